"""SparkExecutor: runs a plan as one barrier-mode Spark job, one task per slot.

The driver (this process) starts a control server, submits the job in its
own job group from a background thread, and watches: slot registrations
(answered with every slot's data-plane addresses), heartbeats, failure
reports and the job's own outcome. Any failure (a subtask's exception, a
killed Python worker, a lost executor, a slot silent for longer than the
heartbeat timeout) cancels the job group and raises ``JobFailedError``; the
executor returns only when Spark reports the job ended and, on a loopback
cluster, when the slots' Python workers are gone.

The pieces of an attempt live in their own modules: the watch loop and the end of a
failed or cancelled attempt in :mod:`.watch`, the errors that say why it failed (a
subtask's report, a lost worker, a silent slot with its thread stacks) in
:mod:`.diagnostics`, the coordinator's link to the slots in :mod:`.gateway`, and what
is shipped to the workers (the lockgate package, the partition functions) in
:mod:`.packaging`. ``execute``, the restart loop around the attempts, is the one of
:class:`~lockgate.executor.base.BaseExecutor`.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from typing import Any

import cloudpickle

from ...core.clock import SystemClock
from ...errors import ConfigurationError
from ...graph.execution_plan import ExecutionPlan
from ...job.handle import JobHandle
from ...job.result import JobExecutionResult
from ..base import (
    BaseExecutor,
    cancelled_result,
    finished_result,
)
from ..base import (
    checkpoint_run as _checkpoint_run,
)
from .auth import MessageAuth, new_secret
from .control import ControlServer
from .diagnostics import discard_stack_dumps, stall_after
from .gateway import SparkGateway, checkpoint_dispatch
from .liveness import start_timeout
from .packaging import ship_lockgate, slot_function, warm_worker
from .session import (
    check_session,
    create_session,
    is_loopback,
    quiet_expected_spark_logs,
    task_slots,
    wait_for_slots,
)
from .slot import SlotJob
from .watch import (
    CLOSE_GRACE_S,
    CancelRequested,
    SlotLost,
    await_workers_gone,
    cancel_slots,
    counters_at_stop,
    watch_attempt,
)


class SparkExecutor(BaseExecutor):
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
        pids = sc.parallelize(range(n), n).barrier().mapPartitions(warm_worker).collect()
        return sorted(pids)

    def slot_capacity(self) -> int:
        """How many slots (tasks at once) the Spark application offers now: the highest
        parallelism a job (and the autoscaler) can use."""
        return task_slots(self.spark.sparkContext)

    def _ship(self, sc: Any) -> None:
        """Ship the lockgate package to ``sc``'s executors (:func:`.packaging.ship_lockgate`),
        at most once per SparkExecutor, and not at all when ``ship_package`` is off."""
        if self._shipped or not self.ship_package:
            return
        ship_lockgate(sc)
        self._shipped = True

    def run_attempt(
        self, plan: ExecutionPlan, attempt_number: int, handle: JobHandle
    ) -> JobExecutionResult:
        """One attempt: one barrier-mode Spark job (a new generation), until every slot
        finishes or one fails. A failed or cancelled attempt returns (CANCELED) or raises
        ``JobFailedError`` only after its slots were cancelled and its job group cancelled
        (and, on a loopback cluster, its slots' Python workers waited for, bounded)."""
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
        gateway = SparkGateway(server)
        run = _checkpoint_run(plan, gateway, SystemClock(), handle.finished_results)
        if run is not None:
            server.dispatch = checkpoint_dispatch(run)
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
                results = rdd.mapPartitions(slot_function(job)).collect()
                outcome.put(("ok", results))
            except BaseException as e:  # noqa: BLE001 - reported to the watcher
                outcome.put(("error", e))

        thread = threading.Thread(target=submit, name="lockgate spark job", daemon=True)
        thread.start()
        cancelled = False
        try:
            results = watch_attempt(
                plan,
                server,
                outcome,
                handle,
                run,
                gateway,
                running=self.running,
                start_timeout_s=self.slot_start_timeout_s,
                heartbeat_timeout_s=self.heartbeat_timeout_s,
            )
        except BaseException as e:
            cancelled = isinstance(e, CancelRequested)
            lost = isinstance(e, SlotLost)
            cancel_slots(server, grace_s=0 if lost else CLOSE_GRACE_S)
            # slots close their operators and end by themselves, usually; a lost slot's
            # task never ends (its host may be cut off), so the job cannot end by itself
            thread.join(0 if lost else 3)
            sc.cancelJobGroup(group)
            thread.join(30)
            await_workers_gone(master, server)
            if cancelled:
                return cancelled_result(
                    plan, (time.monotonic() - started) * 1000, counters_at_stop(server)
                )
            if isinstance(e, SlotLost):
                raise e.error from None
            raise
        finally:
            if run is not None:
                # a stop with a savepoint ends FINISHED: its checkpoints are kept
                run.stop(cancelled=cancelled and handle.cancelled)
            handle.detach()
            server.close()
            discard_stack_dumps(server)
            self.control = None
            self.running.clear()
        counters = [c for r in results for c in r["counters"]]
        sink_results = [x for r in results for x in r["results"]]
        return finished_result(plan, (time.monotonic() - started) * 1000, counters, sink_results)


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


def _job_description(plan: ExecutionPlan, generation: int, handle: JobHandle) -> str:
    """What the Spark UI shows for an attempt: the lockgate job and its dashboard."""
    text = f"lockgate job '{plan.job_name}' (attempt {generation})"
    if handle.rest_url:
        text += f", dashboard {handle.rest_url}"
    return text
