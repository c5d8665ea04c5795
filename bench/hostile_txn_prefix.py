"""Hostile neighbours on one Kafka cluster (issue 37 item 3): transactional-id prefixes.

Two exactly-once KafkaSinks that share a transactional id fence each other: the later
producer of the id aborts the earlier one's open transaction. Before the fix the default
prefix ``lockgate-<job name>-<sink uid>`` gave job ``orders`` with sink ``eu-out`` and
job ``orders-eu`` with sink ``out`` the same ids, and a job could finish without an
error with records missing (a transaction its neighbour aborted was taken for
committed). :func:`txn_prefix_collision` runs two attacks, each with a victim job
(3,000 records, 300 ms checkpoints, ``LocalExecutor``) and an attacker job beside it:

* ``named_alike``: the attacker is job ``orders-eu`` with sink ``out`` next to the
  victim ``orders`` with sink ``eu-out``, both with default prefixes. Both must finish,
  in one attempt, each with every record committed exactly once;
* ``same_prefix``: the attacker sets ``transactional_id_prefix`` to the victim's
  default prefix on purpose. Nothing can keep it from fencing the victim, but no job may
  report success with records missing or doubled: each one finishes with every record
  exactly once, or fails.

It is a case of ``bench/hostile.py`` (``--cases txn_prefix_collision``) and runs on its
own too, printing one JSON line (needs Kafka on ``LOCKGATE_BENCH_KAFKA``, by default
127.0.0.1:9092)::

    python bench/hostile_txn_prefix.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Any

# `python bench/hostile_txn_prefix.py` puts bench/ first on sys.path, where bench/kafka.py
# would shadow kafka-python (the sink's transaction requests import it)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [os.path.dirname(HERE)] + [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import lockgate as lg
from lockgate.connectors import SequenceSource
from lockgate.connectors.kafka.sink import KafkaSink, default_prefix

BOOTSTRAP = os.environ.get("LOCKGATE_BENCH_KAFKA", "127.0.0.1:9092")
N = 3_000
VICTIM = ("orders", "eu-out")
ATTACKER = ("orders-eu", "out")


def _to_record(v: Any) -> dict[str, int]:
    return {"v": int(v)}


def _env(storage: str, topic: str, uid: str, prefix: str | None) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(300)
    env.checkpoint_config.storage = storage
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=5, delay=0))
    (
        env.from_source(SequenceSource(0, N, rows_per_second=1_000, batch_size=50))
        .uid("numbers")
        .map(_to_record, name="to record")
        .uid("to record")
        .sink_to(KafkaSink(BOOTSTRAP, topic, transactional_id_prefix=prefix), name="kafka")
        .uid(uid)
    )
    return env


def _topics(names: list[str], create: bool) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    if create:
        futures = admin.create_topics([NewTopic(n, 1, 1) for n in names])
    else:
        futures = admin.delete_topics(names)
    for future in futures.values():
        future.result(30)


def _committed(topic: str, timeout_s: float = 60.0) -> list[int]:
    """Every value a read_committed reader sees in ``topic`` (partition 0) now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": f"lgbench-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[int] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF: the stable end
                        return out
                    raise RuntimeError(str(msg.error()))
                out.append(json.loads(msg.value())["v"])
        raise TimeoutError(f"reading {topic} did not reach its last stable offset")
    finally:
        consumer.close()


def _attack(work: str, name: str, attacker_prefix: str | None) -> dict[str, Any]:
    topics = {
        job: f"lgbench-prefix-{name}-{uuid.uuid4().hex[:8]}" for job in ("victim", "attacker")
    }
    _topics(list(topics.values()), create=True)
    try:
        outcome: dict[str, Any] = {}
        jobs = {"victim": (VICTIM, None), "attacker": (ATTACKER, attacker_prefix)}

        def run(role: str) -> None:
            (job, uid), prefix = jobs[role]
            storage = os.path.join(work, name, role)
            try:
                result = _env(storage, topics[role], uid, prefix).execute(job)
                outcome[role] = {"status": "FINISHED", "attempts": result.attempts}
            except lg.JobFailedError as e:
                outcome[role] = {"status": "FAILED", "error": str(e).splitlines()[0][:300]}

        threads = [threading.Thread(target=run, args=(role,)) for role in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        for role, topic in topics.items():
            counts = Counter(_committed(topic))
            report = outcome.setdefault(role, {"status": "did not end"})
            report["committed"] = sum(counts.values())
            report["missing"] = sum(1 for v in range(N) if v not in counts)
            report["duplicated"] = sum(c - 1 for c in counts.values() if c > 1)
        return outcome
    finally:
        _topics(list(topics.values()), create=False)


def txn_prefix_collision(target: Any = None) -> dict[str, Any]:
    """The case (``target``, the job of ``bench/hostile.py``, is not needed: the jobs
    run next to it). JSON fields: ``ok``, the two prefixes and what each job did."""
    work = tempfile.mkdtemp(prefix="lockgate-hostile-txn-prefix-")
    try:
        result: dict[str, Any] = {
            "victim_prefix": default_prefix(*VICTIM),
            "attacker_prefix": default_prefix(*ATTACKER),
        }
        result["named_alike"] = _attack(work, "alike", None)
        result["same_prefix"] = _attack(work, "same", default_prefix(*VICTIM))
        whole = all(
            r["missing"] == 0 and r["duplicated"] == 0 and r["committed"] == N
            for r in result["named_alike"].values()
        ) and all(r["attempts"] == 1 for r in result["named_alike"].values() if "attempts" in r)
        named_alike_ok = whole and all(
            r["status"] == "FINISHED" for r in result["named_alike"].values()
        )
        # with the prefix taken on purpose, a job may fail; it may never finish incomplete
        same_prefix_ok = all(
            r["status"] == "FAILED"
            or (r["status"] == "FINISHED" and r["missing"] == 0 and r["duplicated"] == 0)
            for r in result["same_prefix"].values()
        ) and all(r["duplicated"] == 0 for r in result["same_prefix"].values())
        result["ok"] = (
            result["victim_prefix"] != result["attacker_prefix"]
            and named_alike_ok
            and same_prefix_ok
        )
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    line = {"case": "txn_prefix_collision", **txn_prefix_collision()}
    print(json.dumps(line, default=str), flush=True)
    sys.exit(0 if line["ok"] else 1)
