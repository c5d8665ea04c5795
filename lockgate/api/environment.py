"""StreamEnvironment: where a job is defined, configured and executed."""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from ..autoscaling.config import AutoscalingConfig
from ..checkpoint.config import CheckpointConfig, CheckpointingMode, ExternalizedRetention
from ..checkpoint.storage_url import open_storage
from ..connectors.base import Source
from ..core.durations import Duration, to_millis
from ..core.execution_config import ExecutionConfig
from ..core.key_groups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from ..errors import ConfigurationError
from ..graph.execution_plan import ExecutionPlan, build_execution_plan
from ..graph.job_graph import JobGraph, build_job_graph
from ..graph.operator_factory import OperatorFactory
from ..graph.preflight import check_connectors
from ..graph.transformations import Kind, Transformation, walk
from ..graph.validation import validate
from ..job.result import JobExecutionResult
from ..recovery.restart_strategy import RestartStrategy
from ..runtime.operators.io import SourceOperator
from ..state.backends import HashMapStateBackend, StateBackend, check_state_backend
from ..time.watermark_strategy import check_watermark_strategy
from .datastream import DataStream, _check_parallelism
from .job_capture import capture_if_asked
from .job_client import JobClient
from .replanning import Replanner
from .resume import (
    fresh_from_environment,
    log_fresh_start,
    log_resume,
    newest_own_checkpoint,
    resume_failed_text,
)

log = logging.getLogger(__name__)


class StreamEnvironment:
    """Defines and runs a streaming job.

    ``parallelism`` is the default of every operator (default: the number of
    CPU cores); ``max_parallelism`` (default 128) is the number of key groups,
    the upper bound of any later rescaling. ``executor`` runs the job
    (default: a ``LocalExecutor``).
    """

    def __init__(
        self,
        parallelism: int | None = None,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        *,
        executor: Any = None,
        config: ExecutionConfig | None = None,
    ) -> None:
        self.max_parallelism = check_max_parallelism(max_parallelism)
        if parallelism is None:
            parallelism = min(os.cpu_count() or 1, self.max_parallelism)
        self.parallelism = _check_parallelism(parallelism, "parallelism")
        self.config = config or ExecutionConfig()
        self.executor = executor
        self._checkpoint_config = CheckpointConfig()
        self._restart_strategy: RestartStrategy | None = None
        #: faults injected by ``lockgate.testing.inject_faults`` (tests only)
        self._faults: Any = None
        self._state_backend: StateBackend = HashMapStateBackend()
        self._transformations: list[Transformation] = []
        self._autoscaling: AutoscalingConfig | None = None

    # -- configuration -----------------------------------------------------------
    def set_parallelism(self, parallelism: int) -> StreamEnvironment:
        self.parallelism = _check_parallelism(parallelism, "parallelism")
        return self

    def set_max_parallelism(self, max_parallelism: int) -> StreamEnvironment:
        self.max_parallelism = check_max_parallelism(max_parallelism)
        return self

    def set_buffer_timeout(self, timeout: Duration) -> StreamEnvironment:
        """The longest a record waits in an output buffer (default 100 ms; 0 flushes each batch)."""
        self.config.buffer_timeout_ms = to_millis(timeout, "buffer timeout")
        return self

    def set_flush_when_idle(self, enabled: bool) -> StreamEnvironment:
        """Whether a task sends its part-filled output buffers as soon as its input runs
        dry (default True: at low rates latency then does not depend on the buffer
        timeout; under load buffers fill as before). False: only a full buffer or the
        buffer timeout sends one, as in Flink."""
        if not isinstance(enabled, bool):
            raise ConfigurationError(f"set_flush_when_idle takes True or False, got {enabled!r}")
        self.config.flush_when_idle = enabled
        return self

    def enable_checkpointing(
        self, interval: Duration, mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    ) -> StreamEnvironment:
        """Take a checkpoint every ``interval`` (``timedelta`` or ms) with ``mode``.
        Further settings are in :attr:`checkpoint_config`. A bare int under 100 is
        taken as milliseconds, as always, but warns (``UserWarning``): it most likely
        meant seconds; pass ``timedelta(seconds=...)`` to say so."""
        ms = to_millis(interval, "checkpoint interval", allow_zero=False)
        if not isinstance(interval, timedelta) and ms < 100:
            warnings.warn(
                f"enable_checkpointing({interval!r}) takes a checkpoint every {ms} ms (a bare "
                f"int is milliseconds); for seconds pass timedelta(seconds={interval}), or "
                f"timedelta(milliseconds={interval}) to keep {ms} ms without this warning",
                UserWarning,
                stacklevel=2,
            )
        cfg = self._checkpoint_config
        before = (cfg.interval, cfg.mode)
        cfg.interval, cfg.mode = interval, mode
        try:
            cfg.validate()
        except ConfigurationError:
            cfg.interval, cfg.mode = before  # a rejected call changes nothing
            raise
        return self

    @property
    def checkpoint_config(self) -> CheckpointConfig:
        """The checkpoint settings (storage, min_pause, timeout, max_concurrent,
        tolerable_failures, unaligned, aligned_timeout, retained, externalized);
        validated when the job is built."""
        return self._checkpoint_config

    def set_restart_strategy(self, strategy: RestartStrategy) -> StreamEnvironment:
        """How the job restarts after a failure (M-R2), e.g.
        ``lg.RestartStrategy.fixed_delay(attempts=3, delay=timedelta(seconds=1))``. Default:
        exponential delay when checkpointing is enabled, no restarts otherwise."""
        if not isinstance(strategy, RestartStrategy):
            raise ConfigurationError(
                f"set_restart_strategy needs an lg.RestartStrategy (e.g. "
                f"lg.RestartStrategy.fixed_delay(attempts=3, delay=1000)), got {strategy!r}"
            )
        self._restart_strategy = strategy
        return self

    @property
    def restart_strategy(self) -> RestartStrategy | None:
        """The restart strategy set with :meth:`set_restart_strategy` (None: the default)."""
        return self._restart_strategy

    def set_state_backend(self, backend: StateBackend) -> StreamEnvironment:
        """Where keyed state lives: ``lg.HashMapStateBackend()`` (the default; on the
        heap, copy-on-write snapshots) or ``lg.RocksDBStateBackend(incremental=True)``
        (on local disk, incremental checkpoints). Savepoints of either restore into
        either (M-S1)."""
        self._state_backend = check_state_backend(backend)
        return self

    @property
    def state_backend(self) -> StateBackend:
        return self._state_backend

    def autoscaling(
        self,
        *,
        min_parallelism: int = 1,
        max_parallelism: int | None = None,
        target_utilization: float = 0.7,
        stabilization: Duration = timedelta(minutes=1),
        scale_down_delay: Duration = timedelta(minutes=5),
        metrics_window: Duration | None = None,
        utilization_boundary: float = 0.3,
        catch_up: Duration = timedelta(minutes=5),
        interval: Duration = timedelta(seconds=5),
    ) -> StreamEnvironment:
        """Rescale the running job to its input rate (Flink's Kubernetes autoscaler rule,
        see :mod:`lockgate.autoscaling`): every ``interval`` the driver reads each
        vertex's input rate and busy time, computes the parallelism that keeps its
        subtasks ``target_utilization`` busy at the rate it must take (a source: its
        input's growth plus its backlog worked off within ``catch_up``), and when a
        vertex leaves ``target_utilization ± utilization_boundary`` rescales the job:
        a savepoint, then the job restored from it at the new parallelism (key groups
        move, splits are reassigned, exactly-once sinks commit the savepoint's
        transactions), all within the run; ``JobClient.rescales()`` lists the decisions.

        Parallelism stays within ``min_parallelism..max_parallelism`` (None: the job's
        max parallelism; on Spark also the task slots the session offers; a source also
        its own limit). ``stabilization``: after the start and each rescale, how long
        before metrics count; ``metrics_window`` (default: ``stabilization``, at least 1
        s): how long they are averaged; ``scale_down_delay``: how long a lower
        parallelism must be wanted before it is applied. Needs checkpointing; a rescale
        that fails before the rescaled job's first checkpoint rolls back to the previous
        parallelism. Calling it again replaces the settings."""
        if max_parallelism is not None and (
            isinstance(max_parallelism, int)
            and not isinstance(max_parallelism, bool)
            and max_parallelism > self.max_parallelism
        ):
            raise ConfigurationError(
                f"autoscaling max_parallelism {max_parallelism} is above the job's max "
                f"parallelism {self.max_parallelism} (its number of key groups): lower it, or "
                "raise StreamEnvironment(max_parallelism=...)"
            )
        window = stabilization if metrics_window is None else metrics_window
        if isinstance(window, timedelta) and window.total_seconds() < 1:
            window = timedelta(seconds=1)
        elif isinstance(window, int) and not isinstance(window, bool) and 0 <= window < 1000:
            window = 1000
        self._autoscaling = AutoscalingConfig.of(
            min_parallelism=min_parallelism,
            max_parallelism=max_parallelism,
            target_utilization=target_utilization,
            utilization_boundary=utilization_boundary,
            stabilization=stabilization,
            metrics_window=window,
            scale_down_delay=scale_down_delay,
            catch_up=catch_up,
            interval=interval,
        )
        return self

    @property
    def autoscaling_config(self) -> AutoscalingConfig | None:
        """The autoscaler's settings (None: the job keeps its parallelism)."""
        return self._autoscaling

    def disable_operator_chaining(self) -> StreamEnvironment:
        self.config.chaining = False
        return self

    # -- sources -------------------------------------------------------------------
    def from_source(
        self, source: Source, name: str | None = None, watermark_strategy: Any = None
    ) -> DataStream:
        """A stream reading ``source`` (e.g. ``lg.connectors.SequenceSource(0, 100)``).

        ``watermark_strategy`` (an ``lg.WatermarkStrategy``): the records get event
        timestamps from its assigner and each source subtask generates watermarks (and
        idleness) from them (M-W1, M-W2); the end of the source sends the maximum
        watermark."""
        if not isinstance(source, Source):
            raise ConfigurationError(
                f"from_source needs a lockgate source (e.g. lg.connectors.SequenceSource(0, 10)), "
                f"got {source!r}"
            )
        kwargs: dict[str, Any] = {"source": source}
        if watermark_strategy is not None:
            kwargs["watermark_strategy"] = check_watermark_strategy(watermark_strategy)
        t = Transformation(
            Kind.SOURCE,
            name or f"Source: {source.default_name}",
            factory=OperatorFactory(SourceOperator, kwargs, {"source:object": source}),
        )
        t.required_side_outputs = tuple(getattr(source, "side_outputs", ()))
        limit = source.max_parallelism()
        if limit is not None:
            t.parallelism = min(self.parallelism, limit)
        self._register(t)
        return DataStream(self, t)

    def from_collection(
        self, items: Iterable[Any], name: str | None = None, watermark_strategy: Any = None
    ) -> DataStream:
        from ..connectors.builtin.collection import CollectionSource

        return self.from_source(
            CollectionSource(items), name=name, watermark_strategy=watermark_strategy
        )

    def from_sequence(self, start: int, end: int, name: str | None = None) -> DataStream:
        from ..connectors.builtin.sequence import SequenceSource

        return self.from_source(SequenceSource(start, end), name=name)

    # -- graph ---------------------------------------------------------------------
    def _register(self, t: Transformation) -> None:
        self._transformations.append(t)

    def _unregister(self, t: Transformation) -> None:
        self._transformations = [x for x in self._transformations if x is not t]

    def _prepare(self) -> list[Transformation]:
        self.config.validate()
        validate(
            self._transformations,
            self.parallelism,
            self.max_parallelism,
            checkpointing=self._checkpoint_config.enabled,
        )
        sinks = [t for t in self._transformations if t.kind is Kind.SINK]
        order = walk(sinks)
        _assign_uids(order)
        return order

    def get_job_graph(self) -> JobGraph:
        """The chained job graph (validates the logical graph first)."""
        order = self._prepare()
        return build_job_graph(order, self.parallelism, self.max_parallelism, self.config.chaining)

    def _replanner(self, plan: ExecutionPlan) -> Replanner:
        """What rebuilds ``plan`` at another parallelism (the autoscaler's rescales)."""
        return Replanner(
            plan,
            self._prepare(),
            self.parallelism,
            self.max_parallelism,
            self.config.chaining,
            lambda p, path: _restore_spec(p, path, False, self._checkpoint_config),
        )

    def get_execution_plan(
        self,
        job_name: str = "lockgate job",
        *,
        restore_from: str | None = None,
        allow_non_restored_state: bool = False,
        fresh: bool = False,
    ) -> ExecutionPlan:
        """The plan ``execute`` would run (see :meth:`execute` for the arguments)."""
        self._checkpoint_config.validate()
        for name, value in (
            ("allow_non_restored_state", allow_non_restored_state),
            ("fresh", fresh),
        ):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{name} must be True or False, got {value!r}")
        if restore_from is None and os.environ.get("LOCKGATE_RESTORE_FROM"):
            # ``lockgate run --restore PATH`` (M-R3)
            restore_from = os.environ["LOCKGATE_RESTORE_FROM"]
        # ``lockgate run --allow-non-restored-state`` / ``--fresh``
        allow_non_restored_state = allow_non_restored_state or (
            os.environ.get("LOCKGATE_ALLOW_NON_RESTORED_STATE") == "1"
        )
        fresh = fresh_from_environment(fresh)
        if fresh and restore_from is not None:
            raise ConfigurationError(
                f"fresh=True starts from empty state, restore_from={restore_from!r} from a "
                "checkpoint: give one of them (lockgate run: --fresh or --restore)"
            )
        graph = self.get_job_graph()
        plan = build_execution_plan(job_name, graph, self.config, self._plan_checkpoint_config())
        plan.restart_strategy = self._restart_strategy
        plan.autoscaling = self._autoscaling
        if self._autoscaling is not None and not self._checkpoint_config.enabled:
            raise ConfigurationError(
                "autoscaling rescales the job from savepoints, which need checkpointing: "
                "call env.enable_checkpointing(interval) as well"
            )
        plan.run_id = uuid.uuid4().hex[:12]
        plan.faults = self._faults
        plan.state_backend = self._state_backend
        if restore_from is not None:
            plan.restore = _restore_spec(
                plan, restore_from, allow_non_restored_state, self._checkpoint_config
            )
        elif plan.checkpoint is not None and plan.checkpoint.storage not in _temporary_storages:
            plan.restore = _resume_spec(
                plan, allow_non_restored_state, fresh, self._checkpoint_config
            )
        if self._checkpoint_config.enabled or restore_from is not None:
            _warn_generated_uids(self._transformations)
        return plan

    def _plan_checkpoint_config(self) -> CheckpointConfig | None:
        """A copy of the checkpoint settings for one run, its storage resolved: without
        one, checkpoints go to a fresh temporary directory on this machine, which the
        run deletes when it ends unless ``externalized`` is ``RETAIN_ON_CANCELLATION``
        (see :func:`_remove_temporary_storage`)."""
        cfg = self._checkpoint_config
        if not cfg.enabled:
            return None
        resolved = copy.copy(cfg)
        storage = resolved.storage
        temporary = storage is None
        if storage is None:
            storage = tempfile.mkdtemp(prefix="lockgate-checkpoints-")
            log.info("checkpoint_config.storage is not set: checkpoints go to %s", storage)
        # absolute, and checked once here: slots open it by this URL (with the signing
        # key and permissions, registered for it in this process)
        resolved.storage = open_storage(storage, resolved.storage_options()).url
        if temporary:
            _temporary_storages.add(resolved.storage)
        return resolved

    # -- execution -----------------------------------------------------------------
    def execute(
        self,
        job_name: str = "lockgate job",
        *,
        executor: Any = None,
        restore_from: str | None = None,
        allow_non_restored_state: bool = False,
        fresh: bool = False,
    ) -> JobExecutionResult:
        """Build the job, run it to the end and return its result.

        ``restore_from``: start from a retained checkpoint or savepoint (M-R3): the path
        of its ``chk-<id>`` folder, or of a checkpoint storage (its newest intact
        checkpoint). State is matched by operator uid; state of a uid the job no longer
        has fails the restore unless ``allow_non_restored_state`` (M-S2). A damaged
        checkpoint is never loaded: the newest intact retained one before it is used,
        with a warning.

        Without ``restore_from``, a job whose checkpoint storage
        (``checkpoint_config.storage``) holds completed checkpoints of a job of the same
        name resumes from the newest one, as a restarted driver does (M-C8; logged at
        WARNING): running the same job again after its driver died neither loses nor
        repeats output. ``fresh=True`` (``lockgate run --fresh``) starts from empty
        state instead. A checkpoint that does not fit the job fails with
        ``RestoreError`` naming the uids, as a restore does.

        Failed attempts restart as the restart strategy says (M-R1, M-R2). Raises
        ``InvalidGraphError`` for a bad graph (before anything runs),
        ``RestoreError`` when nothing at ``restore_from`` can be restored, and
        ``JobFailedError`` when the job fails for good. Sources and sinks check their
        settings first (``check_before_run``, e.g. a database that cannot take the
        sink's transactions) and raise ``ConfigurationError`` before anything runs.
        """
        if not isinstance(job_name, str) or not job_name:
            raise ConfigurationError(f"job_name must be a non-empty string, got {job_name!r}")
        capture_if_asked(self, job_name)  # lockgate savepoint check: build, do not run
        plan = self.get_execution_plan(
            job_name,
            restore_from=restore_from,
            allow_non_restored_state=allow_non_restored_state,
            fresh=fresh,
        )
        check_connectors(plan)
        chosen = executor or self.executor or default_executor()
        _log_executor(job_name, chosen)
        client = JobClient(
            job_name,
            _then_clean_up(plan, chosen),
            background=False,
            plan=plan,
            rescaling=self._rescaling(plan, chosen),
        )
        return client.run_here()

    def execute_async(
        self,
        job_name: str = "lockgate job",
        *,
        executor: Any = None,
        restore_from: str | None = None,
        allow_non_restored_state: bool = False,
        fresh: bool = False,
    ) -> JobClient:
        """Build the job and start it in the background; the returned
        :class:`JobClient` waits for it, cancels it and lists its checkpoints. The
        arguments are those of :meth:`execute`.

        Raises ``InvalidGraphError`` for a bad graph before anything runs.
        """
        if not isinstance(job_name, str) or not job_name:
            raise ConfigurationError(f"job_name must be a non-empty string, got {job_name!r}")
        capture_if_asked(self, job_name)  # lockgate savepoint check: build, do not run
        plan = self.get_execution_plan(
            job_name,
            restore_from=restore_from,
            allow_non_restored_state=allow_non_restored_state,
            fresh=fresh,
        )
        check_connectors(plan)
        chosen = executor or self.executor or default_executor()
        _log_executor(job_name, chosen)
        return JobClient(
            job_name,
            _then_clean_up(plan, chosen),
            plan=plan,
            rescaling=self._rescaling(plan, chosen),
        )

    def _rescaling(self, plan: ExecutionPlan, executor: Any) -> Any:
        """The replanner and the executor's slot bound, for a job with autoscaling."""
        if plan.autoscaling is None:
            return None
        return (self._replanner(plan), getattr(executor, "slot_capacity", None))


_shared_spark_executor: Any = None


def _log_executor(job_name: str, executor: Any) -> None:
    describe = getattr(executor, "describe", None)
    where = describe() if callable(describe) else type(executor).__name__
    log.info("job %r runs on %s", job_name, where)


def default_executor() -> Any:
    """The executor ``env.execute`` uses when none is given: a ``SparkExecutor`` (on
    ``$LOCKGATE_SPARK_MASTER``, else ``local[*]``), shared by every job of this process so
    the Spark session starts once; a ``LocalExecutor`` when ``$LOCKGATE_EXECUTOR=local``
    (``lockgate run --executor local``)."""
    global _shared_spark_executor
    choice = os.environ.get("LOCKGATE_EXECUTOR", "spark").strip().lower() or "spark"
    if choice == "local":
        from ..executor.local import LocalExecutor

        return LocalExecutor()
    if choice != "spark":
        raise ConfigurationError(
            f"LOCKGATE_EXECUTOR={choice!r} is not an executor: use 'local' or 'spark'"
        )
    if _shared_spark_executor is None:
        from ..executor.spark import SparkExecutor

        _shared_spark_executor = SparkExecutor(
            master=os.environ.get("LOCKGATE_SPARK_MASTER") or None
        )
    return _shared_spark_executor


#: the temporary checkpoint storages this process made for runs without a storage
_temporary_storages: set[str] = set()


def _then_clean_up(plan: ExecutionPlan, executor: Any) -> Any:
    """``executor.execute(plan)`` as a JobClient run, which removes the run's temporary
    checkpoint storage when it ends."""

    def run(handle: Any) -> JobExecutionResult:
        try:
            result: JobExecutionResult = executor.execute(plan, handle=handle)
            return result
        finally:
            _remove_temporary_storage(plan)

    return run


def _remove_temporary_storage(plan: ExecutionPlan) -> None:
    """Delete the temporary checkpoint storage the run made (no storage was set), which
    nothing can restore from once the run is over; with
    ``externalized = RETAIN_ON_CANCELLATION`` it is kept, and its path logged."""
    cfg = plan.checkpoint
    if cfg is None or cfg.storage not in _temporary_storages:
        return
    assert cfg.storage is not None
    if cfg.externalized is ExternalizedRetention.RETAIN_ON_CANCELLATION:
        log.warning(
            "job %r: its checkpoints are retained (RETAIN_ON_CANCELLATION) in the "
            "temporary folder %s, which is not deleted; set "
            "checkpoint_config.storage to choose where they go",
            plan.job_name,
            cfg.storage,
        )
        return
    _temporary_storages.discard(cfg.storage)
    shutil.rmtree(cfg.storage, ignore_errors=True)


def _resume_spec(
    plan: ExecutionPlan, allow_non_restored_state: bool, fresh: bool, cfg: CheckpointConfig
) -> Any:
    """The newest checkpoint of the job's own storage when the job resumes from it, as a
    restarted driver does (M-C8, :mod:`lockgate.api.resume`); ``None`` for a fresh
    start. Raises ``RestoreError`` when that checkpoint does not fit the job."""
    from ..recovery.restore import RestoreError

    assert plan.checkpoint is not None and plan.checkpoint.storage is not None
    own = newest_own_checkpoint(plan.checkpoint.storage, plan.job_name)
    if own is None:
        return None
    if fresh:
        log_fresh_start(plan.job_name, own)
        return None
    try:
        spec = _restore_spec(plan, own.restore_path, allow_non_restored_state, cfg)
    except RestoreError as e:
        raise RestoreError(resume_failed_text(plan.job_name, own, e)) from e
    log_resume(plan.job_name, own)
    return spec


def _restore_spec(
    plan: ExecutionPlan, restore_from: str, allow_non_restored_state: bool, cfg: CheckpointConfig
) -> Any:
    """The checkpoint at ``restore_from``, checked against the job's operators (M-S2),
    read with the signing key of ``cfg``; a fallback past a damaged checkpoint that
    may have committed sink output is refused unless
    ``cfg.allow_replaying_committed_output``."""
    from ..recovery.failover import committed_output_guard
    from ..recovery.restore import RestoreError, resolve_restore_path

    if not isinstance(restore_from, (str, os.PathLike)):
        raise ConfigurationError(
            f"restore_from must be the path of a checkpoint or savepoint, got {restore_from!r}"
        )
    if not isinstance(cfg.allow_replaying_committed_output, bool):
        raise ConfigurationError(
            f"checkpoint allow_replaying_committed_output must be True or False, got "
            f"{cfg.allow_replaying_committed_output!r}"
        )
    spec = resolve_restore_path(
        os.fspath(restore_from),
        options=cfg.storage_options(),
        guard=committed_output_guard(plan, cfg.allow_replaying_committed_output),
    )
    unknown = sorted(spec.operator_uids() - set(plan.operator_names))
    if unknown and not allow_non_restored_state:
        raise RestoreError(
            f"restore_from {restore_from!r}: the checkpoint holds state of operators this job "
            f"does not have (uids {unknown}); give those operators the same .uid(...) as "
            "before, or pass allow_non_restored_state=True to drop that state"
        )
    from ..recovery.channel_state import check_restorable

    check_restorable(plan, spec, allow_non_restored_state=allow_non_restored_state)  # M-B7
    return spec


def _warn_generated_uids(transformations: list[Transformation]) -> None:
    """Warn about operators whose state is matched by a generated uid (M-S2)."""
    generated = [
        t for t in transformations if not t.kind.virtual and getattr(t, "_auto_uid", False)
    ]
    if generated:
        names = ", ".join(f"'{t.name}' (generated uid {t.uid})" for t in generated)
        log.warning(
            "operators without an explicit uid: %s. Their state is matched by a generated "
            "uid that changes when the graph upstream of them changes, so a changed job may "
            "not restore it from a checkpoint or savepoint: set .uid('...') on every "
            "stateful operator (M-S2)",
            names,
        )


def _derived_uid(t: Transformation, taken: set[str]) -> str | None:
    """``"<owner uid>.<suffix>"`` for a step the API made for an operator with an explicit
    uid (``t.uid_of``), if that is a valid uid no other operator has; else None."""
    if t.uid_of is None:
        return None
    owner, suffix = t.uid_of
    if not owner.uid or getattr(owner, "_auto_uid", False):
        return None
    uid = f"{owner.uid}.{suffix}"
    if uid in taken or len(uid.encode()) > 128:
        return None
    return uid


def _assign_uids(order: list[Transformation]) -> None:
    """Give operators without a uid a stable one derived from their name and position
    in the graph (unchanged as long as the graph upstream of them is unchanged)."""
    taken = {t.uid for t in order if t.uid and not getattr(t, "_auto_uid", False)}
    generated: dict[int, str] = {}
    for t in order:
        parents = ",".join(generated.get(i.id, i.uid or "") for i in t.inputs)
        digest = hashlib.sha1(f"{t.kind.value}|{t.name}|{parents}".encode()).hexdigest()[:12]
        if t.kind.virtual:
            generated[t.id] = digest
            continue
        if t.uid and not getattr(t, "_auto_uid", False):
            generated[t.id] = t.uid
            continue
        derived = _derived_uid(t, taken)
        if derived is not None:
            t.uid = derived
            taken.add(derived)
            generated[t.id] = derived
            continue
        uid = f"auto-{digest}"
        n = 1
        while uid in taken:
            n += 1
            uid = f"auto-{digest}-{n}"
        taken.add(uid)
        t.uid = uid
        t._auto_uid = True  # type: ignore[attr-defined]
        generated[t.id] = uid
