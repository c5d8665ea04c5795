"""The ``lockgate`` command line.

``lockgate run JOB.py [--executor local|spark] [--master URL] [--restore PATH]
[--allow-non-restored-state] [JOB ARGS...]``
runs a job file as ``__main__`` (as ``python JOB.py`` would), with
``sys.argv`` set to ``[JOB.py, *JOB ARGS]``. The lockgate options may come
before or right after the job file; everything from the first other argument
on (or after a ``--``) is passed to the job untouched. The options are handed
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
* ``lockgate savepoint JOB PATH [--timeout S]``: take a savepoint of the
  running job into the folder PATH (M-S1) and print its folder.
* ``lockgate stop JOB [--savepoint PATH [--drain]] [--timeout S]``: with
  ``--savepoint``, take a savepoint, then stop the job (``--drain`` first
  sends the maximum watermark through) and print the savepoint's folder;
  without it, cancel the job.

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
several with the given name, a missing CHK folder, a DEST that is not empty).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import runpy
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from . import __version__
from .checkpoint.storage import CorruptCheckpointError
from .errors import ConfigurationError, JobFailedError, LockgateError
from .executor import job_registry
from .executor.job_registry import JobControlError, JobNotFoundError

EXECUTOR_ENV = "LOCKGATE_EXECUTOR"
MASTER_ENV = "LOCKGATE_SPARK_MASTER"
RESTORE_ENV = "LOCKGATE_RESTORE_FROM"
ALLOW_NON_RESTORED_ENV = "LOCKGATE_ALLOW_NON_RESTORED_STATE"
EXECUTORS = ("local", "spark")
SPARK_EXECUTOR_MODULE = "lockgate.executor.spark"

_RUN_OPTIONS = ("--executor", "--master", "--restore")
_RUN_FLAGS = ("--allow-non-restored-state",)


class _UsageError(Exception):
    """A problem with the command line; the message is printed, the exit code is 2."""


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
        "after '--') are the job's.",
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


def _add_control_commands(commands: Any) -> None:
    home = f"${job_registry.HOME_ENV}/{job_registry.JOBS_FOLDER}"
    commands.add_parser(
        "list",
        help="list the running jobs",
        description=f"List the running jobs of this machine (registered in {home}): "
        "id, name, pid and start time.",
    )
    timeout_help = (
        "fail when the job takes longer than S seconds (default: wait as long as the job runs)"
    )
    savepoint = commands.add_parser(
        "savepoint",
        help="take a savepoint of a running job",
        description="Take a savepoint of a running job into the folder PATH and print the "
        "savepoint's folder. The job keeps running.",
    )
    savepoint.add_argument("job", metavar="JOB", help="the job's id or (unique) name")
    savepoint.add_argument("path", metavar="PATH", help="the folder of the savepoint")
    savepoint.add_argument("--timeout", metavar="S", type=_seconds, default=None, help=timeout_help)
    stop = commands.add_parser(
        "stop",
        help="stop a running job, with a savepoint or not",
        description="With --savepoint PATH: take a savepoint into PATH, then stop the job, "
        "and print the savepoint's folder. Without: cancel the job.",
    )
    stop.add_argument("job", metavar="JOB", help="the job's id or (unique) name")
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


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "run":
        leading, ns.job_args = _split_leading_options(ns.job_args)
        if leading:
            options = argparse.ArgumentParser(prog="lockgate run", add_help=False)
            _add_run_options(options)
            late = options.parse_args(leading)
            ns.executor = late.executor or ns.executor
            ns.master = late.master or ns.master
            ns.restore = late.restore or ns.restore
            ns.allow_non_restored_state = (
                late.allow_non_restored_state or ns.allow_non_restored_state
            )
    return ns


def _spark_executor_available() -> bool:
    try:
        return importlib.util.find_spec(SPARK_EXECUTOR_MODULE) is not None
    except ImportError:
        return False


def _restore_env(restore: str | None, allow_non_restored_state: bool) -> dict[str, str]:
    """The environment variables for ``--restore``; raises ``_UsageError``."""
    env: dict[str, str] = {}
    if allow_non_restored_state and restore is None:
        raise _UsageError("--allow-non-restored-state applies to --restore PATH")
    if restore is None:
        return env
    if "://" not in restore and not os.path.isdir(restore):
        raise _UsageError(
            f"--restore {restore}: no such folder; give a checkpoint folder (chk-<id>), a "
            "checkpoint storage folder, a savepoint folder or an exported checkpoint"
        )
    env[RESTORE_ENV] = restore
    if allow_non_restored_state:
        env[ALLOW_NON_RESTORED_ENV] = "1"
    return env


def _executor_env(executor: str | None, master: str | None) -> dict[str, str]:
    """The environment variables for ``--executor``/``--master``; raises ``_UsageError``."""
    if master is not None and executor is None:
        executor = "spark"
    if master is not None and executor != "spark":
        raise _UsageError(f"--master applies to the Spark executor, not to --executor {executor}")
    env: dict[str, str] = {}
    if executor == "spark" and not _spark_executor_available():
        raise _UsageError(
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


def run_job(
    path: str,
    args: list[str],
    executor: str | None = None,
    master: str | None = None,
    restore: str | None = None,
    allow_non_restored_state: bool = False,
) -> int:
    """Run the job file ``path`` as ``__main__`` with ``args``; return the exit code."""
    if not os.path.exists(path):
        raise _UsageError(f"job file not found: {path}")
    if not os.path.isfile(path):
        raise _UsageError(f"job file is not a file: {path}")
    env = _executor_env(executor, master)
    env.update(_restore_env(restore, allow_non_restored_state))
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


def _savepoint_target(path: str) -> str:
    """A savepoint PATH as the job should see it: local paths absolute (the job's working
    folder may differ from ours), URLs (``s3://...``) unchanged."""
    if not path:
        raise _UsageError("the savepoint PATH is empty; give a folder")
    return path if "://" in path else os.path.abspath(os.path.expanduser(path))


def list_command() -> int:
    """``lockgate list``: print the running jobs; return the exit code."""
    jobs = job_registry.list_jobs()
    if not jobs:
        print(
            f"no lockgate job is running (registry: {job_registry.jobs_folder()})", file=sys.stderr
        )
        return 0
    rows = [("ID", "NAME", "PID", "STARTED")] + [
        (
            j.job_id,
            j.job_name,
            str(j.pid),
            datetime.fromtimestamp(j.started_at).strftime("%Y-%m-%d %H:%M:%S"),
        )
        for j in jobs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[3]]))
    return 0


def savepoint_command(job: str, path: str, timeout: float | None = None) -> int:
    """``lockgate savepoint JOB PATH``: print the savepoint's folder; return the exit code."""
    target = _savepoint_target(path)
    info = job_registry.find_job(job)
    print(job_registry.send_command(info, job_registry.SAVEPOINT, path=target, timeout=timeout))
    return 0


def stop_command(
    job: str, savepoint: str | None = None, drain: bool = False, timeout: float | None = None
) -> int:
    """``lockgate stop JOB``: stop with a savepoint (print its folder) or cancel; return
    the exit code."""
    if drain and savepoint is None:
        raise _UsageError("--drain applies to --savepoint PATH")
    target = None if savepoint is None else _savepoint_target(savepoint)
    info = job_registry.find_job(job)
    if target is None:
        job_registry.send_command(info, job_registry.CANCEL, timeout=timeout)
        print(f"cancelling job {info.job_id} ({info.job_name})")
        return 0
    print(
        job_registry.send_command(
            info, job_registry.STOP, path=target, drain=drain, timeout=timeout
        )
    )
    return 0


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


def _dispatch(ns: argparse.Namespace) -> int:
    if ns.command == "checkpoint":
        return checkpoint_export_command(ns.chk, ns.dest)
    if ns.command == "list":
        return list_command()
    if ns.command == "savepoint":
        return savepoint_command(ns.job, ns.path, ns.timeout)
    if ns.command == "stop":
        return stop_command(ns.job, ns.savepoint, ns.drain, ns.timeout)
    return run_job(
        ns.job, ns.job_args, ns.executor, ns.master, ns.restore, ns.allow_non_restored_state
    )


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
    except (_UsageError, JobNotFoundError, ConfigurationError) as e:
        print(f"lockgate: error: {e}", file=sys.stderr)
        return 2
    except JobControlError as e:
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
