"""The source and sink contracts.

Sources follow Flink's split model: a :class:`Source` cuts its input into
splits (``create_splits``), each subtask's :class:`SourceReader` reads the
splits assigned to it and records a read position per split (checkpoints
store it). ``poll`` emits at most one batch per call, never blocks for long,
and says whether more is available now, later, or never.

A :class:`Sink` makes one :class:`SinkWriter` per subtask.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..core.batch import Batch
from ..errors import ConfigurationError, MalformedRecordError
from ..runtime.context import RuntimeContext

DEAD_LETTER_TAG = "dead-letter"
#: what a source does with a record it cannot parse
ON_ERROR = ("fail", "dead_letter")
#: the default largest record (in bytes, as read) a source decodes: larger ones are
#: malformed (``max_record_bytes``)
DEFAULT_MAX_RECORD_BYTES = 32 * 1024 * 1024
#: how much of an oversized record its dead letter keeps (the ``raw`` prefix), in bytes
OVERSIZED_PREFIX_BYTES = 1024
#: what decoding one record may raise because of the record's content: malformed JSON
#: (``json.JSONDecodeError``), bad UTF-8 (``UnicodeDecodeError``), an integer of more
#: than 4,300 digits (``ValueError``), nesting deeper than the interpreter's recursion
#: limit (``RecursionError``), numbers out of range (``OverflowError``). Sources catch
#: these around their own decoding only, never around user code. ``MemoryError`` is
#: not among them: records are bounded by ``max_record_bytes``, so running out of
#: memory is the machine's problem, not the record's.
DECODE_ERRORS: tuple[type[BaseException], ...] = (ValueError, RecursionError, OverflowError)


class InputStatus(enum.Enum):
    MORE_AVAILABLE = "more"
    NOTHING_AVAILABLE = "nothing now"
    END_OF_INPUT = "end"


class ReaderOutput(ABC):
    """What a reader emits into."""

    @abstractmethod
    def emit(self, batch: Batch) -> None: ...

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        """Emit ``batch``, read from split ``split_id``: with a watermark strategy, each
        split gets its own watermark generator and the source's watermark is the
        minimum over its active splits (M-W1, M-W2), so one lagging split holds back
        only what it must. Readers that know their splits should call this."""
        self.emit(batch)

    def split_started(self, split_id: Any) -> None:
        """Split ``split_id`` is assigned and will be read: from now on it holds the
        watermark back (at its start, until its first batch or until it goes idle with
        ``with_idleness``), as Flink's split outputs do (M-W1). Call it once per split,
        before the split's first batch; a split never announced is registered by its
        first batch, so a watermark emitted before it may already have passed it."""

    def split_finished(self, split_id: Any) -> None:
        """Split ``split_id`` is exhausted: it no longer holds the watermark back."""

    @abstractmethod
    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        """Send an unparseable input record to the dead-letter side output."""


class SourceReader(ABC):
    """Reads the splits of one subtask."""

    #: On restore, readers get the unfinished splits of the old subtasks assigned to
    #: them (old subtask ``j`` goes to new subtask ``j % parallelism``). A reader that
    #: assigns work by a rule of its own (e.g. a hash of a file name) sets this to True:
    #: it then gets the splits of *every* old subtask and keeps its own share.
    restores_every_split: bool = False

    #: Records between the reader's position and the end of its input as last seen
    #: (a metric: the source lag), None when the reader does not know. Readers that
    #: know set it as they read; it is read from other threads, never locked.
    pending_records: int | None = None

    @abstractmethod
    def add_splits(self, splits: list[Any]) -> None: ...

    @abstractmethod
    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit the next batch if one is ready; say what to expect next."""

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: how long until data may be ready (None: unknown)."""
        return None

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """After NOTHING_AVAILABLE, before the task waits: arrange for ``wake()`` to be
        called (from any thread, at most once) as soon as data may be ready, and return
        True; the task then wakes on arrival rather than after :meth:`wait_hint_ms`
        (which still bounds its wait). A spurious ``wake()`` costs one empty poll.
        Default: False, the reader cannot tell (the task polls after the hint)."""
        return False

    def snapshot_positions(self) -> list[Any]:
        """The unfinished splits with their read positions (stored in checkpoints)."""
        return []

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        """Checkpoint ``checkpoint_id`` completed; ``positions`` is what
        ``snapshot_positions`` returned for it. Called on the task thread. For side
        effects that must wait for a durable checkpoint (e.g. committing offsets to a
        Kafka consumer group for monitoring); never needed for correctness. Default:
        nothing."""

    def close(self) -> None: ...


class Source(ABC):
    """A source of records. ``bounded`` sources end; their job then finishes."""

    bounded: bool = True
    #: a short name shown in plans when the user gives none
    default_name: str = "source"
    #: ``"dead_letter"``: records the source cannot parse go to the side output
    #: ``lg.DEAD_LETTER`` (see :func:`report_malformed`); ``"fail"``: they fail the job
    on_error: str = "fail"

    @property
    def side_outputs(self) -> tuple[str, ...]:
        """The side outputs the source emits: the dead letters with ``on_error="dead_letter"``
        (something must read them, or the job is refused: they would be lost)."""
        return (DEAD_LETTER_TAG,) if self.on_error == "dead_letter" else ()

    @abstractmethod
    def create_splits(self, parallelism: int) -> list[Any]:
        """Cut the input into splits; subtask i reads splits i, i+p, i+2p, ..."""

    @abstractmethod
    def create_reader(self, ctx: RuntimeContext) -> SourceReader: ...

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        """The splits subtask ``ctx.subtask_index`` reads after a restore, from the
        ``splits`` its reader takes over (the assigned old subtasks' or, with
        ``restores_every_split``, every old subtask's), reconciled with this source's
        configuration, which may differ from the run that wrote the checkpoint (M-R3).
        Called on the subtask before ``add_splits``, once per restore; returns new
        objects (never changes ``splits``). The positions come from the checkpoint; what
        the configuration decides is the source's: above all, a source built bounded
        ends after a restore too, also from the state of an unbounded run (its splits
        get the ends a fresh start would give them). Default: ``splits`` as they are."""
        return splits

    def max_parallelism(self) -> int | None:
        """The largest parallelism this source can use (None: any)."""
        return None

    def check_before_run(self) -> None:
        """Called on the driver before a job with this source starts: raise
        ``ConfigurationError`` for a setting the job cannot run with. Default: nothing."""

    def prepare_run(self) -> bool:
        """Called on the driver once per job run (after ``check_before_run``), on the
        copy of the source every subtask of every attempt of the run then gets: fix
        here what must be the same in all of them (e.g. start offsets resolved once, so
        a restart before the first checkpoint replays the same records). Returns True
        if it changed the source. Default: nothing, False."""
        return False


class SinkWriter(ABC):
    """Writes one subtask's records."""

    @abstractmethod
    def write(self, batch: Batch) -> None: ...

    def finish(self) -> None:
        """End of input: everything written must now be durable/visible."""

    def close(self) -> None:
        """Release resources (also after a failure)."""

    def result(self) -> Any:
        """A value returned to the client when the job ends (e.g. collected records)."""
        return None


class Sink(ABC):
    default_name: str = "sink"

    @property
    def accepts_changes(self) -> bool:
        """Whether the sink applies a changelog (updates and deletes). When True its
        writer gets batches with their row kinds (``lockgate.core.batch.kinds_of``; the
        event-time column is still left out); when False (default) it gets what users
        see, and a record that is not an insert fails the job naming the sink, since
        writing an update or a delete as a new row would corrupt its output."""
        return False

    @property
    def commits_on_checkpoint(self) -> bool:
        """Whether the sink publishes its records only when a checkpoint completes (or,
        without checkpoints, when a bounded job has ended): exactly-once two-phase
        commit (M-X2). An unbounded job without checkpointing would then never publish
        anything, so such a job is refused when it is built. Default: False (records
        are written as they come)."""
        return False

    def check_before_run(self) -> None:
        """Called on the driver before a job with this sink starts: raise
        ``ConfigurationError`` for a setting the job cannot run with (e.g. a database
        that cannot take the sink's transactions). Default: nothing."""

    @abstractmethod
    def create_writer(self, ctx: RuntimeContext) -> SinkWriter: ...


def assign_splits(splits: list[Any], subtask_index: int, parallelism: int) -> list[Any]:
    """The splits of subtask ``subtask_index``: every ``parallelism``-th, from its index."""
    return splits[subtask_index::parallelism]


def check_bool(owner: str, arg: str, value: object) -> bool:
    """``value`` of argument ``arg`` of ``owner`` checked to be True or False."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner} {arg} must be True or False, got {value!r}")
    return value


def check_int(owner: str, arg: str, value: object, low: int, meaning: str) -> int:
    """``value`` checked to be an int (not a bool) >= ``low``; ``meaning`` says what it
    is, for the message."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigurationError(
            f"{owner} {arg} must be an int >= {low} ({meaning}), got {value!r}"
        )
    return value


def check_positive(owner: str, arg: str, value: object, meaning: str) -> float:
    """``value`` checked to be a number > 0; returned as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(
            f"{owner} {arg} must be a positive number ({meaning}), got {value!r}"
        )
    return float(value)


def check_on_error(source: str, on_error: object) -> str:
    """``on_error`` of source ``source`` checked: ``"fail"`` or ``"dead_letter"``."""
    if on_error not in ON_ERROR:
        raise ConfigurationError(
            f"{source} on_error must be 'fail' (a malformed record fails the job with its "
            f"position) or 'dead_letter' (it goes to the side output lg.DEAD_LETTER), "
            f"got {on_error!r}"
        )
    return str(on_error)


def check_max_record_bytes(owner: str, value: object) -> int:
    """``max_record_bytes`` of source ``owner`` checked: an int >= 1 (bytes)."""
    return check_int(
        owner,
        "max_record_bytes",
        value,
        1,
        "the largest record, in bytes, decoded; larger ones are malformed and "
        f"go to the dead-letter output; default {DEFAULT_MAX_RECORD_BYTES}",
    )


def decode_error(what: str, error: BaseException) -> str:
    """The ``error`` text of a dead letter whose decoding as ``what`` (e.g. ``"JSON"``)
    raised ``error``: its type is named unless it is a plain parse error."""
    import json

    if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
        return f"invalid {what}: {error}"
    return f"invalid {what} ({type(error).__name__}): {error}"


def oversized(size: int | str, limit: int, prefix: bytes) -> tuple[str, str]:
    """``(raw, error)`` of a dead letter for a record of ``size`` bytes (an int, or a
    text such as ``"more than 40000000"``) over ``limit``: ``raw`` is the text of its
    first :data:`OVERSIZED_PREFIX_BYTES` bytes (``prefix``, cut to that length)."""
    raw = prefix[:OVERSIZED_PREFIX_BYTES].decode("utf-8", "replace")
    return raw, (
        f"record of {size} bytes is over max_record_bytes={limit}; not decoded, raw "
        f"holds its first {min(len(prefix), OVERSIZED_PREFIX_BYTES)} bytes (raise "
        "max_record_bytes if such records are valid)"
    )


def report_malformed(
    on_error: str,
    output: ReaderOutput,
    *,
    what: str,
    location: str,
    raw: Any,
    error: str,
    **fields: Any,
) -> None:
    """A record a source cannot parse: never dropped (the "Bad input" rule).

    With ``on_error="dead_letter"`` it goes to the dead-letter side output as a dict
    ``{"location", "raw", "error", **fields}`` (``fields`` name the position, e.g.
    ``file`` and ``line``, or ``stream`` and ``id``); otherwise this raises
    :class:`~lockgate.errors.MalformedRecordError` with ``location``. ``what`` names
    the kind of record, e.g. ``"jsonl record"``.
    """
    if on_error == "dead_letter":
        output.emit_dead_letter({"location": location, **fields, "raw": raw, "error": error})
        return
    raise MalformedRecordError(
        f"malformed {what} at {location}: {error} (raw: {raw!r:.200}); fix the input, or "
        "pass on_error='dead_letter' to route such records to the side output "
        "lg.DEAD_LETTER",
        location=location,
        raw=raw,
    )
