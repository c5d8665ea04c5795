"""How a Kafka reader gets its partitions' records: a :class:`PartitionFetcher` (through
librdkafka's consumer, or with the source's own Fetch requests), the splits both share
(:class:`ReaderSplits`), and a decoded batch waiting to go out (:class:`ReadyBatch`).
A reader whose direct fetch cannot go on swaps its fetcher for librdkafka's, which
continues every split from its offset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...core.batch import Batch
from ..base import ReaderOutput
from .split import KafkaSplit

#: a split's key: (topic, partition)
SplitKey = tuple[str, int]


class ReaderSplits:
    """The splits of one reader: those being read (``active``, each holding the offset
    of the next record to emit), those read to their bounded end (``finished``, kept in
    checkpoints so that no restore reads them again), and the final offsets of splits
    finished since the last offset commit (``finished_offsets``)."""

    def __init__(self) -> None:
        self.active: dict[SplitKey, KafkaSplit] = {}
        self.finished: dict[SplitKey, KafkaSplit] = {}
        self.finished_offsets: dict[SplitKey, int] = {}

    def finish(self, key: SplitKey, output: ReaderOutput) -> KafkaSplit:
        """Move the split of ``key`` (read to its end) from the active to the finished
        ones and tell ``output`` (``split_finished``)."""
        split = self.finished[key] = self.active.pop(key)
        self.finished_offsets[key] = split.offset
        output.split_finished(split.split_id)
        return split

    def take_finished_offsets(self) -> dict[SplitKey, int]:
        """The final offsets of the splits finished since the last call."""
        offsets, self.finished_offsets = self.finished_offsets, {}
        return offsets


@dataclass
class ReadyBatch:
    """One decoded batch of one partition not emitted yet: emitting it moves the split's
    position to ``next_offset`` (past every record it holds or refused), and its
    ``dead_letters`` (those records' dead letters) go out in the same poll, never
    before: a checkpoint between the two would hold a dead letter and an offset before
    its record, and a restore would send it again."""

    key: SplitKey
    batch: Batch | None
    next_offset: int
    dead_letters: list[dict[str, Any]] = field(default_factory=list)


class PartitionFetcher(Protocol):
    """Fetches, decodes and emits the records of a reader's active splits, and moves
    their positions. Guarantees of every implementation: the records of a partition are
    emitted in offset order, each once, one batch per partition and poll; a split's
    position never passes a record not emitted (or reported malformed); a bounded split
    is finished (:meth:`ReaderSplits.finish`) when its position reaches its end."""

    def assign(self, splits: list[KafkaSplit]) -> None:
        """Start reading ``splits`` (active, unfinished, new to this fetcher) at their
        offsets."""
        ...

    def poll(self, output: ReaderOutput) -> bool:
        """Emit what is ready without blocking; True when records came or more are
        waiting. May raise :class:`~lockgate.connectors.kafka.direct_client.FetchUnavailable`
        (the direct fetch only) before emitting anything: the reader then continues
        through librdkafka."""
        ...

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """After a poll that emitted nothing: call ``wake()`` (from any thread) once
        records may be ready, and return True; False when this fetcher cannot tell
        (the reader then polls on its interval)."""
        ...

    def lag(self) -> int | None:
        """Records between the active splits' offsets and their partitions' high
        watermarks (or ends), from what the client already knows; None while no
        partition's watermark is known."""
        ...

    def close(self) -> None:
        """Release what the fetcher holds (not the consumer, which the reader owns)."""
        ...
