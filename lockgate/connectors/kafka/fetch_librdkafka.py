"""The Kafka reader's :class:`~lockgate.connectors.kafka.partition_fetcher.PartitionFetcher`
through librdkafka's consumer (explicit assignments, ``consume`` with timeout 0), with
the checks that keep a hostile producer's records from moving a split's position past a
record not emitted (issue 37 items 2 and 7: offsets out of order, keys too large)."""

from __future__ import annotations

import logging
from array import array
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base import ReaderOutput
from . import source_limits
from .common import confluent_kafka
from .malformed import report_message
from .partition_fetcher import ReaderSplits, SplitKey
from .record_decoder import RecordDecoder
from .source_options import OWNER
from .source_settings import SourceSettings
from .split import EARLIEST, KafkaSplit

log = logging.getLogger(__name__)


class LibrdkafkaFetcher:
    """Reads the reader's splits through its consumer. ``poll`` never blocks: it emits
    what the client has prefetched (at most :data:`source_limits.MAX_BATCH` messages),
    one batch per partition, then moves every split's position to the consumer's (past
    control markers and aborted records too), except past a record held back or
    refused."""

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
        #: the topic of every message when the source reads one named topic (no need to
        #: ask each message)
        self._single_topic = (
            source.topics[0] if source.pattern is None and len(source.topics) == 1 else None
        )
        #: the last offset librdkafka gave each partition (its records must grow)
        self._last_offsets: dict[SplitKey, int] = {}
        #: per partition, a record after a gap held back until what follows it shows
        #: that it skipped nothing (``_in_order``)
        self._held: dict[SplitKey, Any] = {}
        #: partitions whose client position went past a refused record (a forged one
        #: claimed an offset there): the split's position stops after the last emitted
        self._beyond: dict[SplitKey, int] = {}
        #: per partition, the largest offset a refused record claimed while no record
        #: emitted is past it yet: librdkafka's position (which only moves forward) is
        #: past it, the records below it that follow are still to come, so the split's
        #: position stops after the last record emitted until one emitted passes it
        self._forged: dict[SplitKey, int] = {}
        #: per partition, the fetch position of its last end event: every record
        #: before it has been handed over
        self._eof: dict[SplitKey, int] = {}

    def assign(self, splits: list[KafkaSplit]) -> None:
        """Assign the splits' partitions to the consumer at their offsets
        (:data:`~lockgate.connectors.kafka.split.EARLIEST` is librdkafka's beginning)."""
        if splits:
            ck = confluent_kafka()
            self.consumer.incremental_assign(
                [ck.TopicPartition(s.topic, s.partition, s.offset) for s in splits]
            )

    def poll(self, output: ReaderOutput) -> bool:
        """Emit what the consumer has ready and move the positions; True when records
        (or errors) came."""
        messages = self.consumer.consume(num_messages=source_limits.MAX_BATCH, timeout=0)
        got = False
        if messages:
            messages, got = self._events(messages)
        if messages or self._held:
            self._emit(messages, output)
        self._advance(output)
        return bool(messages) or got

    def watch_arrival(self, wake: Callable[[], None]) -> bool:
        """librdkafka offers no readiness handle to Python: the reader polls on its
        interval."""
        return False

    def close(self) -> None:
        """Nothing of its own to release (the reader closes the consumer)."""

    def _report(self, m: Any, raw: Any, error: str, output: ReaderOutput) -> None:
        report_message(self.source.on_error, m, raw, error, output)

    def lag(self) -> int | None:
        """Records between each split's offset and its partition's high watermark (or
        its end), from the client's cached watermarks (no request); None while no
        partition's watermark is known yet."""
        ck = confluent_kafka()
        total: int | None = None
        for split in self.splits.active.values():
            try:
                low, high = self.consumer.get_watermark_offsets(
                    ck.TopicPartition(split.topic, split.partition), cached=True
                )
            except ck.KafkaException:
                continue
            if high is None or high < 0:
                continue
            if split.end is not None:
                high = min(high, split.end)
            # a split not positioned yet starts at the partition's start or end
            position = (
                split.offset if split.offset >= 0 else (low if split.offset == EARLIEST else high)
            )
            if position is None or position < 0:
                continue
            total = (total or 0) + max(0, high - position)
        return total

    def _events(self, messages: list[Any]) -> tuple[list[Any], bool]:
        """``messages`` without the client's events: errors (a fatal one raises), and
        partition ends, whose fetch position is kept in ``_eof``; and whether any
        record or error came (a partition's end alone is nothing more to read)."""
        message: Any = type(messages[0])
        if not any(map(message.error, messages)):
            return messages, True
        records = []
        errors = False
        for m in messages:
            err = m.error()
            if err is None:
                records.append(m)
            elif err.code() == confluent_kafka().KafkaError._PARTITION_EOF:
                self._eof[(m.topic(), m.partition())] = m.offset()
            else:
                self._client_error(err)
                errors = True
        return records, bool(records) or errors

    def _emit(self, messages: list[Any], output: ReaderOutput) -> None:
        """One batch per partition of ``messages`` (those of its split, before a
        bounded end), in offset order (client events taken out by :meth:`_events`)."""
        message: Any = type(messages[0] if messages else next(iter(self._held.values())))
        runs_of = self._runs(messages, message) if messages else {}
        for key in self._held:
            runs_of.setdefault(key, [])
        for key, runs in runs_of.items():
            split = self.splits.active.get(key)
            if split is None:
                self._held.pop(key, None)
                continue  # a partition just given up
            if len(runs) == 1:
                msgs = messages[runs[0][0] : runs[0][1]]
            else:
                msgs = [m for a, b in runs for m in messages[a:b]]
            # each record's offset and key are read once, for all the checks
            msgs, offsets = self._in_order(key, msgs, message, output)
            msgs, offsets, keys = self._keys_in_bounds(msgs, offsets, message, output)
            if split.end is not None and offsets and offsets[-1] >= split.end:
                cut = bisect_left(offsets, split.end)  # offsets now grow: cut at the end
                msgs = msgs[:cut]
                keys = None if keys is None else keys[:cut]
            if not msgs:
                continue
            batch = self.decoder.decode_messages(msgs, message, keys, output)
            if batch is not None:
                output.emit_from_split(split.split_id, batch)

    def _in_order(
        self, key: tuple[str, int], msgs: list[Any], message: Any, output: ReaderOutput
    ) -> tuple[list[Any], list[int]]:
        """``msgs`` (one partition's, as librdkafka hands them over, after a record held
        back at the last poll) without the records of forged batches (issue 37 item 2),
        each failing the job or dead-lettered. A v2 record carries its own offset delta,
        which the broker stores unchecked in an uncompressed batch; librdkafka reports
        ``base + delta`` and fetches on from the batch header's end, so a record claiming
        a later offset than its batch allows comes before records with lower offsets
        (the next batches', which librdkafka still delivers), or lies at or past the
        partition's high watermark. Refused here, before anything is emitted or the
        position moves: a record followed by an offset not above its own, one at or
        below an offset already read, one at or past the high watermark (asked again of
        the broker first). The last record, when a gap lies before it (a legitimate
        one: transaction markers, aborted or compacted records), is held back (the
        position stays before it) until a higher offset follows it, the consumer's
        position moves past something after it, or it is the partition's last record:
        else a forged one would be emitted, and checkpointed past, before the records
        showing it forged arrive. librdkafka's position stays past a refused record, so
        the split's stays after the last record emitted until one emitted passes it
        (``_forged``; the polls until then may all end on records below it)."""
        held = self._held.pop(key, None)
        if held is not None:
            msgs = [held, *msgs]
        if not msgs:
            return msgs, []
        offsets = list(map(message.offset, msgs))
        last = self._last_offsets.get(key)
        if last is None:
            split = self.splits.active[key]
            last = split.offset - 1 if split.offset >= 0 else offsets[0] - 1
        steps = np.frombuffer(array("q", offsets), dtype=np.int64)  # faster than asarray
        if (
            offsets[0] > last
            and bool((steps[1:] > steps[:-1]).all())
            and not self._past_end(key, offsets[-1])
        ):
            kept, kept_offsets = msgs, offsets
        else:
            kept, kept_offsets = self._refuse_out_of_order(key, msgs, offsets, last, output)
        # the client's position is past the last record handed over; when that one is
        # refused or held, the split's position stops after the last record emitted
        tail_out = not kept or kept[-1] is not msgs[-1]
        if kept:
            o = kept_offsets[-1]
            before = kept_offsets[-2] if len(kept) > 1 else last
            if o > before + 1 and not self._confirmed(key, o):
                self._held[key] = kept[-1]
                kept = kept[:-1]
                kept_offsets = kept_offsets[:-1]
                tail_out = True
        last = self._last_offsets[key] = kept_offsets[-1] if kept_offsets else last
        if tail_out:
            self._beyond[key] = last + 1
        if self._forged.get(key, last + 1) <= last:
            del self._forged[key]  # a record emitted is past every refused one
        return kept, kept_offsets

    def _refuse_out_of_order(
        self,
        key: tuple[str, int],
        msgs: list[Any],
        offsets: list[int],
        last: int,
        output: ReaderOutput,
    ) -> tuple[list[Any], list[int]]:
        """``msgs`` (with their ``offsets``) without the records out of order (each
        failing the job or dead-lettered), after ``last``, the offset read before them:
        see :meth:`_in_order`. The largest offset refused is kept in ``_forged``."""
        kept: list[Any] = []
        kept_offsets: list[int] = []
        high: int | None = None
        for i, (m, o) in enumerate(zip(msgs, offsets)):
            why = ""
            if o <= (kept_offsets[-1] if kept_offsets else last):
                why = f"it follows offset {kept_offsets[-1] if kept_offsets else last}"
            elif i + 1 < len(offsets) and offsets[i + 1] <= o:
                why = f"offset {offsets[i + 1]} follows it"
            else:
                if high is None and self._past_end(key, o):
                    high = self._high_watermark(key)
                if high is not None and o >= high:
                    why = f"the partition's high watermark is {high}"
            if why:
                if o > self._forged.get(key, -1):
                    self._forged[key] = o
                self._report(
                    m,
                    m.value(),
                    f"a record claiming offset {o} out of order ({why}): its batch's "
                    "offset deltas are forged; refused so that no other record is "
                    "skipped",
                    output,
                )
                continue
            kept.append(m)
            kept_offsets.append(o)
        return kept, kept_offsets

    def _keys_in_bounds(
        self, msgs: list[Any], offsets: list[int], message: Any, output: ReaderOutput
    ) -> tuple[list[Any], list[int], list[Any] | None]:
        """``msgs`` and their ``offsets`` without the records whose key is larger than
        ``max_record_bytes`` (each failing the job or dead-lettered, as a value that
        large is): a gzip bomb librdkafka expanded (issue 37 item 7) goes no further.
        With a ``key_field``, also the kept records' keys (read once), else None."""
        limit = self.source.max_record_bytes
        if self.source.key_field is None:
            keys = None
            if max(map(len, filter(None, map(message.key, msgs))), default=0) <= limit:
                return msgs, offsets, None
        else:
            keys = list(map(message.key, msgs))
            if max(map(len, filter(None, keys)), default=0) <= limit:
                return msgs, offsets, keys
        kept = []
        kept_offsets = []
        for m, o in zip(msgs, offsets):
            k = m.key()
            if k is not None and len(k) > limit:
                self._report(
                    m,
                    m.value(),
                    f"its key of {len(k)} bytes is larger than max_record_bytes={limit} "
                    "(raise max_record_bytes if such keys are genuine)",
                    output,
                )
                continue
            kept.append(m)
            kept_offsets.append(o)
        return kept, kept_offsets, None if keys is None else list(map(message.key, kept))

    def _confirmed(self, key: tuple[str, int], offset: int) -> bool:
        """The record at ``offset`` (after a gap) is its partition's last, or the
        consumer's position went past something after it (a marker, aborted records):
        no record it could have skipped is still to come."""
        ck = confluent_kafka()
        tp = ck.TopicPartition(*key)
        try:
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and 0 <= high <= offset + 1:
                return True
            (at,) = self.consumer.position([tp])
        except ck.KafkaException:
            return False
        return bool(at.offset > offset + 1)

    def _past_end(self, key: tuple[str, int], offset: int) -> bool:
        """``offset`` at or past the partition's high watermark as the client last
        heard it (no request)."""
        ck = confluent_kafka()
        try:
            _, high = self.consumer.get_watermark_offsets(ck.TopicPartition(*key), cached=True)
        except ck.KafkaException:
            return False
        return high is not None and high >= 0 and offset >= high

    def _high_watermark(self, key: tuple[str, int]) -> int | None:
        """The partition's high watermark, asked of the broker now."""
        ck = confluent_kafka()
        try:
            _, high = self.consumer.get_watermark_offsets(
                ck.TopicPartition(*key), timeout=source_limits.REQUEST_TIMEOUT_S
            )
        except ck.KafkaException:
            return None
        return int(high)

    def _advance(self, output: ReaderOutput) -> None:
        """Every split's offset := the consumer's position; finish bounded splits."""
        ck = confluent_kafka()
        positions = self.consumer.position(
            [ck.TopicPartition(s.topic, s.partition) for s in self.splits.active.values()]
        )
        done: list[Any] = []
        for tp in positions:
            split = self.splits.active[(tp.topic, tp.partition)]
            if tp.offset >= 0:
                key = (tp.topic, tp.partition)
                offset = min(tp.offset, self._beyond.pop(key, tp.offset))
                forged = self._forged.get(key)
                if forged is not None:
                    # the client's position is past a refused record, and the records
                    # between the last one emitted and it may still be to come (the
                    # polls since may have ended on records below it, not only on it),
                    # unless the client reached the partition's end beyond them (what
                    # lay between was markers or aborted records)
                    eof = self._eof.get(key, -1)
                    if eof > forged:
                        del self._forged[key]
                    else:
                        offset = min(offset, max(self._last_offsets[key] + 1, eof))
                split.offset = offset if split.end is None else min(offset, split.end)
            if split.finished:
                self.splits.finish((tp.topic, tp.partition), output)
                done.append(ck.TopicPartition(tp.topic, tp.partition))
        if done:
            self.consumer.incremental_unassign(done)

    def _client_error(self, err: Any) -> None:
        """An error event of the consumer: fatal ones and a vanished topic fail the
        job; others (a broker briefly away) are the client's to retry."""
        ck = confluent_kafka()
        code = err.code()
        if code == ck.KafkaError._PARTITION_EOF:
            return
        if err.fatal() or code in (
            ck.KafkaError.UNKNOWN_TOPIC_OR_PART,
            ck.KafkaError._UNKNOWN_TOPIC,
            ck.KafkaError._UNKNOWN_PARTITION,
            ck.KafkaError.TOPIC_AUTHORIZATION_FAILED,
        ):
            raise ConnectionError(
                f"{OWNER} reading {self.source.topic_description} at "
                f"{self.source.bootstrap_servers!r} failed: {err}; the job restarts from its "
                "last checkpoint if a restart strategy allows"
            )
        log.warning("KafkaSource: %s (the client retries)", err)

    def _runs(self, messages: list[Any], message: Any) -> dict[tuple[str, int], list[Any]]:
        """``(topic, partition)`` -> the ``(start, stop)`` index ranges of ``messages``
        holding its records, in order (the client hands them over partition by
        partition, so there are few ranges)."""
        n = len(messages)
        parts = list(map(message.partition, messages))
        single = self._single_topic
        topics: list[str] | None = None
        if single is None:
            topics = list(map(message.topic, messages))
        if parts.count(parts[0]) == n and (topics is None or topics.count(topics[0]) == n):
            cuts = [0, n]
        else:
            p = np.asarray(parts)
            change = p[1:] != p[:-1]
            if topics is not None:
                t = np.asarray(topics, dtype=object)
                change |= t[1:] != t[:-1]
            cuts = [0, *(np.flatnonzero(change) + 1).tolist(), n]
        runs: dict[tuple[str, int], list[Any]] = {}
        for a, b in zip(cuts[:-1], cuts[1:]):
            topic = topics[a] if topics is not None else single
            assert topic is not None
            runs.setdefault((topic, parts[a]), []).append((a, b))
        return runs
