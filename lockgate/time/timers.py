"""The timer service of one keyed operator subtask (M-W6, M-T3, M-T4).

:class:`InternalTimerService` holds the subtask's event-time and processing-time
timers, each a :class:`~lockgate.time.timer_queue.InternalTimer`
``(timestamp, key, namespace)`` (namespace None unless windows use it), in two
deduplicated priority queues (:mod:`lockgate.time.timer_queue`). Guarantees:

* **Deduplicated**: registering a queued timer again keeps one; deleting a timer
  that is not queued does nothing.
* **Event time (M-W6)**: ``advance_watermark(ts, on_timer)`` first sets
  ``current_watermark`` to ``ts``, then removes and hands to ``on_timer`` every
  event-time timer with timestamp <= ``ts``, in timestamp order (ties in
  registration order). **Callback contract**: ``on_timer(timer)`` receives the timer
  and must make ``timer.key`` the current key (e.g. set the keyed state backend's
  ``current_key``) before running user code; the service does not know the key
  context. Timers registered by a callback with timestamp <= ``ts`` fire in the same
  advance (an earlier one than the timer being fired fires next), as in Flink;
  timers a callback deletes do not fire. The caller forwards the watermark after
  ``advance_watermark`` returns. A timer registered outside firing at or below the
  current watermark fires on the next advance.
* **Processing time**: ``current_processing_time()`` is the injectable clock's
  ``time_ms()``; ``on_processing_time(now_ms, on_timer)`` fires, the same way, the
  processing-time timers with timestamp <= ``now_ms``; ``next_processing_time()``
  gives the earliest pending one, so the task can schedule its wake-up with its
  clock. The optional ``on_earlier_processing_time(ts)`` hook is called whenever a
  registration makes ``next_processing_time()`` earlier (reschedule the wake-up).
* **Snapshots (M-T3, M-T4)**: ``snapshot_view()`` is the cheap synchronous part
  (O(distinct timestamps), copy-on-write afterwards); its ``materialize()`` (any
  thread) is the picklable payload grouped by key group
  (:mod:`lockgate.time.timer_snapshot`). ``restore(payloads, key_groups)`` keeps the
  timers of a key-group range from one or several old subtasks' payloads, so timers
  follow their keys when the parallelism changes.

Everything except ``TimerSnapshot.materialize`` belongs to the task thread. While
timers fire, only registering, deleting and reading are allowed; a nested advance,
a snapshot or a restore raises :class:`TimerServiceBusyError`.

:class:`TimerService` is the user-facing facade ``ctx.timer_service()`` returns: the
same operations bound to the current key, with the arguments checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.clock import Clock, SystemClock
from ..core.elements import MIN_WATERMARK
from ..core.key_groups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from ..core.key_hash import canonical_keys
from ..errors import ConfigurationError, CorruptStreamError, LockgateError, UnsupportedKeyError
from .timer_args import as_list, check_timestamp, key_column, timestamp_array
from .timer_queue import InternalTimer, TimerQueue
from .timer_snapshot import (
    EVENT_TIME,
    TIMER_SNAPSHOT_FORMAT,
    TIMER_SNAPSHOT_VERSION,
    TimerSnapshot,
    restored_entries,
)

OnTimer = Callable[[InternalTimer], Any]


class TimerServiceBusyError(LockgateError, RuntimeError):
    """A snapshot, a restore or another firing was asked for while timers are firing."""


class InternalTimerService:
    """The timers of one keyed operator subtask (see the module docstring).

    ``name`` appears in error messages (the operator's name); ``max_parallelism`` must
    be the operator's (it decides the key groups of snapshots); ``clock`` gives
    processing time (default the system clock).
    """

    def __init__(
        self,
        name: str = "timers",
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        *,
        clock: Clock | None = None,
        on_earlier_processing_time: Callable[[int], Any] | None = None,
    ) -> None:
        self.name = name
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self.clock: Clock = SystemClock() if clock is None else clock
        self.on_earlier_processing_time = on_earlier_processing_time
        self._event = TimerQueue()
        self._processing = TimerQueue()
        self._watermark = MIN_WATERMARK
        self._firing = False

    # -- time -----------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        """The last watermark given to :meth:`advance_watermark` (``MIN_WATERMARK`` before)."""
        return self._watermark

    def current_processing_time(self) -> int:
        """Processing time: the clock's epoch milliseconds."""
        return self.clock.time_ms()

    @property
    def firing(self) -> bool:
        """Whether timers are being fired right now (a callback is running)."""
        return self._firing

    # -- registration ---------------------------------------------------------------------
    def register_event_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> bool:
        """Queue the event-time timer ``(timestamp, key, namespace)``; False if it was
        already queued."""
        if type(timestamp) is not int:
            timestamp = check_timestamp(timestamp, f"{self._where}: register_event_time_timer")
        try:
            return self._event.add(timestamp, key, namespace)
        except TypeError as e:
            raise self._unhashable(key, namespace, e) from e

    def register_processing_time_timer(
        self, key: Any, timestamp: int, namespace: Any = None
    ) -> bool:
        """Queue the processing-time timer ``(timestamp, key, namespace)``; False if it
        was already queued. Calls ``on_earlier_processing_time`` if it became the
        earliest one."""
        if type(timestamp) is not int:
            timestamp = check_timestamp(timestamp, f"{self._where}: register_processing_time_timer")
        hook = self.on_earlier_processing_time
        head = self._processing.peek_timestamp() if hook is not None else None
        try:
            added = self._processing.add(timestamp, key, namespace)
        except TypeError as e:
            raise self._unhashable(key, namespace, e) from e
        if added and hook is not None and (head is None or timestamp < head):
            hook(timestamp)
        return added

    def delete_event_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> bool:
        """Remove the event-time timer ``(timestamp, key, namespace)``; False if it was
        not queued."""
        if type(timestamp) is not int:
            timestamp = check_timestamp(timestamp, f"{self._where}: delete_event_time_timer")
        try:
            return self._event.remove(timestamp, key, namespace)
        except TypeError as e:
            raise self._unhashable(key, namespace, e) from e

    def delete_processing_time_timer(self, key: Any, timestamp: int, namespace: Any = None) -> bool:
        """Remove the processing-time timer ``(timestamp, key, namespace)``; False if it
        was not queued. (The scheduled wake-up may then find nothing due: harmless.)"""
        if type(timestamp) is not int:
            timestamp = check_timestamp(timestamp, f"{self._where}: delete_processing_time_timer")
        try:
            return self._processing.remove(timestamp, key, namespace)
        except TypeError as e:
            raise self._unhashable(key, namespace, e) from e

    def register_event_time_timers(
        self,
        keys: Sequence[Any] | Any,
        timestamps: Any,
        namespace: Any = None,
        *,
        namespaces: Sequence[Any] | Any | None = None,
    ) -> int:
        """Queue ``(timestamps[i], keys[i], namespace)`` for every i; returns how many
        were new. ``namespaces`` (one per key) overrides ``namespace``. ``keys`` and
        ``namespaces`` may be lists, numpy or Arrow arrays (numpy and Arrow values are
        stored as Python values); ``timestamps`` integer lists, numpy or Arrow arrays.

        With one namespace per call (a window operator registers each window's keys
        in one call: ``namespace=window``) timers are grouped by timestamp with numpy and
        deduplicated in bulk by C-level dict updates, which makes one timer per
        (key, window) cheap; with ``namespaces`` they are added one by one."""
        return self._register_many(
            self._event, keys, timestamps, namespace, namespaces, "register_event_time_timers"
        )[0]

    def register_processing_time_timers(
        self,
        keys: Sequence[Any] | Any,
        timestamps: Any,
        namespace: Any = None,
        *,
        namespaces: Sequence[Any] | Any | None = None,
    ) -> int:
        """The bulk form of :meth:`register_processing_time_timer` (see
        :meth:`register_event_time_timers`)."""
        hook = self.on_earlier_processing_time
        head = self._processing.peek_timestamp() if hook is not None else None
        added, earliest = self._register_many(
            self._processing,
            keys,
            timestamps,
            namespace,
            namespaces,
            "register_processing_time_timers",
        )
        if (
            added
            and hook is not None
            and earliest is not None
            and (head is None or earliest < head)
        ):
            hook(earliest)
        return added

    def _register_many(
        self,
        queue: TimerQueue,
        keys: Any,
        timestamps: Any,
        namespace: Any,
        namespaces: Any,
        what: str,
    ) -> tuple[int, int | None]:
        where = f"{self._where}: {what}"
        arr = timestamp_array(timestamps, where)
        key_col = key_column(keys, where)
        n = len(key_col)
        if len(arr) != n:
            raise ConfigurationError(
                f"{where} got {n} keys but {len(arr)} timestamps; give one timestamp per key"
            )
        if n == 0:
            return 0, None
        ns_list = None
        if namespaces is not None:
            ns_list = as_list(namespaces)
            if len(ns_list) != n:
                raise ConfigurationError(
                    f"{where} got {n} keys but {len(ns_list)} namespaces; give one namespace "
                    "per key (or one namespace for all with namespace=...)"
                )
        try:
            added = queue.add_many(arr, key_col, ns_list, namespace)
        except TypeError as e:
            raise UnsupportedKeyError(
                f"{where}: every key and namespace of a timer must be hashable ({e})"
            ) from e
        return added, int(arr.min())

    # -- firing (M-W6) --------------------------------------------------------------------
    def advance_watermark(self, watermark: int, on_timer: OnTimer) -> int:
        """Set the current watermark to ``watermark``, then fire every event-time timer
        with timestamp <= ``watermark`` in timestamp order, calling ``on_timer(timer)``,
        which must make ``timer.key`` the current key (see the module docstring).
        Returns how many fired. A watermark below the current one is a
        CorruptStreamError (watermarks never go back, M-W3/M-W5)."""
        watermark = check_timestamp(watermark, f"{self._where}: advance_watermark")
        if watermark < self._watermark:
            raise CorruptStreamError(
                f"{self._where}: watermark {watermark} is below the current watermark "
                f"{self._watermark}; watermarks must not go back"
            )
        self._enter_firing("advance_watermark")
        self._watermark = watermark
        try:
            return self._event.fire(watermark, on_timer)
        finally:
            self._firing = False

    def on_processing_time(self, now_ms: int, on_timer: OnTimer) -> int:
        """Fire every processing-time timer with timestamp <= ``now_ms`` in timestamp
        order, calling ``on_timer(timer)`` (same contract as :meth:`advance_watermark`).
        Returns how many fired. Schedule the next call at :meth:`next_processing_time`."""
        now_ms = check_timestamp(now_ms, f"{self._where}: on_processing_time")
        self._enter_firing("on_processing_time")
        try:
            return self._processing.fire(now_ms, on_timer)
        finally:
            self._firing = False

    def next_event_time(self) -> int | None:
        """The earliest pending event-time timer's timestamp, or None."""
        return self._event.peek_timestamp()

    def next_processing_time(self) -> int | None:
        """The earliest pending processing-time timer's timestamp, or None: when the
        task should call :meth:`on_processing_time` next."""
        return self._processing.peek_timestamp()

    # -- inspection -----------------------------------------------------------------------
    def num_event_time_timers(self) -> int:
        return len(self._event)

    def num_processing_time_timers(self) -> int:
        return len(self._processing)

    def event_time_timers(self) -> list[InternalTimer]:
        """The pending event-time timers in firing order (a new list)."""
        return self._event.timers()

    def processing_time_timers(self) -> list[InternalTimer]:
        """The pending processing-time timers in firing order (a new list)."""
        return self._processing.timers()

    # -- snapshots (M-T3, M-T4) -----------------------------------------------------------
    def snapshot_view(self) -> TimerSnapshot:
        """The synchronous part of a checkpoint: a view of every timer now pending,
        taken in O(distinct timestamps); later registrations, deletions and firings
        never change it (copy-on-write). Materialize it on any thread."""
        self._check_not_firing("snapshot_view")
        size = len(self._event) + len(self._processing)
        return TimerSnapshot(
            self.name, self.max_parallelism, self._event.freeze(), self._processing.freeze(), size
        )

    def snapshot(self) -> dict[str, Any]:
        """``snapshot_view().materialize()``: the picklable payload grouped by key group
        (format in :mod:`lockgate.time.timer_snapshot`)."""
        return self.snapshot_view().materialize()

    def restore(self, snapshots: Iterable[Mapping[str, Any]], key_groups: range) -> None:
        """Add the timers of the key groups in ``key_groups`` from the payloads of one or
        several old subtasks (several when rescaling); other key groups are skipped.
        Duplicates across payloads are kept once; ``on_earlier_processing_time`` is
        called with the earliest pending processing time afterwards, if any. Payloads
        are checked in full before anything is added. The watermark is not restored
        (it starts at ``MIN_WATERMARK``; the first watermark fires what is due)."""
        self._check_not_firing("restore")
        if not isinstance(key_groups, range):
            raise ConfigurationError(
                f"{self._where}: restore needs the subtask's key groups as a range, got "
                f"{key_groups!r}"
            )
        if isinstance(snapshots, Mapping):
            raise ConfigurationError(
                f"{self._where}: restore needs a list of timer snapshots, got one snapshot; "
                "wrap it in a list"
            )
        loaded: list[tuple[str, list[tuple[int, Any, Any]]]] = list(
            restored_entries(snapshots, key_groups, self.max_parallelism, self._where)
        )
        for queue_name, entries in loaded:
            if not entries:
                continue
            queue = self._event if queue_name == EVENT_TIME else self._processing
            try:
                queue.add_many(
                    np.fromiter((e[0] for e in entries), dtype=np.int64, count=len(entries)),
                    # a restored NaN key is a new NaN object: make it the one NaN key
                    canonical_keys([e[1] for e in entries]),
                    [e[2] for e in entries],
                )
            except TypeError as e:
                raise UnsupportedKeyError(
                    f"{self._where}: a restored timer has an unhashable key or namespace ({e})"
                ) from e
        hook = self.on_earlier_processing_time
        head = self._processing.peek_timestamp()
        if hook is not None and head is not None:
            hook(head)

    # -- facade ---------------------------------------------------------------------------
    def facade(self, current_key: Callable[[], Any]) -> TimerService:
        """The user-facing :class:`TimerService` bound to ``current_key()``."""
        return TimerService(self, current_key)

    # -- internals ------------------------------------------------------------------------
    @property
    def _where(self) -> str:
        return f"timer service of operator '{self.name}'"

    def _enter_firing(self, what: str) -> None:
        self._check_not_firing(what)
        self._firing = True

    def _check_not_firing(self, what: str) -> None:
        if self._firing:
            raise TimerServiceBusyError(
                f"{self._where}: {what} was called while timers are firing; a timer "
                "callback may only register, delete and read timers and time"
            )

    def _unhashable(self, key: Any, namespace: Any, error: TypeError) -> LockgateError:
        return UnsupportedKeyError(
            f"{self._where}: a timer needs a hashable key and namespace, got key {key!r} "
            f"and namespace {namespace!r} ({error})"
        )


class TimerService:
    """What ``ctx.timer_service()`` gives a ``KeyedProcessFunction``: timers of the
    current key (read from the ``current_key`` provider at each call), and the
    current watermark and processing time. Timestamps are epoch milliseconds as ints;
    anything else is a ConfigurationError. When a timer fires, the function's
    ``on_timer(timestamp, ctx)`` runs with its key as the current key."""

    __slots__ = ("_current_key", "_service")

    def __init__(self, service: InternalTimerService, current_key: Callable[[], Any]) -> None:
        if not isinstance(service, InternalTimerService):
            raise ConfigurationError(f"TimerService needs an InternalTimerService, got {service!r}")
        if not callable(current_key):
            raise ConfigurationError(
                "TimerService needs a current_key provider (a callable returning the "
                f"current key), got {current_key!r}"
            )
        self._service = service
        self._current_key = current_key

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once the watermark reaches ``timestamp``
        (registering the same time again for the key keeps one timer)."""
        ts = check_timestamp(timestamp, self._what("register_event_time_timer"))
        self._service.register_event_time_timer(self._current_key(), ts)

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer`` for the current key once processing time reaches
        ``timestamp`` (a past time fires as soon as possible)."""
        ts = check_timestamp(timestamp, self._what("register_processing_time_timer"))
        self._service.register_processing_time_timer(self._current_key(), ts)

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Cancel the current key's event-time timer at ``timestamp`` (if any)."""
        ts = check_timestamp(timestamp, self._what("delete_event_time_timer"))
        self._service.delete_event_time_timer(self._current_key(), ts)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Cancel the current key's processing-time timer at ``timestamp`` (if any)."""
        ts = check_timestamp(timestamp, self._what("delete_processing_time_timer"))
        self._service.delete_processing_time_timer(self._current_key(), ts)

    def current_watermark(self) -> int:
        """The operator's current event time (``MIN_WATERMARK`` before the first watermark)."""
        return self._service.current_watermark

    def current_processing_time(self) -> int:
        """The operator's processing time (epoch ms, from its injectable clock)."""
        return self._service.current_processing_time()

    def _what(self, method: str) -> str:
        return f"timer_service().{method} (operator '{self._service.name}')"


__all__ = [
    "TIMER_SNAPSHOT_FORMAT",
    "TIMER_SNAPSHOT_VERSION",
    "InternalTimer",
    "InternalTimerService",
    "TimerService",
    "TimerServiceBusyError",
    "TimerSnapshot",
    "check_timestamp",
]
