"""Rebuilding a submitted job at another parallelism (the autoscaler's rescales)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.partitioners import RebalancePartitioning
from ..errors import ConfigurationError
from ..graph.execution_plan import ExecutionPlan, build_execution_plan
from ..graph.job_graph import build_job_graph
from ..graph.transformations import Kind, Transformation


class Replanner:
    """Builds ``plan``'s job again with other parallelisms per operator uid, from the
    transformations it was built from: the same operators, uids, chains, run id,
    checkpoint storage, restart strategy and state backend; only parallelism and the
    edges it decides (forward or rebalance where none was given) change.

    ``restore_spec(plan, path)``: the checked restore of the savepoint at ``path``
    into ``plan`` (the environment's, M-S2)."""

    def __init__(
        self,
        plan: ExecutionPlan,
        order: list[Transformation],
        default_parallelism: int,
        max_parallelism: int,
        chaining: bool,
        restore_spec: Callable[[ExecutionPlan, str], Any],
    ) -> None:
        self.base = plan
        self._order = list(order)
        self._default = default_parallelism
        self._max = max_parallelism
        self._chaining = chaining
        self._restore_spec = restore_spec
        self._source_limits: dict[str, int] = {}
        for t in self._order:
            if t.kind is Kind.SOURCE and t.uid:
                source = (t.factory.kwargs or {}).get("source") if t.factory else None
                limit = source.max_parallelism() if source is not None else None
                if limit is not None:
                    self._source_limits[t.uid] = int(limit)

    def plan_for(self, parallelism_of: dict[str, int]) -> ExecutionPlan:
        """The job with ``parallelism_of`` (operator uid -> parallelism; uids not given
        keep the base plan's)."""
        current = {op.uid: v.parallelism for v in self.base.vertices for op in v.operators}
        current.update(parallelism_of)
        # edges rebalanced because their ends' parallelism differed stay rebalanced, so
        # the chains (the vertices) stay what they were
        rebalanced = {
            (e.source_operator, e.target_operator, e.side_tag)
            for e in self.base.edges.values()
            if isinstance(e.partitioning, RebalancePartitioning)
        }
        graph = build_job_graph(
            self._order,
            self._default,
            self._max,
            self._chaining,
            parallelism_of=current,
            rebalanced=rebalanced,
        )
        for uid, limit in self._source_limits.items():
            if current.get(uid, 1) > limit:
                raise ConfigurationError(
                    f"source '{uid}' can have at most {limit} subtasks, not {current[uid]}"
                )
        if [v.id for v in graph.vertices] != [v.id for v in self.base.vertices]:
            raise ConfigurationError(
                "the job's chains would change at that parallelism; a rescale keeps them"
            )
        base = self.base
        plan = build_execution_plan(base.job_name, graph, base.config, base.checkpoint)
        plan.restart_strategy = base.restart_strategy
        plan.autoscaling = base.autoscaling
        plan.run_id = base.run_id
        plan.faults = base.faults
        plan.state_backend = base.state_backend
        return plan

    def restore_spec(self, plan: ExecutionPlan, path: str) -> Any:
        return self._restore_spec(plan, path)

    def upper_bound(self, vertex: Any) -> int:
        """The highest parallelism ``vertex`` (a ``VertexPlan``) may get: its key groups,
        and for a source its own limit (e.g. its partitions)."""
        bound = int(vertex.max_parallelism)
        for op in vertex.operators:
            limit = self._source_limits.get(op.uid)
            if limit is not None:
                bound = min(bound, limit)
        return max(1, bound)
