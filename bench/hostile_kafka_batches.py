"""Hostile Kafka record batches (issue 37 items 2 and 7): what a producer with write
access to a topic can store, read by KafkaSource on both fetch paths.

* ``forged_offset_deltas``: a victim writes 3,000 records, the attacker an uncompressed
  batch of 7,000 records whose last record claims an offset 2,000 past the batch (the
  broker checks only the count and the last delta), the victim 3,000 more; then the
  same with 7,000 victim records on each side and a jump of 6,000 (more than a poll). A job
  (``LocalExecutor``, checkpoints every 100 ms, one failure after a completed
  checkpoint, a restore) reads the topic with ``on_error="dead_letter"``, once with the
  direct fetch and once through librdkafka. Before the fix a checkpoint could hold a
  position past 2,000 of the victim's records (lost on a restore), and a bounded read
  through librdkafka ended early. ``ok``: every victim record once on both paths, and
  the forged batch dead-lettered.
* ``gzip_bomb``: 64 gzip batches of 65 KiB, each expanding to 64 MiB (4 MiB stored, 4
  GiB expanded), between ordinary records; read by the direct fetch with
  ``on_error="dead_letter"`` in a child process. Before the fix: ``MemoryError`` at a
  3 GiB peak, at every restart. ``ok``: the ordinary records arrive, each bomb is
  dead-lettered, and the child's peak RSS stays under 1 GiB. Through librdkafka (which
  has no decompression bound of its own) 4 bombs are read too, reporting the peak.

Cases of ``bench/hostile.py``; each runs on its own too, printing one JSON line::

    python bench/hostile_kafka_batches.py [forged_offset_deltas|gzip_bomb]

Needs the broker of ``scripts/services.sh`` (``LOCKGATE_TEST_KAFKA``, default
127.0.0.1:9092).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# bench/kafka.py would be taken for kafka-python (which tests/kafka_raw.py imports)
sys.path[:] = [ROOT, os.path.join(ROOT, "tests")] + [
    p for p in sys.path if os.path.abspath(p or ".") != HERE
]

import lockgate as lg
from kafka_raw import forged_batch, gzip_bomb_batch, produce_raw
from lockgate.connectors import KafkaSource, RateLimitedSource
from lockgate.testing import FailAtRecord, inject_faults

BOOTSTRAP = os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092")
VICTIMS, ATTACK, JUMP = 3_000, 7_000, 2_000
#: the layouts of the forged batch: (name, victims before and after it, its last
#: record's jump past the batch). "far" jumps more than one poll (5,000 records) past
#: the batch, with more victims after it than the jump: through librdkafka no poll then
#: reaches past the forged offset, whatever the polls' cuts
LAYOUTS = (("near", VICTIMS, JUMP), ("far", 7_000, 6_000))
BOMBS, BOMB_BYTES = 64, 64 << 20


def _topic(prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while True:
        meta = admin.list_topics(name, timeout=10).topics.get(name)
        if meta is not None and meta.error is None and meta.partitions[0].leader >= 0:
            return name
        if time.monotonic() > deadline:
            raise RuntimeError(f"topic {name} has no leader after 30 s")
        time.sleep(0.05)  # bounded polling for the new partition's leader


def _delete(topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    AdminClient({"bootstrap.servers": BOOTSTRAP}).delete_topics([topic])


def _produce(topic: str, records: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 20})
    for r in records:
        producer.produce(topic, json.dumps(r).encode(), partition=0)
    if producer.flush(30):
        raise RuntimeError("the victim's records were not all written")


def _tag(r: dict[str, Any]) -> tuple[str, int]:
    return (r["p"], r["i"])


def _dead(d: dict[str, Any]) -> tuple[str, int]:
    return ("dead", d["offset"])


def _forged_job(topic: str, fetch: str, per_side: int) -> dict[str, Any]:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch, on_error="dead_letter")
    records = env.from_source(RateLimitedSource(source, 4_000), name="kafka").uid("kafka")
    tagged = records.map(_tag, name="tag").uid("tag")
    inject_faults(env, FailAtRecord("tag", record=4_000, attempt=0, after_checkpoints=1))
    dead = records.get_side_output(lg.DEAD_LETTER).map(_dead)
    out = tagged.union(dead).execute_and_collect(f"forged batch {fetch}")
    victims = [i for tag, i in out if tag == "victim"]
    return {
        "victims_read": len(set(victims)),
        "victims_lost": 2 * per_side - len(set(victims)),
        "victims_duplicated": len(victims) - len(set(victims)),
        "dead_letters": len([i for tag, i in out if tag == "dead"]),
        "attacker_records_read": len([i for tag, i in out if tag == "attacker"]),
    }


def forged_offset_deltas(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed). JSON
    fields: ``ok`` and, per layout and fetch path, what the restored job read."""
    result: dict[str, Any] = {}
    for layout, victims, jump in LAYOUTS:
        topic = _topic("hostile-forged")
        try:
            _produce(topic, [{"p": "victim", "i": i} for i in range(victims)])
            values = [json.dumps({"p": "attacker", "i": i}).encode() for i in range(ATTACK)]
            deltas = [*range(ATTACK - 1), ATTACK - 1 + jump]
            produce_raw(BOOTSTRAP, topic, 0, [forged_batch(values, deltas)])
            _produce(topic, [{"p": "victim", "i": i} for i in range(victims, 2 * victims)])
            for fetch in ("auto", "librdkafka"):
                result[f"{layout}_{fetch}"] = _forged_job(topic, fetch, victims)
        finally:
            _delete(topic)
    result["ok"] = all(
        r["victims_lost"] == 0 and r["victims_duplicated"] == 0 and r["dead_letters"] > 0
        for r in list(result.values())
    )
    return result


def _read_bombs(topic: str, fetch: str) -> dict[str, Any]:
    """In the child process: read ``topic`` to its end; what came out, and the peak."""
    from lockgate.connectors.base import InputStatus, ReaderOutput, assign_splits
    from lockgate.runtime.context import RuntimeContext

    class Out(ReaderOutput):
        def __init__(self) -> None:
            self.records = 0
            self.dead: list[dict[str, Any]] = []

        def emit(self, batch: Any) -> None:
            self.records += len(batch)

        def emit_from_split(self, split_id: Any, batch: Any) -> None:
            self.records += len(batch)

        def emit_dead_letter(self, record: dict[str, Any]) -> None:
            self.dead.append(record)

    properties = {"max.partition.fetch.bytes": 65536} if fetch == "librdkafka" else None
    source = KafkaSource(
        BOOTSTRAP, topic, bounded=True, fetch=fetch, on_error="dead_letter",
        properties=properties,
    )  # fmt: skip
    ctx = RuntimeContext(
        task_name="t", operator_name="kafka", operator_uid="kafka", subtask_index=0,
        parallelism=1, max_parallelism=128,
    )  # fmt: skip
    reader: Any = source.create_reader(ctx)
    out = Out()
    started = time.monotonic()
    error = None
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        while reader.poll(out) is not InputStatus.END_OF_INPUT:
            if time.monotonic() - started > 600:
                raise TimeoutError("not at the end in 600 s")
            time.sleep(0.01)  # the task's own idle wait
    except Exception as e:  # noqa: BLE001 - reported, as the child's result
        error = f"{type(e).__name__}: {e}"[:300]
    finally:
        reader.close()
    return {
        "records": out.records,
        "dead_letters": len(out.dead),
        "error": error,
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mib": _peak_rss_mib(),
    }


def _peak_rss_mib() -> int:
    """This process's peak resident memory (``VmHWM``: ``ru_maxrss`` would count the
    parent's peak, which Linux carries through fork and exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def gzip_bomb(target: Any = None) -> dict[str, Any]:
    """The case. JSON fields: ``ok`` and what each fetch path's child read."""
    topic = _topic("hostile-gzip-bomb")
    try:
        _produce(topic, [{"i": i} for i in range(10)])
        produce_raw(BOOTSTRAP, topic, 0, [gzip_bomb_batch(BOMB_BYTES)] * BOMBS)
        _produce(topic, [{"i": i} for i in range(10, 20)])
        result: dict[str, Any] = {}
        for fetch in ("auto", "librdkafka"):
            child = subprocess.run(
                [sys.executable, __file__, "--child", topic, fetch],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            lines = child.stdout.strip().splitlines()
            result[fetch] = json.loads(lines[-1]) if lines else {"error": child.stderr[-300:]}
            if fetch == "auto":  # librdkafka: the first few bombs are enough to measure
                _delete(topic)
                topic = _topic("hostile-gzip-bomb")
                _produce(topic, [{"i": i} for i in range(10)])
                produce_raw(BOOTSTRAP, topic, 0, [gzip_bomb_batch(BOMB_BYTES)] * 4)
                _produce(topic, [{"i": i} for i in range(10, 20)])
        direct = result["auto"]
        result["ok"] = (
            direct.get("error") is None
            and direct.get("records") == 20
            and direct.get("dead_letters") == BOMBS
            and direct.get("peak_rss_mib", 1 << 30) < 1024
        )
        return result
    finally:
        _delete(topic)


CASES = {"forged_offset_deltas": forged_offset_deltas, "gzip_bomb": gzip_bomb}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(_read_bombs(sys.argv[2], sys.argv[3])), flush=True)
        sys.exit(0)
    names = sys.argv[1:] or list(CASES)
    ok = True
    for name in names:
        line = {"case": name, **CASES[name]()}
        print(json.dumps(line, default=str), flush=True)
        ok = ok and bool(line["ok"])
    sys.exit(0 if ok else 1)
