"""The ``lockgate`` command's arguments: the parser of every command and the rules of
``lockgate run``'s options (lockgate's options go before the job file or right after
it; from the first job argument on, everything is the job's, and one of lockgate's own
options there draws a warning saying it went to the job)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..executor import job_registry
from .detach import START_TIMEOUT_S
from .remote import TOKEN_ENV, URL_ENV

EXECUTOR_ENV = "LOCKGATE_EXECUTOR"
MASTER_ENV = "LOCKGATE_SPARK_MASTER"
RESTORE_ENV = "LOCKGATE_RESTORE_FROM"
ALLOW_NON_RESTORED_ENV = "LOCKGATE_ALLOW_NON_RESTORED_STATE"
FRESH_ENV = "LOCKGATE_FRESH"
EXECUTORS = ("local", "spark")
SPARK_EXECUTOR_MODULE = "lockgate.executor.spark"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: lockgate's options of ``run`` that take a value / that take none; right after the job
#: file they are lockgate's, after a job argument they are the job's (with a warning)
_RUN_OPTIONS = (
    "--executor",
    "--master",
    "--restore",
    "--log-level",
    "--start-timeout",
    "--rest-bind",
    "--rest-port",
    "--rest-token-file",
)
_RUN_FLAGS = ("--allow-non-restored-state", "--fresh", "--detach")


def _log_level(text: str) -> str:
    """``--log-level``: a logging level name, any case."""
    name = text.strip().upper()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level; use one of {', '.join(LOG_LEVELS)}"
        )
    return name


def _add_rest_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rest-bind",
        metavar="ADDR",
        default=None,
        help="the address the job's REST API listens on, e.g. 0.0.0.0 (sets "
        "LOCKGATE_REST_BIND; default the job's ExecutionConfig.rest_bind, 127.0.0.1)",
    )
    parser.add_argument(
        "--rest-port",
        metavar="PORT",
        default=None,
        help="the REST API's port (sets LOCKGATE_REST_PORT; default any free one)",
    )
    parser.add_argument(
        "--rest-token-file",
        metavar="FILE",
        default=None,
        help="a private file (chmod 600) holding the REST token to use instead of a "
        "random one, so that a job on another machine can be reached with a token known "
        "in advance (sets LOCKGATE_REST_TOKEN_FILE)",
    )


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
        help="when restoring or resuming: drop state of operators the job no longer has "
        f"instead of failing (sets {ALLOW_NON_RESTORED_ENV})",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        default=False,
        help="start from empty state even when the job's checkpoint storage holds "
        "completed checkpoints of it (by default the job resumes from the newest, as a "
        f"restarted driver does; sets {FRESH_ENV})",
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
    _add_rest_options(parser)
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
    _add_submit_command(commands)
    _add_control_commands(commands)
    return parser


def _add_submit_command(commands: Any) -> None:
    submit = commands.add_parser(
        "submit",
        help="run a job's driver on a worker of a Spark standalone cluster",
        description="Submit the job file to a Spark standalone cluster in cluster deploy "
        "mode: its driver runs on a worker (spark-submit refuses Python drivers there; "
        "lockgate submits Spark's own PythonRunner, which runs 'lockgate run JOB' on the "
        "worker). Prints the driver's submission id. The worker must see the job file, "
        "lockgate and --python at the same paths. Give --rest-bind, --rest-port and "
        "--rest-token-file to reach the job with --url from elsewhere.",
    )
    submit.add_argument("--master", metavar="URL", required=True, help="spark://HOST:PORT")
    submit.add_argument(
        "--supervise",
        action="store_true",
        default=False,
        help="the cluster starts the driver again when it dies (it resumes from its newest "
        "checkpoint)",
    )
    submit.add_argument(
        "--conf",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Spark setting for the application (repeatable)",
    )
    submit.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the Python the driver and executors run (default this one; it must exist at "
        "the same path on the workers)",
    )
    _add_rest_options(submit)
    submit.add_argument(
        "--fresh", action="store_true", default=False, help="as lockgate run --fresh"
    )
    submit.add_argument("--restore", metavar="PATH", default=None, help="as lockgate run --restore")
    submit.add_argument(
        "--log-level", metavar="LEVEL", type=_log_level, default="INFO", help="default INFO"
    )
    submit.add_argument("job", metavar="JOB", help="path of the job file (a Python script)")
    submit.add_argument(
        "job_args", metavar="JOB_ARGS", nargs=argparse.REMAINDER, help="arguments passed to the job"
    )


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
        "savepoint's folder. The job keeps running. ('lockgate savepoint check SAVEPOINT "
        "JOB [JOB_ARGS]' checks a savepoint against a job file before deploying it.)",
    )
    savepoint.add_argument("job", metavar="JOB", help=job_help)
    savepoint.add_argument("path", metavar="PATH", help="the folder of the savepoint")
    savepoint.add_argument("--timeout", metavar="S", type=_seconds, default=None, help=timeout_help)
    _add_remote_options(savepoint)
    stop = commands.add_parser(
        "stop",
        help="take a savepoint, then stop the job",
        description="Take a savepoint, then stop the job, and print the savepoint's folder "
        "(as Flink's stop). The savepoint goes into --savepoint PATH, else into a new folder "
        "in the job's default savepoint folder (checkpoint_config.savepoint_dir, or "
        "LOCKGATE_SAVEPOINT_DIR where the job runs); a job without one refuses and keeps "
        "running. To stop a job without a savepoint: lockgate cancel JOB.",
    )
    stop.add_argument("job", metavar="JOB", help=job_help)
    stop.add_argument(
        "--savepoint",
        metavar="PATH",
        default=None,
        help="the folder of the savepoint (default: a new folder in the job's default "
        "savepoint folder)",
    )
    stop.add_argument(
        "--drain",
        action="store_true",
        default=False,
        help="end the input first: send the maximum watermark through "
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


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv`` (``SystemExit`` for ``--help``, ``--version`` and usage errors);
    for ``run``, take lockgate's options right after the job file and warn about those
    among the job's arguments."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "run":
        leading, ns.job_args = _split_leading_options(ns.job_args)
        if leading:
            options = argparse.ArgumentParser(prog="lockgate run", add_help=False)
            _add_run_options(options)
            late = options.parse_args(leading)
            for name in (
                "executor",
                "master",
                "restore",
                "log_level",
                "start_timeout",
                "rest_bind",
                "rest_port",
                "rest_token_file",
            ):
                setattr(ns, name, getattr(late, name) or getattr(ns, name))
            ns.allow_non_restored_state = (
                late.allow_non_restored_state or ns.allow_non_restored_state
            )
            ns.detach = late.detach or ns.detach
            ns.fresh = late.fresh or ns.fresh
        _warn_misplaced(ns.job, ns.job_args)
    return ns
