"""The task side of a checkpoint (M-T1 to M-T4) and the output half of unaligned
checkpoints (M-B7), driven directly with in-memory channels, a recording responder and
in-memory storage."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import lockgate as lg
from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.channel_state import INPUT, OUTPUT, decode
from lockgate.checkpoint.storage import MemoryCheckpointStorage
from lockgate.checkpoint.types import CheckpointFailureReason
from lockgate.connectors import CollectionSource, FileSource, SequenceSource
from lockgate.connectors.base import ReaderOutput
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, scalar_batch, to_rows
from lockgate.core.partitioners import ForwardPartitioning
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import StreamOperator
from lockgate.runtime.record_writer import RecordWriter
from lockgate.runtime.subtask_checkpointer import SubtaskCheckpointer

BARRIER = el.CheckpointBarrier(1, 0)
UNALIGNED = el.CheckpointBarrier(1, 0, el.CheckpointOptions(unaligned=True))


class Responder:
    def __init__(self) -> None:
        self.acks: list = []
        self.declines: list = []
        self.event = threading.Event()

    def acknowledge(self, ack) -> None:
        self.acks.append(ack)
        self.event.set()

    def decline(self, task, checkpoint_id, reason) -> None:
        self.declines.append((task, checkpoint_id, reason))
        self.event.set()

    def task_running(self, task) -> None:
        pass  # initialization done: nothing to record here


class StatefulOperator(StreamOperator):
    """Records the order of checkpoint calls; its state is the number of rows seen."""

    def __init__(self, log: list[str], view=None) -> None:
        super().__init__()
        self.uid = "stateful"
        self.log = log
        self.seen = 0
        self.view = view

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        self.log.append("prepare")

    def snapshot_state(self, checkpoint_id: int):
        self.log.append("snapshot")
        return self.view if self.view is not None else {"seen": self.seen}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.log.append(f"complete {checkpoint_id}")


class LoggingChannel(LocalChannel):
    def __init__(self, log: list[str]) -> None:
        super().__init__(1 << 20)
        self.log = log

    def put(self, element) -> None:
        if not isinstance(element, (RowBatch,)) and not hasattr(element, "num_rows"):
            self.log.append(f"put {type(element).__name__}")
        super().put(element)


def make(log=None, view=None, channels=None, timeout_ms=100):
    log = [] if log is None else log
    channels = channels or [LoggingChannel(log)]
    writer = RecordWriter(
        channels,
        ForwardPartitioning().create(1, 0),
        lg.SystemClock(),
        timeout_ms=timeout_ms,
        max_rows=1000,
        max_bytes=1 << 20,
    )
    storage = MemoryCheckpointStorage()
    responder = Responder()
    op = StatefulOperator(log, view)
    cp = SubtaskCheckpointer((7, 0), "task", [op], [writer], storage, responder, lg.SystemClock())
    return cp, op, writer, channels, storage, responder, log


def drain(channel: LocalChannel) -> list:
    out = []
    while (e := channel.poll()) is not None:
        out.append(e)
    return out


def wait_for(event: threading.Event, what: str) -> None:
    assert event.wait(10), f"timed out waiting for {what}"


def test_m_t1_a_source_prepares_then_forwards_the_barrier_then_snapshots() -> None:
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        writer.write(RowBatch([1, 2]))  # buffered, must precede the barrier
        cp.trigger_source(BARRIER)
        assert log == ["prepare", "put CheckpointBarrier", "snapshot"]
        elements = drain(channel)
        assert to_rows(elements[0]) == [1, 2] and elements[1] == BARRIER
        wait_for(responder.event, "the acknowledgement")
        [ack] = responder.acks
        assert ack.task == (7, 0) and ack.checkpoint_id == 1
        assert storage.read_state(ack.handles["stateful"])["state"] == {"seen": 0}
    finally:
        cp.close()


def test_m_t2_a_task_that_is_not_running_declines_and_sends_a_cancellation_marker() -> None:
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        cp.decline_not_running(BARRIER)
        assert responder.declines == [((7, 0), 1, CheckpointFailureReason.TASK_NOT_RUNNING)]
        assert drain(channel) == [el.CancellationMarker(1)]
        assert "snapshot" not in log and not responder.acks
    finally:
        cp.close()


class BlockingView:
    """A snapshot view whose asynchronous part waits for the test."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.proceed = threading.Event()
        self.released = threading.Event()

    def materialize(self):
        self.started.set()
        assert self.proceed.wait(10)
        return {"x": 1}

    def release(self) -> None:
        self.released.set()


def test_m_t3_the_asynchronous_part_runs_in_the_background_and_the_ack_follows_it() -> None:
    view = BlockingView()
    cp, op, writer, [channel], storage, responder, log = make(view=view)
    try:
        cp.trigger_source(BARRIER)  # returns while the asynchronous part still runs
        wait_for(view.started, "the asynchronous part to start")
        writer.write(RowBatch([3]))  # processing goes on meanwhile
        assert not responder.acks and cp.in_progress == [1]
        view.proceed.set()
        wait_for(responder.event, "the acknowledgement")
        [ack] = responder.acks
        assert ack.metrics.sync_ms >= 0 and ack.metrics.async_ms >= 0
        assert ack.metrics.state_size == ack.handles["stateful"].size > 0
        assert view.released.is_set()
    finally:
        cp.close()


def test_m_t3_a_cancelled_asynchronous_part_releases_its_view_deletes_its_files_and_never_acks() -> (
    None
):
    view = BlockingView()
    cp, op, writer, [channel], storage, responder, log = make(view=view)
    try:
        cp.trigger_source(BARRIER)
        wait_for(view.started, "the asynchronous part to start")
        cp.notify_aborted(1)
        view.proceed.set()
        wait_for(view.released, "the view to be released")
        cp.close()
        assert not responder.acks and not storage.files
    finally:
        cp.close()


def test_m_c3_completion_notices_reach_the_operators() -> None:
    cp, op, writer, [channel], storage, responder, log = make()
    cp.notify_complete(4)
    cp.close()
    assert log == ["complete 4"]


def _reader(source, subtask=0, parallelism=1):
    ctx = RuntimeContext(
        task_name="t",
        operator_name="src",
        operator_uid="src",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )
    reader = source.create_reader(ctx)
    reader.add_splits(source.create_splits(parallelism)[subtask::parallelism])
    return reader


class Sink(ReaderOutput):
    def __init__(self) -> None:
        self.rows: list = []

    def emit(self, batch) -> None:
        self.rows.extend(to_rows(batch))

    def emit_dead_letter(self, record) -> None:
        raise AssertionError(record)


@pytest.mark.parametrize("kind", ["sequence", "collection", "file"])
def test_m_t4_sources_store_their_read_positions(kind, tmp_path) -> None:
    if kind == "sequence":
        source = SequenceSource(0, 10, batch_size=4)
    elif kind == "collection":
        source = CollectionSource(list(range(10)), batch_size=4)
    else:
        path = tmp_path / "in.jsonl"
        path.write_text("".join(f'{{"v": {i}}}\n' for i in range(10)))
        source = FileSource(str(path), format="jsonl", batch_size=4)
    reader = _reader(source)
    out = Sink()
    reader.poll(out)
    split = reader.snapshot_positions()[0]  # (a file source adds the finished names)
    reader.poll(out)  # the snapshot is a copy: later reads do not move it
    position = getattr(split, "next", getattr(split, "position", None))
    assert position in (4, 0 + 4)
    assert len(out.rows) == 8
    reader.close()  # the file source's open file (an unclosed file warns, and warnings fail)


def test_m_b7_an_unaligned_barrier_overtakes_queued_and_buffered_output_which_is_persisted() -> (
    None
):
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        channel.put(scalar_batch(np.arange(3)))  # queued in the channel
        writer.write(RowBatch(["buffered"]))  # still in the output buffer
        cp.trigger_snapshot(UNALIGNED, AlignmentInfo(0.0, 0.0, unaligned=True))
        first = channel.poll()
        assert first == UNALIGNED  # the barrier went ahead of the queued batch
        cp.channel_state_complete(1)
        wait_for(responder.event, "the acknowledgement")
        [ack] = responder.acks
        assert ack.metrics.unaligned and ack.metrics.persisted_inflight_bytes > 0
        state = decode(storage.read_state(ack.handles[cp.channel_state_key]))
        [output] = state
        assert output.side == OUTPUT and len(output.batches) == 2
        writer.flush_all()
        rest = drain(channel)
        assert to_rows(rest[0]) == [0, 1, 2] and to_rows(rest[1]) == ["buffered"]
    finally:
        cp.close()


def test_m_b7_a_priority_barrier_never_overtakes_a_control_element() -> None:
    channel = LocalChannel(1 << 20)
    channel.put(RowBatch([1]))
    channel.put(el.Watermark(5))
    channel.put(RowBatch([2]))
    overtaken = channel.put_priority(UNALIGNED)
    assert [to_rows(b) for b in overtaken] == [[2]]
    elements = drain(channel)
    assert to_rows(elements[0]) == [1] and elements[1] == el.Watermark(5)
    assert elements[2] == UNALIGNED and to_rows(elements[3]) == [2]


def test_m_b7_in_flight_input_records_are_persisted_until_channel_state_is_complete() -> None:
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        cp.trigger_snapshot(UNALIGNED, AlignmentInfo(0.0, 0.0, unaligned=True))
        cp.record_inflight(1, 2, RowBatch([{"a": 1}]))
        assert not responder.acks  # waits for the channel state
        cp.channel_state_complete(1)
        wait_for(responder.event, "the acknowledgement")
        [ack] = responder.acks
        state = decode(storage.read_state(ack.handles[cp.channel_state_key]))
        [recorded] = state
        assert recorded.side == INPUT and len(recorded.batches) == 1
    finally:
        cp.close()


def test_m_b4_abort_declines_once_and_sends_one_cancellation_marker_downstream() -> None:
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        cp.abort_checkpoint(3, CheckpointFailureReason.SUBSUMED)
        cp.abort_checkpoint(3, CheckpointFailureReason.SUBSUMED)
        assert responder.declines == [((7, 0), 3, CheckpointFailureReason.SUBSUMED)]
        assert drain(channel) == [el.CancellationMarker(3)]
    finally:
        cp.close()


# -- incremental checkpoints (M-R4) -------------------------------------------------------------


class IncrementalView:
    """A view with ``materialize_to``: uploads each of its files unless the uploader
    offers it for reuse; ``block`` makes it wait after uploading."""

    def __init__(self, files: dict[str, bytes], block: threading.Event | None = None) -> None:
        self.files = files
        self.block = block
        self.calls: list[str] = []
        self.uploading = threading.Event()
        self.released = threading.Event()

    def materialize(self) -> dict:
        self.calls.append("materialize")
        return {"canonical": sorted(self.files)}

    def materialize_to(self, uploader) -> dict:
        self.calls.append("materialize_to")
        refs = {k: uploader.reuse(k) or uploader.upload(k, data) for k, data in self.files.items()}
        self.uploading.set()
        if self.block is not None:
            assert self.block.wait(10), "the test never unblocked materialize_to"
        return {"native": refs}

    def release(self) -> None:
        self.released.set()


def checkpoint_with(cp, op, responder, view, barrier):
    op.view = view
    responder.event.clear()
    cp.trigger_snapshot(barrier, AlignmentInfo(0.0, 0.0, unaligned=False))
    wait_for(responder.event, f"the acknowledgement of checkpoint {barrier.checkpoint_id}")
    return responder.acks[-1]


def test_m_r4_a_checkpoint_writes_through_the_uploader_and_the_handle_carries_its_files() -> None:
    cp, op, writer, _, storage, responder, log = make()
    try:
        view = IncrementalView({"a": b"aaaa", "b": b"bb"})
        ack = checkpoint_with(cp, op, responder, view, BARRIER)
        handle = ack.handles["stateful"]
        state = storage.read_state(handle)["state"]
        assert view.calls == ["materialize_to"]
        assert handle.shared == (state["native"]["a"], state["native"]["b"])
        assert all(h.path.startswith("shared/stateful/0/1-") for h in handle.shared)
        assert [storage.read_file(h.path) for h in handle.shared] == [b"aaaa", b"bb"]
        assert ack.metrics.state_size == handle.size + 6  # state file + uploaded bytes
    finally:
        cp.close()


def test_m_s1_a_savepoint_always_materializes_canonically_without_shared_files() -> None:
    cp, op, writer, _, storage, responder, log = make()
    try:
        view = IncrementalView({"a": b"aaaa"})
        savepoint = el.CheckpointBarrier(1, 0, el.CheckpointOptions(el.CheckpointType.SAVEPOINT))
        ack = checkpoint_with(cp, op, responder, view, savepoint)
        assert view.calls == ["materialize"] and ack.handles["stateful"].shared == ()
        assert storage.read_state(ack.handles["stateful"])["state"] == {"canonical": ["a"]}
        assert storage.list_files("shared") == []
    finally:
        cp.close()


def test_m_r4_only_files_of_a_checkpoint_known_complete_are_reused() -> None:
    cp, op, writer, _, storage, responder, log = make()
    try:
        first = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1"}), el.CheckpointBarrier(1, 0)
        )
        second = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1"}), el.CheckpointBarrier(2, 0)
        )
        assert second.handles["stateful"].shared != first.handles["stateful"].shared
        cp.notify_complete(2)
        third = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1", "b": b"2"}), el.CheckpointBarrier(3, 0)
        )
        assert third.handles["stateful"].shared[0] == second.handles["stateful"].shared[0]
        assert third.metrics.state_size == third.handles["stateful"].size + 1  # only b
        cp.notify_aborted(4)  # forget: the next checkpoint uploads everything
        fifth = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1"}), el.CheckpointBarrier(5, 0)
        )
        assert fifth.handles["stateful"].shared[0] != second.handles["stateful"].shared[0]
    finally:
        cp.close()


def test_m_t3_a_cancelled_incremental_checkpoint_deletes_the_shared_files_it_uploaded() -> None:
    cp, op, writer, _, storage, responder, log = make()
    try:
        block = threading.Event()
        view = IncrementalView({"a": b"aaaa"}, block)
        op.view = view
        cp.trigger_snapshot(BARRIER, AlignmentInfo(0.0, 0.0, unaligned=False))
        wait_for(view.uploading, "the upload")
        assert len(storage.list_files("shared")) == 1
        cp.notify_aborted(1)
        block.set()
        wait_for(view.released, "the release of the view")
        assert storage.list_files("shared") == [] and storage.folders() == set()
        assert not responder.acks
    finally:
        cp.close()


def test_m_r4_a_savepoint_in_between_keeps_the_files_offered_for_reuse() -> None:
    cp, op, writer, _, storage, responder, log = make()
    try:
        first = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1"}), el.CheckpointBarrier(1, 0)
        )
        cp.notify_complete(1)
        checkpoint_with(
            cp,
            op,
            responder,
            IncrementalView({"a": b"1"}),
            el.CheckpointBarrier(2, 0, el.CheckpointOptions(el.CheckpointType.SAVEPOINT)),
        )
        cp.notify_complete(2)
        third = checkpoint_with(
            cp, op, responder, IncrementalView({"a": b"1"}), el.CheckpointBarrier(3, 0)
        )
        assert third.handles["stateful"].shared == first.handles["stateful"].shared
    finally:
        cp.close()


def test_m_t1_after_an_alignment_the_task_forwards_the_barrier_then_snapshots() -> None:
    """M-T1 for a task whose barrier completes an alignment (not a source): output that
    must precede the barrier goes first, then the barrier on every output channel, then
    the synchronous snapshot."""
    cp, op, writer, [channel], storage, responder, log = make()
    try:
        writer.write(RowBatch([1, 2]))  # buffered, must precede the barrier
        cp.trigger_snapshot(BARRIER, AlignmentInfo(0.0, 0.0, unaligned=False))
        assert log == ["prepare", "put CheckpointBarrier", "snapshot"]
        elements = drain(channel)
        assert to_rows(elements[0]) == [1, 2] and elements[1] == BARRIER
        wait_for(responder.event, "the acknowledgement")
        assert [a.checkpoint_id for a in responder.acks] == [1]
    finally:
        cp.close()
