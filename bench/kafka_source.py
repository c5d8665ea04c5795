"""KafkaSource alone: how fast it reads, feeding a DiscardingSink.

Writes ``--records`` JSON values ``{"key": k, "ts": epoch ms}`` (the records of
``bench/kafka.py``, with its two end markers) to a fresh topic of 2 partitions,
then runs, per ``--formats`` case, ``KafkaSource(bounded=True) -> DiscardingSink`` at
``--parallelism`` on the local executor, and prints one JSON line per case with
``records_per_s`` (records / the job's seconds, from ``execute_async`` to ``wait()``).

Cases: ``json`` (``format="json"``, a dict per record), ``bytes`` (``format="bytes"``),
``text``, and ``schema`` (``format="json"`` with ``schema=``: one Arrow batch per
partition and poll).

Usage::

    .venv/bin/python bench/kafka_source.py [--records 1000000] [--formats json,bytes,schema]
                                           [--parallelism 2] [--profile json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
# `python bench/kafka_source.py` puts bench/ first on sys.path, where bench/kafka.py would
# shadow the kafka-python package; the repository root goes there instead.
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

import pyarrow as pa
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka import produce_input

SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.int64())])
CASES = ("json", "bytes", "text", "schema")


def run(bootstrap: str, topic: str, case: str, parallelism: int, records: int) -> dict:
    import lockgate as lg
    from lockgate.connectors import DiscardingSink
    from lockgate.connectors.kafka.source import KafkaSource

    env = lg.StreamEnvironment(parallelism=parallelism)
    fmt = "json" if case == "schema" else case
    extra = {"schema": SCHEMA} if case == "schema" else {}
    source = KafkaSource(bootstrap, topic, bounded=True, format=fmt, **extra)
    env.from_source(source, name="kafka-in").uid("kafka-in").sink_to(DiscardingSink())
    started = time.perf_counter()
    result = env.execute_async("kafka-source", executor=lg.LocalExecutor()).wait()
    seconds = time.perf_counter() - started
    read = result.records_out("kafka-in")
    if read != records:
        raise SystemExit(f"{case}: the source read {read} records, not {records}")
    return {
        "bench": "kafka_source",
        "case": case,
        "records": records,
        "parallelism": parallelism,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "cores": os.cpu_count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--formats", default="json,bytes,schema")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--bootstrap", default=os.environ.get("LOCKGATE_TEST_KAFKA", "127.0.0.1:9092"))
    ap.add_argument("--profile", default="", help="a case to run under cProfile (top 25)")
    args = ap.parse_args()
    cases = [c.strip() for c in args.formats.split(",") if c.strip()]
    if not cases or any(c not in CASES for c in cases):
        ap.error(f"--formats: a comma-separated subset of {','.join(CASES)}, got {args.formats!r}")
    if args.records < 1:
        ap.error(f"--records must be at least 1, got {args.records}")
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    topic = f"lgbench-source-{uuid.uuid4().hex[:8]}"
    try:
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(30)
    except KafkaException as e:
        raise SystemExit(f"cannot create topic {topic} on {args.bootstrap}: {e}") from e
    try:
        # bench/kafka.py's input plus one marker per partition
        produce_input(args.bootstrap, topic, args.records)
        total = args.records + 2
        for case in cases:
            if case == args.profile:
                import cProfile
                import pstats

                profile = cProfile.Profile()
                profile.enable()
                line = run(args.bootstrap, topic, case, args.parallelism, total)
                profile.disable()
                pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
            else:
                line = run(args.bootstrap, topic, case, args.parallelism, total)
            print(json.dumps(line), flush=True)
    finally:
        for future in admin.delete_topics([topic]).values():
            try:
                future.result(30)
            except KafkaException:
                pass


if __name__ == "__main__":
    main()
