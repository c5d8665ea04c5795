"""JobClient: a job started with ``env.execute_async``."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import secrets
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from ..autoscaling.autoscaler import Autoscaler
from ..autoscaling.decisions import DecisionLog, RescaleDecision
from ..checkpoint.config import SAVEPOINT_DIR_ENV
from ..checkpoint.savepoints import (
    check_savepoint_target,
    new_savepoint_folder,
    publish_savepoint,
)
from ..checkpoint.types import CheckpointFailureReason, CheckpointStats
from ..core.rest_settings import rest_settings
from ..errors import CheckpointFailedError, ConfigurationError
from ..executor.job_registry import register_job
from ..job.handle import JobHandle
from ..job.observer import JobObserver, graph_of
from ..job.progress import ProgressLogger, format_result, progress_of
from ..job.restart_causes import RestartCause, failure_location
from ..job.result import JobExecutionResult, JobStatus
from .rescaling import Rescaler
from .resume import record_stop_with_savepoint

log = logging.getLogger(__name__)


class JobClient:
    """Controls and observes a job running in the background.

    ``wait()`` returns the job's result (or raises its ``JobFailedError``);
    ``cancel()`` stops it (its result then has status ``CANCELED``);
    ``checkpoints()`` lists its checkpoints with their metrics;
    ``trigger_savepoint(path)`` writes a savepoint into the folder ``path`` while the
    job goes on; ``stop_with_savepoint(path)`` writes one and then stops the job
    (its result then has status ``FINISHED`` and ``savepoint_path`` set; without
    ``path``, into the default savepoint folder, ``checkpoint_config.savepoint_dir``).
    """

    def __init__(
        self,
        job_name: str,
        run: Callable[[JobHandle], JobExecutionResult],
        *,
        background: bool = True,
        plan: Any = None,
        rescaling: Any = None,
    ) -> None:
        """Start ``run`` in a background thread (``background=False``: the caller runs it
        with :meth:`run_here`). Either way the job is registered for command-line control
        (``lockgate list``, ``lockgate savepoint``, ``lockgate stop``) while it runs.
        ``rescaling``: ``(Replanner, slot capacity callable or None)`` for a plan with
        autoscaling (``env.autoscaling``)."""
        self.job_name = job_name
        self._handle = JobHandle()
        self._done = threading.Event()
        self._result: JobExecutionResult | None = None
        self._error: BaseException | None = None
        self._stopped_with: str | None = None
        self._savepoint_lock = threading.Lock()
        # orders setting the result and the savepoint a stop published (a drained job may
        # end before the savepoint is published, or after)
        self._result_lock = threading.Lock()
        self._run_fn = run
        self._plan = plan
        #: savepoint checkpoint id -> the folder it was published to
        self._published: dict[int, str] = {}
        #: wall-clock seconds when the client was made (the job's start)
        self.started_at = time.time()
        self._observer = JobObserver(
            plan,
            self._read_metrics,
            earlier=lambda: self._handle.earlier_counts,
            current_plan=lambda: self._handle.plan,
        )
        self._decisions = DecisionLog()
        self._autoscaler = self._make_autoscaler(plan, rescaling)
        if getattr(getattr(plan, "config", None), "metrics_enabled", False):
            self._observer.start_sampling()
        self._rest_token: str | None = None
        #: the id the REST API answers to: the registry id (a random one without it)
        self._rest_id: str | None = None
        self._rest = self._start_rest(plan)
        try:
            self._registration = register_job(
                job_name, self, rest_url=self.rest_url, rest_token=self.rest_token
            )
        except BaseException:
            if self._rest is not None:
                self._rest.stop()
            raise
        self._rest_id = self._registration.job_id or secrets.token_hex(6)
        self._handle.rest_url = self.rest_url
        interval = getattr(getattr(plan, "config", None), "progress_interval_ms", 0)
        self._progress_logger: ProgressLogger | None = (
            ProgressLogger(self.progress, lambda: self.running, interval).start()
            if interval
            else None
        )
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(
                target=self._run, args=(run,), name=f"lockgate job client {job_name}", daemon=True
            )
            self._thread.start()

    def _make_autoscaler(self, plan: Any, rescaling: Any) -> Autoscaler | None:
        config = getattr(plan, "autoscaling", None)
        if config is None or rescaling is None:
            return None
        replanner, slot_capacity = rescaling

        def upper_bound(vertex: Any) -> int:
            bound = replanner.upper_bound(vertex)
            if slot_capacity is not None:
                bound = min(bound, max(1, int(slot_capacity())))
            return int(bound)

        rescaler = Rescaler(
            self.job_name,
            self._handle,
            replanner,
            self._decisions,
            self._savepoint_then,
            self._done.is_set,
        )
        log.info("job %r autoscales: %s", self.job_name, config.describe())
        return Autoscaler(
            self.job_name,
            config,
            read_metrics=self._observer.metrics,
            current_plan=lambda: self._handle.plan if self.running else None,
            upper_bound=upper_bound,
            rescale=rescaler,
            decisions=self._decisions,
        )

    def parallelism(self) -> dict[str, int]:
        """Each operator uid's parallelism now (after the autoscaler's rescales, the
        running attempt's; before the first attempt, the submitted plan's)."""
        plan = self._handle.plan or self._plan
        if plan is None:
            return {}
        return {op.uid: v.parallelism for v in plan.vertices for op in v.operators}

    def autoscaling(self) -> dict[str, Any] | None:
        """The autoscaler's settings (None: the job does not autoscale)."""
        config = getattr(self._plan, "autoscaling", None)
        if config is None or self._autoscaler is None:
            return None
        return {**dataclasses.asdict(config), "describe": config.describe()}

    def rescales(self) -> list[RescaleDecision]:
        """The autoscaler's decisions so far, oldest first: when, each operator uid's
        parallelism before and after, why (every vertex's rate, busy share and
        utilization), the savepoint it went through and how it ended (``applied``,
        ``failed``: the job went on as it was, ``rolled back``: the rescaled job failed
        before its first checkpoint and went back). Empty without autoscaling."""
        return self._decisions.all()

    def _savepoint_then(self, path: str, then: Any) -> str:
        """A savepoint into ``path`` with periodic checkpoints stopped (one that stops
        nothing: it commits nothing), then ``then(storage, savepoint id, location)``
        before they could resume; they resume if either fails (and the error is raised).
        The autoscaler's rescales stop the job in ``then``."""
        check_savepoint_target(path)
        with self._savepoint_lock:
            coordinator = self._running_coordinator(TRIGGER_RETRY_S)
            coordinator.stop_periodic()
            try:
                savepoint_id, location = self._savepoint(coordinator, path, None)
                then(coordinator.storage, savepoint_id, location)
            except BaseException:
                if not coordinator.is_shut_down:
                    coordinator.start()
                raise
            return location

    def run_here(self) -> JobExecutionResult:
        """Run the job in the calling thread (a client made with ``background=False``)
        and return its result, or raise its error."""
        if self._thread is not None or self._done.is_set():
            raise ConfigurationError(
                "run_here() runs a job once, for a client made with background=False"
            )
        self._run(self._run_fn)
        return self.wait()

    def _run(self, run: Callable[[JobHandle], JobExecutionResult]) -> None:
        if self._autoscaler is not None:
            self._autoscaler.start()
        try:
            result = run(self._handle)
            with self._result_lock:
                if self._stopped_with is not None:
                    _stopped(result, self._stopped_with)
                self._result = result
            if self._progress_logger is not None:
                self._progress_logger.stop()  # the end line is the last
            log.info("%s", format_result(result, self._plan))
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self._error = e
        finally:
            self._done.set()
            if self._autoscaler is not None:
                self._autoscaler.stop()
            # after _done: a stop command in progress waits for the end of the job
            self._registration.close()
            if self._progress_logger is not None:
                self._progress_logger.stop()
            self._observer.stop()
            if self._rest is not None:
                # A stop request waiting in the server answers once the job ended. Run in
                # the caller's thread (execute()), wait for that answer: the caller may
                # exit its process next, which would cut the answer off. A background
                # job's stop request waits for the end of this thread: the server then
                # finishes by itself once it answered (and before the process exits, see
                # lockgate.rest.server).
                self._rest.stop(wait=self._thread is None or not self._rest.busy)

    def _start_rest(self, plan: Any) -> Any:
        """Serve the job's REST API if ``plan.config.rest_enabled``; None when disabled or
        when it cannot start (logged: the job runs without it)."""
        config = getattr(plan, "config", None)
        if config is None or not getattr(config, "rest_enabled", False):
            return None
        # LOCKGATE_REST_* (lockgate run --rest-*, lockgate submit) override the config
        settings = rest_settings(config.rest_bind, config.rest_port)
        token = settings.token
        try:
            from ..rest.server import start_rest_server

            server = start_rest_server(
                self,
                token,
                lambda: self._rest_id,
                host=settings.bind,
                port=settings.port,
                name=self.job_name,
            )
        except (OSError, ImportError) as e:
            log.warning(
                "job %r serves no REST API, metrics or dashboard: cannot listen on %s:%s "
                "(%s: %s); set ExecutionConfig.rest_bind / rest_port to a free address, or "
                "rest_enabled=False",
                self.job_name,
                settings.bind,
                settings.port,
                type(e).__name__,
                e,
            )
            return None
        self._rest_token = token
        log.info("job %r serves its REST API and dashboard at %s", self.job_name, server.url)
        if not _is_loopback(settings.bind):
            log.warning(
                "job %r serves its REST API on %s over plain HTTP: its token crosses that "
                "network in clear; reach it through an SSH tunnel or a TLS proxy of your "
                "own, or keep rest_bind='127.0.0.1' (docs/security.md)",
                self.job_name,
                settings.bind,
            )
        return server

    @property
    def rest_url(self) -> str | None:
        """The job's REST API and dashboard (``http://HOST:PORT``), None when it serves
        none (``ExecutionConfig.rest_enabled=False``, or the address could not be bound)."""
        return None if self._rest is None else str(self._rest.url)

    @property
    def rest_token(self) -> str | None:
        """The token every REST request needs (``Authorization: Bearer <token>``); also in
        the job's registry entry (mode 0600). Never logged: keep it secret."""
        return self._rest_token

    def __repr__(self) -> str:
        state = "done" if self._done.is_set() else "running"
        return f"JobClient({self.job_name!r}, {state})"

    @property
    def running(self) -> bool:
        """Whether every subtask is deployed and the job has not ended."""
        return self._handle.running.is_set() and not self._done.is_set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        """Block until the job ends; return its result or raise its error.
        Raises ``TimeoutError`` when ``timeout`` seconds pass first."""
        _check_timeout(timeout, "wait")
        if not self._done.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' still running after {timeout}s")
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        """Stop the job (idempotent; returns at once, ``wait()`` for the end)."""
        self._handle.cancel()

    def checkpoints(self) -> list[CheckpointStats]:
        """Every checkpoint of the job so far (ascending id): completed, failed and in
        progress, with their metrics (M-B10); those of earlier attempts of the run too
        (one in progress when its attempt ended is reported failed)."""
        stats: list[CheckpointStats] = self._handle.checkpoint_history()
        published = dict(self._published)
        return [
            dataclasses.replace(s, external_path=published[s.checkpoint_id])
            if s.checkpoint_id in published
            else s
            for s in stats
        ]

    def watermarks(self) -> list[Any]:
        """The watermark diagnostic of the running attempt: per operator subtask, its
        current watermark and what holds it back (an input channel, or the source's
        generator); a moment old on Spark (sent with the slots' heartbeats). Empty
        before the job runs."""
        provider = self._handle.watermarks
        return list(provider()) if provider is not None else []

    def restart_causes(self) -> list[RestartCause]:
        """The job's failures so far (a metric): each distinct failure (operator and
        error) with the number of attempts it failed, in the order they first happened;
        a job restarting forever on the same error shows its count growing."""
        return self._handle.restart_causes.snapshot()

    # -- observing a running job (REST API, /metrics, dashboard) ------------------------
    def status(self) -> str:
        """``CREATED`` (deploying), ``RUNNING``, ``RESTARTING`` (between attempts), then
        ``FINISHED``, ``CANCELED`` or ``FAILED``."""
        if self._done.is_set():
            if self._error is not None:
                return JobStatus.FAILED.value
            return self._result.status.value if self._result is not None else "FAILED"
        if self._handle.running.is_set():
            return "RUNNING"
        return "RESTARTING" if self._handle.restart_causes.failures else "CREATED"

    def graph(self) -> dict[str, Any]:
        """The job graph: ``vertices`` (id, name, parallelism, operators) and ``edges``
        (source and target vertex ids, partitioning)."""
        return graph_of(self._handle.plan or self._plan)

    def _read_metrics(self) -> list[dict[str, Any]]:
        provider = self._handle.metrics
        if provider is None or not self._handle.running.is_set() or self._done.is_set():
            return []
        return list(provider())

    def metrics(self) -> dict[str, Any]:
        """Live metrics (a JSON-ready dict): ``job`` (status, attempt, restarts,
        uptime, and ``attempts``: the run's ended attempts, each with its status,
        duration, error, record counts per operator uid and checkpoints), ``vertices``
        (per task and subtask: records and bytes in and out with their rates, busy /
        idle / backpressured ms per second, queue fill) and ``operators`` (per operator
        subtask: records in and out with their rates, watermark and its lag, source
        lag, keys and state size where known). Record counts span the run: the ended
        attempts' counts are added to the running one's (replayed records included).
        Rates are over about the last second; on Spark the numbers are a heartbeat old.
        Empty lists while no attempt runs."""
        out = self._observer.metrics()
        out["job"] = self._job_summary()
        return out

    def _job_summary(self) -> dict[str, Any]:
        restarts = self._handle.restart_causes.failures
        return {
            "name": self.job_name,
            "status": self.status(),
            "started_at": self.started_at,
            "uptime_s": round(time.time() - self.started_at, 3),
            "attempt": restarts,
            "restarts": restarts,
            "attempts": [a.to_json() for a in list(self._handle.attempt_history)],
        }

    def exceptions(self) -> list[dict[str, Any]]:
        """The job's failures, oldest first (at most the latest 50): ``time``,
        ``attempt``, ``operator``, ``error`` (type and first line), ``traceback``, and
        where a lost process ran (``slot``, ``host``, ``pid``, ``signal``, ``exit_code``;
        None when not known or not a lost process);
        the final error too once the job failed."""
        history = self._handle.restart_causes.history()
        error = self._error if self._done.is_set() else None
        if error is not None and not any(e.get("final") for e in history):
            history.append(
                {
                    "time": time.time(),
                    "attempt": self._handle.restart_causes.failures,
                    "operator": getattr(error, "operator", None),
                    "error": _first_line(error),
                    "traceback": "".join(traceback.format_exception(error))[-20_000:],
                    **failure_location(error),
                    "final": True,
                }
            )
        return history

    def progress(self) -> dict[str, Any]:
        """A summary for people, as Spark's ``lastProgress``: records per second into the
        job (its sources' output) and out of it, the lowest watermark, the last completed
        checkpoint and the most backpressured task."""
        return progress_of(self.metrics(), self.checkpoints())

    # -- savepoints (M-S1) ----------------------------------------------------------------
    def trigger_savepoint(self, path: str, timeout: float | None = None) -> str:
        """Take a savepoint into the folder ``path`` (a local path or a URL; it must not
        hold a savepoint yet) and return its location; the job goes on. The savepoint
        is aligned and holds every operator's state in the canonical format, so either
        state backend restores it, at any parallelism (``restore_from=path``).

        Waits for the job to be running, then for the savepoint: at most ``timeout``
        seconds in all (None: the checkpoint timeout for the savepoint). Raises
        ``ConfigurationError`` for a bad folder or a job without checkpointing,
        ``CheckpointFailedError`` when the savepoint fails, ``TimeoutError``.
        """
        _check_timeout(timeout, "trigger_savepoint")
        check_savepoint_target(path)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._savepoint_lock:
            coordinator = self._running_coordinator(_left(deadline))
            return self._savepoint(coordinator, path, _left(deadline))[1]

    def stop_with_savepoint(
        self, path: str | None = None, drain: bool = False, timeout: float | None = None
    ) -> str:
        """Take a savepoint into ``path``, then stop the job; return the savepoint's
        location. Periodic checkpoints stop first, so no checkpoint after the savepoint
        commits output the savepoint does not cover. If the savepoint fails the job
        keeps running (periodic checkpoints resume) and the error is raised. A job
        stopped with a savepoint ends ``FINISHED`` (``savepoint_path`` set): its retained
        checkpoints stay, as after any normal end, and its storage notes the savepoint
        (``_stopped_with_savepoint``) so that a run resuming there starts from it.

        ``path=None`` (Flink's ``stop`` without a target directory): a new folder in the
        default savepoint folder, ``checkpoint_config.savepoint_dir`` or else the
        environment variable ``LOCKGATE_SAVEPOINT_DIR`` of this process
        (:func:`~lockgate.checkpoint.savepoints.new_savepoint_folder`). With neither, a
        ``ConfigurationError`` says so and the job goes on: give a folder, configure
        one, or stop the job without a savepoint with :meth:`cancel`.

        ``drain=False``: the job is cancelled once the savepoint completed; the driver
        commits the savepoint's pending transactions (a restore from it goes on where
        the job stopped).

        ``drain=True`` (Flink's ``stop --drain``; use it when the job will not be
        resumed): the savepoint's barrier makes every source end its input first, so the
        maximum watermark goes through the job and every event-time window and timer
        fires, and every task finishes its operators before its snapshot; the savepoint
        is every task's final checkpoint (FLIP-147): its completion notice commits the
        sinks' last transactions in the tasks, and the job ends by itself (status
        ``FINISHED``). The savepoint holds no pending window or timer. If it fails, the
        sources have stopped already: periodic checkpoints resume and the next one ends
        the job the same way.
        """
        if not isinstance(drain, bool):
            raise ConfigurationError(
                f"stop_with_savepoint(drain=...) must be True or False, got {drain!r}"
            )
        _check_timeout(timeout, "stop_with_savepoint")
        if path is None:
            path = self._default_savepoint_folder()
        check_savepoint_target(path)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._savepoint_lock:
            coordinator = self._running_coordinator(_left(deadline))
            coordinator.stop_periodic()
            try:
                savepoint_id, location = self._savepoint(
                    coordinator, path, _left(deadline), drain=drain, stop=True
                )
            except BaseException:
                if not coordinator.is_shut_down:
                    coordinator.start()
                raise
            # a rerun on the storage resumes from this savepoint, not an older checkpoint
            record_stop_with_savepoint(coordinator.storage, self.job_name, savepoint_id, location)
            with self._result_lock:
                self._stopped_with = location
                if self._result is not None:  # a drained job may have ended already
                    _stopped(self._result, location)
            self._handle.final_savepoint = location
            if not drain:
                self._handle.cancel()
            # drained: every task ends once it handled the savepoint's completion notice
        # Wait for the end, but not with wait(): it joins the job's thread, and a stop
        # from the command line runs in a command thread of the job registry that the
        # job's thread, ending, lets answer before it closes the registration (a
        # deadlock until the registry gave up, and the command got no answer)
        left = _left(deadline)
        if not self._done.wait(left):
            raise TimeoutError(f"job '{self.job_name}' still running after {left}s")
        if self._error is not None:
            raise self._error
        return location

    def _default_savepoint_folder(self) -> str:
        """A new folder in the job's default savepoint folder, or a ``ConfigurationError``
        saying how to stop the job instead."""
        config = getattr(self._plan, "checkpoint", None)
        if config is None or not config.enabled:
            raise ConfigurationError(
                f"job '{self.job_name}' runs without checkpointing, so it cannot be stopped "
                "with a savepoint: cancel it (client.cancel(), lockgate cancel JOB), or call "
                "env.enable_checkpointing(interval) before execute_async next time"
            )
        folder = config.default_savepoint_dir()
        if folder is None:
            raise ConfigurationError(
                f"job '{self.job_name}' has no default savepoint folder, so stop needs one: "
                "give it (client.stop_with_savepoint(path), lockgate stop JOB --savepoint "
                f"PATH), or configure one (env.checkpoint_config.savepoint_dir, or the "
                f"environment variable {SAVEPOINT_DIR_ENV} where the job runs). To stop the "
                "job without a savepoint, cancel it: client.cancel(), lockgate cancel JOB. "
                "The job keeps running"
            )
        return new_savepoint_folder(folder, self.job_name)

    def _running_coordinator(self, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._handle.running.is_set():
            if self._done.is_set():
                raise ConfigurationError(
                    f"job '{self.job_name}' has ended; savepoints can only be taken of a "
                    "running job"
                )
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job '{self.job_name}' was not running within {timeout}s")
            self._handle.running.wait(0.05 if left is None else min(left, 0.05))
        coordinator = self._handle.coordinator
        if coordinator is None:
            raise ConfigurationError(
                f"job '{self.job_name}' runs without checkpointing; savepoints need it: call "
                "env.enable_checkpointing(interval) before execute_async"
            )
        return coordinator

    def _savepoint(
        self,
        coordinator: Any,
        path: str,
        timeout: float | None,
        *,
        drain: bool = False,
        stop: bool = False,
    ) -> tuple[int, str]:
        """Trigger a savepoint, wait for it and publish it into ``path``: its checkpoint
        id and its location."""
        # a task still initializing (restoring state, opening connections) or another
        # checkpoint in the way is waited for, as long as the timeout allows
        deadline = time.monotonic() + (TRIGGER_RETRY_S if timeout is None else timeout)
        while True:
            result = coordinator.trigger_checkpoint(savepoint=True, drain=drain, stop=stop)
            if not isinstance(result, CheckpointFailureReason):
                break
            if (
                result not in _TRANSIENT_TRIGGER_FAILURES
                or time.monotonic() >= deadline
                or self._done.is_set()
            ):
                raise CheckpointFailedError(
                    f"the savepoint of job '{self.job_name}' could not be triggered: {result.value}"
                )
            self._done.wait(TRIGGER_RETRY_PAUSE_S)
        if timeout is not None:
            timeout = max(0.0, deadline - time.monotonic())
        completed = coordinator.wait_for_savepoint(result, timeout)
        location: str = publish_savepoint(coordinator.storage, completed, path)
        # the savepoint's temporary chk-<id> folder is gone: its stats name where it is
        self._published[result] = location
        return result, location


#: how long a savepoint without a timeout waits for its trigger to be accepted (seconds)
TRIGGER_RETRY_S = 120.0
TRIGGER_RETRY_PAUSE_S = 0.05
#: trigger refusals that pass by themselves: the savepoint tries again
_TRANSIENT_TRIGGER_FAILURES = frozenset(
    {
        CheckpointFailureReason.TASK_NOT_RUNNING,
        CheckpointFailureReason.TOO_MANY_CONCURRENT,
        CheckpointFailureReason.MIN_PAUSE,
    }
)


def _stopped(result: JobExecutionResult, savepoint: str) -> None:
    """A job stopped with ``savepoint`` (cancelled after it, or drained) finished."""
    if result.status in (JobStatus.CANCELED, JobStatus.FINISHED):
        result.status = JobStatus.FINISHED
        result.savepoint_path = savepoint


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (never negative), or None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _check_timeout(timeout: float | None, what: str) -> None:
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
    ):
        raise ConfigurationError(f"{what} timeout must be seconds >= 0 or None, got {timeout!r}")


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) is this machine's loopback only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
