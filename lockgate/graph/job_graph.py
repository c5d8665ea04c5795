"""From the logical graph to the job graph: resolve virtual nodes, then chain.

Chaining rule (Flink's): an edge is chained when it is a forward edge (no
key_by / rebalance / broadcast on it), both ends have the same parallelism,
the consumer has no other input, the consumer is not a source, and chaining
is enabled. A chained group of operators runs in one subtask thread and hands
batches from operator to operator by a function call.

An edge without an explicit partitioning is forward when both ends have the
same parallelism and rebalance otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.partitioners import (
    ForwardPartitioning,
    KeyGroupPartitioning,
    KeySelector,
    PartitionerSpec,
    RebalancePartitioning,
)
from ..errors import InvalidGraphError
from .operator_factory import OperatorFactory
from .transformations import Kind, Transformation


@dataclass
class StreamNode:
    id: int
    name: str
    uid: str
    kind: Kind
    parallelism: int
    max_parallelism: int
    factory: OperatorFactory[Any]
    chainable: bool = True


@dataclass
class StreamEdge:
    id: int
    source: int
    target: int
    partitioning: PartitionerSpec
    side_tag: str | None
    input_index: int
    chained: bool = False


@dataclass
class JobVertex:
    """A chain of operators that runs as one subtask per parallel instance."""

    id: int
    name: str
    parallelism: int
    max_parallelism: int
    #: node ids, head first, in topological order
    operators: list[int]
    in_edges: list[int] = field(default_factory=list)
    out_edges: list[int] = field(default_factory=list)
    is_source: bool = False


@dataclass
class JobGraph:
    nodes: dict[int, StreamNode]
    edges: dict[int, StreamEdge]
    vertices: list[JobVertex]
    vertex_of: dict[int, int]

    def vertex(self, vertex_id: int) -> JobVertex:
        for v in self.vertices:
            if v.id == vertex_id:
                return v
        raise KeyError(vertex_id)

    def chains(self) -> list[list[str]]:
        """Each vertex's operator names, head first (for tests and plan printing)."""
        return [[self.nodes[n].name for n in v.operators] for v in self.vertices]


def build_job_graph(  # noqa: C901 (chaining, vertices and edges in one pass over the topological order)
    order: list[Transformation],
    default_parallelism: int,
    default_max_parallelism: int,
    chaining: bool = True,
    parallelism_of: dict[str, int] | None = None,
    rebalanced: set[tuple[int, int, str | None]] | None = None,
) -> JobGraph:
    """``order`` lists transformations inputs-first (see ``transformations.walk``).
    ``parallelism_of``: operator uid -> parallelism, overriding the transformations'
    own (a rescale: every operator of a chain gets the same, so the chains stay).
    ``rebalanced``: (source node, target node, side tag) of edges without an explicit
    partitioning that stay rebalanced whatever their ends' parallelism (a rescale
    keeps the job's edges and chains as they were)."""
    overrides = parallelism_of or {}
    kept = rebalanced or set()
    nodes: dict[int, StreamNode] = {}
    for t in order:
        if t.kind.virtual:
            continue
        assert t.factory is not None
        nodes[t.id] = StreamNode(
            id=t.id,
            name=t.name,
            uid=t.uid or "",
            kind=t.kind,
            parallelism=overrides.get(t.uid or "", t.parallelism or default_parallelism),
            max_parallelism=t.max_parallelism or default_max_parallelism,
            factory=t.factory,
            chainable=t.chainable,
        )

    edges: dict[int, StreamEdge] = {}
    for t in order:
        if t.kind.virtual:
            continue
        for input_index, upstream in enumerate(t.inputs):
            idx = input_index if _two_input(t) else 0
            for source_id, partitioning, side_tag in _resolve(upstream):
                target = nodes[t.id]
                source = nodes[source_id]
                if isinstance(partitioning, KeySelector):
                    partitioning = KeyGroupPartitioning(partitioning, target.max_parallelism)
                if partitioning is None:
                    partitioning = (
                        ForwardPartitioning()
                        if source.parallelism == target.parallelism
                        and (source_id, t.id, side_tag) not in kept
                        else RebalancePartitioning()
                    )
                elif partitioning.pointwise and source.parallelism != target.parallelism:
                    raise InvalidGraphError(
                        f"forward() connects '{source.name}' (parallelism {source.parallelism}) "
                        f"to '{target.name}' (parallelism {target.parallelism}); forward needs "
                        "equal parallelism: make them equal or use rebalance()"
                    )
                edge_id = len(edges)
                edges[edge_id] = StreamEdge(edge_id, source_id, t.id, partitioning, side_tag, idx)

    in_degree: dict[int, int] = {n: 0 for n in nodes}
    for e in edges.values():
        in_degree[e.target] += 1
    for e in edges.values():
        s, d = nodes[e.source], nodes[e.target]
        e.chained = (
            chaining
            and isinstance(e.partitioning, ForwardPartitioning)
            and s.parallelism == d.parallelism
            and in_degree[d.id] == 1
            and d.kind is not Kind.SOURCE
            and s.chainable
            and d.chainable
        )

    head_of: dict[int, int] = {}
    for node_id in nodes:  # nodes are in topological order
        chained_in = [e for e in edges.values() if e.target == node_id and e.chained]
        head_of[node_id] = head_of[chained_in[0].source] if chained_in else node_id

    vertices: dict[int, JobVertex] = {}
    for node_id in nodes:
        head = head_of[node_id]
        v = vertices.get(head)
        if v is None:
            hn = nodes[head]
            v = vertices[head] = JobVertex(
                id=head,
                name="",
                parallelism=hn.parallelism,
                max_parallelism=hn.max_parallelism,
                operators=[],
                is_source=hn.kind is Kind.SOURCE,
            )
        v.operators.append(node_id)
    for v in vertices.values():
        v.name = " -> ".join(nodes[n].name for n in v.operators)
    for e in edges.values():
        if e.chained:
            continue
        vertices[head_of[e.source]].out_edges.append(e.id)
        vertices[head_of[e.target]].in_edges.append(e.id)
    return JobGraph(nodes, edges, list(vertices.values()), head_of)


def _two_input(t: Transformation) -> bool:
    return bool(t.factory and getattr(t.factory.operator_class, "two_input", False))


_Route = tuple[int, "PartitionerSpec | KeySelector | None", "str | None"]


def _resolve(t: Transformation) -> list[_Route]:
    """The real nodes behind ``t`` with the partitioning and side tag on the way
    (a key selector stands for key-group partitioning to the consumer's max parallelism)."""
    if t.kind is Kind.UNION:
        out: list[_Route] = []
        for i in t.inputs:
            out.extend(_resolve(i))
        return out
    if t.kind is Kind.PARTITION:
        how = t.key_selector if t.key_selector is not None else t.partitioning
        return [(s, how, tag) for s, _, tag in _resolve(t.inputs[0])]
    if t.kind is Kind.SIDE_OUTPUT:
        return [(s, p, t.side_tag) for s, p, _ in _resolve(t.inputs[0])]
    return [(t.id, None, None)]
