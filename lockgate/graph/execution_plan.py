"""The execution plan: the job graph expanded to subtasks and channels, ready to ship.

A plan is plain, picklable data: operators travel as cloudpickled factories
(unpickled once per subtask, so every subtask gets its own copy of the user's
function objects). Slot i hosts subtask i of every vertex (slot sharing), so
a plan needs as many slots as its largest parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ..checkpoint.config import CheckpointConfig
from ..core.execution_config import ExecutionConfig
from ..core.partitioners import PartitionerSpec
from .job_graph import JobGraph
from .transformations import Kind


@dataclass
class OperatorPlan:
    id: int
    uid: str
    name: str
    kind: Kind
    parallelism: int
    max_parallelism: int
    payload: bytes
    #: (downstream operator id in the same vertex, side tag or None)
    chained_outputs: list[tuple[int, str | None]] = field(default_factory=list)
    #: (edge id, side tag or None) for outputs leaving the vertex
    edge_outputs: list[tuple[int, str | None]] = field(default_factory=list)


@dataclass
class EdgePlan:
    id: int
    source_vertex: int
    source_operator: int
    target_vertex: int
    target_operator: int
    partitioning: PartitionerSpec
    side_tag: str | None
    input_index: int
    source_parallelism: int
    target_parallelism: int

    def channel_pairs(self) -> list[tuple[int, int]]:
        """(producer subtask, consumer subtask) of every channel of this edge."""
        if self.partitioning.pointwise:
            return [(i, i) for i in range(self.source_parallelism)]
        return [
            (p, c) for p in range(self.source_parallelism) for c in range(self.target_parallelism)
        ]

    def consumers_of(self, producer: int) -> list[int]:
        return [c for p, c in self.channel_pairs() if p == producer]

    def producers_of(self, consumer: int) -> list[int]:
        return [p for p, c in self.channel_pairs() if c == consumer]


@dataclass
class VertexPlan:
    id: int
    name: str
    parallelism: int
    max_parallelism: int
    operators: list[OperatorPlan]
    in_edges: list[int]
    out_edges: list[int]
    is_source: bool


@dataclass
class ExecutionPlan:
    job_name: str
    vertices: list[VertexPlan]
    edges: dict[int, EdgePlan]
    config: ExecutionConfig
    #: uid -> operator name, for every operator
    operator_names: dict[str, str]
    #: periodic checkpoints (None: disabled); ``storage`` is resolved to a URL
    checkpoint: CheckpointConfig | None = None
    #: the checkpoint or savepoint this attempt restores (a ``RestoreSpec``), or None
    restore: Any = None
    #: the restart strategy of the job (a ``RestartStrategy``; None: the default)
    restart_strategy: Any = None
    #: injected faults (a ``lockgate.testing.FaultSchedule``), for tests only
    faults: Any = None
    #: unique per run of a job (``env.execute``), the same in all its attempts
    run_id: str = ""
    #: where keyed state lives (a ``lockgate.state.backends.StateBackend``); None: the heap
    state_backend: Any = None
    #: the autoscaler's settings (``lockgate.autoscaling.AutoscalingConfig``; None: off)
    autoscaling: Any = None

    @property
    def checkpointing(self) -> bool:
        return self.checkpoint is not None and self.checkpoint.enabled

    def source_tasks(self) -> list[tuple[int, int]]:
        """(vertex id, subtask) of every source subtask: the ones checkpoints trigger (M-C3)."""
        return [(v.id, i) for v in self.vertices if v.is_source for i in range(v.parallelism)]

    @property
    def num_slots(self) -> int:
        return max(v.parallelism for v in self.vertices)

    def vertex(self, vertex_id: int) -> VertexPlan:
        for v in self.vertices:
            if v.id == vertex_id:
                return v
        raise KeyError(vertex_id)

    def subtasks(self) -> list[tuple[int, int]]:
        return [(v.id, i) for v in self.vertices for i in range(v.parallelism)]

    def slot_subtasks(self, slot: int) -> list[tuple[int, int]]:
        """The (vertex id, subtask index) pairs slot ``slot`` hosts."""
        return [(v.id, slot) for v in self.vertices if slot < v.parallelism]

    def describe(self) -> str:
        lines = [f"job '{self.job_name}'"]
        for v in self.vertices:
            lines.append(f"  [{v.id}] {v.name} (parallelism {v.parallelism})")
            for eid in v.out_edges:
                e = self.edges[eid]
                tag = f" side '{e.side_tag}'" if e.side_tag else ""
                lines.append(f"      --{e.partitioning.name}{tag}--> [{e.target_vertex}]")
        return "\n".join(lines)


def build_execution_plan(
    job_name: str,
    graph: JobGraph,
    config: ExecutionConfig,
    checkpoint: CheckpointConfig | None = None,
) -> ExecutionPlan:
    edges: dict[int, EdgePlan] = {}
    for e in graph.edges.values():
        if e.chained:
            continue
        s, t = graph.nodes[e.source], graph.nodes[e.target]
        edges[e.id] = EdgePlan(
            id=e.id,
            source_vertex=graph.vertex_of[e.source],
            source_operator=e.source,
            target_vertex=graph.vertex_of[e.target],
            target_operator=e.target,
            partitioning=e.partitioning,
            side_tag=e.side_tag,
            input_index=e.input_index,
            source_parallelism=s.parallelism,
            target_parallelism=t.parallelism,
        )
    vertices: list[VertexPlan] = []
    names: dict[str, str] = {}
    for v in graph.vertices:
        ops: list[OperatorPlan] = []
        for node_id in v.operators:
            n = graph.nodes[node_id]
            names[n.uid] = n.name
            op = OperatorPlan(
                id=n.id,
                uid=n.uid,
                name=n.name,
                kind=n.kind,
                parallelism=n.parallelism,
                max_parallelism=n.max_parallelism,
                payload=cloudpickle.dumps(n.factory),
            )
            for e in graph.edges.values():
                if e.source != node_id:
                    continue
                if e.chained:
                    op.chained_outputs.append((e.target, e.side_tag))
                else:
                    op.edge_outputs.append((e.id, e.side_tag))
            ops.append(op)
        vertices.append(
            VertexPlan(
                id=v.id,
                name=v.name,
                parallelism=v.parallelism,
                max_parallelism=v.max_parallelism,
                operators=ops,
                in_edges=list(v.in_edges),
                out_edges=list(v.out_edges),
                is_source=v.is_source,
            )
        )
    return ExecutionPlan(job_name, vertices, edges, config, names, checkpoint)
