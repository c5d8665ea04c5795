"""Parallelism 64 on the local executor (issue 43 part 2): a job with two keyed edges and a
broadcast, exactly-once into files, through a failure of a keyed operator after a
checkpoint; the published output is exactly the failure-free one (M-R1, M-X1).

At 64 subtasks per vertex the local executor runs about 450 threads in one interpreter
on this project's 2-core machine: at 10,000 records/s it is saturated and a checkpoint
takes 40-55 s. The input is paced by checkpoints (``CheckpointPacedSource``), so the
fault, which waits for a checkpoint, finds records however slow the machine is.

The job: a checkpoint-paced sequence of ``N`` numbers (64 splits) -> key_by(v % 997) ->
running sum per key -> key_by(v % 101) -> count per key -> files; the counts that are a
multiple of ``MARK`` -> broadcast -> files (each one 64 times). With per-key order
depending on how the splits interleave, the check is what does not depend on it: every
number once in each file set with its keys, each key's largest running total and count,
and every mark exactly 64 times.
"""

from __future__ import annotations

from collections import Counter

import pytest

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors import FileSink, SequenceSource
from lockgate.testing import FailAtRecord, inject_faults
from published_files import published

P = 64
#: records per source subtask, and per completed checkpoint of an attempt
PER_SUBTASK, PER_CHECKPOINT = 600, 200
N = 64 * PER_SUBTASK
MARK = 100


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        total = self.total.value() + value
        self.total.update(total)
        yield {"k": value % 997, "v": value, "total": total}


class Count(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        yield {**value, "j": value["v"] % 101, "n": n}


@pytest.mark.hang_guard(600)
def test_m_r1_p64_two_keyed_edges_and_a_broadcast_exact_through_failures(tmp_path) -> None:
    env = lg.StreamEnvironment(parallelism=P)
    env.enable_checkpointing(500)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=4, delay=0))
    counts = (
        env.from_source(
            CheckpointPacedSource(SequenceSource(0, N), PER_CHECKPOINT, end_after=4),
            name="numbers",
        )
        .uid("numbers")
        .key_by(lambda v: v % 997)
        .process(RunningSum(), name="sums")
        .uid("sums")
        .key_by(lambda r: r["v"] % 101)
        .process(Count(), name="counts")
        .uid("counts")
    )
    counts.sink_to(FileSink(str(tmp_path / "counts"), format="jsonl"), name="files").uid("files")
    (
        counts.filter(lambda r: r["n"] % MARK == 0, name="marks")
        .broadcast()
        .map(lambda r: {"j": r["j"], "n": r["n"]}, name="everywhere")
        .sink_to(FileSink(str(tmp_path / "marks"), format="jsonl"), name="mark files")
        .uid("mark files")
    )
    schedule = inject_faults(
        env,
        FailAtRecord("sums", record=150, subtask=7, after_checkpoints=1),
    )
    result = env.execute("p64", executor=lg.LocalExecutor())
    assert result.attempts == 2, f"the fault of {schedule} fired once"

    rows = published(str(tmp_path / "counts"))
    assert sorted(r["v"] for r in rows) == list(range(N)), "every number exactly once"
    assert all(r["k"] == r["v"] % 997 and r["j"] == r["v"] % 101 for r in rows)
    largest_total: dict[int, int] = {}
    for r in rows:
        largest_total[r["k"]] = max(largest_total.get(r["k"], 0), r["total"])
    expected_total = Counter()
    for v in range(N):
        expected_total[v % 997] += v
    assert largest_total == {k: t for k, t in expected_total.items() if k in largest_total}
    assert len(largest_total) == 997
    per_j = Counter(v % 101 for v in range(N))
    counts_seen: dict[int, list[int]] = {}
    for r in rows:
        counts_seen.setdefault(r["j"], []).append(r["n"])
    assert {j: sorted(ns) for j, ns in counts_seen.items()} == {
        j: list(range(1, c + 1)) for j, c in per_j.items()
    }, "each key counted every record once, 1..n"

    marks = Counter((m["j"], m["n"]) for m in published(str(tmp_path / "marks")))
    expected_marks = {(j, n): P for j, c in per_j.items() for n in range(MARK, c + 1, MARK)}
    assert dict(marks) == expected_marks, "every mark broadcast to all 64 subtasks once"
