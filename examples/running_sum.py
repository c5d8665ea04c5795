"""Running sums per key: the example of the README's "The API in one example".

Run it with any of::

    lockgate run examples/running_sum.py [--count N] [--parallelism N] [--out DIR]
    lockgate run --executor local examples/running_sum.py [...]   # no Spark, no Java
    python examples/running_sum.py [--count N] [--parallelism N] [--out DIR]

By default the job runs on Spark (an embedded ``local[*]`` session, which needs Java 17
or newer; ``lockgate run --master URL`` picks a cluster); ``--executor local`` (or
``LOCKGATE_EXECUTOR=local``) runs every subtask as a thread of this process instead.

The integers ``0 .. N-1`` (``SequenceSource``) become records ``{"k": x % 10,
"v": x}`` (``map``), are partitioned by ``k`` (``key_by``), and a
``KeyedProcessFunction`` keeps each key's running total in a ``ValueState``
and emits ``{"k": key, "total": t}`` for every record, into JSON-lines files
(``FileSink``, exactly-once: its part files appear only once complete). At the end
the script checks each key's last total against the closed form and prints the job's
status and per-operator record counts.

The job takes no checkpoints: it is bounded and short. For checkpoints, restart
strategies, state backends and savepoints see the README and ``docs/operations.md``;
every operator already has a uid, so the job could restore from a savepoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import lockgate as lg


class RunningSum(lg.KeyedProcessFunction):
    """Adds up ``value["v"]`` per key; emits the new total for every record."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value: Any, ctx: Any) -> Iterator[dict[str, Any]]:
        t = self.total.value() + value["v"]
        self.total.update(t)
        yield {"k": ctx.current_key, "total": t}


def build(env: lg.StreamEnvironment, count: int, out_dir: str) -> None:
    """numbers -> {"k", "v"} -> key_by(k) -> RunningSum -> FileSink(out_dir)."""
    nums = env.from_source(lg.connectors.SequenceSource(0, count), name="numbers").uid("numbers")
    sums = (
        nums.map(lambda x: {"k": x % 10, "v": x}, name="to record")
        .uid("to-record")
        .key_by(lambda r: r["k"])
        .process(RunningSum(), name="running sum")
        .uid("sums")
    )
    sums.sink_to(lg.connectors.FileSink(out_dir, format="jsonl"), name="sums file").uid("sink")


def expected_totals(count: int) -> dict[int, int]:
    """Sum of ``x`` in ``range(count)`` with ``x % 10 == k``, for each key ``k`` that occurs."""
    return {k: sum(range(k, count, 10)) for k in range(min(10, count))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Running sums per key with lockgate.")
    parser.add_argument("--count", type=int, default=100_000, help="numbers to read (0..N-1)")
    parser.add_argument("--parallelism", type=int, default=2, help="subtasks per operator")
    parser.add_argument("--out", help="folder for the totals (default: a temporary one)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lockgate-running-sum-") as tmp:
        out_dir = args.out or tmp
        before = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()

        env = lg.StreamEnvironment(parallelism=args.parallelism)
        build(env, args.count, out_dir)
        result = env.execute("running sums")

        # The totals of a key only grow, so its largest total is its last one.
        final: dict[int, int] = {}
        for name in sorted(set(os.listdir(out_dir)) - before):
            with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                for line in f:
                    r = json.loads(line)
                    final[r["k"]] = max(final.get(r["k"], 0), r["total"])

    print(f"job '{result.job_name}': {result.status.value} in {result.duration_ms:.0f} ms")
    for name, counts in result.record_counts.items():
        print(f"  {name:<12} in {counts['records_in']:>8}  out {counts['records_out']:>8}")
    expected = expected_totals(args.count)
    for k in sorted(final):
        print(f"  k={k}  total={final[k]}")
    ok = final == expected and result.status is lg.JobStatus.FINISHED
    print("totals match the closed form" if ok else f"MISMATCH: expected {expected}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
