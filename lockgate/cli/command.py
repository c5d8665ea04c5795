"""The ``lockgate`` command line.

``lockgate run JOB.py [--executor local|spark] [--master URL] [--restore PATH | --fresh]
[--allow-non-restored-state] [--log-level LEVEL] [--detach] [JOB ARGS...]``
runs a job file as ``__main__`` (as ``python JOB.py`` would), with
``sys.argv`` set to ``[JOB.py, *JOB ARGS]``. The lockgate options may come
before or right after the job file; everything from the first other argument
on (or after a ``--``) is passed to the job untouched; one of lockgate's own
options among those (``lockgate run job.py out --executor local``) goes to the
job too, with a warning on standard error saying so. ``--log-level LEVEL``
sets the root logger's level (and a handler on standard error) for the job.
``--detach`` (``-d``) runs the job in the background (see
:mod:`lockgate.cli.detach`): it prints the job's id, dashboard URL and log file
once the job registered. The options are handed
to the job's ``StreamEnvironment`` through environment variables
(``LOCKGATE_EXECUTOR``, ``LOCKGATE_SPARK_MASTER``, ``LOCKGATE_RESTORE_FROM``,
``LOCKGATE_ALLOW_NON_RESTORED_STATE``, ``LOCKGATE_FRESH``): ``--restore PATH`` makes the
job's ``env.execute`` start from the checkpoint or savepoint at PATH (M-R3). Without it
a job whose checkpoint storage holds completed checkpoints of it resumes from the newest
(as a restarted driver does, M-C8); ``--fresh`` starts it from empty state instead.
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
* ``lockgate stop JOB [--savepoint PATH] [--drain] [--timeout S]``: take a
  savepoint, then stop the job (``--drain`` first sends the maximum watermark
  through) and print the savepoint's folder; without ``--savepoint`` the savepoint
  goes into the job's default savepoint folder (``checkpoint_config.savepoint_dir``
  or ``LOCKGATE_SAVEPOINT_DIR`` where the job runs), and a job without one refuses
  and keeps running.
* ``lockgate cancel JOB``: cancel the job (no savepoint).
* ``lockgate top JOB [--interval S] [--once]``: a live view of the job's
  progress and tasks (:mod:`lockgate.cli.top`).
* ``lockgate token JOB``: print the job's REST token (the only command that
  prints it), for the dashboard's login or ``--token`` elsewhere.

With ``--url http://HOST:PORT`` (or ``$LOCKGATE_URL``) and ``--token TOKEN`` (or
``$LOCKGATE_TOKEN``), ``list``, ``status``, ``savepoint``, ``stop``, ``cancel`` and
``top`` reach the job through its REST API instead, from any machine
(:mod:`lockgate.cli.remote`, :mod:`lockgate.cli.control`); a savepoint PATH
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

The parts: :mod:`lockgate.cli.parser` (the arguments), :mod:`lockgate.cli.control`
(the job-control commands), :mod:`lockgate.cli.remote` (the REST client),
:mod:`lockgate.cli.detach` (``run --detach``) and :mod:`lockgate.cli.top` (``top``);
this module runs job files and maps errors to exit codes. See ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import runpy
import sys
import traceback
from collections.abc import Sequence

from .. import __version__
from ..checkpoint.storage import CorruptCheckpointError
from ..core import rest_settings
from ..errors import ConfigurationError, JobFailedError, LockgateError
from ..executor import job_registry
from ..executor.job_registry import JobControlError, JobNotFoundError
from .control import (
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
from .detach import START_TIMEOUT_S, DetachError, start_detached
from .job_file import job_process_state
from .parser import (
    ALLOW_NON_RESTORED_ENV,
    EXECUTOR_ENV,
    EXECUTORS,
    FRESH_ENV,
    LOG_FORMAT,
    LOG_LEVELS,
    MASTER_ENV,
    RESTORE_ENV,
    SPARK_EXECUTOR_MODULE,
    build_parser,
    parse,
)
from .remote import URL_ENV, RemoteError
from .savepoint_check import is_check_command, savepoint_check_command
from .submit import SubmitError

__all__ = [
    "ALLOW_NON_RESTORED_ENV",
    "EXECUTORS",
    "EXECUTOR_ENV",
    "FRESH_ENV",
    "LOG_LEVELS",
    "MASTER_ENV",
    "RESTORE_ENV",
    "build_parser",
    "main",
    "run_job",
]

log = logging.getLogger(__name__)


def _spark_executor_available() -> bool:
    try:
        return importlib.util.find_spec(SPARK_EXECUTOR_MODULE) is not None
    except ImportError:
        return False


def _restore_env(
    restore: str | None, allow_non_restored_state: bool, fresh: bool = False
) -> dict[str, str]:
    """The environment variables for ``--restore``, ``--allow-non-restored-state`` and
    ``--fresh``; raises ``UsageError``."""
    env: dict[str, str] = {}
    if fresh and restore is not None:
        raise UsageError(
            "--fresh starts from empty state, --restore from a checkpoint: give one of them"
        )
    if fresh and allow_non_restored_state:
        raise UsageError("--allow-non-restored-state applies to restoring, not to --fresh")
    if fresh:
        env[FRESH_ENV] = "1"
    if allow_non_restored_state:
        env[ALLOW_NON_RESTORED_ENV] = "1"
    if restore is None:
        return env
    if "://" not in restore and not os.path.isdir(restore):
        raise UsageError(
            f"--restore {restore}: no such folder; give a checkpoint folder (chk-<id>), a "
            "checkpoint storage folder, a savepoint folder or an exported checkpoint"
        )
    env[RESTORE_ENV] = restore
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
        from ..executor.spark.session import check_java

        check_java()  # ConfigurationError (exit 2): no Java 17+, suggests --executor local
    if executor is not None:
        env[EXECUTOR_ENV] = executor
    if master is not None:
        env[MASTER_ENV] = master
    return env


def _rest_env(bind: str | None, port: str | None, token_file: str | None) -> dict[str, str]:
    """The environment variables for ``--rest-bind``, ``--rest-port`` and
    ``--rest-token-file`` (:mod:`lockgate.core.rest_settings`); raises ``UsageError``."""
    env: dict[str, str] = {}
    try:
        if bind is not None:
            if not bind.strip():
                raise UsageError("--rest-bind: give an address to listen on, e.g. 0.0.0.0")
            env[rest_settings.BIND_ENV] = bind.strip()
        if port is not None:
            env[rest_settings.PORT_ENV] = str(rest_settings.parse_port(port, "--rest-port"))
        if token_file is not None:
            rest_settings.read_token_file(token_file, "--rest-token-file")
            env[rest_settings.TOKEN_FILE_ENV] = os.path.abspath(token_file)
    except ConfigurationError as e:
        raise UsageError(str(e)) from None
    return env


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
    fresh: bool = False,
    rest_bind: str | None = None,
    rest_port: str | None = None,
    rest_token_file: str | None = None,
) -> int:
    """Run the job file ``path`` as ``__main__`` with ``args``; return the exit code."""
    _check_job_file(path)
    env = _executor_env(executor, master)
    env.update(_restore_env(restore, allow_non_restored_state, fresh))
    env.update(_rest_env(rest_bind, rest_port, rest_token_file))
    if log_level is not None:
        set_log_level(log_level)
    log.info(
        "lockgate run %s: executor %s",
        path,
        env.get(EXECUTOR_ENV, "chosen by the job (Spark unless it says otherwise)")
        + (f", master {env[MASTER_ENV]}" if MASTER_ENV in env else ""),
    )
    with job_process_state(path, args, env):
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
    the background (:mod:`lockgate.cli.detach`)."""
    _check_job_file(ns.job)
    _executor_env(ns.executor, ns.master)  # fails here, not in the background
    _restore_env(ns.restore, ns.allow_non_restored_state, ns.fresh)
    _rest_env(ns.rest_bind, ns.rest_port, ns.rest_token_file)
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
        ("--rest-bind", ns.rest_bind),
        ("--rest-port", ns.rest_port),
        (
            "--rest-token-file",
            None if ns.rest_token_file is None else os.path.abspath(ns.rest_token_file),
        ),
    ):
        if value is not None:
            run_args += [flag, value]
    if ns.allow_non_restored_state:
        run_args.append("--allow-non-restored-state")
    if ns.fresh:
        run_args.append("--fresh")
    run_args += [ns.job, "--", *ns.job_args]
    return start_detached(run_args, ns.job, ns.start_timeout or START_TIMEOUT_S)


def checkpoint_export_command(chk: str, dest: str) -> int:
    """``lockgate checkpoint export CHK DEST``: print what was exported; return the exit
    code. Raises ``ConfigurationError`` (usage) or ``ExportError`` /
    ``CorruptCheckpointError`` (the checkpoint cannot be exported)."""
    from ..checkpoint.export import export_checkpoint

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
    from .top import run_top

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
            ns.fresh,
            ns.rest_bind,
            ns.rest_port,
            ns.rest_token_file,
        )
    if ns.command == "submit":
        from .submit import Submission, submit_command

        return submit_command(
            Submission(
                master=ns.master,
                job=ns.job,
                job_args=ns.job_args[1:] if ns.job_args[:1] == ["--"] else ns.job_args,
                supervise=ns.supervise,
                conf=ns.conf,
                python=ns.python,
                rest_bind=ns.rest_bind,
                rest_port=ns.rest_port,
                rest_token_file=ns.rest_token_file,
                fresh=ns.fresh,
                restore=ns.restore,
                log_level=ns.log_level,
            )
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
    args = sys.argv[1:] if argv is None else list(argv)
    if is_check_command(args):
        return savepoint_check_command(args[2:])
    try:
        ns = parse(args)
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
    except (JobControlError, DetachError, SubmitError) as e:
        print(f"lockgate: {e}", file=sys.stderr)
        return 1
    except CorruptCheckpointError as e:
        print(f"lockgate: error: the checkpoint is damaged: {e}", file=sys.stderr)
        return 1
    except LockgateError as e:  # ExportError and the like: the command could not do it
        print(f"lockgate: error: {e}", file=sys.stderr)
        return 1
