"""Checkpoint ids: strictly increasing per job and never reused (M-E2, M-T3).

An id is never handed out twice on one checkpoint storage: not by two attempts of one
run, not by two runs, whether or not the checkpoint with that id completed. This
matters because the asynchronous part of a failed attempt's snapshot may still be
writing into ``chk-<id>/`` (or deleting what it wrote there) after the next attempt
started: if the next attempt reused the id, those late writes and deletions would hit
the new attempt's checkpoint.

How: :class:`CheckpointIdCounter` *reserves* ids durably before handing them out. The
reservation is the file ``_checkpoint_ids`` at the storage root (checksummed JSON,
``{"reserved_through": N}``, written atomically), so ids ``<= N`` may have been used.
A counter starts after the largest of: the reservation, the durable pointer
(``storage.read_latest()``, M-C8) and the newest folder holding a ``_metadata``
(``storage.completed_ids()``); on empty storage it starts at 1. It reserves
``reserve`` ids per write (one small atomic write per ``reserve`` checkpoints, not one
per checkpoint) and writes the next block when they run out. :meth:`release` (the
coordinator calls it when it shuts down) gives back the unused rest of the block,
so the next attempt or run continues right after the last id handed out instead of
after the block: ids stay dense unless a driver dies without releasing.

Failures: the storage is read on the first :meth:`next_id` call (not on
construction) and written when a block is reserved, so a storage that cannot be read
or written surfaces as "a new id cannot be obtained" (M-C1, ``ID_UNAVAILABLE``) when a
trigger needs an id, and the next call tries again. An id is never returned before the
reservation covering it is durable.

Before writing a block the counter reads the reservation again and starts after it if
another counter reserved more since (e.g. after this one was released). Two drivers
writing checkpoints into one storage *at the same time* are still not supported (the
read and the write are not one atomic step, and they would overwrite each other's
``_latest``).
"""

from __future__ import annotations

import json
import logging
import threading

from ..fs_storage import KIND_JSON, decode_file, encode_file
from ..storage import CheckpointStorage, CorruptCheckpointError

log = logging.getLogger(__name__)

#: the reservation file, at the storage root
RESERVATION = "_checkpoint_ids"
#: ids reserved per durable write
DEFAULT_RESERVE = 32
_DAMAGED_HINT = (
    "the checkpoint ids already used are unknown, so no checkpoint can be "
    "triggered. Delete the file to continue after the newest completed "
    "checkpoint (only while nothing else writes to this storage)"
)


def read_reservation(storage: CheckpointStorage) -> int:
    """The largest id reserved in ``storage`` (0 when nothing was). Raises
    :class:`~lockgate.checkpoint.storage.CorruptCheckpointError` for a damaged file."""
    try:
        data = storage.read_file(RESERVATION)
    except FileNotFoundError:
        return 0
    where = f"{storage.url.rstrip('/')}/{RESERVATION}"
    try:
        payload, _ = decode_file(data, KIND_JSON, where)
        value = json.loads(payload.decode("utf-8"))
    except (CorruptCheckpointError, ValueError) as e:
        raise CorruptCheckpointError(f"{e}; {_DAMAGED_HINT}") from e
    reserved = value.get("reserved_through") if isinstance(value, dict) else None
    if isinstance(reserved, bool) or not isinstance(reserved, int) or reserved < 0:
        raise CorruptCheckpointError(
            f"checkpoint id reservation {where} holds {value!r}, not "
            f'{{"reserved_through": <int >= 0>}}; {_DAMAGED_HINT}'
        )
    return reserved


def write_reservation(storage: CheckpointStorage, reserved_through: int) -> None:
    """Durably record that ids up to ``reserved_through`` may be in use (atomic)."""
    payload = json.dumps({"reserved_through": reserved_through}).encode("utf-8")
    storage.write_file(RESERVATION, encode_file(payload, KIND_JSON), atomic=True)


class CheckpointIdCounter:
    """Hands out checkpoint ids, never one that was handed out before on its storage
    (see the module docstring). Thread-safe."""

    def __init__(
        self,
        storage: CheckpointStorage | None = None,
        *,
        start: int | None = None,
        reserve: int = DEFAULT_RESERVE,
    ) -> None:
        """``start``: the smallest first id (with ``storage`` the first id is also after
        every id the storage knows); without ``storage`` ids live in memory only and
        start at ``start`` or 1. ``reserve``: ids reserved per durable write (>= 1)."""
        if start is not None and start < 1:
            raise ValueError(f"checkpoint ids start at 1 or later, got {start}")
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 1:
            raise ValueError(
                f"reserve must be an int >= 1 (ids reserved per write), got {reserve!r}"
            )
        self._storage = storage
        self._start = start if start is not None else 1
        self._reserve = reserve
        #: the next id to hand out; None until the storage was read
        self._next: int | None = self._start if storage is None else None
        #: the last id the durable reservation covers (storage only)
        self._reserved_through = 0
        self._lock = threading.Lock()

    @staticmethod
    def first_id_after_storage(storage: CheckpointStorage) -> int:
        """The id following every id ``storage`` knows: reserved, named by the durable
        pointer or holding a ``_metadata`` (1 when it knows none)."""
        newest = max(read_reservation(storage), storage.read_latest() or 0)
        ids = storage.completed_ids()
        if ids:
            newest = max(newest, max(ids))
        return newest + 1

    def next_id(self) -> int:
        """The next id; raises whatever reading or writing the storage raised (M-C1)."""
        with self._lock:
            if self._next is None:
                assert self._storage is not None
                self._next = max(self._start, self.first_id_after_storage(self._storage))
            value = self._next
            if self._storage is not None and value > self._reserved_through:
                # a new block; skip what another counter reserved since (a later run's
                # counter while this one was released, say)
                value = max(value, read_reservation(self._storage) + 1)
                through = value + self._reserve - 1
                write_reservation(self._storage, through)  # before the id is handed out
                self._reserved_through = through
            self._next = value + 1
            return value

    def release(self) -> None:
        """Give back the reserved ids not handed out yet, so the next counter on this
        storage continues right after the last id handed out. The counter stays usable
        (it reserves again when needed). Call when the coordinator stops; a failure is
        logged and only leaves a gap in the ids."""
        with self._lock:
            if self._storage is None or self._next is None:
                return
            last = self._next - 1
            if self._reserved_through <= last:
                return
            try:
                if read_reservation(self._storage) != self._reserved_through:
                    return  # another counter reserved after us: leave its reservation alone
                write_reservation(self._storage, last)
                self._reserved_through = last
            except Exception as e:  # noqa: BLE001 - a gap in the ids is harmless
                log.warning(
                    "giving back the unused checkpoint ids %d..%d of %s failed: %s",
                    last + 1,
                    self._reserved_through,
                    self._storage.url,
                    e,
                )

    def peek(self) -> int | None:
        """The id :meth:`next_id` will return, or None before the storage was read."""
        with self._lock:
            return self._next
