"""Checkpoint files of a failed attempt never touch a later attempt's or run's (M-E2, M-T3).

Checkpoint ids are never reused on one storage (across attempts and across runs,
completed or not), and every state file name is unique to the write that made it.
So the asynchronous snapshot part of a failed attempt, which may still be writing
``chk-<id>/op-<uid>-<subtask>`` (and then deleting it, being cancelled) after the
next attempt started, can neither overwrite nor delete a file of the next attempt's
checkpoints.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import lockgate as lg
from conftest import FileProbe, wait_until
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.connectors import SequenceSource
from lockgate.connectors.base import Sink, SinkWriter
from lockgate.core.batch import to_rows
from lockgate.recovery.restore import resolve_restore_path
from running_sums import expected_running_sums

N = 20_000
CHUNK = 2_000


def expected_sums(n: int) -> list[dict[str, int]]:
    return expected_running_sums(n, CHUNK)


def by_value(records: list[Any]) -> list[Any]:
    return sorted(records, key=lambda r: r["v"])


def to_record(x: int) -> dict[str, int]:
    return {"k": x // CHUNK, "v": x}


def key_of(r: dict[str, int]) -> int:
    return r["k"]


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value: Any, ctx: Any) -> Any:
        total = self.total.value() + value["v"]
        self.total.update(total)
        yield {"k": value["k"], "v": value["v"], "sum": total}


# --------------------------------------------------------------------------- holding a late write

_GATES: dict[str, Gate] = {}


def _gate(name: str) -> Gate:
    return _GATES[name]


class Gate:
    """Holds the asynchronous part of attempt 0's first sink snapshot (local executor:
    pickles by name, so the job's copy is this object)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.held = threading.Event()
        self.release = threading.Event()
        self.failed = threading.Event()
        #: the task thread of the failed attempt's sink (it ends once its async part did)
        self.held_task: threading.Thread | None = None
        _GATES[name] = self

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_gate, (self.name,))


class HeldState:
    """A sink state whose serialization, in the asynchronous part, waits for the gate."""

    def __init__(self, gate: Gate, records: list[Any]) -> None:
        self.gate = gate
        self.records = records

    def __reduce__(self) -> tuple[Any, tuple[list[Any]]]:
        self.gate.held.set()
        if not self.gate.release.wait(30):
            raise RuntimeError("the test never released the held snapshot")
        return (list, (self.records,))


class FailWhenHeld:
    """A map function that fails once, as soon as a snapshot is held: the failed attempt
    is cancelled and the next one starts while the held subtask is still closing (a
    subtask closes only once its asynchronous part ended)."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def __call__(self, x: int) -> dict[str, int]:
        if self.gate.held.is_set() and not self.gate.failed.is_set():
            self.gate.failed.set()
            raise RuntimeError("attempt 0 fails while its asynchronous snapshot part is held")
        return to_record(x)


class HoldingSink(Sink):
    """An exactly-once collecting sink (its records are its checkpointed state) whose
    first snapshot in attempt 0 is held in the asynchronous part."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def create_writer(self, ctx: Any) -> SinkWriter:
        return _HoldingWriter(self.gate, ctx.attempt_number)


class _HoldingWriter(SinkWriter):
    def __init__(self, gate: Gate, attempt: int) -> None:
        self.gate = gate
        self.attempt = attempt
        self.records: list[Any] = []
        self.snapshots = 0

    def write(self, batch: Any) -> None:
        self.records.extend(to_rows(batch))

    def initialize_state(self, states: list[Any]) -> None:
        for records in states:
            self.records.extend(records)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        self.snapshots += 1
        if self.attempt == 0 and self.snapshots == 1 and not self.gate.release.is_set():
            self.gate.held_task = threading.current_thread()
            return HeldState(self.gate, list(self.records))
        return list(self.records)

    def result(self) -> Any:
        return self.records


def held_sink_job(storage: str, gate: Gate, *, restore_from: str | None = None) -> Any:
    """The job: numbers -> records (fails once when a snapshot is held) -> running sums per
    key -> the holding sink. Set ``gate.release`` first for a run that never holds."""
    # a short join timeout: the next attempt starts while the held subtask still closes
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor(join_timeout_s=0.5))
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = storage
    env.checkpoint_config.retained = 1000  # the checkpoint the test looks at stays
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=3, delay=0))
    (
        env.from_source(SequenceSource(0, N, rows_per_second=10_000, batch_size=200))
        .uid("numbers")
        .map(FailWhenHeld(gate))
        .uid("records")
        .key_by(key_of)
        .process(RunningSum())
        .uid("sums")
        .sink_to(HoldingSink(gate))
        .uid("sink")
    )
    return env.execute_async("held late write", restore_from=restore_from)


@pytest.mark.hang_guard(120)
def test_m_t3_m_e2_a_late_async_part_of_a_failed_attempt_never_touches_the_next_attempts_files(
    tmp_path: Any,
) -> None:
    """M-T3, M-E2: attempt 0's asynchronous part of its first checkpoint is held until
    attempt 1 has completed a checkpoint of the same operator, then released: it writes
    (and, cancelled, deletes) its state file late. Attempt 1's checkpoint still restores
    intact and the output is exact.

    Local executor only: the hold needs the failed attempt's thread to outlive the
    attempt (on Spark, the Python worker of a failed barrier task is killed by Spark,
    and the held object could not be released from the test process)."""
    storage = str(tmp_path / "checkpoints")
    gate = Gate(f"gate-{id(tmp_path)}")
    try:
        client = held_sink_job(storage, gate)
        try:
            wait_until(gate.held.is_set, "attempt 0's first sink snapshot is held", 30)
            fs = FileSystemCheckpointStorage(storage)
            wait_until(lambda: bool(fs.completed_ids()), "attempt 1 has completed a checkpoint", 60)
            first = min(fs.completed_ids())
            gate.release.set()
            wait_until(
                lambda: gate.held_task is not None and not gate.held_task.is_alive(),
                "attempt 0's sink thread ended (its late write and delete are done)",
                30,
            )
            result = client.wait(60)
        finally:
            gate.release.set()
            if not client.done():
                client.cancel()
                client.wait(30)
        assert result.attempts == 2
        [records] = result.sink_results["sink"]
        assert by_value(records) == expected_sums(N)

        spec = resolve_restore_path(f"{storage}/chk-{first}")  # verifies every file
        assert spec.checkpoint_id == first, "the checkpoint of attempt 1 must be intact"
        never_holds = Gate(f"never-holds-{id(tmp_path)}")
        never_holds.release.set()
        never_holds.failed.set()
        restored = held_sink_job(storage, never_holds, restore_from=f"{storage}/chk-{first}").wait(
            60
        )
        [again] = restored.sink_results["sink"]
        assert by_value(again) == expected_sums(N), "restored: exactly the same output"
    finally:
        _GATES.clear()


# --------------------------------------------------------------------------- ids across runs


class _Unpicklable:
    def __reduce__(self) -> Any:
        raise RuntimeError("this checkpoint cannot be written (the test declines it)")


class IdRecordingSink(Sink):
    """Collects records (exactly-once, like CollectSink) and reports ``(run, attempt,
    checkpoint id)`` of every checkpoint it snapshots to ``probe``. In the attempts
    ``decline_in`` every snapshot fails in its asynchronous part, so no checkpoint of
    theirs completes (the third failure in a row fails the attempt)."""

    def __init__(self, probe: FileProbe, run: int, decline_in: tuple[int, ...]) -> None:
        self.probe = probe
        self.run = run
        self.decline_in = decline_in

    def create_writer(self, ctx: Any) -> SinkWriter:
        return _IdRecordingWriter(self, ctx.attempt_number)


class _IdRecordingWriter(SinkWriter):
    def __init__(self, sink: IdRecordingSink, attempt: int) -> None:
        self.sink = sink
        self.attempt = attempt
        self.records: list[Any] = []

    def write(self, batch: Any) -> None:
        self.records.extend(to_rows(batch))

    def initialize_state(self, states: list[Any]) -> None:
        for records in states:
            self.records.extend(records)

    def snapshot_state(self, checkpoint_id: int) -> Any:
        self.sink.probe.add((self.sink.run, self.attempt, checkpoint_id))
        if self.attempt in self.sink.decline_in:
            return _Unpicklable()
        return list(self.records)

    def result(self) -> Any:
        return self.records


def id_run(
    executor: Any,
    storage: str,
    probe: FileProbe,
    run: int,
    decline_in: tuple[int, ...],
    restarts: int = 0,
) -> Any:
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.checkpoint_config.storage = storage
    env.checkpoint_config.tolerable_failures = 2
    env.set_restart_strategy(
        lg.RestartStrategy.fixed_delay(attempts=restarts, delay=0)
        if restarts
        else lg.RestartStrategy.none()
    )
    (
        env.from_source(SequenceSource(0, N, rows_per_second=20_000, batch_size=200))
        .uid("numbers")
        .map(to_record)
        .uid("records")
        .key_by(key_of)
        .process(RunningSum())
        .uid("sums")
        .sink_to(IdRecordingSink(probe, run, decline_in))
        .uid("sink")
    )
    return env.execute(f"ids, run {run}")


def ids_of(probe: FileProbe, run: int, attempt: int) -> set[int]:
    return {cid for r, a, cid in probe.items if (r, a) == (run, attempt)}


@pytest.mark.hang_guard(180)
def test_m_e2_a_run_never_reuses_the_ids_of_an_earlier_run_whose_checkpoints_never_completed(
    executor: Any, tmp_path: Any, file_probe: FileProbe
) -> None:
    """M-E2: run 1 triggers checkpoints that all fail, then fails (none completed, so the
    storage has no ``_metadata`` and no ``_latest``); run 2 on the same storage takes
    only new ids, completes checkpoints and its output is exact."""
    storage = str(tmp_path / "checkpoints")
    with pytest.raises(lg.JobFailedError, match="consecutive checkpoint failures"):
        id_run(executor, storage, file_probe, run=1, decline_in=(0,))
    fs = FileSystemCheckpointStorage(storage)
    assert fs.completed_ids() == [] and fs.read_latest() is None
    first_run = ids_of(file_probe, 1, 0)
    assert first_run, "run 1 triggered no checkpoint: make it run longer"

    result = id_run(executor, storage, file_probe, run=2, decline_in=())
    second_run = ids_of(file_probe, 2, 0)
    assert second_run and min(second_run) > max(first_run), (
        f"run 2 reused checkpoint ids of run 1: run 1 {sorted(first_run)}, "
        f"run 2 {sorted(second_run)}"
    )
    assert fs.completed_ids() and min(fs.completed_ids()) > max(first_run)
    records = [r for part in result.sink_results["sink"] for r in part]
    assert by_value(records) == expected_sums(N)


@pytest.mark.hang_guard(180)
def test_m_e2_the_next_attempt_never_reuses_the_ids_of_a_failed_attempts_checkpoints(
    executor: Any, tmp_path: Any, file_probe: FileProbe
) -> None:
    """M-E2: attempt 0 triggers checkpoints that all fail, then fails; attempt 1 of the
    same run takes only new ids (none of attempt 0's completed, so nothing on storage
    names them but the id reservation) and the output is exact."""
    result = id_run(
        executor, str(tmp_path / "checkpoints"), file_probe, run=1, decline_in=(0,), restarts=1
    )
    assert result.attempts == 2
    failed, next_attempt = ids_of(file_probe, 1, 0), ids_of(file_probe, 1, 1)
    assert failed and next_attempt and min(next_attempt) > max(failed), (
        f"attempt 1 reused checkpoint ids of attempt 0: {sorted(failed)} then "
        f"{sorted(next_attempt)}"
    )
    records = [r for part in result.sink_results["sink"] for r in part]
    assert by_value(records) == expected_sums(N)
