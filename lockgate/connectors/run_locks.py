"""Which runs of a file-writing sink are alive: run locks in the sink's folder (M-X2).

The file-system form of :class:`~lockgate.connectors.PostgresSink`'s run locks
(:func:`~lockgate.connectors.postgres.transactions.hold_run_lock` and
``run_is_alive``), for ``DeltaSink`` and ``FileSink`` on a local (or network) folder:

* every process of a run that may still commit the sink's transactions holds a shared
  lock (``flock``) on ``<folder>/.lockgate-runs/<run>.lock``: the run's driver for the
  whole run (:meth:`TwoPhaseCommitSink.hold_run`, released after the run's transactions
  were settled), and each writer subtask while it is open. The operating system drops a
  lock when its holder exits, however it ends (``SIGKILL`` too);
* a later run that restored a checkpoint or savepoint of that run may delete what the
  run left uncommitted only when it can take the lock exclusively
  (:func:`run_is_alive` is False): then no process of that run is left. While the run
  is alive (a job forked from a savepoint of a job that goes on) its files are left to
  it; when there is no lock file (the run never held one in this folder, or the folder
  is on an object store, where there are no locks) nothing proves it dead, and its
  files are left too.

The folder is hidden (``.``): readers of the table or folder skip it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Callable

log = logging.getLogger(__name__)

#: the folder of the run locks, inside the sink's folder
LOCKS = ".lockgate-runs"
_RUN = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


def _path(folder: str, run: str) -> str | None:
    if not _RUN.match(run):
        return None  # not a run id this module names a lock file after
    return os.path.join(folder, LOCKS, f"{run}.lock")


class RunLock:
    """A held shared lock of one run (see the module docstring)."""

    def __init__(self, folder: str, run: str, path: str, fd: int) -> None:
        self.folder = folder
        self.run = run
        self.path = path
        self._fd: int | None = fd

    def release(self, *, forget: bool = False) -> None:
        """Drop the lock; ``forget``: also delete the lock file when no other process of
        the run holds it (the run's driver, once the run has ended)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if forget:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass
                else:
                    _remove(self.folder, self.path)
        finally:
            os.close(fd)


def hold_run_lock(folder: str, run: str) -> RunLock | None:
    """Take the shared lock of ``run`` in ``folder`` (a local folder); None when ``run`` is
    not a run id (empty)."""
    path = _path(folder, run)
    if path is None:
        return None
    while True:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            continue  # the folder was removed meanwhile (its last lock file deleted)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # a run found dead removes its lock file: hold the one that is there now
            if os.path.exists(path) and os.path.samestat(os.fstat(fd), os.stat(path)):
                return RunLock(folder, run, path, fd)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def writer_run_lock(folder: str, run: str, where: str) -> RunLock | None:
    """:func:`hold_run_lock` for a writer subtask: a folder where the lock cannot be taken
    (a ``.lockgate-runs`` another user owns) is logged, not raised. The run's driver holds
    the lock for the whole run anyway; without a lock file nothing proves the run dead, so
    its files are never deleted by another run."""
    try:
        return hold_run_lock(folder, run)
    except OSError as e:
        log.warning(
            "%s: cannot hold run %s's lock in %s (%s); other runs restoring its checkpoints "
            "rely on its driver's",
            where,
            run,
            os.path.join(folder, LOCKS),
            e,
        )
        return None


def run_is_alive(folder: str, run: str) -> bool | None:
    """Whether a process of ``run`` holds its lock in ``folder`` now: True, False (no
    process of it is left), or None when nothing can tell (no lock file of it there)."""
    path = _path(folder, run)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:  # gone, or another account's (0600): nothing can be proven
        if not isinstance(e, FileNotFoundError):
            log.warning("cannot tell whether run %s is alive: %s", run, e)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the lock if it was taken
    return False


def forget_run(folder: str, run: str) -> None:
    """Delete the lock file of ``run``, found dead, once its leftovers were deleted (kept
    if a process of it holds the lock again)."""
    path = _path(folder, run)
    if path is None:
        return
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _remove(folder, path)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


def forget_ended_runs(folder: str, leftovers: Callable[[str], bool]) -> None:
    """Delete the lock files of the runs in ``folder`` found dead that have nothing left
    for a restore to prove dead (``leftovers(run)`` is False)."""
    try:
        names = os.listdir(os.path.join(folder, LOCKS))
    except FileNotFoundError:
        return
    for name in names:
        run = name[: -len(".lock")] if name.endswith(".lock") else ""
        if run and not leftovers(run) and run_is_alive(folder, run) is False:
            forget_run(folder, run)


def _remove(folder: str, path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    with contextlib.suppress(OSError):  # kept while other runs' locks are in it
        os.rmdir(os.path.join(folder, LOCKS))
