"""Timer snapshots: the frozen view (synchronous part), the picklable payload grouped
by key group (asynchronous part) and reading payloads back for a key-group range
(M-T3, M-T4).

The payload :meth:`TimerSnapshot.materialize` returns::

    {"format": "lockgate-timers", "version": 1, "max_parallelism": M,
     "key_groups": {key_group: {"event_time": [(timestamp, key, namespace), ...],
                                "processing_time": [(timestamp, key, namespace), ...]}}}

Each list is in firing order (see :mod:`lockgate.time.timer_queue`). A timer goes with
the key group of its key, like the key's keyed state, so a subtask restoring a
key-group range gets exactly the timers of the keys it now owns, at any parallelism.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core.key_groups import check_restored_max_parallelism, key_groups_of_keys
from ..errors import ConfigurationError
from .timer_queue import FrozenView

#: the ``format`` mark and ``version`` of timer snapshot payloads
TIMER_SNAPSHOT_FORMAT = "lockgate-timers"
TIMER_SNAPSHOT_VERSION = 1
#: the queue names in a payload's key group entries
EVENT_TIME = "event_time"
PROCESSING_TIME = "processing_time"
QUEUES = (EVENT_TIME, PROCESSING_TIME)

TimerEntry = tuple[int, Any, Any]


class TimerSnapshot:
    """The consistent view :meth:`InternalTimerService.snapshot_view` took (M-T3).

    Registrations, deletions and firings after it was taken never change it.
    ``materialize()`` (any thread, any number of times) builds the payload;
    ``release()`` drops the view (idempotent; there is nothing to give back, since
    the service copies a shared bucket before writing it)."""

    __slots__ = ("_size", "_views", "max_parallelism", "name")

    def __init__(
        self,
        name: str,
        max_parallelism: int,
        event_time: FrozenView,
        processing_time: FrozenView,
        size: int,
    ) -> None:
        self.name = name
        self.max_parallelism = max_parallelism
        self._views: dict[str, FrozenView] | None = {
            EVENT_TIME: event_time,
            PROCESSING_TIME: processing_time,
        }
        self._size = size

    def size_hint(self) -> int:
        """The number of timers (both queues) in the snapshot."""
        return self._size

    def release(self) -> None:
        self._views = None

    def materialize(self) -> dict[str, Any]:
        """The picklable payload (see the module docstring); key groups are computed
        vectorized. Raises ConfigurationError after ``release()``, and
        :class:`~lockgate.errors.UnsupportedKeyError` for a key without a stable hash."""
        views = self._views
        if views is None:
            raise ConfigurationError(
                f"timer service '{self.name}': this timer snapshot was released; it "
                "cannot be materialized any more"
            )
        groups: dict[int, dict[str, list[TimerEntry]]] = {}
        for queue, view in views.items():
            for kg, entries in _grouped(view, self.max_parallelism):
                groups.setdefault(kg, {EVENT_TIME: [], PROCESSING_TIME: []})[queue] = entries
        return {
            "format": TIMER_SNAPSHOT_FORMAT,
            "version": TIMER_SNAPSHOT_VERSION,
            "max_parallelism": self.max_parallelism,
            "key_groups": dict(sorted(groups.items())),
        }


def _grouped(view: FrozenView, max_parallelism: int) -> Iterator[tuple[int, list[TimerEntry]]]:
    """``(key_group, entries in firing order)`` for the timers of one frozen queue."""
    entries = [(t, key, ns) for t in sorted(view) for ns, keys in view[t].items() for key in keys]
    n = len(entries)
    if n == 0:
        return
    kgs = key_groups_of_keys([e[1] for e in entries], max_parallelism)
    order = np.argsort(kgs, kind="stable")
    sorted_kgs = kgs[order]
    cuts = (np.flatnonzero(sorted_kgs[1:] != sorted_kgs[:-1]) + 1).tolist()
    ordered = [entries[i] for i in order.tolist()]
    for start, end in zip([0, *cuts], [*cuts, n]):
        yield int(sorted_kgs[start]), ordered[start:end]


def restored_entries(
    snapshots: Any, key_groups: range, max_parallelism: int, where: str
) -> Iterator[tuple[str, list[TimerEntry]]]:
    """``(queue, entries)`` of every key group in ``key_groups`` of every payload,
    after checking each payload's format, version and max parallelism and each entry's
    shape. Key groups outside the range are skipped without being read."""
    for i, snap in enumerate(snapshots):
        here = f"{where}: timer snapshot #{i}"
        groups = _check_payload(snap, here, max_parallelism)
        for kg, queues in groups.items():
            if kg not in key_groups:
                continue
            if not isinstance(queues, Mapping):
                raise ConfigurationError(
                    f"{here}: key group {kg!r} holds a {type(queues).__name__}, not a "
                    f"mapping of {EVENT_TIME!r}/{PROCESSING_TIME!r} to timer lists"
                )
            for queue in QUEUES:
                entries = queues.get(queue, ())
                yield queue, _checked_entries(entries, f"{here}, key group {kg}, {queue}")


def _check_payload(snap: Any, where: str, max_parallelism: int) -> Mapping[Any, Any]:
    if not isinstance(snap, Mapping) or snap.get("format") != TIMER_SNAPSHOT_FORMAT:
        shown = (
            f"format {snap.get('format')!r}"
            if isinstance(snap, Mapping)
            else f"a {type(snap).__name__}"
        )
        raise ConfigurationError(
            f"{where} is {shown}, not a timer snapshot (a dict with format "
            f"{TIMER_SNAPSHOT_FORMAT!r} from InternalTimerService.snapshot())"
        )
    version = snap.get("version")
    if version != TIMER_SNAPSHOT_VERSION:
        raise ConfigurationError(
            f"{where} has version {version!r}; this version of lockgate reads timer "
            f"snapshots of version {TIMER_SNAPSHOT_VERSION}"
        )
    check_restored_max_parallelism(snap.get("max_parallelism"), max_parallelism, where, "timers")
    groups = snap.get("key_groups")
    if not isinstance(groups, Mapping):
        raise ConfigurationError(
            f"{where} has no 'key_groups' mapping (found {type(groups).__name__})"
        )
    return groups


def _checked_entries(entries: Any, where: str) -> list[TimerEntry]:
    if not isinstance(entries, (list, tuple)):
        raise ConfigurationError(
            f"{where} is a {type(entries).__name__}, not a list of "
            "(timestamp, key, namespace) timers"
        )
    for e in entries:
        if not isinstance(e, tuple) or len(e) != 3 or type(e[0]) is not int:
            raise ConfigurationError(
                f"{where} holds {e!r}; timers are (timestamp: int, key, namespace) tuples"
            )
    return list(entries)
