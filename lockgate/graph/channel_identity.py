"""Stable names for edges and channels, so in-flight data outlives the job that wrote it.

An unaligned checkpoint persists the records in flight on every channel (M-B7). A
restore may happen in another process, from a job built again (its vertex and edge
ids come from counters and from the order of construction) and at another
parallelism or partitioning (M-R3, M-S3). So channel state is never named by ids;
it is named by what survives those changes:

* an edge by :class:`EdgeKey`: the uids of the operators at its two ends (the one
  that emits the records, the one that consumes them), the side-output tag the
  records left by, and the consumer's input index (0, or 0/1 of a two-input
  operator). Two jobs have "the same edge" exactly when they have an edge with equal
  keys: an operator added elsewhere, even chained into the same task, changes no key;
  an operator inserted between the two ends changes the key (its uid is now at one
  end), and so does swapping the inputs of a two-input operator;
* a channel by :class:`ChannelInfo`: its edge key, its producer and consumer subtask
  indexes, and what a restore needs to redistribute its records: both parallelisms,
  the partitioning's kind and the consumer's max parallelism (key groups).

:func:`subtask_channels` lists the channels of one subtask in the order both
executors wire them (input channels: the vertex's in-edges in order, one channel per
producer subtask; outputs: one record writer per out-edge in order, one channel per
consumer subtask), plus the edges whose records the subtask consumes, network and
chained (:class:`ConsumedEdge`). :func:`consumed_edges` lists those of a whole plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..core.partitioners import ForwardPartitioning, PartitionerSpec
from .execution_plan import EdgePlan, ExecutionPlan, OperatorPlan, VertexPlan


class EdgeKey(NamedTuple):
    """An edge, named by what stays the same across jobs, processes and parallelisms."""

    #: uid of the operator that emits the records
    producer: str
    #: uid of the operator that consumes them
    consumer: str
    #: the side output the records leave the producer by (None: its main output)
    side_tag: str | None
    #: the consumer's input the edge feeds (0, or 0/1 for two-input operators)
    input_index: int

    def describe(self, names: dict[str, str] | None = None) -> str:
        """``'a' (uid a) -> 'b' (uid b)``, with the side output and input when set."""
        names = names or {}

        def end(uid: str) -> str:
            name = names.get(uid)
            return f"'{name}' (uid '{uid}')" if name and name != uid else f"uid '{uid}'"

        text = f"{end(self.producer)} -> {end(self.consumer)}"
        if self.side_tag is not None:
            text += f" (side output '{self.side_tag}')"
        if self.input_index:
            text += f" (input {self.input_index})"
        return text

    def to_json(self) -> list[Any]:
        return [self.producer, self.consumer, self.side_tag, self.input_index]

    @classmethod
    def from_json(cls, data: Any) -> EdgeKey:
        producer, consumer, side_tag, input_index = data
        return cls(str(producer), str(consumer), side_tag, int(input_index))


@dataclass(frozen=True)
class ChannelInfo:
    """One channel of an edge, with what a restore needs to redistribute its records."""

    edge: EdgeKey
    producer_subtask: int
    consumer_subtask: int
    producer_parallelism: int
    consumer_parallelism: int
    #: the partitioning's ``name``: "forward", "rebalance", "broadcast", "hash", ...
    partitioning: str
    #: the consumer's max parallelism (the number of key groups of a "hash" edge)
    max_parallelism: int

    def to_json(self) -> dict[str, Any]:
        """Plain data for a state file (no class of this module is pickled into one)."""
        return {
            "edge": self.edge.to_json(),
            "producer_subtask": self.producer_subtask,
            "consumer_subtask": self.consumer_subtask,
            "producer_parallelism": self.producer_parallelism,
            "consumer_parallelism": self.consumer_parallelism,
            "partitioning": self.partitioning,
            "max_parallelism": self.max_parallelism,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChannelInfo:
        return cls(
            edge=EdgeKey.from_json(data["edge"]),
            producer_subtask=int(data["producer_subtask"]),
            consumer_subtask=int(data["consumer_subtask"]),
            producer_parallelism=int(data["producer_parallelism"]),
            consumer_parallelism=int(data["consumer_parallelism"]),
            partitioning=str(data["partitioning"]),
            max_parallelism=int(data["max_parallelism"]),
        )


@dataclass(frozen=True)
class ConsumedEdge:
    """An edge of the new job as its consumer sees it: where restored in-flight records
    of that edge go. ``chained``: both ends run in one task (a forward edge inside an
    operator chain), so its records are handed to the consumer operator directly."""

    key: EdgeKey
    partitioning: PartitionerSpec
    producer_parallelism: int
    consumer_parallelism: int
    consumer_max_parallelism: int
    chained: bool = False


@dataclass(frozen=True)
class SubtaskChannels:
    """The channels of one subtask, in the order the executors wire them."""

    #: uid of the subtask's head operator: names its channel state in a checkpoint
    owner: str
    subtask: int
    #: input channel index (of the input gate) -> its channel
    inputs: tuple[ChannelInfo, ...]
    #: record writer index -> channel index of that writer -> its channel
    outputs: tuple[tuple[ChannelInfo, ...], ...]
    #: the edges whose records this subtask's operators consume, network ones first
    consumed: tuple[ConsumedEdge, ...]


def _operators(plan: ExecutionPlan) -> dict[int, OperatorPlan]:
    return {op.id: op for v in plan.vertices for op in v.operators}


def _edge_key(edge: EdgePlan, ops: dict[int, OperatorPlan]) -> EdgeKey:
    return EdgeKey(
        ops[edge.source_operator].uid,
        ops[edge.target_operator].uid,
        edge.side_tag,
        edge.input_index,
    )


def _channel(
    edge: EdgePlan, ops: dict[int, OperatorPlan], producer: int, consumer: int
) -> ChannelInfo:
    return ChannelInfo(
        edge=_edge_key(edge, ops),
        producer_subtask=producer,
        consumer_subtask=consumer,
        producer_parallelism=edge.source_parallelism,
        consumer_parallelism=edge.target_parallelism,
        partitioning=edge.partitioning.name,
        max_parallelism=ops[edge.target_operator].max_parallelism,
    )


def _consumed(
    plan: ExecutionPlan, vertex: VertexPlan, ops: dict[int, OperatorPlan]
) -> tuple[ConsumedEdge, ...]:
    out: list[ConsumedEdge] = []
    for edge_id in vertex.in_edges:
        edge = plan.edges[edge_id]
        out.append(
            ConsumedEdge(
                _edge_key(edge, ops),
                edge.partitioning,
                edge.source_parallelism,
                edge.target_parallelism,
                ops[edge.target_operator].max_parallelism,
            )
        )
    for op in vertex.operators:
        for target_id, tag in op.chained_outputs:
            target = ops[target_id]
            # a chained consumer has this one input (chaining needs in-degree 1)
            out.append(
                ConsumedEdge(
                    EdgeKey(op.uid, target.uid, tag, 0),
                    ForwardPartitioning(),
                    vertex.parallelism,
                    vertex.parallelism,
                    target.max_parallelism,
                    chained=True,
                )
            )
    # two edges with one key (a stream unioned with itself) share their recorded channels:
    # the records of both reach the same input of the same operator, so they replay once
    unique: dict[EdgeKey, ConsumedEdge] = {}
    for e in out:
        unique.setdefault(e.key, e)
    return tuple(unique.values())


def subtask_channels(plan: ExecutionPlan, vertex: VertexPlan, subtask: int) -> SubtaskChannels:
    """The channels of subtask ``subtask`` of ``vertex``, ordered as the executors wire
    them (see the module docstring)."""
    ops = _operators(plan)
    inputs: list[ChannelInfo] = []
    for edge_id in vertex.in_edges:
        edge = plan.edges[edge_id]
        inputs.extend(_channel(edge, ops, p, subtask) for p in edge.producers_of(subtask))
    outputs: list[tuple[ChannelInfo, ...]] = []
    for edge_id in vertex.out_edges:
        edge = plan.edges[edge_id]
        outputs.append(tuple(_channel(edge, ops, subtask, c) for c in edge.consumers_of(subtask)))
    return SubtaskChannels(
        vertex.operators[0].uid,
        subtask,
        tuple(inputs),
        tuple(outputs),
        _consumed(plan, vertex, ops),
    )


def consumed_edges(plan: ExecutionPlan) -> dict[EdgeKey, ConsumedEdge]:
    """Every edge of ``plan`` (network and chained) by its key."""
    ops = _operators(plan)
    return {e.key: e for v in plan.vertices for e in _consumed(plan, v, ops)}
