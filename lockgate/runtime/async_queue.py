"""The element queues of the async I/O operator (M-W7).

The operator puts every input record and every watermark into a queue, starts an
asynchronous request per record, completes the record's entry when the request
ends, and calls :meth:`ElementQueue.emit_completed` to pass on what may leave.

* :class:`OrderedElementQueue`: entries leave in input order. A watermark is an
  entry that is complete from the start, so it leaves exactly when every record
  in front of it has left, and it never holds back anything behind it longer
  than the records in front of it do.
* :class:`UnorderedElementQueue`: watermarks split the queue into segments.
  Within a segment of records, completed records leave in the order they
  completed; a segment leaves only after every segment in front of it has; a
  watermark is a segment of its own. So no record ever moves across a watermark
  in either direction.

Both queues hold at most ``capacity`` entries (records and watermarks count
alike). A full queue refuses new entries: the operator checks
:meth:`ElementQueue.has_capacity` and waits (processing its mailbox, where
completions arrive) until an entry has left: backpressure.

For checkpoints, :meth:`ElementQueue.pending_inputs` lists every input still in
the queue (in flight, or complete but not yet emitted) in input order; the
operator stores it and, on restore, puts those elements into a fresh queue and
issues the records' requests again.

The queues are not thread-safe: the task thread alone calls them (completions
from the request runner are handed to the task thread through its mailbox).
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.elements import Watermark
from ..errors import ConfigurationError, LockgateError


class QueueFullError(LockgateError, RuntimeError):
    """An entry was added to a full queue; check ``has_capacity()`` first and wait."""


@dataclass(frozen=True)
class Completion:
    """How a request ended: with ``results`` (a list, possibly empty) or with ``error``."""

    results: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    @classmethod
    def success(cls, results: Iterable[Any]) -> Completion:
        return cls(results=list(results))

    @classmethod
    def failure(cls, error: BaseException) -> Completion:
        if not isinstance(error, BaseException):
            raise ConfigurationError(
                f"a failed completion needs an exception, got {type(error).__name__}"
            )
        return cls(error=error)

    @property
    def failed(self) -> bool:
        return self.error is not None


class QueueOutput(Protocol):
    """Where :meth:`ElementQueue.emit_completed` sends what leaves the queue."""

    def emit_results(self, record: Any, results: list[Any]) -> None:
        """The results of ``record``'s request (called once per record, possibly with [])."""

    def emit_watermark(self, watermark: Watermark) -> None:
        """A watermark, after every result of every record that arrived before it."""


class RecordEntry:
    """A record in a queue; the operator completes it when its request ends.

    The first completion wins: later ones are ignored (``complete``/``fail``/``settle``
    return False), so a late result racing a timeout cannot change an entry.
    """

    __slots__ = ("record", "_completion", "_on_done")

    def __init__(self, record: Any) -> None:
        self.record = record
        self._completion: Completion | None = None
        self._on_done: Callable[[RecordEntry], None] | None = None

    @property
    def done(self) -> bool:
        return self._completion is not None

    @property
    def completion(self) -> Completion | None:
        return self._completion

    def settle(self, completion: Completion) -> bool:
        """Complete the entry with ``completion``; False if it was already complete."""
        if not isinstance(completion, Completion):
            raise ConfigurationError(
                f"settle() needs a Completion, got {type(completion).__name__}"
            )
        if self._completion is not None:
            return False
        self._completion = completion
        if self._on_done is not None:
            self._on_done(self)
        return True

    def complete(self, results: Iterable[Any]) -> bool:
        """Complete the entry with ``results``; False if it was already complete."""
        return self.settle(Completion.success(results))

    def fail(self, error: BaseException) -> bool:
        """Complete the entry with ``error``; False if it was already complete."""
        return self.settle(Completion.failure(error))

    def __repr__(self) -> str:
        state = (
            "pending"
            if self._completion is None
            else ("failed" if self._completion.failed else "done")
        )
        return f"RecordEntry({self.record!r:.60}, {state})"


def _check_capacity(capacity: object) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigurationError(
            f"the async I/O queue capacity must be a positive int, got {capacity!r}"
        )
    return capacity


def _check_watermark(watermark: object) -> Watermark:
    if not isinstance(watermark, Watermark):
        raise ConfigurationError(
            f"add_watermark() needs a Watermark, got {type(watermark).__name__}"
        )
    return watermark


def _emit(entry: RecordEntry, output: QueueOutput) -> None:
    completion = entry.completion
    assert completion is not None
    if completion.error is not None:
        raise completion.error
    output.emit_results(entry.record, completion.results)


class ElementQueue(abc.ABC):
    """The common contract of the two queues (M-W7)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity)
        self._size = 0

    def __len__(self) -> int:
        """Entries in the queue (records and watermarks not yet emitted)."""
        return self._size

    def is_empty(self) -> bool:
        return self._size == 0

    def has_capacity(self) -> bool:
        """Whether one more entry fits; when not, the operator waits (backpressure)."""
        return self._size < self.capacity

    def _reserve(self, what: str) -> None:
        if self._size >= self.capacity:
            raise QueueFullError(
                f"the async I/O queue is full ({self._size}/{self.capacity}) and cannot take "
                f"a {what}; wait until has_capacity() is true"
            )
        self._size += 1

    def add_record(self, record: Any) -> RecordEntry:
        """Queue ``record``; return its entry, to complete when its request ends.

        Raises :class:`QueueFullError` when the queue is full.
        """
        self._reserve("record")
        entry = RecordEntry(record)
        self._add_record(entry)
        return entry

    def add_watermark(self, watermark: Watermark) -> None:
        """Queue ``watermark`` (complete from the start). The operator calls
        :meth:`emit_completed` right after, so a watermark with nothing pending in
        front of it leaves at once. Raises :class:`QueueFullError` when full."""
        _check_watermark(watermark)
        self._reserve("watermark")
        self._add_watermark(watermark)

    def emit_completed(self, output: QueueOutput) -> int:
        """Send every entry that may leave now to ``output``, in the order the queue's
        rule allows; return how many entries left.

        A failed record raises its error when it would leave; it stays at the front
        of the queue (the operator fails the task), the entries before it have left.
        """
        return self._emit_completed(output)

    @abc.abstractmethod
    def has_completed(self) -> bool:
        """Whether :meth:`emit_completed` would emit at least one entry."""

    @abc.abstractmethod
    def pending_inputs(self) -> list[Any]:
        """Every record and :class:`Watermark` still in the queue, in input order
        (including completed records not yet emitted): what a checkpoint stores and a
        restore puts back (re-issuing the records' requests)."""

    @abc.abstractmethod
    def _add_record(self, entry: RecordEntry) -> None: ...

    @abc.abstractmethod
    def _add_watermark(self, watermark: Watermark) -> None: ...

    @abc.abstractmethod
    def _emit_completed(self, output: QueueOutput) -> int: ...


class OrderedElementQueue(ElementQueue):
    """Results leave in input order; a watermark is an always-complete entry (M-W7)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._entries: deque[RecordEntry | Watermark] = deque()

    def _add_record(self, entry: RecordEntry) -> None:
        self._entries.append(entry)

    def _add_watermark(self, watermark: Watermark) -> None:
        self._entries.append(watermark)

    @staticmethod
    def _ready(entry: RecordEntry | Watermark) -> bool:
        return isinstance(entry, Watermark) or entry.done

    def has_completed(self) -> bool:
        return bool(self._entries) and self._ready(self._entries[0])

    def _emit_completed(self, output: QueueOutput) -> int:
        emitted = 0
        entries = self._entries
        while entries and self._ready(entries[0]):
            head = entries[0]
            if isinstance(head, Watermark):
                output.emit_watermark(head)
            else:
                _emit(head, output)
            entries.popleft()
            self._size -= 1
            emitted += 1
        return emitted

    def pending_inputs(self) -> list[Any]:
        return [e if isinstance(e, Watermark) else e.record for e in self._entries]


class _Segment:
    """Records between two watermarks, or a single watermark."""

    __slots__ = ("watermark", "entries", "completed")

    def __init__(self, watermark: Watermark | None = None) -> None:
        self.watermark = watermark
        # records not yet emitted, in input order (dicts keep insertion order)
        self.entries: dict[int, RecordEntry] = {}
        # completed records not yet emitted, in completion order
        self.completed: deque[RecordEntry] = deque()


class UnorderedElementQueue(ElementQueue):
    """Results leave in any order within a segment; a watermark is a segment of its
    own; a segment leaves only after all segments before it have (M-W7).

    Within a segment, completed records leave in the order they completed.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._segments: deque[_Segment] = deque()

    def _add_record(self, entry: RecordEntry) -> None:
        if not self._segments or self._segments[-1].watermark is not None:
            self._segments.append(_Segment())
        segment = self._segments[-1]
        segment.entries[id(entry)] = entry

        def on_done(done: RecordEntry) -> None:
            segment.completed.append(done)

        entry._on_done = on_done

    def _add_watermark(self, watermark: Watermark) -> None:
        self._segments.append(_Segment(watermark))

    def has_completed(self) -> bool:
        # a record segment is never empty: it is created for a record and dropped as
        # soon as its last record has been emitted
        if not self._segments:
            return False
        head = self._segments[0]
        return head.watermark is not None or bool(head.completed)

    def _emit_completed(self, output: QueueOutput) -> int:
        emitted = 0
        segments = self._segments
        while segments:
            head = segments[0]
            if head.watermark is not None:
                output.emit_watermark(head.watermark)
                segments.popleft()
                self._size -= 1
                emitted += 1
                continue
            while head.completed:
                entry = head.completed[0]
                _emit(entry, output)
                head.completed.popleft()
                del head.entries[id(entry)]
                self._size -= 1
                emitted += 1
            if head.entries:
                break
            segments.popleft()
        return emitted

    def pending_inputs(self) -> list[Any]:
        inputs: list[Any] = []
        for segment in self._segments:
            if segment.watermark is not None:
                inputs.append(segment.watermark)
            else:
                inputs.extend(e.record for e in segment.entries.values())
        return inputs
