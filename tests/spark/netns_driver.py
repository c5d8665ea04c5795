"""A driver process inside a :class:`~netns_cluster.NetnsCluster`'s driver namespace, for
the multi-host tests and ``bench/scale_cluster.py``: it starts ``args`` there (in a
session of its own), keeps its stderr in ``log`` and puts each JSON message it prints on
a line starting with ``prefix`` in :attr:`NetnsDriver.messages`, then
``{"kind": "exited", "code": ...}`` when it ends.

Guarantees: :meth:`NetnsDriver.expect` waits at most its timeout and fails (an
``AssertionError`` with the driver log's tail) on a wrong or missing message;
:meth:`NetnsDriver.stop` waits (bounded) for the driver to exit, then ends what is left
of it and its children, by pid."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from cluster import alive, descendants
from cluster_driver import PREFIX
from netns_cluster import NetnsCluster


class NetnsDriver:
    def __init__(
        self,
        cluster: NetnsCluster,
        args: list[str],
        *,
        log: Path,
        cwd: Path,
        prefix: str = PREFIX,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        self.prefix = prefix
        self._log_file = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            cluster.driver_command(*args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env={**cluster.driver_env(), **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, name="netns driver reader", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(self.prefix):
                self.messages.put(json.loads(line[len(self.prefix) :]))
        self.messages.put({"kind": "exited", "code": self.process.wait()})

    def expect(self, kind: str, timeout_s: float, what: str) -> dict[str, Any]:
        try:
            message = self.messages.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting until {what}\n{self.log_tail()}"
            ) from None
        if message["kind"] != kind:
            raise AssertionError(f"expected '{kind}' ({what}), got {message}\n{self.log_tail()}")
        return message

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        return f"--- driver log {self.log} ---\n" + "\n".join(text)

    def stop(self) -> None:
        """Wait (bounded) for the driver to exit, then kill what is left of it, by pid."""
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            pass
        pause = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = [self.process.pid, *descendants(self.process.pid)]
            if not any(alive(p) for p in pids):
                break
            for p in pids:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while any(alive(p) for p in pids) and time.monotonic() < deadline:
                pause.wait(0.05)  # bounded: the killed processes finish exiting
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._log_file.close()
