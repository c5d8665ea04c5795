"""A per-machine registry of running jobs, so another process can find and control them.

A running job registers itself (:func:`register_job`): a small control server
thread listens on ``127.0.0.1`` (never on another interface) and the file
``<home>/jobs/<job_id>.json`` records the job id, job name, pid, endpoint,
start time and a secret generated for this job. ``<home>`` is
``$LOCKGATE_HOME``, by default ``~/.lockgate``. The file is created with mode
0600 (readable by its user only) and appears atomically, complete or not at
all; :meth:`JobRegistration.close` stops the server and removes it.

Another process (the ``lockgate`` command line) lists the running jobs
(:func:`list_jobs`), picks one by id or name (:func:`find_job`) and sends it a
command (:func:`send_command`): ``savepoint``, ``stop`` (with a savepoint) or
``cancel``. Requests and replies are JSON sealed with an HMAC under the job's
secret (:mod:`lockgate.executor.spark.auth`): a request that fails
authentication never reaches the job; its sender gets an unauthenticated
"rejected" answer. Nothing received is ever unpickled. Each request carries a
random id and its send time under the MAC; the job runs a request only once
(it remembers the ids of the last ``REQUEST_WINDOW_S`` seconds) and only while it
is fresh, so a captured request cannot be replayed. The server disconnects a peer
sending a frame over ``REGISTRY_REQUEST_LIMIT`` bytes.

The registry folder must be private: ``<home>/jobs`` owned by the user and
writable by nobody else, ``<home>`` owned by the user (or root) and not writable by
others unless sticky. A job does not register in an unsafe folder (it logs a
warning saying how to fix it) and :func:`list_jobs` refuses to read one: anyone who
can write there could plant a registration that points the command line at them.

Registering never stops a job: when it fails (an unwritable home, no free
port) a warning is logged and the job runs without command-line control.

The parts: :mod:`.files` (the registry folder and files, finding a job),
:mod:`.server` (the job's control server, registering) and :mod:`.client` (sending a
command). This module re-exports their public names.
"""

from .client import GONE_GRACE_S, REPLY_GRACE_S, send_command
from .files import (
    CANCEL,
    COMMANDS,
    DEFAULT_HOME,
    HOME_ENV,
    JOBS_FOLDER,
    SAVEPOINT,
    STOP,
    JobCommandError,
    JobControlError,
    JobInfo,
    JobNotFoundError,
    JobUnreachableError,
    UnsafeRegistryError,
    check_private_folder,
    find_job,
    jobs_folder,
    list_jobs,
    lockgate_home,
)
from .server import CLOSE_DRAIN_S, REQUEST_WINDOW_S, JobControl, JobRegistration, register_job

__all__ = [
    "CANCEL",
    "CLOSE_DRAIN_S",
    "COMMANDS",
    "DEFAULT_HOME",
    "GONE_GRACE_S",
    "HOME_ENV",
    "JOBS_FOLDER",
    "REPLY_GRACE_S",
    "REQUEST_WINDOW_S",
    "SAVEPOINT",
    "STOP",
    "JobCommandError",
    "JobControl",
    "JobControlError",
    "JobInfo",
    "JobNotFoundError",
    "JobRegistration",
    "JobUnreachableError",
    "UnsafeRegistryError",
    "check_private_folder",
    "find_job",
    "jobs_folder",
    "list_jobs",
    "lockgate_home",
    "register_job",
    "send_command",
]
