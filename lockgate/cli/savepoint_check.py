"""``lockgate savepoint check SAVEPOINT JOB [JOB_ARGS...]``: build the job from its
file without running it and check the savepoint against it
(:func:`lockgate.savepoint.check`). Exit code 0 exactly when ``lockgate run --restore
SAVEPOINT JOB`` would get past restoring state, 1 when it would not, 2 for usage
errors."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Sequence

from ..api.job_capture import JobCaptured, capturing_jobs
from ..errors import LockgateError
from ..savepoint.check import check
from .job_file import job_process_state


def is_check_command(argv: Sequence[str]) -> bool:
    """``savepoint check SAVEPOINT JOB ...`` (``lockgate savepoint JOB PATH`` takes a
    savepoint of a running job: two arguments after ``savepoint``; a check has the word
    ``check`` and at least two more)."""
    positional = [a for a in argv[1:] if not a.startswith("-")]
    return len(argv) >= 2 and argv[0] == "savepoint" and argv[1] == "check" and len(positional) >= 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lockgate savepoint check",
        description="Build the job from JOB (run as __main__ up to env.execute(...), which "
        "does not run) and check the savepoint or checkpoint SAVEPOINT against it: per "
        "operator, matched by uid, new or dropped; per state, compatible, evolved (what "
        "changes), incompatible (why), untyped or kept; parallelism and max "
        "parallelism. Exit code 0 when 'lockgate run --restore SAVEPOINT JOB' would "
        "restore, 1 when it would not.",
    )
    parser.add_argument(
        "--allow-non-restored-state",
        action="store_true",
        help="as for 'lockgate run': state of operators the job no longer has is dropped",
    )
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="a savepoint or checkpoint")
    parser.add_argument("job", metavar="JOB", help="the job file (a Python script)")
    parser.add_argument("job_args", metavar="JOB_ARGS", nargs=argparse.REMAINDER)
    return parser


def savepoint_check_command(argv: Sequence[str]) -> int:
    """Run the command (``argv`` without ``savepoint check``); return the exit code."""
    try:
        ns = _parser().parse_args(list(argv))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if not os.path.isfile(ns.job):
        print(f"lockgate: error: job file not found: {ns.job}", file=sys.stderr)
        return 2
    args = ns.job_args[1:] if ns.job_args[:1] == ["--"] else ns.job_args
    try:
        with job_process_state(ns.job, args, {}), capturing_jobs():
            runpy.run_path(ns.job, run_name="__main__")
    except JobCaptured as captured:
        try:
            report = check(
                ns.savepoint,
                captured.env,
                allow_non_restored_state=ns.allow_non_restored_state,
                job_name=captured.job_name,
            )
        except LockgateError as e:
            print(f"lockgate: error: {e}", file=sys.stderr)
            return 2
        print(report.format())
        return 0 if report.ok else 1
    except SystemExit as e:
        print(
            f"lockgate: error: {ns.job} exited ({e.code!r}) before calling env.execute(...)",
            file=sys.stderr,
        )
        return 2
    print(
        f"lockgate: error: {ns.job} ended without calling env.execute(...): nothing to check",
        file=sys.stderr,
    )
    return 2
