"""Running a job file as ``python JOB`` would: its ``sys.argv``, ``sys.path[0]`` and
environment, for ``lockgate run`` and ``lockgate savepoint check``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def job_process_state(path: str, args: list[str], env: dict[str, str]) -> Iterator[None]:
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
