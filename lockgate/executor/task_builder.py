"""Builds a runnable subtask from the plan and the channels an executor made for it.

Both executors use this: the local one with in-memory channels, the Spark one
with in-memory channels inside a slot and network channels between slots.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ..core.clock import Clock
from ..graph.channel_identity import SubtaskChannels, subtask_channels
from ..graph.execution_plan import ExecutionPlan, VertexPlan
from ..recovery.channel_state import batches_to_replay
from ..runtime.chain import OperatorChain
from ..runtime.channels import InputChannel, OutputChannel
from ..runtime.input_gate import InputGate
from ..runtime.record_writer import RecordWriter
from ..runtime.task import StreamTask

if TYPE_CHECKING:
    from ..checkpoint.storage import CheckpointStorage
    from ..runtime.subtask_checkpointer import CheckpointResponder

log = logging.getLogger(__name__)


def build_task(
    plan: ExecutionPlan,
    vertex: VertexPlan,
    subtask_index: int,
    *,
    output_channels: dict[int, list[OutputChannel]],
    input_channels: list[tuple[InputChannel, int]],
    signal: threading.Event,
    clock: Clock,
    attempt_number: int = 0,
    storage: CheckpointStorage | None = None,
    responder: CheckpointResponder | None = None,
    in_process: bool = True,
) -> StreamTask:
    """``output_channels[edge]`` lists the edge's channels in consumer-subtask order
    (``vertex.out_edges`` order); ``input_channels`` pairs each input channel with its
    logical input index, in-edges in ``vertex.in_edges`` order, one channel per producer
    subtask in ``producers_of`` order (channel state names channels by it, M-B7). With
    checkpoints enabled in the plan, ``storage`` and ``responder`` are required.
    ``in_process``: the task runs in the driver's process (local executor): faults that
    kill the process are refused there."""
    cfg = plan.config
    writers: dict[int, RecordWriter] = {}
    for edge_id in vertex.out_edges:
        edge = plan.edges[edge_id]
        channels = output_channels[edge_id]
        for c in channels:
            c.set_producer_signal(signal)
        writers[edge_id] = RecordWriter(
            channels,
            edge.partitioning.create(len(channels), subtask_index),
            clock,
            timeout_ms=cfg.buffer_timeout_ms,
            max_rows=cfg.buffer_max_rows,
            max_bytes=cfg.buffer_max_bytes,
        )
    gate = None
    if input_channels:
        gate = InputGate([c for c, _ in input_channels], [i for _, i in input_channels], signal)
    chain = OperatorChain(
        vertex,
        subtask_index,
        writers,
        job_name=plan.job_name,
        attempt_number=attempt_number,
        clock=clock,
        restore=plan.restore,
        run_id=plan.run_id,
        state_backend=plan.state_backend,
    )
    task = StreamTask(
        vertex.name, subtask_index, chain, gate, list(writers.values()), signal, clock
    )
    task.key = (vertex.id, subtask_index)
    task.flush_when_idle = cfg.flush_when_idle
    _track_latency(getattr(cfg, "latency_tracking_interval_ms", 0), chain, gate)
    if not cfg.metrics_enabled:
        task.metrics_enabled = False
        for w in writers.values():
            w.count_bytes = False
    task.channels = _channels(plan, vertex, subtask_index, writers, input_channels)
    task.channel_state_replay = batches_to_replay
    for op in chain.operators:  # operators waiting for asynchronous work (async I/O)
        op.ctx.mailbox = task.mailbox
        op.ctx.run_mail_until = task.run_mail_until
    faults = plan.faults
    if plan.checkpointing:
        if storage is None or responder is None:
            raise ValueError("a checkpointed plan needs checkpoint storage and a responder")
        if faults is not None:
            responder = faults.wrap_responder(responder, task.key, attempt_number)
        _enable_checkpoints(plan, vertex, task, storage, responder, clock)
    if faults is not None:
        faults.install(task, attempt_number=attempt_number, in_process=in_process)
    return task


def _track_latency(interval_ms: int, chain: OperatorChain, gate: InputGate | None) -> None:
    """End-to-end latency (``latency_tracking_interval_ms`` > 0): a source head sends
    markers behind its batches; an input gate hands the markers it meets to the head
    operator, which forwards them down the chain to the sinks."""
    if gate is not None:
        gate.on_latency_marker = chain.head.process_latency_marker
    source = chain.source
    if interval_ms and source is not None:
        source.track_latency(interval_ms)


def _channels(
    plan: ExecutionPlan,
    vertex: VertexPlan,
    subtask_index: int,
    writers: dict[int, RecordWriter],
    input_channels: list[tuple[InputChannel, int]],
) -> SubtaskChannels | None:
    """The stable names of the subtask's channels (M-B7), or None when the executor
    wired channels otherwise than :func:`build_task` documents (a test wiring a task by
    hand): its channel state is then unnamed, and a restore refuses it loudly."""
    layout = subtask_channels(plan, vertex, subtask_index)
    wired = [len(w.channels) for w in writers.values()]
    if len(layout.inputs) != len(input_channels) or [len(o) for o in layout.outputs] != wired:
        log.warning(
            "%s (%d): %d input channels and outputs %s are wired, the plan has %d and %s: "
            "the channel state of unaligned checkpoints cannot name its channels",
            vertex.name,
            subtask_index,
            len(input_channels),
            wired,
            len(layout.inputs),
            [len(o) for o in layout.outputs],
        )
        return None
    return layout


def _enable_checkpoints(
    plan: ExecutionPlan,
    vertex: VertexPlan,
    task: StreamTask,
    storage: CheckpointStorage,
    responder: CheckpointResponder,
    clock: Clock,
) -> None:
    from ..checkpoint.barriers.factory import create_barrier_handler
    from ..runtime.checkpointed_input import CheckpointedInputGate
    from ..runtime.subtask_checkpointer import SubtaskCheckpointer

    cfg = plan.checkpoint
    assert cfg is not None
    checkpointer = SubtaskCheckpointer(
        (vertex.id, task.subtask_index),
        vertex.name,
        task.chain.operators,
        task.writers,
        storage,
        responder,
        clock,
        channels=task.channels,
    )
    handler = None
    checked = None
    if task.input_gate is not None:
        handler = create_barrier_handler(
            cfg.mode,
            unaligned=cfg.unaligned,
            aligned_timeout_ms=cfg.aligned_timeout_ms,
            num_channels=task.input_gate.num_channels,
            actions=checkpointer,
            clock=clock,
        )
        checked = CheckpointedInputGate(task.input_gate, handler, checkpointer)
    from ..runtime.final_checkpoint import wait_limit_ms

    task.enable_checkpoints(checkpointer, handler, checked, final_wait_ms=wait_limit_ms(cfg))
