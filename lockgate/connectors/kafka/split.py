"""A Kafka source's split: one topic partition and its read position (``kafka.split``
in checkpoints and savepoints), and which subtask owns it."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ...core.state_records import state_record

#: the split offset meaning "the partition's first offset" (librdkafka's OFFSET_BEGINNING)
EARLIEST = -2


@state_record("kafka.split")
@dataclass
class KafkaSplit:
    """One topic partition. ``offset`` is the offset of the next record to read
    (:data:`EARLIEST`: the partition's first offset); ``end`` is, for a bounded source,
    the partition's end offset when the job started (exclusive), None when unbounded."""

    topic: str
    partition: int
    offset: int
    end: int | None = None

    @property
    def split_id(self) -> str:
        return f"{self.topic}[{self.partition}]"

    @property
    def finished(self) -> bool:
        """Bounded and every record before ``end`` read."""
        return self.end is not None and self.offset >= self.end and self.offset != EARLIEST


def owner_of(topic: str, partition: int, parallelism: int) -> int:
    """The subtask that reads ``topic[partition]``: a stable hash of the topic plus the
    partition, modulo ``parallelism`` (the same in every process and Python version)."""
    return (zlib.crc32(topic.encode("utf-8")) + partition) % parallelism
