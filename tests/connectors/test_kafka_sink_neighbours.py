"""KafkaSinks of different jobs side by side (issue 37, item 3; M-X1, M-X2, M-X3).

The default transactional-id prefix is unique per (job name, sink uid): job ``orders``
with sink ``eu-out`` and job ``orders-eu`` with sink ``out`` used to share
``lockgate-orders-eu-out``, fenced and aborted each other, and one of them finished
without an error with records missing. A commit counts as done only when the broker
accepted it or the transaction's COMMIT markers are in the log: a transaction another
producer of its id aborted fails the job, never passes as committed, and the error says
that another producer with the same transactional id took over.
"""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest
from confluent_kafka import Producer

import lockgate as lg
from kafka_fixtures import BOOTSTRAP, open_transactions, read_committed
from lockgate.connectors.builtin.sequence import SequenceSource
from lockgate.connectors.kafka.sink import KafkaSink, default_prefix
from lockgate.connectors.kafka.transactions import (
    KafkaTransaction,
    TransactionLostError,
    fence_and_abort,
    prefix_of,
)
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext

_KAFKA_ID = __import__("re").compile(r"[A-Za-z0-9._-]+")


def sink_context(job: str = "lgtest job", uid: str = "kafka") -> RuntimeContext:
    return RuntimeContext(
        task_name="sink task",
        operator_name="kafka",
        operator_uid=uid,
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        job_name=job,
    )


# ------------------------------------------------------------------- the default prefix


def test_issue37_3_m_x2_the_default_prefix_is_injective_over_job_name_and_sink_uid() -> None:
    """Pairs that read alike once joined by '-' (or once odd characters are replaced)
    get different prefixes; each stays a readable, valid Kafka id of at most 126
    characters, and the id's prefix is found again from the id alone."""
    pairs = [
        ("orders", "eu-out"),
        ("orders-eu", "out"),
        ("orders-eu-out", ""),
        ("", "orders-eu-out"),
        ("orders eu", "out"),
        ("orders_eu", "out"),
        ("orders/eu", "out"),
        ("a" * 300, "x"),
        ("a" * 300 + "b", "x"),
        ("ß", "x"),
        ("ss", "x"),
    ]
    prefixes = [default_prefix(job, uid) for job, uid in pairs]
    assert len(set(prefixes)) == len(pairs), dict(zip(pairs, prefixes))
    for (job, uid), prefix in zip(pairs, prefixes):
        assert _KAFKA_ID.fullmatch(prefix) and len(prefix) <= 126, prefix
        assert prefix == default_prefix(job, uid), "the prefix is a function of the pair"
        assert prefix_of(f"{prefix}-3-12") == prefix
    assert default_prefix("orders", "eu-out").startswith("lockgate-orders-eu-out-")


# ------------------------------------------------------------- commits that did not happen


def produce_committed(tid: str, topic: str, value: bytes) -> None:
    """Another producer initializes ``tid`` (fencing the one before it and aborting its
    open transaction), then writes and commits ``value``."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value)
    producer.commit_transaction(60)


@pytest.mark.hang_guard(180)
def test_issue37_3_m_x3_a_transaction_another_producer_aborted_is_never_counted_committed(
    kafka_topic,
) -> None:
    """A pre-committed transaction is aborted by another producer of its transactional
    id, which then commits a transaction of its own (the coordinator now describes only
    that one). The live commit fails saying that another producer with the same id took
    over, naming the id; the commit after a restore (by producer id and epoch, from a
    never-opened copy of the sink, as the driver has) raises TransactionLostError
    (before the fix it returned as if committed: the job finished with records missing)."""
    topic = kafka_topic(2)
    prefix = f"lgtest-taken-{topic[-8:]}"
    sink = KafkaSink(
        BOOTSTRAP, topic, format="text", key=lambda r: r, transactional_id_prefix=prefix
    )
    sink.open(sink_context())
    try:
        txn = sink.begin_transaction()
        sink.write(txn, RowBatch([f"mine {i}" for i in range(100)]))
        sink.pre_commit(txn)
        checkpointed = copy.deepcopy(txn)
        assert {p[:2] for p in checkpointed.partitions} == {(topic, 0), (topic, 1)}
        produce_committed(txn.transactional_id, topic, b"the other producer's")
        with pytest.raises(RuntimeError) as live:
            sink.commit(txn)
        text = str(live.value)
        assert "another producer with the same transactional id" in text, text
        assert repr(txn.transactional_id) in text, text
    finally:
        sink.close()
    driver_copy = pickle.loads(pickle.dumps(KafkaSink(BOOTSTRAP, topic, format="text")))
    with pytest.raises(TransactionLostError) as lost:
        driver_copy.recover_and_commit(checkpointed)
    text = str(lost.value)
    assert "ABORT marker" in text and "another producer with the same transactional id" in text
    assert repr(checkpointed.transactional_id) in text, text
    assert read_committed(topic, raw=True) == [b"the other producer's"]


@pytest.mark.hang_guard(180)
def test_issue37_3_m_x2_a_committed_transaction_whose_id_moved_on_is_committed_once(
    kafka_topic,
) -> None:
    """The usual restore: the transaction was committed before the failure and its id
    was initialized again since (its epoch moved on). Committing it again reads its
    COMMIT markers and returns; its records are there once. A transaction checkpointed
    by an older lockgate (no offsets recorded) still restores, and so does one whose
    records retention deleted (an old savepoint's)."""
    topic = kafka_topic(2)
    prefix = f"lgtest-again-{topic[-8:]}"
    sink = KafkaSink(BOOTSTRAP, topic, format="text", transactional_id_prefix=prefix)
    sink.open(sink_context())
    try:
        txn = sink.begin_transaction()
        sink.write(txn, RowBatch([f"r{i}" for i in range(50)]))
        sink.pre_commit(txn)
        sink.commit(txn)
    finally:
        sink.close()
    fence_and_abort(BOOTSTRAP, {}, txn.transactional_id, 60_000)
    produce_committed(txn.transactional_id, topic, b"later")
    driver_copy = KafkaSink(BOOTSTRAP, topic, format="text")
    driver_copy.recover_and_commit(copy.deepcopy(txn))
    old_format = KafkaTransaction(txn.transactional_id, txn.producer_id, txn.epoch, txn.records)
    del old_format.__dict__["partitions"]  # as unpickled from an older checkpoint
    assert old_format.partitions == ()
    driver_copy.recover_and_commit(old_format)
    got = read_committed(topic, raw=True)
    assert sorted(got) == sorted([f"r{i}".encode() for i in range(50)] + [b"later"])
    # retention deleted its records: committed or not, no reader can see them any more
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    ends = [TopicPartition(topic, p, -1) for p in (0, 1)]  # -1: the high watermark
    for future in admin.delete_records(ends).values():
        future.result(30)
    driver_copy.recover_and_commit(copy.deepcopy(txn))


# ------------------------------------------------------------- whole jobs side by side

N = 3_000


def colliding_job(executor: Any, tmp_path: Any, topic: str, job: str, uid: str) -> Any:
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(300)
    env.checkpoint_config.storage = str(tmp_path / job / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=20, delay=0))
    (
        env.from_source(SequenceSource(0, N, rows_per_second=1_000, batch_size=50))
        .uid("numbers")
        .map(lambda v: {"v": int(v)}, name="to record")
        .uid("to record")
        .sink_to(KafkaSink(BOOTSTRAP, topic), name="kafka")
        .uid(uid)
    )
    return env


@pytest.mark.hang_guard(400)
def test_issue37_3_m_x1_two_jobs_whose_names_join_alike_run_side_by_side_exactly_once(
    executor, tmp_path, kafka_topic
) -> None:
    """Job 'orders' with sink 'eu-out' and job 'orders-eu' with sink 'out', side by side
    with 300 ms checkpoints and default prefixes: each commits every one of its 3,000
    records exactly once, in one attempt (before the fix they shared
    'lockgate-orders-eu-out', fenced each other, restarted over and over, and one
    finished without an error with records missing)."""
    first, second = kafka_topic(1), kafka_topic(1)
    assert default_prefix("orders", "eu-out") != default_prefix("orders-eu", "out")
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(name: str, topic: str, uid: str) -> None:
        try:
            results[name] = colliding_job(executor, tmp_path, topic, name, uid).execute(name)
        except BaseException as e:  # noqa: BLE001 - reported below, with the other job's outcome
            errors.append(e)

    threads = [
        threading.Thread(target=run, args=("orders", first, "eu-out")),
        threading.Thread(target=run, args=("orders-eu", second, "out")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(360)
    assert not any(t.is_alive() for t in threads), "a job did not end within 360 s"
    assert not errors, f"a job failed: {errors}"
    for topic, name in ((first, "orders"), (second, "orders-eu")):
        got = sorted(r["v"] for r in read_committed(topic))
        assert got == list(range(N)), (
            f"job {name!r}: {len(got)} records committed ({len(set(got))} distinct) of {N}"
        )
        assert results[name].attempts == 1, (
            f"job {name!r} needed {results[name].attempts} attempts: its transactions were "
            "fenced by the other job's"
        )
    assert open_transactions(default_prefix("orders", "eu-out")) == []
    assert open_transactions(default_prefix("orders-eu", "out")) == []


# ------------------------------------------------- checkpoints of an older lockgate


def open_under(prefix: str, topic: str, slots: int, job: str) -> list[KafkaTransaction]:
    """Pre-committed transactions of slots 0..slots-1 under ``prefix``, left open as a
    crashed run leaves them."""
    sink = KafkaSink(BOOTSTRAP, topic, format="text", transactional_id_prefix=prefix)
    sink.open(sink_context(job))
    try:
        out = []
        for slot in range(slots):
            txn = sink.begin_transaction()
            sink.write(txn, RowBatch([f"{prefix} slot {slot} #{i}" for i in range(10)]))
            sink.pre_commit(txn)
            out.append(txn)
        return out
    finally:
        sink.close()


@pytest.mark.hang_guard(180)
def test_issue37_3_m_x2_a_checkpoint_under_the_old_default_prefix_restores_by_its_ids(
    kafka_topic,
) -> None:
    """A checkpoint written by an older lockgate, under the old default prefix
    ``lockgate-<job>-<uid>`` of this job and sink: its pending transaction is committed
    by its recorded id (not by a prefix computed again), the run's lingering transaction
    under the old prefix is aborted, and an open transaction under another prefix (a job
    this one was forked from) is left alone."""
    from lockgate.connectors.kafka.sink import legacy_default_prefix
    from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter

    topic = kafka_topic(1)
    job = f"lgtest-old-{topic[-8:]}"
    legacy = legacy_default_prefix(job, "kafka")
    assert legacy == f"lockgate-{job}-kafka" != default_prefix(job, "kafka")
    pending, lingering = open_under(legacy, topic, 2, job)
    del pending.__dict__["partitions"]  # as unpickled from the older checkpoint
    foreign = open_under(legacy_default_prefix(f"{job}-origin", "kafka"), topic, 1, job)[0]
    try:
        sink = KafkaSink(BOOTSTRAP, topic, format="text")
        writer = sink.create_writer(sink_context(job))
        assert isinstance(writer, TwoPhaseCommitWriter)
        writer.initialize_state([{"pending": [(7, pending)]}])
        writer.close()
        assert open_transactions(legacy) == [], "the old run's lingering transaction stays open"
        assert open_transactions(foreign.transactional_id) == [foreign.transactional_id], (
            "a transaction under another job's prefix was aborted"
        )
    finally:
        fence_and_abort(BOOTSTRAP, {}, foreign.transactional_id, 60_000)
        fence_and_abort(BOOTSTRAP, {}, f"{default_prefix(job, 'kafka')}-0-0", 60_000)
    got = read_committed(topic, raw=True)
    assert got == [f"{legacy} slot 0 #{i}".encode() for i in range(10)], got
    assert lingering.transactional_id != pending.transactional_id
