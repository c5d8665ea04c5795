"""A healthy run is quiet (issue 37 item 17): at the default level (INFO) a healthy
Kafka job logs its start, its progress lines and its end, nothing else; librdkafka's
informational lines (``%6|...|BGQUEUE|... Purging 1 unserved events``) and kafka-python's
connection lines are DEBUG, a completed checkpoint is DEBUG, and nothing of librdkafka
reaches standard error. Local executor: the Python-side loggers are the driver's."""

from __future__ import annotations

import logging
import re
import time
import uuid

import pytest
from confluent_kafka import Producer

import lockgate as lg
from kafka_fixtures import BOOTSTRAP, produce, read_committed
from lockgate.connectors import KafkaSink, KafkaSource
from lockgate.connectors.kafka.client_logging import LIBRDKAFKA_LOG, librdkafka_level

N = 3_000


@pytest.mark.hang_guard(120)
def test_a_healthy_kafka_job_logs_its_start_progress_and_end_only(
    kafka_topic, tmp_path, caplog, capfd
) -> None:
    source_topic, sink_topic = kafka_topic(2), kafka_topic(2)
    produce(source_topic, [{"k": i % 10, "v": i} for i in range(N)])
    # librdkafka numbers its clients in one sequence per process: the test's own clients
    # (the fixtures' admin clients, closed in the background) are numbered up to `before`
    before = librdkafka_clients_so_far()
    capfd.readouterr()
    caplog.set_level(logging.INFO)  # what `lockgate run` logs by default
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.config.progress_interval_ms = 100
    env.config.rest_enabled = False
    (
        env.from_source(KafkaSource(BOOTSTRAP, source_topic, bounded=True), name="kafka in")
        .uid("in")
        .map(lambda r: {"k": r["k"], "v": r["v"] * 2}, name="double")
        .uid("double")
        .sink_to(
            KafkaSink(
                BOOTSTRAP,
                sink_topic,
                key="k",
                delivery="exactly_once",
                transactional_id_prefix=f"quiet-{uuid.uuid4().hex[:8]}",
            ),
            name="kafka out",
        )
        .uid("out")
    )
    result = env.execute("quiet job")
    assert result.status is lg.JobStatus.FINISHED
    assert len(read_committed(sink_topic)) == N
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= 20]
    start = [x for x in lines if x[2].startswith("job 'quiet job' runs on ")]
    progress = [x for x in lines if x[0] == "lockgate.progress"]
    end = [x for x in lines if x[2].startswith("job 'quiet job' FINISHED in ")]
    assert len(start) == 1 and len(end) == 1, lines
    others = [x for x in lines if x not in start + progress + end]
    assert others == [], f"a healthy run logged more than start, progress and end: {others}"
    assert f"{N:,} records read" in end[0][2], end
    assert lines[0] == start[0] and lines[-1] == end[0]
    err = capfd.readouterr().err
    of_the_job = [
        line
        for line in err.splitlines()
        if (m := re.search(r"\|rdkafka#\w+-(\d+)\|", line)) and int(m.group(1)) > before
    ]
    assert of_the_job == [], "librdkafka wrote to standard error"


def librdkafka_clients_so_far() -> int:
    """The number librdkafka gave its newest client in this process (a probe's)."""
    names: list[str] = []

    class Names:
        def log(self, level: int, msg: str, *args: object) -> None:
            names.append(msg % args)

    probe = Producer({"bootstrap.servers": BOOTSTRAP, "debug": "generic", "logger": Names()})
    deadline = time.monotonic() + 10
    while not any("rdkafka#producer-" in n for n in names):
        assert time.monotonic() < deadline, "the probe client logged nothing in 10 s"
        probe.poll(0.05)
    probe.flush(5)
    found = re.search(r"rdkafka#producer-(\d+)", next(n for n in names if "rdkafka#producer-" in n))
    assert found is not None
    return int(found.group(1))


def test_librdkafka_log_levels_are_mapped_to_python_levels() -> None:
    """confluent-kafka hands the log callback syslog levels mapped to Python's: emerg,
    alert and crit to CRITICAL, err to ERROR, warning to WARNING, notice and info to
    INFO, debug to DEBUG. lockgate's callback keeps warnings and errors and moves
    notice and info (``%5|``, ``%6|``) to DEBUG."""
    assert librdkafka_level(logging.CRITICAL) == logging.CRITICAL
    assert librdkafka_level(logging.ERROR) == logging.ERROR
    assert librdkafka_level(logging.WARNING) == logging.WARNING
    assert librdkafka_level(logging.INFO) == logging.DEBUG
    assert librdkafka_level(logging.DEBUG) == logging.DEBUG
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("lockgate.connectors.librdkafka")
    handler = Keep(level=logging.DEBUG)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        LIBRDKAFKA_LOG.log(
            logging.INFO, "%s [%s] %s", "BGQUEUE", "rdkafka#producer-1", "Purging 1 unserved events"
        )
        LIBRDKAFKA_LOG.log(logging.WARNING, "%s [%s] %s", "FAIL", "rdkafka#consumer-2", "down")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.DEBUG, "BGQUEUE [rdkafka#producer-1] Purging 1 unserved events"),
        (logging.WARNING, "FAIL [rdkafka#consumer-2] down"),
    ]
