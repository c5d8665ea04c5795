"""How a slot's Python worker ended, when it did not end by itself: the signal that
killed it or its exit code, recorded by the worker daemon of this host.

A slot's Python worker is a child of Spark's worker daemon (:mod:`.daemon`), not of
the driver, and PySpark's daemon ignores ``SIGCHLD``, so the kernel reaps its workers
and their exit status is lost: the JVM only sees the worker's socket close ("Python
worker exited unexpectedly (crashed)"). lockgate's daemon reaps its workers itself
(:func:`install_reaper`) and writes the status of each worker that was killed by a
signal or exited with a non-zero code into a private folder of this host (one small
file per pid, :func:`exits_folder`). The driver reads the one of a slot it lost
(:func:`read_exit`, on the slot's host only: a loopback cluster, where lockgate's
daemon runs) to name the signal in the attempt's error, and deletes the files of its
slots when the attempt ends (:func:`discard_exit`).

Nothing here is needed for correctness: a status that cannot be written or read
leaves the error without its signal.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerExit:
    """How a worker process ended: ``signal`` (its number) when a signal killed it,
    else ``exit_code``."""

    signal: int | None
    exit_code: int | None

    def describe(self) -> str:
        """``was killed by signal 9 (SIGKILL)`` or ``exited with code 3``."""
        if self.signal is not None:
            return f"was killed by signal {self.signal} ({signal_name(self.signal)})"
        return f"exited with code {self.exit_code}"


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 64`` for a number without a name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exits_folder() -> str:
    """This user's folder of worker exit statuses (created private, 0700, on first use)."""
    folder = os.path.join(tempfile.gettempdir(), f"lockgate-worker-exits-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        raise PermissionError(
            f"{folder} is not a private folder of this user (a symlink, another owner or "
            "open permissions): worker exit statuses are not recorded there"
        )
    return folder


def record_exit(pid: int, status: int, folder: str) -> None:
    """Write the status ``os.waitpid`` gave for ``pid`` if the worker did not exit
    with code 0."""
    if os.WIFSIGNALED(status):
        text = f"signal {os.WTERMSIG(status)}"
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        text = f"exit {os.WEXITSTATUS(status)}"
    else:
        return
    path = os.path.join(folder, str(pid))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def read_exit(pid: int) -> WorkerExit | None:
    """The recorded status of worker ``pid`` on this host, or None (not recorded: it is
    alive, ended with code 0, or its daemon is not lockgate's)."""
    try:
        path = os.path.join(exits_folder(), str(int(pid)))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    if len(text) != 2 or not text[1].lstrip("-").isdigit():
        return None
    if text[0] == "signal":
        return WorkerExit(signal=int(text[1]), exit_code=None)
    if text[0] == "exit":
        return WorkerExit(signal=None, exit_code=int(text[1]))
    return None


def discard_exit(pid: int) -> None:
    """Delete the recorded status of worker ``pid`` on this host (a slot does it for its
    own pid when it starts: any file there is an older process's with the same pid)."""
    try:
        os.unlink(os.path.join(exits_folder(), str(int(pid))))
    except OSError:
        pass  # none recorded, or no private folder: nothing to mislead anyone


def install_reaper(signal_module: Any) -> Any:
    """A stand-in for the ``signal`` module of PySpark's daemon: everything passes
    through, except the daemon's ``signal(SIGCHLD, SIG_IGN)`` (which lets the kernel
    reap its workers and lose their statuses), replaced by a handler that reaps them
    and records how each ended (:func:`record_exit`)."""
    try:
        folder: str | None = exits_folder()
    except OSError:
        folder = None

    def reap(signum: int, frame: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if folder is not None:
                try:
                    record_exit(pid, status, folder)
                except OSError:
                    pass  # only a diagnostic

    class _Signal:
        def __getattr__(self, name: str) -> Any:
            return getattr(signal_module, name)

        def signal(self, signum: int, handler: Any) -> Any:
            if (
                signum == signal_module.SIGCHLD
                and handler == signal_module.SIG_IGN
                and os.getpid() == _daemon_pid
            ):
                return signal_module.signal(signum, reap)
            return signal_module.signal(signum, handler)

    _daemon_pid = os.getpid()
    return _Signal()
