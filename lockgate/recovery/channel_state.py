"""Restoring the in-flight records of an unaligned checkpoint (M-B7, M-R1, M-R3, M-S3).

An unaligned checkpoint recorded, per channel, the records in flight on it: at the
consumer (input side: arrived after its snapshot, before the channel's barrier) and
at the producer (output side: overtaken by the barrier). Neither end's state holds
them, so a restore must hand every one of them, exactly once, to the operator at the
consumer end of its edge, before that operator takes any new input. The records of
one old channel are replayed in their order on that channel: the input side first
(they were ahead on the channel), then the output side.

Where they go is decided per edge, the edge named by the uids at its two ends, side
tag and input index (:class:`~lockgate.graph.channel_identity.EdgeKey`), as Flink does
since 1.13 when it rescales unaligned checkpoints:

* a keyed edge (``key_by``, "hash"): every record goes to the new consumer subtask that
  owns its key group, recomputed from its key with the new job's partitioner (at the
  same parallelism and max parallelism as before, a channel's records keep their
  consumer subtask: they were partitioned the same way);
* a broadcast edge: each consumer subtask had its own copy, so the consumer's
  parallelism must not change (old channel ``p -> c`` goes to new subtask ``c``);
* any other edge (forward, rebalance, or an edge now chained inside a task): each old
  channel goes, whole, to exactly one new consumer subtask: subtask ``c`` of the same
  number when the consumer's parallelism is unchanged, otherwise the old channels,
  ordered by (consumer, producer), are dealt round-robin over the new subtasks.

What cannot be redistributed fails the restore before anything runs
(:func:`check_restorable`), naming the edge by both uids and saying to restore from an
aligned savepoint instead: records of an edge the new job does not have (an operator
inserted between the two ends, removed, or re-wired), a broadcast edge at another
consumer parallelism, channel state written without channel names. Nothing is ever
dropped silently: the one exception is ``allow_non_restored_state=True`` with the
consumer operator gone from the job (its state is dropped too), logged as a warning
with the amount dropped.

The decisions are pure functions of the recorded channels and the new edge
(:func:`plan_edge`), so the driver's check and every subtask's replay
(:func:`batches_to_replay`) agree without talking to each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..checkpoint.channel_state import INPUT, OUTPUT, RecordedChannel, RecordedSummary, thaw
from ..core.batch import Batch
from ..core.partitioners import BroadcastPartitioning, KeyGroupPartitioning
from ..graph.channel_identity import (
    ChannelInfo,
    ConsumedEdge,
    EdgeKey,
    SubtaskChannels,
    consumed_edges,
)
from ..graph.execution_plan import ExecutionPlan
from .restore import RestoreError, RestoreSpec

log = logging.getLogger(__name__)

#: how to fix a restore that cannot take a checkpoint's in-flight records
_USE_ALIGNED = (
    "Unaligned checkpoints keep the records in flight on each edge, and they can only be "
    "restored into the same edge. Restore from an aligned snapshot instead: take a savepoint "
    "of the old job (client.stop_with_savepoint(path); savepoints are always aligned, so "
    "they hold no in-flight records), or restore a checkpoint taken with "
    "checkpoint_config.unaligned = False."
)


@dataclass(frozen=True)
class EdgeReplay:
    """Where the recorded channels of one edge go in the new job."""

    edge: ConsumedEdge
    #: split every batch by key group over the new consumer subtasks
    by_key: bool
    #: old channel (producer subtask, consumer subtask) -> new consumer subtask (when
    #: not ``by_key``)
    targets: dict[tuple[int, int], int] = field(default_factory=dict)

    def takes(self, channel: tuple[int, int], subtask: int) -> bool:
        """Whether new consumer subtask ``subtask`` replays records of old ``channel``."""
        return self.by_key or self.targets[channel] == subtask


def _amount(summaries: Sequence[RecordedSummary]) -> str:
    batches = sum(s.num_batches for s in summaries)
    size = sum(s.num_bytes for s in summaries)
    return f"{batches} in-flight batch{'es' if batches != 1 else ''} ({size} bytes)"


def plan_edge(
    edge: ConsumedEdge, recorded: Sequence[ChannelInfo], names: dict[str, str] | None = None
) -> EdgeReplay:
    """Where the records of the old channels ``recorded`` (of the edge ``edge.key``) go
    in the new job. Raises :class:`RestoreError` when they cannot be redistributed."""
    if not recorded:
        return EdgeReplay(edge, by_key=False)
    old = recorded[0]
    old_consumers = old.consumer_parallelism
    new_consumers = edge.consumer_parallelism
    channels = sorted(
        {(c.producer_subtask, c.consumer_subtask) for c in recorded}, key=lambda pc: (pc[1], pc[0])
    )
    new_broadcast = isinstance(edge.partitioning, BroadcastPartitioning)
    old_broadcast = old.partitioning == BroadcastPartitioning.name
    # a broadcast edge to one consumer subtask carries every record once, like any edge
    if (old_broadcast and old_consumers > 1) or (new_broadcast and new_consumers > 1):
        if old_broadcast and new_broadcast and old_consumers == new_consumers:
            return EdgeReplay(edge, False, {pc: pc[1] for pc in channels})
        if not old_broadcast:
            why = (
                f"the edge is now a broadcast edge (it was '{old.partitioning}'): every "
                "consumer subtask would need its own copy of records only one of them had"
            )
        elif not new_broadcast:
            why = (
                f"the edge was a broadcast edge (now '{edge.partitioning.name}'): every "
                "consumer subtask held its own copy of the records"
            )
        else:
            why = (
                f"a broadcast edge's consumer went from parallelism {old_consumers} to "
                f"{new_consumers}: each old consumer subtask had its own copy of the "
                "records, and how far each had read differs"
            )
        raise RestoreError(
            f"the checkpoint's in-flight records of the edge {edge.key.describe(names)} "
            f"cannot be redistributed: {why}. {_USE_ALIGNED}"
        )
    if isinstance(edge.partitioning, KeyGroupPartitioning):
        same = (
            old.partitioning == KeyGroupPartitioning.name
            and old_consumers == new_consumers
            and old.max_parallelism == edge.consumer_max_parallelism
        )
        if not same:
            return EdgeReplay(edge, by_key=True)
        return EdgeReplay(edge, False, {pc: pc[1] for pc in channels})
    if old_consumers == new_consumers:
        return EdgeReplay(edge, False, {pc: pc[1] for pc in channels})
    return EdgeReplay(edge, False, {pc: i % new_consumers for i, pc in enumerate(channels)})


def _by_edge(spec: RestoreSpec) -> dict[EdgeKey, list[RecordedSummary]]:
    out: dict[EdgeKey, list[RecordedSummary]] = {}
    for s in spec.channels:
        if s.channel is not None and s.num_batches:
            out.setdefault(s.channel.edge, []).append(s)
    return out


def _unnamed(spec: RestoreSpec) -> list[RecordedSummary]:
    return [s for s in spec.channels if s.channel is None and s.num_batches]


def _unnamed_error(spec: RestoreSpec, unnamed: list[RecordedSummary]) -> RestoreError:
    owners = sorted({s.state_key for s in unnamed})
    return RestoreError(
        f"checkpoint {spec.location} holds {_amount(unnamed)} recorded by "
        f"{', '.join(owners)} in a format that does not name their channels (written by "
        f"an earlier lockgate): they cannot be restored. {_USE_ALIGNED}"
    )


def check_restorable(
    plan: ExecutionPlan, spec: RestoreSpec, *, allow_non_restored_state: bool = False
) -> None:
    """Check, before the job runs, that ``plan`` can take every in-flight record of the
    checkpoint ``spec`` (see the module docstring); raise :class:`RestoreError` naming
    the first edge that cannot, and what to do instead."""
    unnamed = _unnamed(spec)
    if unnamed:
        raise _unnamed_error(spec, unnamed)
    edges = consumed_edges(plan)
    names = plan.operator_names
    for key, summaries in sorted(_by_edge(spec).items(), key=lambda kv: repr(kv[0])):
        edge = edges.get(key)
        if edge is None:
            if allow_non_restored_state and key.consumer not in names:
                log.warning(
                    "restore from %s: dropping %s of the edge %s: its consumer operator is "
                    "not in this job and allow_non_restored_state is set",
                    spec.location,
                    _amount(summaries),
                    key.describe(names),
                )
                continue
            raise RestoreError(
                f"restore_from {spec.location}: the checkpoint holds {_amount(summaries)} "
                f"of the edge {key.describe(names)}, which this job does not have: the "
                f"operators with uids '{key.producer}' and '{key.consumer}' are no longer "
                f"connected to each other{_what_changed(key, edges, names)}. {_USE_ALIGNED}"
            )
        plan_edge(edge, [s.channel for s in summaries if s.channel is not None], names)


def _what_changed(key: EdgeKey, edges: dict[EdgeKey, ConsumedEdge], names: dict[str, str]) -> str:
    """A hint at what replaced edge ``key`` in the new job."""
    if key.producer not in names and key.consumer not in names:
        return " (neither operator is in this job)"
    if key.consumer not in names:
        return f" (this job has no operator with uid '{key.consumer}')"
    if key.producer not in names:
        return f" (this job has no operator with uid '{key.producer}')"
    into = sorted(
        e.key.describe(names)
        for e in edges.values()
        if e.key.consumer == key.consumer and e.key.input_index == key.input_index
    )
    if into:
        return f" (the consumer's input now comes from {', '.join(into)})"
    return ""


def batches_to_replay(
    spec: RestoreSpec, layout: SubtaskChannels
) -> Iterator[tuple[EdgeKey, Batch]]:
    """The in-flight records subtask ``layout.subtask`` replays, with the edge each came
    by (its consumer is an operator of this subtask): per consumed edge, per old channel
    (ordered by consumer then producer), the input side then the output side, each in
    channel order. Reads only the files holding channels of those edges."""
    unnamed = _unnamed(spec)
    if unnamed:
        raise _unnamed_error(spec, unnamed)
    by_edge = _by_edge(spec)
    files: dict[tuple[str, int], list[RecordedChannel]] = {}

    def recorded(s: RecordedSummary) -> RecordedChannel:
        where = (s.state_key, s.file_subtask)
        if where not in files:
            files[where] = spec.read_channel_state(*where)
        return files[where][s.position]

    me = layout.subtask
    for edge in layout.consumed:
        summaries = by_edge.get(edge.key)
        if not summaries:
            continue
        replay = plan_edge(edge, [s.channel for s in summaries if s.channel is not None])
        partitioner = (
            edge.partitioning.create(edge.consumer_parallelism, 0) if replay.by_key else None
        )
        ordered = sorted(
            summaries,
            key=lambda s: (
                _consumer(s),
                _producer(s),
                0 if s.side == INPUT else 1,
                s.state_key,
                s.file_subtask,
                s.position,
            ),
        )
        for s in ordered:
            if not replay.takes((_producer(s), _consumer(s)), me):
                continue
            assert s.side in (INPUT, OUTPUT)
            for frozen in recorded(s).batches:
                batch = thaw(frozen)
                if partitioner is None:
                    yield edge.key, batch
                    continue
                for target, part in partitioner.partition(batch):
                    if target == me:
                        yield edge.key, part


def _producer(s: RecordedSummary) -> int:
    assert s.channel is not None
    return s.channel.producer_subtask


def _consumer(s: RecordedSummary) -> int:
    assert s.channel is not None
    return s.channel.consumer_subtask
