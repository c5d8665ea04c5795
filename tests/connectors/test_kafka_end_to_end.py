"""Kafka in, Kafka out, exactly once (M-X1, M-X2, M-X3, M-R1), against the real broker.

A topic with 3 partitions holds 300,000 JSON records ``{k, v}`` (key ``k`` lives in
partition ``k % 3``, its values in order) -> a keyed running total -> KafkaSink. Five
seeded faults fail attempt after attempt (in the source, in the operator, inside an
alignment, in the asynchronous snapshot part, and between pre-commit and commit); on
Spark a slot's Python worker is killed first. A read_committed consumer must then read
exactly the failure-free output, and no transaction of the sink's prefix may be open.
The exactly-once runs read with a schema (the compiled decoding), the others without.
With ``at_least_once`` every record must be there (duplicates are counted). A job
stopped with a savepoint at parallelism 2 and restored at 3 neither loses nor repeats a
record.
"""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

import lockgate as lg
from conftest import wait_until
from kafka_fixtures import BOOTSTRAP, open_transactions, produce, read_committed
from lockgate.connectors import KafkaSink, KafkaSource, RateLimitedSource
from lockgate.testing import KillWorker, inject_faults, seeded_faults
from running_sums import RunningTotal, key_of

pytestmark = pytest.mark.system  # a whole system end to end (slow): -m 'not system' leaves it out

N = 300_000
KEYS = 300  # 1,000 values per key
PARTITIONS = 3
RATE = 100_000
FAULTS = 5
#: the exactly-once runs read with a schema (the compiled decoding, through every
#: restore); the others decode records one by one into dicts, the default
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def input_records() -> list[dict[str, int]]:
    return [{"k": v % KEYS, "v": v} for v in range(N)]


def expected() -> list[tuple[int, int, int]]:
    totals: dict[int, int] = collections.defaultdict(int)
    out = []
    for r in input_records():
        totals[r["k"]] += r["v"]
        out.append((r["k"], r["v"], totals[r["k"]]))
    return sorted(out)


def output(topic: str) -> list[tuple[int, int, int]]:
    return sorted((r["k"], r["v"], r["total"]) for r in read_committed(topic))


@pytest.fixture
def kafka_input(kafka_topic) -> str:
    topic = kafka_topic(PARTITIONS)
    produce(topic, input_records(), partitioner=lambda i, r: r["k"] % PARTITIONS)
    return topic


def build(
    executor,
    tmp_path,
    source_topic,
    sink_topic,
    *,
    delivery,
    prefix,
    faults=(),
    parallelism=2,
    rate=RATE,
    bounded=True,
    schema=None,
):
    env = lg.StreamEnvironment(parallelism=parallelism, executor=executor)
    env.enable_checkpointing(200)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=FAULTS + 5, delay=0))
    source = KafkaSource(BOOTSTRAP, source_topic, bounded=bounded, schema=schema)
    totals = (
        env.from_source(RateLimitedSource(source, rate), name="kafka in")
        .uid("kafka-in")
        .key_by(key_of)
        .process(RunningTotal(), name="running total")
        .uid("totals")
    )
    totals.sink_to(
        KafkaSink(
            BOOTSTRAP,
            sink_topic,
            key="k",
            delivery=delivery,
            transactional_id_prefix=prefix if delivery == "exactly_once" else None,
        ),
        name="kafka out",
    ).uid("kafka-out")
    if faults:
        inject_faults(env, *faults)
    return env


def faults_for(seed: int, attempts_from: int = 0) -> list:
    # the fewest records a subtask handles in an attempt: about a third of a pass
    return seeded_faults(
        seed,
        FAULTS,
        operators={"source": "kafka in", "operator": "running total", "sink": "kafka out"},
        records=20_000,
        attempts_from=attempts_from,
    )


@pytest.mark.hang_guard(400)
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_m_x1_m_x2_kafka_to_kafka_is_exactly_once_through_seeded_failures(
    executor, tmp_path, kafka_topic, kafka_input
) -> None:
    out = kafka_topic(PARTITIONS)
    prefix = f"lgtest-e2e-{out[-8:]}"
    spark = type(executor).__name__ == "SparkExecutor"
    # on Spark a killed Python worker first: the first attempt always has the whole input
    # to reach its record (a last attempt may not, when a loaded machine's slow
    # checkpoints let the attempts before it read most of the input)
    faults = faults_for(31, attempts_from=1 if spark else 0)
    if spark:
        faults.insert(0, KillWorker("running total", record=15_000, attempt=0, subtask=1))
    env = build(
        executor,
        tmp_path,
        kafka_input,
        out,
        delivery="exactly_once",
        prefix=prefix,
        faults=faults,
        schema=SCHEMA,
    )
    result = env.execute("kafka to kafka exactly once")
    assert result.attempts == len(faults) + 1, f"every fault fires once: {result.attempts}"
    got = output(out)
    assert len(got) == N, f"{len(got)} records committed, expected {N}"
    assert got == expected()
    assert open_transactions(prefix) == [], "no transaction of the job's prefix is left open"


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_m_x1_kafka_to_kafka_at_least_once_has_every_record(
    executor, tmp_path, kafka_topic, kafka_input
) -> None:
    out = kafka_topic(PARTITIONS)
    env = build(
        executor,
        tmp_path,
        kafka_input,
        out,
        delivery="at_least_once",
        prefix=None,
        faults=faults_for(32),
    )
    assert env.execute("kafka to kafka at least once").attempts == FAULTS + 1
    got = collections.Counter(output(out))
    assert set(got) == set(expected()), "every record is present, none is made up"
    duplicates = sum(c - 1 for c in got.values())
    print(f"at_least_once: {duplicates} duplicates of {N} records")


@pytest.mark.hang_guard(300)
def test_m_s3_rescaling_a_kafka_job_from_2_to_3_subtasks_through_a_savepoint(
    tmp_path, kafka_topic, kafka_input
) -> None:
    """Stopped with a savepoint mid-input at parallelism 2, restored at 3: the output is
    exactly the failure-free one (the source's offsets, the keyed totals and the sink's
    pending transactions all move to the new subtasks)."""
    out = kafka_topic(PARTITIONS)
    prefix = f"lgtest-rescale-{out[-8:]}"
    first = build(
        lg.LocalExecutor(),
        tmp_path,
        kafka_input,
        out,
        delivery="exactly_once",
        prefix=prefix,
        rate=20_000,
        bounded=True,
    )
    client = first.execute_async("kafka rescale")
    wait_until(
        lambda: (
            sum(1 for c in client.checkpoints() if c.status == "completed") >= 3 or client.done()
        ),
        "three checkpoints complete",
        timeout_s=60,
    )
    assert not client.done(), "the job must still run when the savepoint is taken"
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoints"))
    stopped = client.wait(60)
    assert stopped.status is not lg.JobStatus.FAILED, stopped
    published = len(read_committed(out))
    assert 0 < published < N, f"stopped mid-input: {published} of {N} committed"
    second = build(
        lg.LocalExecutor(),
        tmp_path,
        kafka_input,
        out,
        delivery="exactly_once",
        prefix=prefix,
        parallelism=3,
        rate=10**7,
    )
    second.execute("kafka rescale restored", restore_from=savepoint)
    assert output(out) == expected()
    assert open_transactions(prefix) == []
