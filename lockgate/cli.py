"""The ``lockgate`` command line.

``lockgate run JOB.py [--executor local|spark] [--master URL] [--restore PATH]
[--allow-non-restored-state] [--log-level LEVEL] [--detach] [JOB ARGS...]``
runs a job file as ``__main__`` (as ``python JOB.py`` would), with
``sys.argv`` set to ``[JOB.py, *JOB ARGS]``. The lockgate options may come
before or right after the job file; everything from the first other argument
on (or after a ``--``) is passed to the job untouched; one of lockgate's own
options among those (``lockgate run job.py out --executor local``) goes to the
job too, with a warning on standard error saying so. ``--log-level LEVEL``
sets the root logger's level (and a handler on standard error) for the job.
``--detach`` (``-d``) runs the job in the background (see
:mod:`lockgate.cli_detach`): it prints the job's id, dashboard URL and log file
once the job registered. The options are handed
to the job's ``StreamEnvironment`` through environment variables
(``LOCKGATE_EXECUTOR``, ``LOCKGATE_SPARK_MASTER``, ``LOCKGATE_RESTORE_FROM``,
``LOCKGATE_ALLOW_NON_RESTORED_STATE``): ``--restore PATH`` makes the job's
``env.execute`` start from the checkpoint or savepoint at PATH (M-R3).
Without ``--executor`` a job runs where it chooses, by default on Spark
(``local[*]`` unless ``--master`` is given). Spark needs Java 17 or newer: with
``--executor spark`` (or ``--master``) the command checks for it before running the
job and, when it is missing or too old, says so and suggests ``--executor local``
(exit code 2); without it, the Spark session makes the same check when it starts.

Running jobs of this machine register in ``$LOCKGATE_HOME/jobs`` (default
``~/.lockgate``; see :mod:`lockgate.executor.job_registry`) and are
controlled from another shell, by job id or (unique) job name:

* ``lockgate list``: the running jobs (id, name, pid, start time).
* ``lockgate status JOB``: the job's status and progress.
* ``lockgate savepoint JOB PATH [--timeout S]``: take a savepoint of the
  running job into the folder PATH (M-S1) and print its folder.
* ``lockgate stop JOB [--savepoint PATH [--drain]] [--timeout S]``: with
  ``--savepoint``, take a savepoint, then stop the job (``--drain`` first
  sends the maximum watermark through) and print the savepoint's folder;
  without it, cancel the job.
* ``lockgate cancel JOB``: cancel the job (no savepoint).
* ``lockgate top JOB [--interval S] [--once]``: a live view of the job's
  progress and tasks (:mod:`lockgate.cli_top`).
* ``lockgate token JOB``: print the job's REST token (the only command that
  prints it), for the dashboard's login or ``--token`` elsewhere.

With ``--url http://HOST:PORT`` (or ``$LOCKGATE_URL``) and ``--token TOKEN`` (or
``$LOCKGATE_TOKEN``), ``list``, ``status``, ``savepoint``, ``stop``, ``cancel`` and
``top`` reach the job through its REST API instead, from any machine
(:mod:`lockgate.cli_remote`, :mod:`lockgate.cli_control`); a savepoint PATH
is then the job machine's (absolute) path or a URL.

Offline, on checkpoint storage (no running job needed):

* ``lockgate checkpoint export CHK DEST``: copy the completed checkpoint CHK (a
  ``chk-<id>`` folder, a checkpoint storage: its newest completed checkpoint, or a
  savepoint or exported folder) into the new folder DEST with every state and shared
  file it references, verified, so that DEST restores on its own
  (``restore_from=DEST``, ``lockgate run --restore DEST``) even after the job's storage
  is gone (see :mod:`lockgate.checkpoint.export`); print DEST and what was copied.

A local PATH is made absolute here, so it means the same folder to the job.
``--timeout S`` fails the command when the job takes longer than S seconds;
without it the command waits as long as the job runs.

Exit codes: 0 when the job file finishes (or the status it passes to
``sys.exit``) or a command succeeds; 1 when the job fails (``JobFailedError``:
its message goes to standard error), the job file raises, or a command fails
(the job's error, a job that ended or did not answer in time, a checkpoint that is
damaged or cannot be exported: the message goes to standard error); 2 for a usage
error (a missing job file, an executor that is not available or lacks Java, no running job or
several with the given name, a missing CHK folder, a DEST that is not empty, a
wrong or missing token, an unknown job at --url).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from . import __version__
from .checkpoint.storage import CorruptCheckpointError
from .cli_control import (
    Remote,
    UsageError,
    cancel_command,
    list_command,
    rest_of,
    savepoint_command,
    status_command,
    stop_command,
    token_command,
)
from .cli_detach import START_TIMEOUT_S, DetachError, start_detached
from .cli_remote import TOKEN_ENV, URL_ENV, RemoteError
from .errors import ConfigurationError, JobFailedError, LockgateError
from .executor import job_registry
from .executor.job_registry import JobControlError, JobNotFoundError

EXECUTOR_ENV = "LOCKGATE_EXECUTOR"
MASTER_ENV = "LOCKGATE_SPARK_MASTER"
RESTORE_ENV = "LOCKGATE_RESTORE_FROM"
ALLOW_NON_RESTORED_ENV = "LOCKGATE_ALLOW_NON_RESTORED_STATE"
EXECUTORS = ("local", "spark")
SPARK_EXECUTOR_MODULE = "lockgate.executor.spark"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: lockgate's options of ``run`` that take a value / that take none; right after the job
#: file they are lockgate's, after a job argument they are the job's (with a warning)
_RUN_OPTIONS = ("--executor", "--master", "--restore", "--log-level", "--start-timeout")
_RUN_FLAGS = ("--allow-non-restored-state", "--detach")

log = logging.getLogger(__name__)


def _log_level(text: str) -> str:
    """``--log-level``: a logging level name, any case."""
    name = text.strip().upper()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level; use one of {', '.join(LOG_LEVELS)}"
        )
    return name


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help=f"where the job runs (sets {EXECUTOR_ENV}; default: the executor the job "
        "chooses itself, else Spark, local[*] unless --master is given; 'local' runs "
        "every subtask as a thread of this process and needs no Java)",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        default=None,
        help=f"Spark master URL, e.g. local[2] or spark://host:7077 (sets {MASTER_ENV}; "
        "implies --executor spark)",
    )
    parser.add_argument(
        "--restore",
        metavar="PATH",
        default=None,
        help=f"start from the checkpoint or savepoint at PATH: a chk-<id> folder, a "
        f"checkpoint storage (its newest intact checkpoint), a savepoint folder or a "
        f"folder made by 'lockgate checkpoint export' (sets {RESTORE_ENV})",
    )
    parser.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        default=False,
        help="with --restore: drop state of operators the job no longer has instead of "
        f"failing (sets {ALLOW_NON_RESTORED_ENV})",
    )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=_log_level,
        default=None,
        help=f"the job's root logging level, one of {', '.join(LOG_LEVELS)}, logged to "
        "standard error (default: Python's, warnings only; INFO with --detach); INFO "
        "shows the periodic progress line",
    )
    parser.add_argument(
        "-d",
        "--detach",
        action="store_true",
        default=False,
        help="run the job in the background: print its id, dashboard URL and log file "
        "(under $LOCKGATE_HOME/logs) once it registered, and return",
    )
    parser.add_argument(
        "--start-timeout",
        metavar="S",
        type=_seconds,
        default=None,
        help=f"with --detach: wait at most S seconds for the job to register "
        f"(default {START_TIMEOUT_S:g})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lockgate`` command."""
    parser = argparse.ArgumentParser(
        prog="lockgate",
        description="Flink-grade, exactly-once stream processing for Python, on Apache Spark.",
    )
    parser.add_argument("--version", action="version", version=f"lockgate {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a job file",
        description="Run a job file as __main__, with sys.argv = [JOB, *JOB_ARGS]. The lockgate "
        "options go before or right after JOB; the remaining arguments (or those "
        "after '--') are the job's (a lockgate option among them goes to the job, with a "
        "warning).",
    )
    _add_run_options(run)
    run.add_argument("job", metavar="JOB", help="path of the job file (a Python script)")
    run.add_argument(
        "job_args", metavar="JOB_ARGS", nargs=argparse.REMAINDER, help="arguments passed to the job"
    )
    _add_control_commands(commands)
    return parser


def _seconds(text: str) -> float:
    """``--timeout``: seconds > 0."""
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}") from e
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def _add_remote_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        metavar="URL",
        default=None,
        help=f"the job's REST address http://HOST:PORT, to reach a job on another machine "
        f"(or set {URL_ENV}; default: this machine's registry)",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        default=None,
        help=f"with --url: the job's REST token (or set {TOKEN_ENV}, which keeps it out of "
        "the process list; 'lockgate token JOB' prints it on the job's machine)",
    )


def _add_control_commands(commands: Any) -> None:
    home = f"${job_registry.HOME_ENV}/{job_registry.JOBS_FOLDER}"
    job_help = "the job's id or (unique) name"
    listing = commands.add_parser(
        "list",
        help="list the running jobs",
        description=f"List the running jobs of this machine (registered in {home}): "
        "id, name, pid and start time; with --url, the jobs of that driver: id, name, "
        "status and start time.",
    )
    _add_remote_options(listing)
    status = commands.add_parser(
        "status",
        help="show a running job's status and progress",
        description="Print the job's status, uptime, restarts and progress (records/s, "
        "watermark, last checkpoint, backpressure), read from its REST API.",
    )
    status.add_argument("job", metavar="JOB", help=job_help)
    _add_remote_options(status)
    timeout_help = (
        "fail when the job takes longer than S seconds (default: wait as long as the job "
        "runs; with --url at most 30 minutes)"
    )
    savepoint = commands.add_parser(
        "savepoint",
        help="take a savepoint of a running job",
        description="Take a savepoint of a running job into the folder PATH and print the "
        "savepoint's folder. The job keeps running.",
    )
    savepoint.add_argument("job", metavar="JOB", help=job_help)
    savepoint.add_argument("path", metavar="PATH", help="the folder of the savepoint")
    savepoint.add_argument("--timeout", metavar="S", type=_seconds, default=None, help=timeout_help)
    _add_remote_options(savepoint)
    stop = commands.add_parser(
        "stop",
        help="stop a running job, with a savepoint or not",
        description="With --savepoint PATH: take a savepoint into PATH, then stop the job, "
        "and print the savepoint's folder. Without: cancel the job.",
    )
    stop.add_argument("job", metavar="JOB", help=job_help)
    stop.add_argument(
        "--savepoint",
        metavar="PATH",
        default=None,
        help="take a savepoint into the folder PATH before stopping",
    )
    stop.add_argument(
        "--drain",
        action="store_true",
        default=False,
        help="with --savepoint: send the maximum watermark through first "
        "(fires every event-time timer and window)",
    )
    stop.add_argument("--timeout", metavar="S", type=_seconds, default=None, help=timeout_help)
    _add_remote_options(stop)
    cancel = commands.add_parser(
        "cancel",
        help="cancel a running job (no savepoint)",
        description="Cancel the job without a savepoint; returns at once, the job ends "
        "shortly after.",
    )
    cancel.add_argument("job", metavar="JOB", help=job_help)
    _add_remote_options(cancel)
    top = commands.add_parser(
        "top",
        help="a live view of a running job",
        description="Show the job's progress and, per task, records in and out per second, "
        "busy and backpressured time, watermark and queue fill, refreshed in place every "
        "--interval seconds (Ctrl-C ends it); read from the job's REST API.",
    )
    top.add_argument("job", metavar="JOB", help=job_help)
    top.add_argument(
        "--interval",
        metavar="S",
        type=_interval,
        default=2.0,
        help="seconds between refreshes (default 2, at least 0.2)",
    )
    top.add_argument("--once", action="store_true", default=False, help="print one frame and exit")
    _add_remote_options(top)
    token = commands.add_parser(
        "token",
        help="print a local job's REST token",
        description="Print the REST token of a job running on this machine (from its "
        f"registration in {home}, readable by you only): to log in to its dashboard or to "
        "pass as --token from another machine. The only command that prints it; treat it "
        "as a password.",
    )
    token.add_argument("job", metavar="JOB", help=job_help)
    checkpoint = commands.add_parser(
        "checkpoint",
        help="work with completed checkpoints on storage",
        description="Offline commands on checkpoint storage (no running job needed).",
    )
    actions = checkpoint.add_subparsers(dest="checkpoint_command", metavar="ACTION", required=True)
    export = actions.add_parser(
        "export",
        help="copy a checkpoint into a self-contained folder",
        description="Copy the completed checkpoint CHK into the new folder DEST with every "
        "state file and every shared file (incremental RocksDB checkpoints) it "
        "references, checking each file's checksum, so that DEST restores on its "
        "own (restore_from=DEST, lockgate run --restore DEST), also after the "
        "job's checkpoint storage is gone.",
    )
    export.add_argument(
        "chk",
        metavar="CHK",
        help="a chk-<id> folder, a checkpoint storage (its newest completed "
        "checkpoint) or a savepoint or exported folder; a path or URL",
    )
    export.add_argument(
        "dest", metavar="DEST", help="a new (or empty) folder: a path or URL (s3://...)"
    )


def _interval(text: str) -> float:
    """``--interval``: seconds >= 0.2."""
    value = _seconds(text)
    if value < 0.2:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0.2, got {text!r}")
    return value


def _split_leading_options(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``args`` (what follows the job file) into the lockgate options at its start
    and the job's arguments: the first other argument, or a ``--``, ends the options."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return list(args[:i]), list(args[i + 1 :])
        if arg in _RUN_FLAGS:
            i += 1
            continue
        name, has_value, _ = arg.partition("=")
        if name not in _RUN_OPTIONS:
            break
        i += 1 if has_value else 2
    return list(args[:i]), list(args[i:])


def misplaced_options(job_args: Sequence[str]) -> list[str]:
    """lockgate's own options among the job's arguments (before any ``--``), which go to
    the job, not to lockgate."""
    found = []
    for arg in job_args:
        if arg == "--":
            break
        name = arg.partition("=")[0]
        if name in _RUN_OPTIONS or name in _RUN_FLAGS:
            found.append(name)
    return found


def _warn_misplaced(job: str, job_args: Sequence[str]) -> None:
    for name in misplaced_options(job_args):
        print(
            f"lockgate: warning: {name} comes after the job's argument "
            f"{job_args[0]!r}, so it went to the job (in sys.argv), not to lockgate; to "
            f"give it to lockgate put it before the job file: lockgate run {name} ... {job} "
            "...",
            file=sys.stderr,
        )


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "run":
        leading, ns.job_args = _split_leading_options(ns.job_args)
        if leading:
            options = argparse.ArgumentParser(prog="lockgate run", add_help=False)
            _add_run_options(options)
            late = options.parse_args(leading)
            for name in ("executor", "master", "restore", "log_level", "start_timeout"):
                setattr(ns, name, getattr(late, name) or getattr(ns, name))
            ns.allow_non_restored_state = (
                late.allow_non_restored_state or ns.allow_non_restored_state
            )
            ns.detach = late.detach or ns.detach
        _warn_misplaced(ns.job, ns.job_args)
    return ns


def _spark_executor_available() -> bool:
    try:
        return importlib.util.find_spec(SPARK_EXECUTOR_MODULE) is not None
    except ImportError:
        return False


def _restore_env(restore: str | None, allow_non_restored_state: bool) -> dict[str, str]:
    """The environment variables for ``--restore``; raises ``UsageError``."""
    env: dict[str, str] = {}
    if allow_non_restored_state and restore is None:
        raise UsageError("--allow-non-restored-state applies to --restore PATH")
    if restore is None:
        return env
    if "://" not in restore and not os.path.isdir(restore):
        raise UsageError(
            f"--restore {restore}: no such folder; give a checkpoint folder (chk-<id>), a "
            "checkpoint storage folder, a savepoint folder or an exported checkpoint"
        )
    env[RESTORE_ENV] = restore
    if allow_non_restored_state:
        env[ALLOW_NON_RESTORED_ENV] = "1"
    return env


def _executor_env(executor: str | None, master: str | None) -> dict[str, str]:
    """The environment variables for ``--executor``/``--master``; raises ``UsageError``."""
    if master is not None and executor is None:
        executor = "spark"
    if master is not None and executor != "spark":
        raise UsageError(f"--master applies to the Spark executor, not to --executor {executor}")
    env: dict[str, str] = {}
    if executor == "spark" and not _spark_executor_available():
        raise UsageError(
            "the Spark executor is not available in this version of lockgate "
            f"({__version__}); run with --executor local"
        )
    if executor == "spark":
        from .executor.spark.session import check_java

        check_java()  # ConfigurationError (exit 2): no Java 17+, suggests --executor local
    if executor is not None:
        env[EXECUTOR_ENV] = executor
    if master is not None:
        env[MASTER_ENV] = master
    return env


@contextmanager
def _job_process_state(path: str, args: list[str], env: dict[str, str]) -> Iterator[None]:
    """Set ``sys.argv``, ``sys.path[0]`` (the job's folder, as ``python JOB`` does) and
    environment variables for the job; restore them afterwards."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_env = {k: os.environ.get(k) for k in env}
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    os.environ.update(env)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _exit_status(exit: SystemExit) -> int:
    """The exit code ``python`` would use for ``sys.exit(code)``."""
    code = exit.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_job_traceback(error: BaseException, path: str) -> None:
    """Print ``error``'s traceback from the job file's frame on (without lockgate's and
    runpy's frames), as ``python JOB`` would."""
    job = os.path.abspath(path)
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != job:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)


def set_log_level(level: str) -> None:
    """The root logger at ``level``, with a handler on standard error if it has none (a
    job that configures logging itself should use ``logging.basicConfig(force=True)``)."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    logging.getLogger().setLevel(level)


def _check_job_file(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"job file not found: {path}")
    if not os.path.isfile(path):
        raise UsageError(f"job file is not a file: {path}")


def run_job(
    path: str,
    args: list[str],
    executor: str | None = None,
    master: str | None = None,
    restore: str | None = None,
    allow_non_restored_state: bool = False,
    log_level: str | None = None,
) -> int:
    """Run the job file ``path`` as ``__main__`` with ``args``; return the exit code."""
    _check_job_file(path)
    env = _executor_env(executor, master)
    env.update(_restore_env(restore, allow_non_restored_state))
    if log_level is not None:
        set_log_level(log_level)
    log.info(
        "lockgate run %s: executor %s",
        path,
        env.get(EXECUTOR_ENV, "chosen by the job (Spark unless it says otherwise)")
        + (f", master {env[MASTER_ENV]}" if MASTER_ENV in env else ""),
    )
    with _job_process_state(path, args, env):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            return _exit_status(e)
        except JobFailedError as e:
            print(f"lockgate: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("lockgate: interrupted", file=sys.stderr)
            return 130
        except Exception as e:  # noqa: BLE001 - reported like python reports a crashed script
            _print_job_traceback(e, path)
            return 1
    return 0


def _run_detached(ns: argparse.Namespace) -> int:
    """``lockgate run --detach``: check what can be checked here, then start the job in
    the background (:mod:`lockgate.cli_detach`)."""
    _check_job_file(ns.job)
    _executor_env(ns.executor, ns.master)  # fails here, not in the background
    _restore_env(ns.restore, ns.allow_non_restored_state)
    run_args: list[str] = []
    for flag, value in (
        ("--executor", ns.executor),
        ("--master", ns.master),
        (
            "--restore",
            None
            if ns.restore is None
            else os.path.abspath(ns.restore)
            if "://" not in ns.restore
            else ns.restore,
        ),
        ("--log-level", ns.log_level or "INFO"),
    ):
        if value is not None:
            run_args += [flag, value]
    if ns.allow_non_restored_state:
        run_args.append("--allow-non-restored-state")
    run_args += [ns.job, "--", *ns.job_args]
    return start_detached(run_args, ns.job, ns.start_timeout or START_TIMEOUT_S)


def checkpoint_export_command(chk: str, dest: str) -> int:
    """``lockgate checkpoint export CHK DEST``: print what was exported; return the exit
    code. Raises ``ConfigurationError`` (usage) or ``ExportError`` /
    ``CorruptCheckpointError`` (the checkpoint cannot be exported)."""
    from .checkpoint.export import export_checkpoint

    done = export_checkpoint(chk, dest)
    print(
        f"exported checkpoint {done.checkpoint_id} from {done.source} to {done.location} "
        f"({done.state_files} state files, {done.shared_files} shared files, "
        f"{done.bytes_written} bytes); restore it with restore_from={done.location!r} or "
        f"lockgate run --restore {done.location}"
    )
    return 0


def top_command(job: str, interval: float, once: bool, remote: Remote) -> int:
    """``lockgate top JOB``: the live view; return the exit code."""
    from .cli_top import run_top

    if remote.wanted:
        client = remote.client()
        return run_top(client, str(client.find_job(job).get("id")), interval=interval, once=once)
    info = job_registry.find_job(job)
    local = rest_of(info)
    if local is None:
        raise UsageError(
            f"job {info.job_id} ({info.job_name!r}) serves no REST API "
            "(ExecutionConfig.rest_enabled), so 'lockgate top' cannot read it; its progress "
            "lines are in its log"
        )
    return run_top(local, str(local.find_job(info.job_id).get("id")), interval=interval, once=once)


def _dispatch(ns: argparse.Namespace) -> int:
    if ns.command == "checkpoint":
        return checkpoint_export_command(ns.chk, ns.dest)
    if ns.command == "run":
        if ns.start_timeout is not None and not ns.detach:
            raise UsageError("--start-timeout applies to --detach")
        if ns.detach:
            return _run_detached(ns)
        return run_job(
            ns.job,
            ns.job_args,
            ns.executor,
            ns.master,
            ns.restore,
            ns.allow_non_restored_state,
            ns.log_level,
        )
    if ns.command == "token":
        return token_command(ns.job, Remote())
    remote = Remote(ns.url, ns.token)
    if ns.token is not None and not remote.wanted:
        raise UsageError(
            f"--token applies to --url (a job on another machine); give --url or set {URL_ENV}"
        )
    if ns.command == "list":
        return list_command(remote)
    if ns.command == "status":
        return status_command(ns.job, remote)
    if ns.command == "savepoint":
        return savepoint_command(ns.job, ns.path, ns.timeout, remote)
    if ns.command == "stop":
        return stop_command(ns.job, ns.savepoint, ns.drain, ns.timeout, remote)
    if ns.command == "cancel":
        return cancel_command(ns.job, remote)
    if ns.command == "top":
        return top_command(ns.job, ns.interval, ns.once, remote)
    raise UsageError(f"unknown command {ns.command!r}")  # pragma: no cover - argparse checks


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockgate`` command; returns the process exit code."""
    try:
        ns = _parse(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as e:  # argparse: --help, --version, usage errors
        return _exit_status(e)
    if ns.command is None:
        build_parser().print_help(sys.stderr)
        return 2
    try:
        return _dispatch(ns)
    except (UsageError, JobNotFoundError, ConfigurationError) as e:
        print(f"lockgate: error: {e}", file=sys.stderr)
        return 2
    except RemoteError as e:
        print(f"lockgate: error: {e}", file=sys.stderr)
        return 2 if e.usage else 1
    except (JobControlError, DetachError) as e:
        print(f"lockgate: {e}", file=sys.stderr)
        return 1
    except CorruptCheckpointError as e:
        print(f"lockgate: error: the checkpoint is damaged: {e}", file=sys.stderr)
        return 1
    except LockgateError as e:  # ExportError and the like: the command could not do it
        print(f"lockgate: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
