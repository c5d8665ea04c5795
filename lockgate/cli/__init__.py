"""The ``lockgate`` command: :func:`main` (the console script ``lockgate``, and ``python -m
lockgate.cli``). One module per command group: ``command`` parses and dispatches
(``run``, ``list``, ``savepoint``, ``stop``, ``cancel``, ``token``, ``checkpoint
export``), ``parser`` builds the argument parser, ``control`` and ``remote`` talk to a
running job (its registry entry or its REST API), ``detach`` starts a job in the
background, ``top`` is the live terminal view, ``submit`` sends a driver to a cluster,
``savepoint_check`` checks a savepoint against a job file, ``job_file`` runs a job file
as ``__main__``."""

from .command import (
    ALLOW_NON_RESTORED_ENV,
    EXECUTOR_ENV,
    EXECUTORS,
    FRESH_ENV,
    LOG_LEVELS,
    MASTER_ENV,
    RESTORE_ENV,
    build_parser,
    main,
    run_job,
)

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
