"""The Kafka reader's :class:`~lockgate.connectors.kafka.partition_fetcher.PartitionFetcher`
with the source's own Fetch requests (``fetch="auto"`` over plaintext,
:mod:`~lockgate.connectors.kafka.direct_client`): a whole fetch decoded with numpy and
no Python object per record, then emitted in batches of at most
:data:`~lockgate.connectors.kafka.source_limits.MAX_BATCH` records, one per poll. Its
:meth:`~DirectPartitionFetcher.poll` raises
:class:`~lockgate.connectors.kafka.direct_client.FetchUnavailable` when it cannot go on;
the reader then continues through librdkafka from the same offsets."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ...core.batch import Batch, RowBatch
from ..arrival_watch import SocketArrivalWatch
from ..base import ReaderOutput, report_malformed
from . import source_limits
from .common import confluent_kafka
from .direct_client import RESPONSE_MAX_BYTES, DirectFetcher, FetchUnavailable
from .malformed import DeadLetters
from .partition_fetcher import ReaderSplits, ReadyBatch, SplitKey
from .record_batches import PartitionRecords
from .record_decoder import RecordDecoder
from .source_settings import SourceSettings
from .split import EARLIEST, KafkaSplit


def max_batch_bytes(max_record_bytes: int) -> int:
    """The most bytes one compressed record batch may expand to when the direct fetch
    decodes it: what one fetch response may hold (``RESPONSE_MAX_BYTES``), or one record
    of the largest value the source reads, and 1 MiB for keys, headers and framing. A
    larger batch is refused as corrupt (a decompression bomb, issue 37 item 7)."""
    return max(max_record_bytes, RESPONSE_MAX_BYTES) + (1 << 20)


def _slice(batch: Batch, start: int, stop: int) -> Batch:
    if isinstance(batch, RowBatch):
        return RowBatch(batch.rows[start:stop])
    return batch.slice(start, stop - start)


class DirectPartitionFetcher:
    """Reads the reader's splits with direct Fetch requests to their leaders (found
    through the consumer's metadata, which also resolves first offsets). Each poll
    emits one queued batch (fetching when none is queued) and moves its split's
    position past it."""

    def __init__(
        self,
        source: SourceSettings,
        consumer: Any,
        splits: ReaderSplits,
        decoder: RecordDecoder,
    ) -> None:
        self.source = source
        self.consumer = consumer
        self.splits = splits
        self.decoder = decoder
        self.client = DirectFetcher(
            self._leaders,
            committed_only=source.isolation == "read_committed",
            max_batch_bytes=max_batch_bytes(source.max_record_bytes),
        )
        #: wakes the task when a fetch response arrives (:meth:`watch_arrival`)
        self.arrival = SocketArrivalWatch(f"lockgate-kafka-arrival-{id(self):x}")
        #: fetched batches not emitted yet, in the order they go out
        self._ready: deque[ReadyBatch] = deque()
        #: splits at EARLIEST not given to the client yet, and until when to try
        self._unresolved: dict[SplitKey, float] = {}
        self._next_resolve = 0.0

    def assign(self, splits: list[KafkaSplit]) -> None:
        """Fetch the splits from their offsets; one at
        :data:`~lockgate.connectors.kafka.split.EARLIEST` once its partition's first
        offset is known (asked at the next polls: a partition just created may have no
        leader yet, and the request fails until it has one)."""
        for split in splits:
            key = (split.topic, split.partition)
            if split.offset == EARLIEST:
                self._unresolved[key] = time.monotonic() + source_limits.REQUEST_TIMEOUT_S
            else:
                self.client.assign(key, split.offset, split.end)

    def poll(self, output: ReaderOutput) -> bool:
        """One queued batch emitted (fetching when none is queued), its dead letters
        first and its split's position moved past it; True when it emitted one or more
        are queued. Raises FetchUnavailable before emitting anything when the direct
        fetch cannot go on."""
        if not self._ready:
            if self._unresolved:
                self._resolve_earliest()
            for records in self.client.poll():
                self._decode_records(records)
        emitted = False
        if self._ready:
            ready = self._ready.popleft()
            split = self.splits.active.get(ready.key)
            if split is not None:
                for record in ready.dead_letters:
                    output.emit_dead_letter(record)
                if ready.batch is not None:
                    output.emit_from_split(split.split_id, ready.batch)
                    emitted = True
                split.offset = ready.next_offset
        self._finish_ended(output)
        return emitted or bool(self._ready)

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """Wake the task when a broker answers one of the fetches in flight (records
        arrived, or its long poll ran out), rather than after an interval. Not while
        batches are queued or first offsets are still being asked for (those need
        polls of their own)."""
        if self._ready or self._unresolved:
            return False
        return self.arrival.arm(self.client.sockets_in_flight(), wake)

    def close(self) -> None:
        """Close the client's broker connections and stop the arrival watch."""
        self.arrival.close()
        self.client.close()

    def _finish_ended(self, output: ReaderOutput) -> None:
        """Finish the bounded splits read to their end."""
        for key, split in list(self.splits.active.items()):
            if split.finished:
                self.splits.finish(key, output)
                self.client.remove(key)

    def lag(self) -> int | None:
        """Records between each split's offset and its partition's high watermark (or
        its end), from the high watermarks of the last fetch responses; None while no
        partition's watermark is known yet."""
        total: int | None = None
        for split in self.splits.active.values():
            high = self.client.high_watermarks.get((split.topic, split.partition))
            if high is not None:
                end = high if split.end is None else min(high, split.end)
                total = (total or 0) + max(0, end - split.offset)
        return total

    def _resolve_earliest(self) -> None:
        """Give the direct fetcher the splits that start at their partition's first
        offset, once the broker tells it (a request each, of at most
        :data:`source_limits.EARLIEST_WAIT_S`); one still unknown after :data:`source_limits.REQUEST_TIMEOUT_S`
        hands the reader over to librdkafka, which resolves it itself."""
        ck = confluent_kafka()
        now = time.monotonic()
        if now < self._next_resolve:
            return
        self._next_resolve = now + source_limits.EARLIEST_RETRY_S
        for key, deadline in list(self._unresolved.items()):
            split = self.splits.active.get(key)
            if split is None:
                del self._unresolved[key]
                continue
            try:
                low, _ = self.consumer.get_watermark_offsets(
                    ck.TopicPartition(*key), timeout=source_limits.EARLIEST_WAIT_S
                )
            except ck.KafkaException as e:
                if time.monotonic() > deadline:
                    raise FetchUnavailable(
                        f"the first offset of {split.split_id} stayed unknown for "
                        f"{source_limits.REQUEST_TIMEOUT_S:.0f} s: {e}"
                    ) from e
                try:  # the client's metadata may not know the partition yet
                    self.consumer.list_topics(key[0], timeout=source_limits.EARLIEST_WAIT_S)
                except ck.KafkaException:
                    pass
                continue
            del self._unresolved[key]
            split.offset = int(low)
            self.client.assign(key, split.offset, split.end)

    def _leaders(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
        """Each partition's leader broker address, from the consumer's metadata."""
        ck = confluent_kafka()
        found: dict[tuple[str, int], tuple[str, int]] = {}
        for topic in sorted({t for t, _ in wanted}):
            try:
                meta = self.consumer.list_topics(topic, timeout=source_limits.REQUEST_TIMEOUT_S)
            except ck.KafkaException as e:
                raise FetchUnavailable(f"metadata of topic {topic!r}: {e}") from e
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                continue
            for p, part in info.partitions.items():
                broker = meta.brokers.get(part.leader)
                if (topic, p) in wanted and broker is not None:
                    found[(topic, p)] = (broker.host, broker.port)
        return found

    def _decode_records(self, records: PartitionRecords) -> None:
        """Decode one partition's directly fetched records and queue them in batches of
        at most :data:`source_limits.MAX_BATCH` records (as librdkafka's path emits them), each with
        the offset its split moves to once it is emitted."""
        key = (records.topic, records.partition)
        split = self.splits.active.get(key)
        if split is None:
            return  # a partition just given up
        batch: Batch | None = None
        # dead letters go out with the batch they belong to (in the same poll as the
        # split's move past them), never before: a checkpoint between the two would
        # hold the dead letter and an offset before its record, and a restore would
        # send it again
        dead = DeadLetters()
        if len(records):
            batch = self.decoder.decode_fetched(records, dead)
        # a refused batch (forged offsets, a decompression bomb) fails the job here, or
        # its dead letter goes out with the part of the fetch whose offset passes it
        refused = deque(self._refused(records))
        end = records.next_offset if split.end is None else min(records.next_offset, split.end)
        rows = 0 if batch is None else len(batch)
        if (
            batch is not None
            and rows > source_limits.MAX_BATCH
            and rows == len(records)
            and self.source.debezium is None  # an envelope gives 0, 1 or 2 rows
        ):
            # one row per record: cut it, each part moving the split past its last record
            offsets = records.offsets
            start = 0
            while rows - start > source_limits.MAX_BATCH:
                stop = start + source_limits.MAX_BATCH
                after = int(offsets[stop - 1]) + 1
                passed = []
                while refused and refused[0]["offset"] < after:
                    passed.append(refused.popleft())
                self._ready.append(ReadyBatch(key, _slice(batch, start, stop), after, passed))
                start = stop
            batch = _slice(batch, start, rows)
        self._ready.append(ReadyBatch(key, batch, end, [*refused, *dead.records]))

    def _refused(self, records: PartitionRecords) -> list[dict[str, Any]]:
        """The dead letters of the batches the direct fetch refused (forged offsets, a
        decompression bomb: issue 37 items 2 and 7), in offset order; with
        ``on_error="fail"`` the first one fails the job, naming it."""
        letters = DeadLetters()
        for r in records.refused:
            report_malformed(
                self.source.on_error,
                letters,
                what="kafka record batch",
                location=r.location,
                raw=None,
                error=f"{r.reason}; {r.count} records, offsets {r.base_offset}-{r.last_offset}",
                topic=r.topic,
                partition=r.partition,
                offset=r.base_offset,
                last_offset=r.last_offset,
            )
        return letters.records
