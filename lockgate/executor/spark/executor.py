"""SparkExecutor: runs a plan as one barrier-mode Spark job, one task per slot.

The driver (this process) starts a control server, submits the job in its
own job group from a background thread, and watches: slot registrations
(answered with every slot's data-plane addresses), heartbeats, failure
reports and the job's own outcome. Any failure (a subtask's exception, a
killed Python worker, a lost executor, a slot silent for longer than the
heartbeat timeout) cancels the job group and raises ``JobFailedError``; the
executor returns only when Spark reports the job ended and, on a loopback
cluster, when the slots' Python workers are gone.

A slot that falls silent is diagnosable: its watchdog sends every thread's stack
half-way to the heartbeat timeout (logged here at once), or, when its whole
interpreter froze, faulthandler writes them into a file this driver reads on a
loopback cluster; the ``JobFailedError`` of a silent slot carries those stacks
(:func:`silent_slot_error`).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
import uuid
import zipfile
from typing import Any

import cloudpickle

from ...checkpoint.types import TaskAcknowledgement
from ...core.clock import SystemClock
from ...errors import ConfigurationError, FailureReason, JobFailedError, UserFunctionError
from ...graph.execution_plan import ExecutionPlan
from ...job.handle import JobHandle
from ...job.result import JobExecutionResult
from ..base import (
    cancelled_result,
    checkpoint_failure,
    failure_error,
    finished_result,
    user_cause,
)
from ..base import (
    checkpoint_run as _checkpoint_run,
)
from .auth import MessageAuth, new_secret
from .control import (
    ACK,
    CANCEL,
    CHECKPOINT_ABORTED,
    CHECKPOINT_COMPLETE,
    DECLINE,
    FAILED,
    REGISTER,
    TASK_END_OF_DATA,
    TASK_FINISHED,
    TASK_RUNNING,
    TRIGGER,
    ControlEvent,
    ControlServer,
)
from .liveness import SlotSilent, SlotsNotStarted, check_liveness, start_timeout
from .lost_worker import aborted_job_error
from .session import (
    check_session,
    create_session,
    is_loopback,
    quiet_expected_spark_logs,
    task_slots,
    wait_for_slots,
)
from .slot import SlotJob
from .worker_exits import discard_exit

log = logging.getLogger(__name__)


class SparkExecutor:
    """Runs jobs on Spark. ``master`` defaults to ``local[*]`` (or ``$LOCKGATE_SPARK_MASTER``);
    ``spark`` reuses an existing SparkSession; ``conf`` adds Spark settings.

    ``heartbeat_timeout_s``: a registered slot silent this long is lost (its host cut off,
    its executor hung or dead) and the attempt fails over. ``slot_start_timeout_s``: every
    slot of an attempt must register within this long of its submission (default: the
    longer of ``heartbeat_timeout_s`` and ``slot_wait_timeout_s``); see :mod:`.liveness`."""

    def __init__(
        self,
        master: str | None = None,
        spark: Any = None,
        conf: dict[str, str] | None = None,
        *,
        slot_wait_timeout_s: float = 60.0,
        heartbeat_timeout_s: float = 60.0,
        slot_start_timeout_s: float | None = None,
        ship_package: bool = True,
    ) -> None:
        self.master = master
        self._spark = spark
        self.conf = dict(conf or {})
        self.slot_wait_timeout_s = slot_wait_timeout_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.slot_start_timeout_s = start_timeout(
            slot_start_timeout_s, heartbeat_timeout_s, slot_wait_timeout_s
        )
        self.ship_package = ship_package
        self._generation = 0
        self._shipped = False
        #: the control server of the running attempt (tests send messages to it)
        self.control: ControlServer | None = None
        #: set once every slot of the running attempt registered
        self.running = threading.Event()

    def __repr__(self) -> str:
        return f"SparkExecutor(master={self.master!r})"

    def describe(self) -> str:
        """Where jobs run, for the start-up log line."""
        if self._spark is not None:
            return f"Spark, master {self._spark.sparkContext.master}"
        master = self.master or os.environ.get("LOCKGATE_SPARK_MASTER") or "local[*]"
        return f"Spark, master {master}"

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = create_session(self.master, self.conf)
            quiet_expected_spark_logs(self._spark.sparkContext)
        return self._spark

    @property
    def slot_pids(self) -> dict[int, int]:
        """Pid of each slot's Python worker in the running attempt."""
        c = self.control
        return {s: r["pid"] for s, r in c.registrations.items()} if c else {}

    def warm_up(self, slots: int | None = None) -> list[int]:
        """Start the Spark session and ``slots`` Python workers (default: every task slot
        the application offers) with lockgate's runtime imported, and return their pids.

        A job's slots run in Spark's Python workers, forked for each task by Spark's
        worker daemon (the executor turns ``spark.python.worker.reuse`` off: a slot's
        process ends with its task, threads and sockets included). Without a warm-up the
        first job waits for that daemon to start and import pyarrow, numpy, pyzmq and
        lockgate (seconds on a small machine); after it, its slots start as fast as later
        jobs' do. This is the Spark counterpart of starting a Flink session cluster before
        submitting jobs.
        """
        spark = self.spark
        sc = spark.sparkContext
        available = task_slots(sc)
        n = available if slots is None else slots
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigurationError(
                f"SparkExecutor.warm_up slots must be an int >= 1, got {slots!r}"
            )
        wait_for_slots(sc, n, self.slot_wait_timeout_s)
        self._ship(sc)
        sc.setJobGroup(
            f"lockgate-warm-up-{uuid.uuid4().hex[:8]}",
            f"lockgate: start {n} Python workers",
            interruptOnCancel=True,
        )
        pids = sc.parallelize(range(n), n).barrier().mapPartitions(_warm_worker).collect()
        return sorted(pids)

    def _ship(self, sc: Any) -> None:
        if self._shipped or not self.ship_package:
            return
        # the folder holding the lockgate package (this file is lockgate/executor/spark/)
        root = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        )
        folder = tempfile.mkdtemp(prefix="lockgate-ship-")
        # Spark's executors fetch the archive from this folder later (new workers too):
        # it goes when the driver process ends, never before
        atexit.register(shutil.rmtree, folder, True)
        archive = _package_zip(root, os.path.join(folder, "lockgate.zip"))
        sc.addPyFile(archive)
        self._shipped = True

    def execute(
        self, plan: ExecutionPlan, *, attempt_number: int = 0, handle: JobHandle | None = None
    ) -> JobExecutionResult:
        """Run ``plan`` to the end, restarting failed attempts as its restart strategy
        says (M-R1, M-R2); ``attempt_number`` is the number of the first attempt."""
        from ...recovery.failover import run_with_restarts

        return run_with_restarts(
            plan,
            self.run_attempt,
            handle=handle or JobHandle(),
            clock=SystemClock(),
            first_attempt=attempt_number,
        )

    def run_attempt(
        self, plan: ExecutionPlan, attempt_number: int, handle: JobHandle
    ) -> JobExecutionResult:
        """One attempt: one barrier-mode Spark job (a new generation), until every slot
        finishes or one fails."""
        started = time.monotonic()
        spark = self.spark
        sc = spark.sparkContext
        check_session(sc)
        if plan.checkpointing:
            _check_storage_reachable(plan, sc.master)
        wait_for_slots(sc, plan.num_slots, self.slot_wait_timeout_s)
        self._ship(sc)
        self._generation += 1
        gen = self._generation
        secret = new_secret()
        master = sc.master
        host = "127.0.0.1" if is_loopback(master) else sc.getConf().get("spark.driver.host")
        server = ControlServer(host, MessageAuth(secret), gen, plan.num_slots)
        self.control = server
        self.running.clear()
        gateway = _SparkGateway(server)
        run = _checkpoint_run(plan, gateway, SystemClock(), handle.finished_results)
        if run is not None:
            server.dispatch = _checkpoint_dispatch(run)
        handle.attach(run.coordinator if run else None, lambda: None)
        handle.watermarks = lambda: [
            w for p in list(server.heartbeat_payloads.values()) for w in p.get("watermarks", [])
        ]
        handle.metrics = lambda: [
            m for p in list(server.heartbeat_payloads.values()) for m in p.get("metrics", [])
        ]
        job = SlotJob(
            cloudpickle.dumps(plan),
            server.endpoint,
            secret,
            gen,
            attempt_number=attempt_number,
            stall_after_s=stall_after(self.heartbeat_timeout_s),
        )
        group = f"lockgate-{plan.job_name}-{uuid.uuid4().hex[:8]}"
        outcome: queue.Queue[tuple[str, Any]] = queue.Queue()

        def submit() -> None:
            try:
                sc.setJobGroup(group, _job_description(plan, gen, handle), interruptOnCancel=True)
                rdd = sc.parallelize(range(plan.num_slots), plan.num_slots).barrier()
                results = rdd.mapPartitions(_slot_function(job)).collect()
                outcome.put(("ok", results))
            except BaseException as e:  # noqa: BLE001 - reported to the watcher
                outcome.put(("error", e))

        thread = threading.Thread(target=submit, name="lockgate spark job", daemon=True)
        thread.start()
        cancelled = False
        try:
            results = self._watch(plan, server, outcome, gen, handle, run, gateway)
        except BaseException as e:
            cancelled = isinstance(e, _CancelRequested)
            lost = isinstance(e, _SlotLost)
            _cancel_slots(server, grace_s=0 if lost else CLOSE_GRACE_S)
            # slots close their operators and end by themselves, usually; a lost slot's
            # task never ends (its host may be cut off), so the job cannot end by itself
            thread.join(0 if lost else 3)
            sc.cancelJobGroup(group)
            thread.join(30)
            self._await_workers_gone(master, server)
            if cancelled:
                return cancelled_result(
                    plan, (time.monotonic() - started) * 1000, _counters_at_stop(server)
                )
            if isinstance(e, _SlotLost):
                raise e.error from None
            raise
        finally:
            if run is not None:
                # a stop with a savepoint ends FINISHED: its checkpoints are kept
                run.stop(cancelled=cancelled and handle.cancelled)
            handle.detach()
            server.close()
            _discard_stack_dumps(server)
            self.control = None
            self.running.clear()
        counters = [c for r in results for c in r["counters"]]
        sink_results = [x for r in results for x in r["results"]]
        return finished_result(plan, (time.monotonic() - started) * 1000, counters, sink_results)

    def _watch(
        self,
        plan: ExecutionPlan,
        server: ControlServer,
        outcome: queue.Queue[tuple[str, Any]],
        gen: int,
        handle: JobHandle,
        run: Any,
        gateway: _SparkGateway,
    ) -> list[dict[str, Any]]:
        submitted = time.monotonic()
        while True:
            if handle.cancel_requested.is_set():
                raise _CancelRequested()
            if gateway.job_error is not None:
                raise checkpoint_failure(plan.job_name, gateway.job_error) from gateway.job_error
            try:
                kind, value = outcome.get(timeout=0.05)
            except queue.Empty:
                pass
            else:
                if kind == "ok":
                    return value
                raise self._spark_failure(plan, server, value)
            while True:
                try:
                    event = server.events.get_nowait()
                except queue.Empty:
                    break
                if event.type == REGISTER and len(server.registrations) == plan.num_slots:
                    self.running.set()
                    handle.running.set()
                    if run is not None:
                        run.start()  # the tasks report RUNNING once initialized
                if event.type == FAILED:
                    raise _reported_failure(plan, event.payload)
            verdict = check_liveness(
                now=time.monotonic(),
                submitted=submitted,
                num_slots=plan.num_slots,
                registered=list(server.registrations),
                last_heartbeat=dict(server.last_heartbeat),
                finished=set(server.finished),
                start_timeout_s=self.slot_start_timeout_s,
                heartbeat_timeout_s=self.heartbeat_timeout_s,
            )
            if isinstance(verdict, SlotsNotStarted):
                raise JobFailedError(
                    f"job '{plan.job_name}' failed: only {verdict.started} of "
                    f"{verdict.num_slots} slots started within {verdict.waited_s:.0f}s "
                    "(slot_start_timeout_s); Spark did not run every task of the barrier "
                    "stage (are its executors busy with another job, or still being "
                    "launched?)",
                    reason=FailureReason.TASK_LOST,
                )
            if isinstance(verdict, SlotSilent):
                error = silent_slot_error(plan.job_name, server, verdict.slot, verdict.silent_s)
                log.error("%s", error)
                raise _SlotLost(error)

    def _spark_failure(
        self, plan: ExecutionPlan, server: ControlServer, error: BaseException
    ) -> JobFailedError:
        # A subtask's own report carries the operator and traceback: prefer it when it came.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                event = server.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if event.type == FAILED:
                return _reported_failure(plan, event.payload)
        # none came: a slot's worker died (killed, crashed) or its executor was lost
        return aborted_job_error(plan, error, dict(server.registrations), _alive)

    def _await_workers_gone(
        self, master: str, server: ControlServer, timeout_s: float = 10
    ) -> None:
        if not is_loopback(master):
            return
        pids = [r["pid"] for r in server.registrations.values()]
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if pids:
                time.sleep(0.05)  # bounded wait for Spark to kill the workers
        if pids:
            log.warning("slot python workers still alive after cancel: %s", pids)


def _counters_at_stop(server: ControlServer, timeout_s: float = 1.0) -> list[Any]:
    """The record counters of a cancelled attempt's subtasks: each slot sends its own in
    the report it makes when it stops (waits at most ``timeout_s`` for the reports not
    received yet; a slot killed before it reported counts nothing)."""
    counters: list[Any] = []
    waiting = set(server.registrations)
    deadline = time.monotonic() + timeout_s
    while waiting:
        try:
            event = server.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if (
            event.type == FAILED
            and event.slot in waiting
            and isinstance(event.payload, dict)
            and "counters" in event.payload
        ):
            waiting.discard(event.slot)
            counters.extend(event.payload["counters"])
    return counters


def stall_after(heartbeat_timeout_s: float) -> float:
    """When a slot's watchdog reports its thread stacks: half-way to the driver's
    heartbeat timeout, so they are there when it fires."""
    return heartbeat_timeout_s / 2


def silent_slot_error(
    job_name: str, server: ControlServer, slot: int, silent_s: float, *, now: float | None = None
) -> JobFailedError:
    """The ``JobFailedError`` (TASK_LOST) of a slot silent for ``silent_s``, with what is
    known of its threads: its watchdog's latest STACKS report; else, on this host, the
    faulthandler dump of a frozen interpreter; else why there is none (its Python worker
    is gone, or the dump is on another host). When the driver's own control thread has
    not run for a while (it receives the heartbeats), its stack is added too."""
    now = time.monotonic() if now is None else now
    reg = server.registrations.get(slot) or {}
    pid, host = reg.get("pid"), reg.get("host")
    where = f"pid {pid} on {host}" if pid is not None else "never registered"
    lines = [
        f"job '{job_name}' failed: slot {slot} sent no heartbeat for {silent_s:.1f}s "
        f"(executor lost or hung; its Python worker: {where})"
    ]
    stacks: str | None = None
    report = server.stack_reports.get(slot)
    if report is not None and isinstance(report.payload, dict):
        p = report.payload
        lines.append(
            f"slot {slot}'s threads, sent by its watchdog {now - report.received_at:.1f}s ago "
            f"({p.get('kind')}: no heartbeat for {p.get('silent_s')}s then):"
        )
        stacks = str(p.get("stacks"))
    dump = reg.get("stack_dump")
    if stacks is None and dump and host == socket.gethostname():
        from .watchdog import read_freeze_dump

        text = read_freeze_dump(dump)
        if text is not None:
            lines.append(
                f"slot {slot}'s whole interpreter froze; faulthandler's dump of its "
                f"threads ({dump}):"
            )
            stacks = text
    if stacks is None:
        if pid is not None and host == socket.gethostname() and not _alive(pid):
            lines.append(f"no thread dump from slot {slot}: its Python worker (pid {pid}) is gone")
        elif dump and host != socket.gethostname():
            lines.append(
                f"no thread dump reached the driver from slot {slot}; if its "
                f"interpreter froze, faulthandler wrote one to {dump} on {host}"
            )
        else:
            lines.append(f"no thread dump from slot {slot} (its watchdog did not report)")
    server_silent = now - server.last_loop
    if server_silent > 5.0:
        lines.append(
            f"the driver's control thread (which receives heartbeats) has not run "
            f"for {server_silent:.1f}s; its stack:\n{server.thread_stack()}"
        )
    message = "\n".join(lines) + (f"\n{stacks}" if stacks else "")
    return JobFailedError(
        message, reason=FailureReason.TASK_LOST, subtask=slot, remote_traceback=stacks
    )


def _discard_stack_dumps(server: ControlServer) -> None:
    """Delete the faulthandler dump files and recorded exit statuses (.worker_exits) of
    the attempt's slots on this host (any freeze or kill they held is in the attempt's
    error by now). A slot deletes its own when it ends; a
    slot Spark killed (a failed or cancelled attempt) cannot. A slot still running keeps
    writing into its open file, unlinked: nothing is left behind."""
    here = socket.gethostname()
    for reg in list(server.registrations.values()):
        path = reg.get("stack_dump") if isinstance(reg, dict) else None
        if path and reg.get("host") == here:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.debug("could not delete the slot stack dump %s: %s", path, e)
        if isinstance(reg, dict) and reg.get("host") == here and reg.get("pid") is not None:
            discard_exit(reg["pid"])  # how a killed slot ended: in the attempt's error by now


class _CancelRequested(Exception):
    """``JobClient.cancel()`` was called."""


class _SlotLost(Exception):
    """A slot fell silent past the heartbeat timeout; ``error`` is the attempt's
    ``JobFailedError`` (raised once the attempt is torn down)."""

    def __init__(self, error: JobFailedError) -> None:
        super().__init__(str(error))
        self.error = error


class _SparkGateway:
    """Sends the coordinator's triggers and notices to the slots (slot i hosts subtask i
    of every vertex)."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.job_error: BaseException | None = None

    def trigger_source(self, task: tuple[int, int], barrier: Any) -> None:
        self.server.send(task[1], TRIGGER, (task, barrier))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.server.send(None, CHECKPOINT_COMPLETE, checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int, reason: Any) -> None:
        self.server.send(None, CHECKPOINT_ABORTED, checkpoint_id)

    def fail_job(self, error: BaseException) -> None:
        if self.job_error is None:
            self.job_error = error


def _checkpoint_dispatch(run: Any) -> Any:
    """Hands checkpoint messages from slots straight to the coordinator."""

    def dispatch(event: ControlEvent) -> bool:
        if event.type == ACK and isinstance(event.payload, TaskAcknowledgement):
            run.acknowledge(event.payload)
            return True
        if event.type == DECLINE:
            task, checkpoint_id, reason = event.payload
            run.decline(tuple(task), checkpoint_id, reason)
            return True
        if event.type == TASK_FINISHED:
            task, results = event.payload
            run.task_finished(tuple(task), results)
            return True
        if event.type == TASK_END_OF_DATA:
            task, last_snapshot_id = event.payload
            run.end_of_data(tuple(task), last_snapshot_id)
            return True
        if event.type == TASK_RUNNING:
            run.task_running(tuple(event.payload))
            return True
        return False

    return dispatch


def _check_storage_reachable(plan: ExecutionPlan, master: str) -> None:
    """Slots write checkpoint files themselves: off a loopback cluster the storage must be
    one every executor reaches."""
    url = plan.checkpoint.storage if plan.checkpoint else None
    if url is not None and url.startswith("memory://"):
        raise ConfigurationError(
            f"checkpoint storage {url!r} lives in one process, but Spark slots are processes "
            "of their own: set checkpoint_config.storage to a directory or filesystem URL"
        )
    if is_loopback(master) or url is None:
        return
    if "://" not in url:
        raise ConfigurationError(
            f"checkpoint storage {url!r} is a local path, but the Spark master {master!r} "
            "runs executors on other machines: set checkpoint_config.storage to a "
            "filesystem every executor reaches (s3://..., hdfs://..., or file:///path on "
            "a mount shared by every machine)"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class RemoteError(Exception):
    """An error from another process that could not be shipped as itself."""

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.traceback_text = traceback_text


#: how long, after a failure, the driver gives the slots that did not fail to close their
#: operators before it lets the failed slot's Spark task fail (which makes Spark kill the
#: rest of the barrier stage, closed or not)
CLOSE_GRACE_S = 5.0


def _cancel_slots(server: ControlServer, grace_s: float) -> None:
    """Cancel every slot of a failed or cancelled attempt so that each closes its operators.

    A slot whose subtask failed waits for its CANCEL before its Spark task fails: the
    others get theirs first, and the failed ones only once the others ended (or after
    ``grace_s``), so Spark does not kill a slot that is still closing its operators."""
    failed = set(server.failed) - set(server.ended)
    others = [s for s in list(server.registrations) if s not in failed]
    if not failed or grace_s <= 0:
        server.send(None, CANCEL)
        return
    for s in others:
        server.send(s, CANCEL)
    deadline = time.monotonic() + grace_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        waiting = set(server.registrations) - set(server.ended) - set(server.failed)
        if not waiting:  # every slot closed, or failed and waits for its CANCEL
            break
        pause.wait(0.02)
    server.send(None, CANCEL)


def _reported_failure(plan: ExecutionPlan, info: dict[str, Any]) -> JobFailedError:
    """The same ``JobFailedError`` the local executor raises, from a slot's report."""
    error: BaseException | None = None
    if info.get("exception") is not None:
        try:
            error = cloudpickle.loads(info["exception"])
        except Exception:  # noqa: BLE001 - e.g. the error's class is not importable here
            error = None
    if error is None:
        error = RemoteError(info["error_type"], info["message"], info["traceback"])
        if info.get("operator") and info.get("parallelism"):
            error = UserFunctionError(
                info["operator"], info["operator_subtask"], info["parallelism"], error
            )
    failure = failure_error(
        plan.job_name, info["task"], info["subtask"], error, tb=info["traceback"]
    )
    failure.__cause__ = user_cause(error)
    return failure


def _warm_worker(iterator: Any) -> Any:
    """Import what a slot needs, in a Spark Python worker (see ``warm_up``): the same
    imports the worker daemon makes before it forks."""
    import lockgate.executor.spark.daemon  # noqa: F401

    yield os.getpid()


def _job_description(plan: ExecutionPlan, generation: int, handle: JobHandle) -> str:
    """What the Spark UI shows for an attempt: the lockgate job and its dashboard."""
    text = f"lockgate job '{plan.job_name}' (attempt {generation})"
    if handle.rest_url:
        text += f", dashboard {handle.rest_url}"
    return text


def _slot_function(job: SlotJob) -> Any:
    def run_partition(iterator: Any) -> Any:
        from pyspark import BarrierTaskContext

        from lockgate.executor.spark.slot import run_slot

        slot = BarrierTaskContext.get().partitionId()
        yield run_slot(slot, job)

    return run_partition


def _package_zip(root: str, archive: str) -> str:
    """``root/lockgate`` zipped to ``archive``, without its ``__pycache__`` folders:
    what is written there while jobs run (bytecode, numba's compiled kernels) would
    change the archive, and Spark refuses a second ``addPyFile`` of a changed one."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for folder, dirs, files in os.walk(os.path.join(root, "lockgate")):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                out.write(path, os.path.relpath(path, root))
    return archive
