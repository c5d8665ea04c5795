"""The stream elements a channel carries (M-E1).

A channel is an ordered queue of: record batches (``pyarrow.RecordBatch`` or
:class:`~lockgate.core.batch.RowBatch`), :class:`Watermark`,
:class:`StreamStatus`, :class:`CheckpointBarrier`, :class:`CancellationMarker`,
:class:`~lockgate.core.latency.marker.LatencyMarker` (end-to-end latency), at most
one :data:`END_OF_DATA` and one :data:`END_OF_PARTITION`. Nothing overtakes anything
else in a channel (unaligned checkpoints, a later issue, are the one sanctioned
exception).
All elements except batches are small, immutable and picklable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Union

from .batch import Batch
from .latency.marker import LatencyMarker

MAX_WATERMARK = 2**63 - 1
MIN_WATERMARK = -(2**63)


@dataclass(frozen=True)
class Watermark:
    """Event time has reached ``timestamp`` (ms): no record with a smaller one is expected.

    ``Watermark(MAX_WATERMARK)`` marks the end of event time (M-W1).
    """

    timestamp: int

    @property
    def is_max(self) -> bool:
        return self.timestamp == MAX_WATERMARK


class StreamStatus(enum.Enum):
    """Whether a channel's producer is emitting (M-W2)."""

    IDLE = "idle"
    ACTIVE = "active"


class CheckpointType(enum.Enum):
    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True)
class CheckpointOptions:
    """What a barrier asks for (M-E2). Savepoints are always aligned.

    ``drain`` (savepoints only, ``stop_with_savepoint(drain=True)``): a task triggered
    with it ends its input first (its sources stop reading), so the maximum watermark
    and the end of data reach every task before this barrier does."""

    type: CheckpointType = CheckpointType.CHECKPOINT
    unaligned: bool = False
    drain: bool = False

    def __post_init__(self) -> None:
        if self.type is CheckpointType.SAVEPOINT and self.unaligned:
            raise ValueError("a savepoint barrier is always aligned (M-E2)")
        if self.drain and self.type is not CheckpointType.SAVEPOINT:
            raise ValueError("only a savepoint barrier can drain the job")


@dataclass(frozen=True)
class CheckpointBarrier:
    """Barrier of checkpoint ``checkpoint_id`` (strictly increasing per job), triggered at
    ``timestamp`` (epoch ms) (M-E2)."""

    checkpoint_id: int
    timestamp: int
    options: CheckpointOptions = CheckpointOptions()


@dataclass(frozen=True)
class PriorityBarrier:
    """An unaligned ``barrier`` a network channel received ahead of the data in front of
    it (M-B7). With ``overtaken`` (a tuple): the barrier has arrived, and the channel
    delivers the overtaken elements next; their batches are in-flight state of the
    checkpoint. Without: an announcement; the data the channel delivers until the
    barrier itself arrives is in-flight state."""

    barrier: CheckpointBarrier
    overtaken: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class CancellationMarker:
    """Tells downstream that checkpoint ``checkpoint_id`` was cancelled upstream (M-T2)."""

    checkpoint_id: int


class _EndOfData:
    """The producer of a channel finished its operators: no record, watermark or status
    follows on the channel, only checkpoint barriers, cancellation markers and its end of
    partition. The producer sends its end of partition once its final checkpoint
    completed (FLIP-147); until then barriers still flow through the channel."""

    _instance: _EndOfData | None = None

    def __new__(cls) -> _EndOfData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "END_OF_DATA"

    def __reduce__(self) -> str:
        return "END_OF_DATA"


END_OF_DATA = _EndOfData()
EndOfData = _EndOfData


class _EndOfPartition:
    """The last element of a channel: its producer has finished."""

    _instance: _EndOfPartition | None = None

    def __new__(cls) -> _EndOfPartition:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "END_OF_PARTITION"

    def __reduce__(self) -> str:
        return "END_OF_PARTITION"


END_OF_PARTITION = _EndOfPartition()
EndOfPartition = _EndOfPartition

ControlElement = Union[  # noqa: UP007 (runtime alias kept as typing.Union)Watermark, StreamStatus, CheckpointBarrier, CancellationMarker,
    PriorityBarrier, _EndOfData, _EndOfPartition, LatencyMarker
]
StreamElement = Union[Batch, ControlElement]  # noqa: UP007 (runtime alias kept as typing.Union)
