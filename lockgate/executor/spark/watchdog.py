"""A slot's watchdog: when the slot's heartbeat falls silent, the driver learns what every
thread of the slot is doing.

A slot's heartbeats leave from its control thread (:class:`~.control.ControlClient`).
They can stop for two kinds of reasons, and the watchdog has one layer for each:

* **The control thread is stuck while the rest of the process runs** (a lock, a blocking
  call, an exception that ended it). The watchdog thread, a Python thread of its own,
  sees that no heartbeat left for ``stall_after_s``, formats every thread's stack
  (:func:`thread_stacks`, with thread names) and hands it to ``report``: in a slot, a
  STACKS message on a zmq socket the watchdog thread owns (zmq sockets are not
  thread-safe; the control thread's socket is never touched). While the silence lasts
  it reports again every ``stall_after_s``, so the driver holds a recent picture.
* **The whole interpreter is stuck** (C code holding the GIL: a blocking call in an
  extension, a lock inherited locked through ``fork``): no Python thread runs, the
  watchdog's included. For that the watchdog keeps ``faulthandler``'s timer armed,
  re-arming it at every check: if the watchdog itself misses ``stall_after_s``,
  faulthandler's C thread, which needs no GIL, writes every thread's stack into
  ``dump_path`` (after a header naming the threads by id). The slot registers that path
  with the driver, which reads it when it runs on the same host. If the process comes
  back to life the watchdog also reports that dump itself.

Guarantees: ``report`` runs only in the watchdog thread; a report is made only during a
silence (heartbeats at least ``stall_after_s`` old) or after a freeze; :meth:`stop`
cancels the faulthandler timer and removes ``dump_path`` unless a freeze was dumped
into it. Cost while all is well: one wake-up per ``check_s`` (a comparison, and
re-arming the faulthandler timer, which starts a short-lived C thread). The
faulthandler timer is per process: in a slot's Python worker it replaces any other
``faulthandler.dump_traceback_later`` (such as PySpark's
``spark.python.worker.tracebackDumpIntervalSeconds``).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

log = logging.getLogger(__name__)

#: what faulthandler writes above each thread's stack: the driver looks for it
FAULTHANDLER_MARK = "(most recent call first)"


def thread_stacks(names: dict[int, str] | None = None) -> str:
    """Every thread's current Python stack, most recent call last, headed by the thread's
    name and id (``names`` overrides the names ``threading`` knows)."""
    known = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
    if names:
        known.update(names)
    frames = sys._current_frames()
    me = threading.get_ident()
    parts = []
    for ident, frame in sorted(frames.items(), key=lambda kv: known.get(kv[0], "")):
        name = known.get(ident, "?")
        here = " (the watchdog, reporting)" if ident == me else ""
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'Thread 0x{ident:016x} "{name}"{here}:\n{stack}')
    return "\n".join(parts)


class SlotWatchdog:
    """Watches ``last_beat()`` (monotonic time of the slot's latest heartbeat) and reports
    the slot's thread stacks when it is older than ``stall_after_s``.

    ``report(payload)`` receives ``{"kind": "silent" | "frozen", "silent_s", "pid",
    "stacks"}``. ``clock`` is injectable; :meth:`check` is one watchdog turn (the thread
    calls it every ``check_s``), usable on its own with a manual clock. ``on_stop`` runs
    in the watchdog thread when it ends (the slot closes the reporting socket there).
    """

    def __init__(
        self,
        last_beat: Callable[[], float],
        report: Callable[[dict[str, Any]], None],
        *,
        stall_after_s: float,
        check_s: float | None = None,
        dump_path: str | None = None,
        label: str = "slot",
        clock: Callable[[], float] = time.monotonic,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        if not stall_after_s > 0:
            raise ValueError(f"stall_after_s must be > 0, got {stall_after_s!r}")
        self.last_beat = last_beat
        self.report = report
        self.stall_after_s = float(stall_after_s)
        self.check_s = float(check_s) if check_s else min(1.0, self.stall_after_s / 4)
        self.dump_path = dump_path
        self.label = label
        self.clock = clock
        self.on_stop = on_stop
        #: how many reports were made
        self.reports = 0
        self._next_report: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dump: IO[str] | None = None
        self._header_threads: frozenset[tuple[int, str]] = frozenset()
        self._header_len = 0
        self._froze = False
        self._dump_lock = threading.Lock()  # the dump file: the watchdog and note_threads

    # -- one turn ---------------------------------------------------------------------
    def check(self) -> dict[str, Any] | None:
        """Look at the heartbeat once; report (and return the report) when it has been
        silent for ``stall_after_s`` and no report went out in the last
        ``stall_after_s``. Returns None otherwise."""
        now = self.clock()
        silent = now - self.last_beat()
        if silent < self.stall_after_s:
            self._next_report = None
            return None
        if self._next_report is not None and now < self._next_report:
            return None
        self._next_report = now + self.stall_after_s
        payload = {
            "kind": "silent",
            "silent_s": round(silent, 1),
            "pid": os.getpid(),
            "stacks": thread_stacks(),
        }
        self._send(payload)
        return payload

    def _send(self, payload: dict[str, Any]) -> None:
        self.reports += 1
        log.warning(
            "%s: no heartbeat for %.1fs; its threads:\n%s",
            self.label,
            payload["silent_s"],
            payload["stacks"],
        )
        try:
            self.report(payload)
        except Exception:
            log.exception("%s: could not report the thread stacks", self.label)

    # -- the faulthandler layer -------------------------------------------------------------
    def _arm(self) -> None:
        """(Re-)arm faulthandler's timer: it fires only if this thread misses
        ``stall_after_s`` (the interpreter is frozen). Keeps the dump file's header (the
        thread names by id) current."""
        with self._dump_lock:
            if self._dump is None:
                return
            self._collect_freeze()
            self._write_header()
            faulthandler.dump_traceback_later(self.stall_after_s, repeat=False, file=self._dump)

    def note_threads(self) -> None:
        """Threads were started (any thread may call this): name them in the dump file's
        header now rather than at the next check, in case the process freezes first."""
        with self._dump_lock:
            if self._dump is not None and not self._dump.closed:
                self._write_header()

    def _write_header(self) -> None:
        dump = self._dump
        assert dump is not None
        threads = frozenset((t.ident, t.name) for t in threading.enumerate() if t.ident is not None)
        if threads != self._header_threads:
            self._header_threads = threads
            header = "".join(
                f'Thread 0x{ident:016x} is "{name}"\n' for ident, name in sorted(threads)
            )
            text = (
                f"lockgate {self.label} (pid {os.getpid()}): faulthandler dump of a "
                f"freeze longer than {self.stall_after_s:.1f}s; threads by id:\n{header}"
            )
            dump.seek(0)
            dump.truncate()
            dump.write(text)
            dump.flush()
            self._header_len = dump.tell()

    def _collect_freeze(self) -> None:
        """If faulthandler wrote a dump (the process froze and came back), report it."""
        dump = self._dump
        assert dump is not None
        size = os.fstat(dump.fileno()).st_size
        if size <= self._header_len:
            return
        dump.seek(0)
        text = dump.read()
        self._froze = True
        self._header_threads = frozenset()  # rewrite the header (drops the old dump)
        self._send(
            {
                "kind": "frozen",
                "silent_s": round(self.clock() - self.last_beat(), 1),
                "pid": os.getpid(),
                "stacks": text,
            }
        )

    # -- the thread -------------------------------------------------------------------------
    def start(self) -> None:
        """Open the dump file (if any) and start the watchdog thread."""
        if self.dump_path is not None:
            self._dump = open(self.dump_path, "w+", encoding="utf-8")  # noqa: SIM115
        self._thread = threading.Thread(
            target=self._run, name=f"lockgate watchdog {self.label}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                self._arm()
                if self._stop.wait(self.check_s):
                    return
                self.check()
        except Exception:
            log.exception("%s: the watchdog failed", self.label)
        finally:
            if self._dump is not None:
                faulthandler.cancel_dump_traceback_later()
            if self.on_stop is not None:
                try:
                    self.on_stop()
                except Exception:
                    log.exception("%s: closing the watchdog failed", self.label)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (bounded wait), cancel the faulthandler timer, remove the dump
        file unless it holds a freeze."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s: the watchdog did not stop within %.0fs", self.label, timeout_s)
                return  # it still uses the dump file
        with self._dump_lock:
            if self._dump is None:
                return
            faulthandler.cancel_dump_traceback_later()
            froze = self._froze or os.fstat(self._dump.fileno()).st_size > self._header_len
            self._dump.close()
            self._dump = None
        if not froze and self.dump_path is not None:
            try:
                os.unlink(self.dump_path)
            except OSError:
                pass


def read_freeze_dump(path: str) -> str | None:
    """The faulthandler dump a slot's watchdog left in ``path`` (header and stacks), or
    None when the file is missing or holds no dump."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text if FAULTHANDLER_MARK in text else None
