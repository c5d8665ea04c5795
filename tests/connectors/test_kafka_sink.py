"""KafkaSink against the real broker (M-X1, M-X2, M-X3): exactly-once output through
seeded failures (one of them between pre-commit and commit), at-least-once output with its
duplicates counted, no transaction left open however the job ends, bad records failing
with their position, and the transaction timeout checked before the job starts.

A replayable sequence -> a keyed running total -> KafkaSink; the failure-free output is
known exactly (one record ``{k, v, total}`` per value)."""

from __future__ import annotations

import collections
import json
import threading

import pytest

import lockgate as lg
from conftest import wait_for_checkpoints, wait_until
from kafka_fixtures import BOOTSTRAP, KEEP_RECORDS, open_transactions, read_committed
from lockgate.connectors.builtin.sequence import SequenceSource
from lockgate.connectors.kafka.sink import KafkaSink, default_prefix
from lockgate.connectors.kafka.transactions import fence_and_abort
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, FailCommit, inject_faults, seeded_faults
from running_sums import RunningTotal, key_of

N = 60_000
CHUNK = 2_000
RATE = 15_000


def to_record(v):
    return {"k": int(v) // CHUNK, "v": int(v)}


def expected(n: int = N) -> list[tuple[int, int, int]]:
    totals: dict[int, int] = {}
    out = []
    for v in range(n):
        k = v // CHUNK
        totals[k] = totals.get(k, 0) + v
        out.append((k, v, totals[k]))
    return out


def output(topic: str) -> list[tuple[int, int, int]]:
    return sorted(((r["k"], r["v"], r["total"]) for r in read_committed(topic)), key=lambda r: r[1])


def build(
    executor,
    tmp_path,
    topic: str,
    *,
    delivery="exactly_once",
    faults=(),
    rate=RATE,
    n=N,
    prefix=None,
    attempts=10,
    bounded=True,
):
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(150)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=attempts, delay=0))
    source = SequenceSource(0, n, rows_per_second=rate, bounded=bounded)
    totals = (
        env.from_source(source, name="numbers")
        .uid("numbers")
        .map(to_record, name="to record")
        .key_by(key_of)
        .process(RunningTotal(), name="running total")
        .uid("totals")
    )
    totals.sink_to(
        KafkaSink(BOOTSTRAP, topic, key="k", delivery=delivery, transactional_id_prefix=prefix),
        name="kafka",
    ).uid("kafka")
    if faults:
        inject_faults(env, *faults)
    return env


@pytest.mark.hang_guard(300)
def test_m_x2_m_x3_kafka_sink_is_exactly_once_through_seeded_failures(
    tmp_path, kafka_topic
) -> None:
    """Five seeded faults (in the source, the operator, an alignment, an async snapshot
    and between pre-commit and commit): a read_committed reader sees exactly the
    failure-free output, and no transaction of the sink's prefix is left open. (On
    Spark: tests/connectors/test_kafka_end_to_end.py.)"""
    topic = kafka_topic(3)
    prefix = f"lgtest-eo-{topic[-8:]}"
    faults = seeded_faults(
        20,
        5,
        operators={"source": "numbers", "operator": "running total", "sink": "kafka"},
        records=4_000,
    )
    assert any(isinstance(f, FailCommit) for f in faults)
    env = build(lg.LocalExecutor(), tmp_path, topic, faults=faults, prefix=prefix)
    result = env.execute("kafka exactly once")
    assert result.attempts == 6, f"every fault fires once: {result.attempts} attempts"
    got = output(topic)
    assert len(got) == N, f"{len(got)} records committed, expected {N}"
    assert got == expected()
    assert open_transactions(prefix) == []


@pytest.mark.hang_guard(200)
def test_m_x1_at_least_once_keeps_every_record_and_counts_duplicates(tmp_path, kafka_topic) -> None:
    topic = kafka_topic(3)
    faults = [
        FailAtRecord("running total", record=6_000, attempt=0, subtask=0),
        FailAtRecord("running total", record=9_000, attempt=1, subtask=1),
    ]
    env = build(lg.LocalExecutor(), tmp_path, topic, delivery="at_least_once", faults=faults)
    assert env.execute("kafka at least once").attempts == 3
    got = collections.Counter(output(topic))
    assert set(got) == set(expected()), "every record is present, none is made up"
    # what the failed attempts sent after their last checkpoint is sent again: allowed
    duplicates = sum(c - 1 for c in got.values())
    print(f"at_least_once: {duplicates} duplicates of {N} records")


@pytest.mark.hang_guard(200)
def test_m_x2_cancelling_leaves_no_open_transaction_and_only_committed_output(
    tmp_path, kafka_topic
) -> None:
    """An unbounded job cancelled mid-run: the driver commits the newest completed
    checkpoint's transactions and aborts the rest; a read_committed reader is not held
    back and reads a prefix-closed output (each key's totals in order, nothing repeated)."""
    topic = kafka_topic(2)
    # the default prefix: the driver's abort at the end must find the subtasks' ids
    job = f"kafka cancel {topic[-8:]}"
    prefix = default_prefix(job, "kafka")
    env = build(lg.LocalExecutor(), tmp_path, topic, rate=5_000, n=10**9, bounded=False)
    client = env.execute_async(job)
    try:
        wait_for_checkpoints(client, 3)
        wait_until(
            lambda: bool(open_transactions(prefix)), "the running job has a transaction open"
        )
    finally:
        client.cancel()
    result = client.wait(60)
    assert result.status is lg.JobStatus.CANCELED, result
    assert open_transactions(prefix) == []
    got = output(topic)
    assert got, "completed checkpoints published records"
    assert len(set(got)) == len(got), "no record repeated"
    by_key: dict[int, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for r in got:
        by_key[r[0]].append(r)
    for k, rows in by_key.items():
        # each key's committed records are its first values, with their running totals
        first = k * CHUNK
        want = [(k, v, (first + v) * (v - first + 1) // 2) for v in range(first, first + len(rows))]
        assert rows == want, f"key {k}: committed records are not a gap-free prefix"


def test_m_x2_a_record_that_cannot_be_encoded_fails_with_its_position(tmp_path, kafka_topic):
    topic = kafka_topic(1)
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection([{"a": 1}, {"a": {1, 2}}, {"a": object()}]).sink_to(
        KafkaSink(BOOTSTRAP, topic, delivery="at_least_once"), name="out"
    )
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("bad record")
    text = str(info.value)
    assert "record #2" in text and "cannot encode" in text and "object" in text, text


def test_m_x2_an_oversized_record_fails_never_dropped(tmp_path, kafka_topic):
    topic = kafka_topic(1)
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection(["small", "x" * 2_000_000]).sink_to(
        KafkaSink(BOOTSTRAP, topic, format="text", delivery="at_least_once"), name="out"
    )
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("oversized record")
    text = str(info.value)
    assert "record #1" in text and "2000000 bytes" in text, text


def test_m_x2_a_transaction_timeout_shorter_than_a_checkpoint_is_refused(tmp_path, kafka_topic):
    topic = kafka_topic(1)
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(5_000)
    env.checkpoint_config.timeout = 60_000
    env.from_source(SequenceSource(0, 10)).sink_to(
        KafkaSink(BOOTSTRAP, topic, properties={"transaction.timeout.ms": 30_000}), name="out"
    )
    with pytest.raises(ConfigurationError, match="65000 ms in all"):
        env.execute("short timeout")


def test_kafka_sink_arguments_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="bootstrap_servers"):
        KafkaSink("nohostport", "t")
    with pytest.raises(ConfigurationError, match="topic"):
        KafkaSink(BOOTSTRAP, "bad topic!")
    with pytest.raises(ConfigurationError, match="delivery"):
        KafkaSink(BOOTSTRAP, "t", delivery="twice")
    with pytest.raises(ConfigurationError, match="format"):
        KafkaSink(BOOTSTRAP, "t", format="avro")
    with pytest.raises(ConfigurationError, match="transactional_id_prefix"):
        KafkaSink(BOOTSTRAP, "t", transactional_id_prefix="has space")
    with pytest.raises(ConfigurationError, match="is for delivery='exactly_once' only"):
        KafkaSink(BOOTSTRAP, "t", delivery="none", transactional_id_prefix="p")
    with pytest.raises(ConfigurationError, match="transactional.id"):
        KafkaSink(BOOTSTRAP, "t", properties={"transactional.id": "x"})
    with pytest.raises(ConfigurationError, match="transaction.timeout.ms"):
        KafkaSink(BOOTSTRAP, "t", properties={"transaction.timeout.ms": "soon"})
    with pytest.raises(ConfigurationError, match="key"):
        KafkaSink(BOOTSTRAP, "t", key=3)


def test_default_prefix_names_job_and_sink() -> None:
    assert default_prefix("sales", "kafka").startswith("lockgate-sales-kafka-")
    odd = default_prefix("sales job/2", "kafka")
    assert odd.startswith("lockgate-sales_job_2-kafka-") and odd != default_prefix(
        "sales job_2", "kafka"
    )


def test_m_x2_a_bounded_job_without_checkpoints_publishes_once_at_its_end(tmp_path, kafka_topic):
    """Without checkpointing, each subtask's records stay in one pre-committed transaction
    that the driver commits (by producer id and epoch) once the whole job has finished."""
    topic = kafka_topic(2)
    prefix = f"lgtest-final-{topic[-8:]}"
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.from_collection([{"i": i} for i in range(1_000)]).sink_to(
        KafkaSink(BOOTSTRAP, topic, transactional_id_prefix=prefix), name="out"
    )
    env.execute("bounded without checkpoints")
    assert sorted(r["i"] for r in read_committed(topic)) == list(range(1_000))
    assert open_transactions(prefix) == []


def test_m_x2_a_record_the_broker_refuses_fails_with_its_topic_key_and_size(tmp_path):
    """A topic whose max.message.bytes is below the producer's limit: the broker refuses
    the record; the job fails naming the topic, the record's key and size, never drops it."""
    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"lgtest-small-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    new = NewTopic(topic, 1, 1, config={**KEEP_RECORDS, "max.message.bytes": "2000"})
    for future in admin.create_topics([new]).values():
        future.result(30)
    try:
        env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
        env.from_collection([{"id": "a", "v": "x"}, {"id": "big", "v": "y" * 5_000}]).sink_to(
            KafkaSink(BOOTSTRAP, topic, key="id", delivery="at_least_once"), name="out"
        )
        with pytest.raises(lg.JobFailedError) as info:
            env.execute("refused record")
        text = str(info.value)
        assert topic in text and "b'big'" in text and "bytes" in text, text
    finally:
        for future in admin.delete_topics([topic]).values():
            future.result(30)


def sink_context() -> RuntimeContext:
    """The context of a sink's only subtask, for a sink driven by hand."""
    return RuntimeContext(
        task_name="sink task",
        operator_name="kafka",
        operator_uid="kafka",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )


def test_issue37_9_m_x2_an_oversized_record_is_named_by_its_number_and_size(
    executor, kafka_topic
) -> None:
    """Record #50 (5,020 bytes) of 250 is over its topic's max.message.bytes (2,000):
    the exactly-once job fails naming that record, its number and its size (before the
    fix: the broker's refusal of its batch was reported without a number, or a later
    record's send failed and was named instead, 'record #52 ... 21 bytes')."""
    topic = kafka_topic(1, {"max.message.bytes": "2000"})
    records = [f"record {i}" for i in range(50)] + ["y" * 5_020]
    records += [f"record {i}" for i in range(51, 250)]
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.set_restart_strategy(lg.RestartStrategy.none())
    env.from_collection(records).sink_to(
        KafkaSink(
            BOOTSTRAP, topic, format="text", transactional_id_prefix=f"lgtest-big-{topic[-8:]}"
        ),
        name="out",
    )
    with pytest.raises(lg.JobFailedError) as info:
        env.execute("oversized record")
    text = str(info.value)
    assert "record #50 of" in text and "5020 bytes" in text and topic in text, text
    assert "max.message.bytes (2000" in text, text
    assert read_committed(topic) == [], "nothing of the failed job is published"


def test_issue37_9_m_x2_a_send_failing_after_a_refused_record_names_the_refused_one(
    kafka_topic,
) -> None:
    """With compression the size of a record's batch cannot be told before the broker
    answers: the broker refuses the batch of a 5,020-byte incompressible record, and the
    transaction takes no more records. The next record's send fails: the error names
    the refused record (its key and size), not the one whose send failed."""
    import os

    from lockgate.core.batch import RowBatch

    topic = kafka_topic(1, {"max.message.bytes": "2000"})
    sink = KafkaSink(
        BOOTSTRAP,
        topic,
        format="bytes",
        key=lambda r: b"big" if len(r) > 100 else b"small",
        transactional_id_prefix=f"lgtest-refused-{topic[-8:]}",
        properties={"compression.type": "lz4"},
    )
    ctx = sink_context()
    sink.open(ctx)
    try:
        txn = sink.begin_transaction()
        sink.write(txn, RowBatch([b"r%d" % i for i in range(50)] + [os.urandom(5_020)]))
        # the broker's refusal reaches the producer (and its delivery reports are served)
        sink._live[txn.transactional_id].flush(60)
        with pytest.raises(ValueError) as info:
            sink.write(txn, RowBatch([b"next"]))
        text = str(info.value)
        assert "b'big'" in text and "5020 bytes" in text and topic in text, text
        assert "b'small'" not in text and "4 bytes" not in text, text
    finally:
        sink.close()
        fence_and_abort(BOOTSTRAP, {}, f"lgtest-refused-{topic[-8:]}-0-0", 60_000)


def test_m_x2_close_waits_for_the_producer_being_initialized_in_the_background(kafka_topic):
    """The next transaction's producer is initialized in the background. A restarted
    attempt initializes the same transactional ids, so an old initialization that ended
    after close() would fence the new attempt's producer (seen in CI as "fenced by a newer
    instance" and one more restart): close() waits for it."""
    started, release = threading.Event(), threading.Event()
    events: list[str] = []
    topic = kafka_topic()
    sink = KafkaSink(BOOTSTRAP, topic, transactional_id_prefix=f"lgtest-close-{topic[-8:]}")
    initialize = sink._new_producer

    def held_initialize(slot: int):
        if slot == 1:
            started.set()
            assert release.wait(60), "the test never released the initialization"
        producer = initialize(slot)
        events.append(f"initialized {slot}")
        return producer

    sink._new_producer = held_initialize
    ctx = sink_context()
    sink.open(ctx)
    transaction = sink.begin_transaction()  # slot 0 now; slot 1 prepared in the background
    assert started.wait(60), "no producer was prepared for the next transaction"

    def close() -> None:
        sink.close()
        events.append("closed")

    closer = threading.Thread(target=close)
    closer.start()
    closer.join(1.0)  # bounded: close() must still be waiting
    assert closer.is_alive(), f"close() returned during an initialization: {events}"
    release.set()
    closer.join(90)
    assert not closer.is_alive(), "close() did not return after the initialization ended"
    assert events == ["initialized 0", "initialized 1", "closed"]
    fence_and_abort(BOOTSTRAP, {}, transaction.transactional_id, 60_000)


def read_keys_and_values(topic: str, n: int) -> list[tuple[bytes | None, bytes]]:
    """The first ``n`` records of partition 0 of ``topic``, as (key, value) bytes."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "lgtest-keys"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[bytes | None, bytes]] = []
        wait_until(
            lambda: (
                got.extend((m.key(), m.value()) for m in consumer.consume(1000, 0.2))
                or len(got) >= n
            ),
            f"{n} records in {topic}",
            timeout_s=30,
        )
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("columns", ["encoded at once", "float: record by record"])
def test_arrow_batches_are_written_with_the_bytes_of_the_record_by_record_encoding(
    kafka_topic, columns
) -> None:
    """An Arrow batch's JSON values and keys, encoded a column at a time, are exactly
    what ``json.dumps`` of each record and ``str`` of its key give; a float column
    takes the record-by-record path, with the same result."""
    topic = kafka_topic(1)
    records = [
        {"k": i % 7, "name": ["plain", "é ü", None][i % 3], "ok": i % 2 == 0, "n": i}
        for i in range(3_000)
    ]
    if columns.startswith("float"):
        records = [{**r, "f": r["n"] / 3} for r in records]
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_collection(records).map_batches(lambda b: b, name="to arrow").sink_to(
        KafkaSink(BOOTSTRAP, topic, key="k", delivery="at_least_once"), name="out"
    )
    env.execute("arrow to kafka")
    got = read_keys_and_values(topic, len(records))
    assert got == [
        (str(r["k"]).encode(), json.dumps(r, ensure_ascii=False).encode()) for r in records
    ]


@pytest.mark.hang_guard(120)
def test_review_m_x2_topic_limits_are_read_through_one_admin_client_per_writer(
    kafka_topic, monkeypatch
) -> None:
    """The max.message.bytes lookups of one writer go through one librdkafka admin client,
    once per topic, however many topics and batches it writes; closing the writer drops
    the client (before the fix: a new admin client per topic, never closed)."""
    from confluent_kafka import admin as ck_admin

    from lockgate.core.batch import RowBatch

    made: list[object] = []
    lookups: list[str] = []

    real_init = ck_admin.AdminClient.__init__
    real_describe = ck_admin.AdminClient.describe_configs

    def counted_init(self, *args, **kwargs):  # the real client, counted
        real_init(self, *args, **kwargs)
        made.append(self)

    def counted_describe(self, resources, *args, **kwargs):
        lookups.extend(r.name for r in resources)
        return real_describe(self, resources, *args, **kwargs)

    first, second = kafka_topic(1), kafka_topic(1)
    monkeypatch.setattr(ck_admin.AdminClient, "__init__", counted_init)
    monkeypatch.setattr(ck_admin.AdminClient, "describe_configs", counted_describe)
    sink = KafkaSink(
        BOOTSTRAP, lambda r: first if r % 2 else second, format="json", delivery="at_least_once"
    )
    ctx = RuntimeContext(
        task_name="sink task",
        operator_name="kafka",
        operator_uid="kafka",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        job_name="lgtest limits",
    )
    writer = sink.create_writer(ctx)
    for n in range(3):
        writer.write(RowBatch(list(range(n * 10, n * 10 + 10))))
    writer.finish()
    assert sorted(lookups) == sorted([first, second]), lookups
    assert len(made) == 1, f"{len(made)} admin clients for the limits of two topics"
    writer.close()
    assert writer.encoder._config_admin is None, "closing the writer keeps its admin client"
    assert sorted(read_committed(first)) == list(range(1, 30, 2))
