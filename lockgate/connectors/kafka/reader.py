"""The Kafka source's reader: one per subtask, one consumer each, explicit assignments
(never group rebalancing). It keeps the splits its subtask owns, announces them, finds
new partitions, reports its lag and commits checkpointed offsets to ``group_id``; the
records themselves come through its
:class:`~lockgate.connectors.kafka.partition_fetcher.PartitionFetcher`, decoded by its
:class:`~lockgate.connectors.kafka.record_decoder.RecordDecoder`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import InputStatus, ReaderOutput, SourceReader
from . import source_limits
from .arrow_decoder import ArrowDecoder
from .common import confluent_kafka
from .direct_client import FetchUnavailable, direct_fetch_possible
from .fetch_direct import DirectPartitionFetcher
from .fetch_librdkafka import LibrdkafkaFetcher
from .partition_fetcher import PartitionFetcher, ReaderSplits
from .partitions import partitions_of
from .record_decoder import RecordDecoder
from .registry_decoder import RegistryRecordDecoder
from .row_decoder import RowDecoder
from .source_settings import SourceSettings
from .split import EARLIEST, KafkaSplit, owner_of

log = logging.getLogger(__name__)


def decoder_for(source: SourceSettings) -> RecordDecoder:
    """The source's decoder: the registry formats' (``schema_registry=``), else Arrow
    (``schema=``), else rows."""
    if source.schema_registry is not None:
        return RegistryRecordDecoder(source)
    if source.schema is not None:
        return ArrowDecoder(source)
    return RowDecoder(source)


class KafkaReader(SourceReader):
    """Reads the partitions its subtask owns through one consumer with explicit
    assignments. ``poll`` never blocks; with nothing ready it asks to be polled again
    after :data:`~lockgate.connectors.kafka.source_limits.IDLE_WAIT_MS`. With
    ``fetch="auto"`` over plaintext it fetches directly, and falls back to librdkafka
    (swapping its fetcher, every split continuing from its offset, with a warning) when
    the direct fetch cannot go on."""

    restores_every_split = True

    def __init__(self, source: SourceSettings, ctx: RuntimeContext, consumer: Any) -> None:
        self.source = source
        self.ctx = ctx
        self.consumer: Any = consumer
        self.splits = ReaderSplits()
        #: every partition this reader has had (discovery starts only the others)
        self.known: set[tuple[str, int]] = set()
        #: splits added since the last poll, announced to the output (``split_started``)
        #: so that they hold the watermark back before their first record (M-W1)
        self._unannounced: list[str] = []
        interval = source.discovery_interval_s
        self._next_discovery = time.monotonic() if interval is not None else None
        #: when to look at the partitions' high watermarks again (source lag metric)
        self._next_lag = 0.0
        #: the fetcher wakes the task on arrival since the last poll (watch_arrival)
        self._watched = False
        #: the one decoder of both fetch paths (a registry's caches are per process)
        self.decoder = decoder_for(source)
        self.fetcher: PartitionFetcher
        if source.fetch == "auto" and direct_fetch_possible(source.properties):
            self.fetcher = DirectPartitionFetcher(source, consumer, self.splits, self.decoder)
        else:
            self.fetcher = LibrdkafkaFetcher(source, consumer, self.splits, self.decoder)

    @property
    def fetches_directly(self) -> bool:
        """Whether the records come through the direct fetch (else librdkafka)."""
        return isinstance(self.fetcher, DirectPartitionFetcher)

    def _owns(self, topic: str, partition: int) -> bool:
        return owner_of(topic, partition, self.ctx.parallelism) == self.ctx.subtask_index

    def add_splits(self, splits: list[KafkaSplit]) -> None:
        """Take over the splits this subtask owns (copies; others, and repeats, are
        dropped) and start fetching them at their offsets."""
        new: list[KafkaSplit] = []
        for split in splits:
            key = (split.topic, split.partition)
            if key in self.known or not self._owns(*key):
                continue
            self.known.add(key)
            if split.finished:
                self.splits.finished[key] = replace(split)
                continue
            split = self.splits.active[key] = replace(split)
            self._unannounced.append(split.split_id)
            new.append(split)
        if new:
            self.fetcher.assign(new)

    def _fall_back(self, why: FetchUnavailable) -> None:
        """Continue every split through librdkafka from its offset."""
        log.warning(
            "KafkaSource subtask %d: direct fetching stopped (%s); reading through "
            "librdkafka from the same offsets",
            self.ctx.subtask_index,
            why,
        )
        self.fetcher.close()
        self.fetcher = LibrdkafkaFetcher(self.source, self.consumer, self.splits, self.decoder)
        # splits still at EARLIEST: librdkafka starts them at the beginning itself
        self.fetcher.assign(list(self.splits.active.values()))

    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit what the fetcher has ready (one batch per partition) and move the
        positions. A bounded split ends when its position reaches its end."""
        if self._next_discovery is not None and time.monotonic() >= self._next_discovery:
            self._discover()
        if self._unannounced:
            for split_id in self._unannounced:
                output.split_started(split_id)
            self._unannounced = []
        if not self.splits.active:
            return (
                InputStatus.END_OF_INPUT if self.source.bounded else InputStatus.NOTHING_AVAILABLE
            )
        try:
            more = self.fetcher.poll(output)
        except FetchUnavailable as e:
            self._fall_back(e)
            more = self.fetcher.poll(output)
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + source_limits.LAG_INTERVAL_S
            self.pending_records = self._lag()
        if self.source.bounded and not self.splits.active:
            return InputStatus.END_OF_INPUT
        return InputStatus.MORE_AVAILABLE if more else InputStatus.NOTHING_AVAILABLE

    def _lag(self) -> int | None:
        """Records between each split's offset and its partition's high watermark (or
        its end), without a request; 0 with no split, None while no partition's
        watermark is known yet."""
        total = self.fetcher.lag()
        if total is None and not self.splits.active:
            return 0
        return total

    def _discover(self) -> None:
        """Start the partitions this subtask owns that it has never had, at their
        earliest offset."""
        interval = self.source.discovery_interval_s
        assert interval is not None
        self._next_discovery = time.monotonic() + interval
        try:
            parts = partitions_of(self.consumer, self.source)
        except ConfigurationError as e:
            if self.source.pattern is not None or self.known:
                log.warning("KafkaSource partition discovery failed: %s", e)
                return
            raise
        self.add_splits([KafkaSplit(t, p, EARLIEST) for t, p in parts])

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """The direct fetch wakes the task when a broker answers (records arrived, or
        its long poll of at most ``MAX_WAIT_MS`` ran out); librdkafka cannot, and its
        reader polls every :data:`~lockgate.connectors.kafka.source_limits.IDLE_WAIT_MS`."""
        self._watched = bool(self.splits.active) and self.fetcher.watch_arrival(wake)
        return self._watched

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: :data:`~lockgate.connectors.kafka.source_limits.IDLE_WAIT_MS`
        (:data:`~lockgate.connectors.kafka.source_limits.WATCHED_WAIT_MS` while the
        fetch wakes the task on arrival), or less until discovery is due."""
        watched, self._watched = self._watched, False
        idle = source_limits.WATCHED_WAIT_MS if watched else source_limits.IDLE_WAIT_MS
        if self._next_discovery is None:
            return idle
        return max(0.0, min(idle, (self._next_discovery - time.monotonic()) * 1000))

    def snapshot_positions(self) -> list[KafkaSplit]:
        """Copies of the unfinished splits, each with its next offset, then of the
        finished ones (bounded: at their ends), so that a restore, also into an unbounded
        source with partition discovery, never reads a finished partition again."""
        return [replace(s) for s in (*self.splits.active.values(), *self.splits.finished.values())]

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        """Commit the offsets of ``checkpoint_id`` to ``group_id`` (if given), for
        monitoring; asynchronous, best effort (never read back on restore)."""
        if self.source.group_id is None or self.consumer is None:
            return
        ck = confluent_kafka()
        offsets = {(s.topic, s.partition): s.offset for s in positions if s.offset >= 0}
        offsets.update(self.splits.take_finished_offsets())
        if not offsets:
            return
        try:
            self.consumer.commit(
                offsets=[ck.TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                asynchronous=True,
            )
        except ck.KafkaException as e:
            log.warning(
                "KafkaSource: committing offsets of checkpoint %d failed: %s", checkpoint_id, e
            )

    def close(self) -> None:
        self.fetcher.close()
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.close()
