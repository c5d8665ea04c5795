"""The mailbox of a subtask: actions from other threads that run in the task's thread.

Control actions (checkpoint triggers, completion notices, cancellation) are
put here by the executor or the coordinator and run by the task's loop
between batches, so they never interleave with the processing of a batch.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class Mailbox:
    def __init__(self, signal: threading.Event) -> None:
        self._mails: deque[tuple[str, Callable[[], None]]] = deque()
        self._signal = signal
        self._closed = False

    def put(self, action: Callable[[], None], description: str = "mail") -> bool:
        """Queue ``action``; it runs in the task thread before the next batch. Returns
        False (and drops it) when the task has finished."""
        if self._closed:
            return False
        self._mails.append((description, action))
        self._signal.set()
        return True

    def run_pending(self) -> int:
        """Run every queued action, oldest first; return how many ran."""
        ran = 0
        while self._mails:
            _, action = self._mails.popleft()
            action()
            ran += 1
        return ran

    def close(self) -> None:
        """Later puts are dropped (the task has finished)."""
        self._closed = True
        self._mails.clear()

    def __len__(self) -> int:
        return len(self._mails)
