"""KafkaSource: records from Apache Kafka topics, replayable by offset (Flink's model).

Each topic partition is one split whose read position is the offset of the next record
to read; every checkpoint stores it (M-T4) and a restored job seeks every partition back
to it (M-R1), so with a transactional or idempotent sink the pipeline is exactly-once
end to end (M-X1). Partitions are assigned explicitly (``assign`` with offsets), never
through group rebalancing; the consumer group only receives the checkpointed offsets,
for monitoring, when a checkpoint completes.

Ownership: partition ``p`` of topic ``t`` belongs to subtask
``(crc32(t) + p) % parallelism`` (a stable hash, like Flink's enumerator). Readers keep
their own share of the splits they are given (``restores_every_split``), so a restore at
another parallelism deals every partition to exactly one subtask, and readers discover
new partitions without a driver-side enumerator.

Event time: ``timestamp_field`` puts each record's Kafka timestamp into it for a
timestamp assigner. Each partition is emitted as its own split
(``emit_from_split``) and announced when assigned (``split_started``), so it has its
own watermark generator from the start and the source's watermark is the minimum over
its partitions (M-W1); ``with_idleness`` lets a partition without records stop holding
it back (M-W2).

Start offsets (``"latest"``, ``"committed"``, a timestamp) are resolved once per job
run on the driver (``prepare_run``) and travel with the job, so every attempt that
starts without a checkpoint starts at the same offsets.

A record that cannot be decoded fails the job with ``topic[partition]@offset``
(``MalformedRecordError``), unless ``on_error="dead_letter"``: then it goes to
``lg.DEAD_LETTER`` as a dict with ``location``, ``topic``, ``partition``, ``offset``,
``raw`` and ``error``. Either way the position moves past it.

Speed: each poll takes what it needs of the messages with C-level calls (a whole
partition's values, offsets, partitions at once), decodes them at once (``json``: the
C JSON scanner over every value; with ``schema=``: one ``pyarrow.json`` read per
partition and poll, giving an Arrow batch), and falls back to record-by-record decoding
only for a poll that holds a record the fast path cannot take (a malformed one, a
tombstone, surrounding whitespace), so that the errors and results are those of
decoding each record alone.

confluent-kafka is imported lazily (``kafka.common.confluent_kafka``), so
``import lockgate`` works without it.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
import uuid
import zlib
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.batch import TS_COLUMN, Batch, RowBatch
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import (
    DECODE_ERRORS,
    DEFAULT_MAX_RECORD_BYTES,
    InputStatus,
    ReaderOutput,
    Source,
    SourceReader,
    check_bool,
    check_max_record_bytes,
    check_on_error,
    decode_error,
    oversized,
    report_malformed,
)
from ..debezium import (
    DEBEZIUM_FORMATS,
    DebeziumConverter,
    check_debezium,
    check_not_debezium,
)
from ..debezium import batch_of as debezium_batch
from ..schema_registry.formats import RegistryDecoder, RegistryFormat, check_registry_format
from ..schema_registry.wire import WireFormatError, schema_id_of
from .client_logging import librdkafka_config
from .common import (
    REGISTRY_FORMATS,
    check_bootstrap_servers,
    check_format,
    check_properties,
    check_schema_registry,
    confluent_kafka,
    key_column,
)
from .direct_client import (
    RESPONSE_MAX_BYTES,
    DirectFetcher,
    FetchUnavailable,
    direct_fetch_possible,
)
from .record_batches import PartitionRecords

log = logging.getLogger(__name__)

OWNER = "KafkaSource"
START_MODES = ("earliest", "latest", "committed")
ISOLATION = ("read_committed", "read_uncommitted")
FETCH_MODES = ("auto", "librdkafka")
#: the split offset meaning "the partition's first offset" (librdkafka's OFFSET_BEGINNING)
EARLIEST = -2
#: records asked of the consumer per poll (one batch per partition and poll)
MAX_BATCH = 5000
#: how long a poll with nothing to read asks the task to wait before the next one
IDLE_WAIT_MS = 10.0
#: seconds a metadata or offset request may take
REQUEST_TIMEOUT_S = 10.0
#: seconds one poll may wait for a partition's first offset (direct fetching)
EARLIEST_WAIT_S = 1.0
#: how often a reader asks again for first offsets it could not learn
EARLIEST_RETRY_S = 0.1
#: librdkafka settings the source changes from librdkafka's defaults (``properties``
#: may set them): when its prefetch queue is full (``queued.min.messages``, 100,000
#: records), librdkafka waits ``fetch.queue.backoff.ms`` (1 s by default) before
#: fetching again, so a reader that drains the queue quickly sat idle most of the time
#: (a bare consumer read 170k small records/s; 900k/s with 10 ms)
FETCH_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 10}
#: what the source sets itself, and the argument to use instead
RESERVED = {
    "bootstrap.servers": "pass bootstrap_servers",
    "group.id": "pass group_id",
    "isolation.level": "pass isolation",
    "enable.auto.commit": "offsets are committed when checkpoints complete",
    "enable.auto.offset.store": "offsets are committed when checkpoints complete",
    "auto.offset.reset": "pass start",
    "enable.partition.eof": "the source tracks partition ends itself",
}

TopicsArg = str | Sequence[str] | re.Pattern[str]
StartArg = str | int | Mapping[Any, int]


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


class KafkaSource(Source):
    """Reads Kafka ``topics`` at ``bootstrap_servers``, one split per topic partition.

    ``topics``: a topic name, a list of names, or a compiled regular expression
    (``re.compile``) that topic names must match in full (internal topics such as
    ``__consumer_offsets`` excluded).

    ``start`` (where each partition starts reading when the job starts without a
    checkpoint): ``"earliest"`` (default), ``"latest"`` (the end offsets when the job
    starts), ``"committed"`` (the offsets committed by ``group_id``; partitions without
    one start at the earliest), an int of epoch milliseconds (the first record whose
    timestamp is at or after it; partitions with none start at their end), or a dict of
    explicit offsets ``{partition: offset}`` (one topic) or
    ``{(topic, partition): offset}`` (unlisted partitions start at the earliest). The
    start offsets are resolved once per job run, on the driver, before any subtask
    starts (``prepare_run``), and travel with the job: a restart before the first
    checkpoint replays exactly the same records.

    ``bounded=True``: each partition is read up to its end offset when the job starts
    (resolved with the start offsets), then its split ends; records written later are
    not read, and the job finishes when every partition has ended. Restored from the
    checkpoint or savepoint of an unbounded run (to catch up with what came since), the
    partitions resume at their restored offsets and end at their end offsets when the
    restored run starts, as at a fresh start; restored from a bounded run's, they keep
    that run's ends. An unbounded source restored from a bounded run's state keeps the
    restored ends too (the end is part of a split's state, as Flink's KafkaSource keeps
    a split's stopping offset), with a warning (:meth:`restore_splits`). Checkpoints
    hold the partitions a bounded run finished too, at their ends, so no restore (nor
    partition discovery after one) reads them again.

    ``format``: ``"json"`` gives the decoded JSON value (a dict for objects),
    ``"text"`` a str, ``"bytes"`` the value's bytes; a record without a value
    (tombstone) is None. ``key_field`` puts the record's key (UTF-8 text, None when it
    has none) into the record under that name; ``timestamp_field`` puts its Kafka
    timestamp (epoch ms, None when it has none), so a timestamp assigner can use it:
    ``WatermarkStrategy.for_bounded_out_of_orderness(...).with_timestamp_assigner(
    timestamp_field)``. These fields go into JSON objects (replacing a field of the same
    name); any other record becomes ``{"value": record, <fields>}``.

    ``schema`` (a ``pyarrow.Schema``; ``format="json"`` only): typed JSON at Arrow speed,
    like Flink SQL's JSON format. Each poll's records of one partition are decoded in one
    ``pyarrow.json.read_json`` call against the schema and emitted as ONE Arrow
    ``RecordBatch`` with exactly the schema's columns, in its order and types (an int64
    field stays int64, a string field stays a string even if it holds a timestamp): a
    field the record lacks is null, a field the schema does not name is ignored, a
    tombstone (no value) is a row of nulls. ``key_field`` and ``timestamp_field``
    become extra columns after the schema's (string, and int64 epoch ms; null when the
    record has no key or timestamp); they must not name a schema column. A record that
    does not fit the schema is malformed (fail or dead letter, as below, with
    ``topic[partition]@offset``): a value that is not one JSON object, invalid JSON or
    UTF-8, a field of the wrong type (a string where the schema says int64, ``1.5`` for an
    int64, a number for a string, an integer too large for its type), a field given
    twice, or a value over ``max_record_bytes``; the other records of the poll still go
    out, as Arrow, in offset order. Values may span several lines (pretty-printed JSON).

    Schema Registry formats (``format="avro"``, ``"protobuf"`` or ``"json_schema"``,
    with ``schema_registry=lg.connectors.SchemaRegistry(url)``): values framed by a
    registry serializer (Confluent's wire format: magic byte, schema id, for Protobuf
    the message indexes, then the payload), as Flink's ``avro-confluent`` and
    ``protobuf`` formats read them. Each record's schema id is looked up in the
    registry once per process (cached, bounded) and the payload decoded with the
    writer's schema: ``avro`` with fastavro, resolved to ``reader_schema`` (an Avro
    schema, dict or JSON text) by Avro's rules when one is given (a field the writer
    lacks takes the reader's default, one the reader lacks is dropped, promotions such
    as int to long), so a topic written by several versions of a producer reads as one
    shape, else as written; ``protobuf`` parsed by ``reader_schema``, the message class
    (required: generated by protoc, or built from a descriptor), under Protobuf's rules
    (unknown fields skipped, missing ones at their defaults), as dicts with the
    ``.proto`` field names, enums as names, nested messages as dicts;
    ``json_schema`` validated against the writer's JSON Schema, then, with a
    ``reader_schema`` (a JSON Schema), reduced to its properties with their defaults
    filled in and validated against it. Records are dicts (a tombstone is None);
    with ``schema=`` (a pyarrow schema, e.g.
    ``lg.connectors.avro_arrow_schema(reader_schema)``) one Arrow RecordBatch per poll
    and partition with exactly the schema's columns, as with JSON (flat Avro records
    straight from the fetched bytes in one compiled pass,
    :mod:`~lockgate.connectors.schema_registry.avro_columns`). ``key_format``
    (a registry format; needs ``key_field``; ``key_reader_schema`` as
    ``reader_schema``) decodes keys the same way into ``key_field`` (rows only).
    Malformed here (failing the job or dead-lettered, as below, with ``schema_id``,
    None when unframed, beside the position): a record not framed, whose schema id the
    registry does not know, whose payload does not decode or leaves bytes after its
    record, that does not match its writer's JSON Schema, or that cannot be resolved to
    the reader schema or held by ``schema``'s columns. A registry that cannot be
    reached is not the record's fault: after the client's bounded retries
    (``SchemaRegistry(retry_for_s=...)``) the job fails naming the registry's URL
    (credentials redacted) and restarts from its last checkpoint, the split's position
    still before the record (M-X1). Both fetch paths decode through one function
    (:class:`~lockgate.connectors.schema_registry.formats.RegistryDecoder`).

    Debezium change events (``format="debezium-json"``, plain or in Kafka Connect's
    JsonConverter wrapper, or ``"debezium-avro"`` with ``schema_registry=``): each
    envelope decoded as JSON or Avro, then converted by
    :class:`~lockgate.connectors.debezium.DebeziumConverter` into changelog rows with
    the table's columns (``c``/``r`` ``+I``, ``u`` ``-U`` and ``+U`` or ``+U`` alone,
    ``d`` ``-D``, tombstones skipped); a malformed envelope, a truncate or a message is
    malformed as below unless ``debezium_skip_ops`` names its op;
    ``debezium_metadata={key: column}`` adds envelope fields (``"source.ts_ms"``,
    ``"source.lsn"``, ...) to the rows. See docs/debezium.md.

    ``isolation="read_committed"`` (default): records of aborted transactions and
    transaction markers are never emitted, and a partition is read only up to its last
    stable offset (an open transaction holds it back until it ends); offsets still move
    past markers and aborted records (the consumer's position is checkpointed, not the
    last offset + 1). ``"read_uncommitted"`` reads everything written.

    ``group_id``: when a checkpoint completes, the offsets it recorded are committed to
    this consumer group, for monitoring (lag) and ``start="committed"``; a restore never
    reads them back (the checkpoint is the source of truth).

    ``partition_discovery_interval`` (seconds or timedelta; unbounded only): every
    interval each subtask asks for the topics' partitions (and, with a pattern, newly
    matching topics); partitions it owns that it has not read before start at their
    earliest offset. Without it the partitions are those of the job's start (or of the
    restored checkpoint).

    Guarantees: the records of one partition are emitted in offset order, each once per
    run; checkpoints record every partition's next offset and a restore rewinds to it
    (M-X1, M-R1), at any parallelism (each partition is read by exactly one subtask).
    Partitions interleave in no defined order. Watermarks are generated per partition
    (M-W1): a lagging partition holds event time back, an idle one stops doing so after
    ``with_idleness`` (M-W2). A lost broker is retried by the client; errors it reports
    as fatal fail the job, which restarts from its last checkpoint.

    A record that cannot be decoded (bad UTF-8 or JSON, an integer of more than 4,300
    digits, nesting deeper than Python's recursion limit, with ``schema`` a record that
    does not fit it) or whose value is larger than
    ``max_record_bytes`` (default 32 MiB) fails the job naming ``topic[partition]@offset``,
    or with ``on_error="dead_letter"`` goes to ``lg.DEAD_LETTER`` with ``topic``,
    ``partition`` and ``offset`` (and ``schema_id`` for the registry formats, and
    ``raw_key``, the key's bytes, with a registry ``key_format``). So does
    what a hostile producer can store (the broker does not check it): a batch whose
    records claim offsets out of order or past their batch (the direct fetch refuses the
    batch, librdkafka's path the record out of order), and a compressed batch expanding
    to more than ``max(max_record_bytes, 32 MiB) + 1 MiB`` (direct fetch; through
    librdkafka, a key larger than ``max_record_bytes``). A split's position never passes a record not emitted
    (docs/security.md, "Hostile record batches").

    ``properties``: further librdkafka consumer settings (e.g. security), except those
    the source sets itself. The source changes one librdkafka default, which
    ``properties`` may set again: ``fetch.queue.backoff.ms`` is 10 (librdkafka's 1,000
    left a fast reader idle whenever its prefetch queue had filled).

    ``fetch``: ``"auto"`` (default) reads record batches with the source's own Fetch
    requests when the connection is plaintext (no ``security.*``, ``sasl.*`` or
    ``ssl.*`` property), decoding a whole fetch with numpy and no Python object per
    record (:mod:`lockgate.connectors.kafka.direct_client`); metadata, start offsets and
    group commits still go through librdkafka. A reader whose direct fetch cannot go on
    (a broker unreachable, an error other than a leader change, a batch compressed with
    another codec than gzip) continues through librdkafka from the same offsets, with a
    warning. ``"librdkafka"``: every record through librdkafka's consumer. The records,
    their order and every guarantee above are the same either way.
    """

    default_name = "kafka"

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        topics: TopicsArg,
        *,
        group_id: str | None = None,
        start: StartArg = "earliest",
        bounded: bool = False,
        format: str = "json",
        key_field: str | None = None,
        on_error: str = "fail",
        isolation: str = "read_committed",
        properties: Mapping[str, Any] | None = None,
        partition_discovery_interval: float | timedelta | None = None,
        timestamp_field: str | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        schema: pa.Schema | None = None,
        fetch: str = "auto",
        schema_registry: Any = None,
        reader_schema: Any = None,
        key_format: str | None = None,
        key_reader_schema: Any = None,
        debezium_metadata: Mapping[str, str] | None = None,
        debezium_skip_ops: Sequence[str] | None = None,
    ) -> None:
        self.bootstrap_servers = check_bootstrap_servers(OWNER, bootstrap_servers)
        self.topics, self.pattern = _check_topics(topics)
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigurationError(
                f"{OWNER} group_id must be None or a non-empty str (the consumer group that "
                f"receives the checkpointed offsets), got {group_id!r}"
            )
        self.group_id = group_id
        self.start = _check_start(start, self.topics, self.pattern, group_id)
        self.bounded = check_bool(OWNER, "bounded", bounded)
        #: Debezium envelopes (format="debezium-json"/"debezium-avro"): the converter of
        #: the decoded values into changelog rows; ``format`` is then the decoding's
        self.debezium: DebeziumConverter | None = None
        if format in DEBEZIUM_FORMATS:
            self.debezium = check_debezium(
                OWNER,
                format,
                debezium_metadata,
                debezium_skip_ops,
                key_field=key_field,
                timestamp_field=timestamp_field,
                schema=schema,
            )
            format = DEBEZIUM_FORMATS[format]
        else:
            check_not_debezium(OWNER, str(format), debezium_metadata, debezium_skip_ops)
        try:
            self.format = check_format(OWNER, format)
        except ConfigurationError as e:
            raise ConfigurationError(
                f"{e}; or 'debezium-json' / 'debezium-avro' (Debezium change events as a changelog)"
            ) from None
        self.key_field = _check_field("key_field", key_field, "the record's key")
        self.timestamp_field = _check_field(
            "timestamp_field", timestamp_field, "the record's Kafka timestamp in epoch ms"
        )
        if key_field is not None and key_field == timestamp_field:
            raise ConfigurationError(
                f"{OWNER} key_field and timestamp_field must differ, both are {key_field!r}"
            )
        self.on_error = check_on_error(OWNER, on_error)
        if isolation not in ISOLATION:
            raise ConfigurationError(
                f"{OWNER} isolation must be 'read_committed' (skip aborted transactions) or "
                f"'read_uncommitted' (read everything written), got {isolation!r}"
            )
        self.isolation = isolation
        self.properties = check_properties(OWNER, properties, reserved=RESERVED)
        self.discovery_interval_s = _check_interval(partition_discovery_interval)
        if self.bounded and self.discovery_interval_s is not None:
            raise ConfigurationError(
                f"{OWNER}: bounded=True reads the partitions of the job's start up to their "
                "end offsets then, so it cannot discover partitions; drop "
                "partition_discovery_interval or pass bounded=False"
            )
        self.max_record_bytes = check_max_record_bytes(OWNER, max_record_bytes)
        self.key_format = _check_key_format(key_format, self.key_field)
        self.schema_registry = check_schema_registry(
            OWNER, schema_registry, {"format": self.format, "key_format": self.key_format}
        )
        #: the registry formats' reader schemas, checked (picklable: a Protobuf class
        #: travels as its descriptors)
        self.value_decoding = _check_reader(self.format, "reader_schema", reader_schema)
        self.key_decoding = _check_reader(self.key_format, "key_reader_schema", key_reader_schema)
        self.schema = _check_schema(
            schema, self.format, self.key_field, self.timestamp_field, self.key_format
        )
        if fetch not in FETCH_MODES:
            raise ConfigurationError(
                f"{OWNER} fetch must be 'auto' (fetch record batches directly over plaintext "
                "connections, through librdkafka otherwise) or 'librdkafka' (always through "
                f"librdkafka), got {fetch!r}"
            )
        self.fetch = fetch
        #: the splits of the job's start, resolved once per run (``prepare_run``)
        self._resolved: list[KafkaSplit] | None = None
        #: bounded: every partition's first offset when ``_resolved`` was resolved
        #: (restored splits never positioned start there: ``restore_splits``)
        self._first_offsets: dict[tuple[str, int], int] = {}

    @property
    def topic_description(self) -> str:
        if self.pattern is not None:
            return f"topics matching {self.pattern.pattern!r}"
        return "topic " + ", ".join(repr(t) for t in self.topics)

    # -- driver ---------------------------------------------------------------------------

    def check_before_run(self) -> None:
        """Fail now if the broker does not answer or a named topic does not exist."""
        consumer = self._consumer(self.group_id)
        try:
            _partitions(consumer, self)
        finally:
            consumer.close()

    def prepare_run(self) -> bool:
        """Resolve every partition's start (and, bounded, end) offset, once per run."""
        self._resolved = self._resolve()
        return True

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[KafkaSplit]:
        """Restored splits reconciled with ``bounded`` (M-R3). Bounded: a split without
        an end (the state of an unbounded run) gets its partition's end offset of this
        run, resolved once per run with the start offsets (``prepare_run``), as at a fresh
        start, so the job reads what came meanwhile and ends; one never positioned
        (:data:`EARLIEST`) starts at its partition's first offset then. A split with an
        end (a bounded run's checkpoint) keeps it: a bounded run's end never moves.
        Unbounded: a restored end is kept as well (it is the split's state, as the
        stopping offset is in Flink's KafkaSource): such a partition is read up to it
        and no further, with a warning; start a new job (e.g. ``start=`` the offsets
        where it stopped) to read past it."""
        out = [replace(s) for s in splits]
        if not self.bounded:
            kept = [
                f"{s.split_id} (end offset {s.end})"
                for s in out
                if s.end is not None
                and owner_of(s.topic, s.partition, ctx.parallelism) == ctx.subtask_index
            ]
            if kept:
                log.warning(
                    "KafkaSource subtask %d: restored %s from a bounded job's state; this "
                    "unbounded source reads them up to those ends and no further (the end is "
                    "part of a split's state); start a new job at their offsets to read on",
                    ctx.subtask_index,
                    ", ".join(kept),
                )
            return out
        open_ended = [s for s in out if s.end is None]
        if not open_ended:
            return out
        bounds = self._bounds(open_ended)
        for s in open_ended:
            first, end = bounds[(s.topic, s.partition)]
            if s.offset == EARLIEST:
                s.offset = first
            s.end = end
        return out

    def _bounds(self, splits: list[KafkaSplit]) -> dict[tuple[str, int], tuple[int, int]]:
        """``(topic, partition)`` -> (first offset, end offset) of this run for the
        partitions of ``splits`` (bounded only): resolved once per run
        (``prepare_run``); a partition the run's start did not list (e.g. its topic
        no longer matches) is asked now."""
        if self._resolved is None:
            self._resolved = self._resolve()
        known: dict[tuple[str, int], tuple[int, int]] = {}
        for r in self._resolved:
            first_offset = self._first_offsets.get((r.topic, r.partition))
            if r.end is not None and first_offset is not None:
                known[(r.topic, r.partition)] = (first_offset, r.end)
        missing = sorted({(s.topic, s.partition) for s in splits} - set(known))
        if missing:
            consumer = self._consumer(self.group_id)
            try:
                first: dict[tuple[str, int], int] = {}
                for r in _resolve_offsets(consumer, self, missing, first):
                    assert r.end is not None
                    known[(r.topic, r.partition)] = (first[(r.topic, r.partition)], r.end)
            finally:
                consumer.close()
        return known

    def create_splits(self, parallelism: int) -> list[KafkaSplit]:
        """The partitions of the job's start with their start (and end) offsets, laid
        out so that subtask ``i``'s share (every ``parallelism``-th from ``i``) holds the
        partitions it owns (:func:`owner_of`); the other entries repeat splits that
        their receivers drop. Outside a job (no ``prepare_run``) they are resolved now."""
        if self._resolved is None:
            self._resolved = self._resolve()
        owned: list[list[KafkaSplit]] = [[] for _ in range(parallelism)]
        for split in self._resolved:
            owned[owner_of(split.topic, split.partition, parallelism)].append(split)
        rounds = max((len(o) for o in owned), default=0)
        filler = self._resolved[:1]
        out: list[KafkaSplit] = []
        for r in range(rounds):
            for i in range(parallelism):
                out.extend([owned[i][r]] if r < len(owned[i]) else filler)
        return [replace(s) for s in out]

    def _resolve(self) -> list[KafkaSplit]:
        consumer = self._consumer(self.group_id)
        try:
            parts = _partitions(consumer, self)
            return _resolve_offsets(consumer, self, parts, self._first_offsets)
        finally:
            consumer.close()

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        """A reader with its own consumer (nothing assigned until splits are added)."""
        return _KafkaReader(self, ctx, self._consumer(self.group_id))

    def _consumer(self, group_id: str | None) -> Any:
        ck = confluent_kafka()
        config: dict[str, Any] = {
            **FETCH_DEFAULTS,
            **self.properties,
            "bootstrap.servers": self.bootstrap_servers,
            # librdkafka needs a group id even for assign(); without one nothing is committed
            "group.id": group_id or f"lockgate-source-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": self.isolation,
            "auto.offset.reset": "earliest",
            # the fetch position a partition's end event carries shows what was handed
            # over (a forged record's claimed offset moves the client's position past it)
            "enable.partition.eof": True,
        }
        try:
            return ck.Consumer(librdkafka_config(config))
        except ck.KafkaException as e:
            raise ConfigurationError(
                f"{OWNER} cannot create a Kafka consumer for {self.bootstrap_servers!r}: {e}; "
                "check properties (librdkafka consumer settings)"
            ) from e


# --------------------------------------------------------------------------- resolution


def _partitions(consumer: Any, source: KafkaSource) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every partition of the source's topics now, sorted;
    ConfigurationError naming the broker when it does not answer, and the topic when a
    named one does not exist."""
    ck = confluent_kafka()
    try:
        meta = consumer.list_topics(timeout=REQUEST_TIMEOUT_S)
    except ck.KafkaException as e:
        raise ConfigurationError(
            f"{OWNER} cannot reach Kafka at {source.bootstrap_servers!r} (reading "
            f"{source.topic_description}): {e}; start the broker there, or fix "
            "bootstrap_servers"
        ) from e
    out: list[tuple[str, int]] = []
    if source.pattern is not None:
        for name, topic in meta.topics.items():
            if not name.startswith("__") and source.pattern.fullmatch(name) and not topic.error:
                out.extend((name, p) for p in topic.partitions)
        return sorted(out)
    for name in source.topics:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ConfigurationError(
                f"{OWNER}: Kafka topic {name!r} does not exist at {source.bootstrap_servers!r}"
                f"{f' ({topic.error})' if topic is not None and topic.error else ''}; create it "
                f"first (kafka-topics.sh --create --topic {name}) or fix topics"
            )
        out.extend((name, p) for p in topic.partitions)
    return sorted(out)


def _resolve_offsets(
    consumer: Any,
    source: KafkaSource,
    parts: list[tuple[str, int]],
    lows: dict[tuple[str, int], int] | None = None,
) -> list[KafkaSplit]:
    """The splits of ``parts`` with their start offsets (and end offsets when bounded);
    ``lows`` (when given) receives the partitions' first offsets as they are read."""
    ck = confluent_kafka()
    tp = ck.TopicPartition
    if lows is None:
        lows = {}
    ends: dict[tuple[str, int], int] = {}
    start = source.start
    try:
        if source.bounded or start == "latest" or isinstance(start, int):
            for t, p in parts:
                low, high = consumer.get_watermark_offsets(tp(t, p), timeout=REQUEST_TIMEOUT_S)
                lows[(t, p)], ends[(t, p)] = int(low), int(high)
        starts: dict[tuple[str, int], int] = {}
        if start == "latest":
            starts = dict(ends)
        elif start == "committed" and parts:
            committed = consumer.committed([tp(t, p) for t, p in parts], timeout=REQUEST_TIMEOUT_S)
            starts = {(c.topic, c.partition): c.offset for c in committed if c.offset >= 0}
        elif isinstance(start, int) and parts:
            found = consumer.offsets_for_times(
                [tp(t, p, start) for t, p in parts], timeout=REQUEST_TIMEOUT_S
            )
            starts = {
                (f.topic, f.partition): f.offset if f.offset >= 0 else ends[(f.topic, f.partition)]
                for f in found
            }
        elif isinstance(start, dict):
            starts = dict(start)
    except ck.KafkaException as e:
        raise ConfigurationError(
            f"{OWNER} cannot read the offsets of {source.topic_description} at "
            f"{source.bootstrap_servers!r}: {e}"
        ) from e
    splits = []
    for t, p in parts:
        # bounded: a concrete start, so an empty partition (start == end) ends at once
        offset = starts.get((t, p), lows[(t, p)] if source.bounded else EARLIEST)
        end = ends[(t, p)] if source.bounded else None
        if end is not None and offset > end:
            offset = end
        splits.append(KafkaSplit(t, p, offset, end))
    return splits


# --------------------------------------------------------------------------- reader


#: how often a reader refreshes its source lag metric (seconds)
LAG_INTERVAL_S = 1.0


class _KafkaReader(SourceReader):
    """Reads the partitions its subtask owns through one consumer with explicit
    assignments. ``poll`` never blocks (``consume`` with timeout 0 returns what the
    client has prefetched); with nothing ready it asks to be polled again after
    :data:`IDLE_WAIT_MS`."""

    restores_every_split = True

    def __init__(self, source: KafkaSource, ctx: RuntimeContext, consumer: Any) -> None:
        self.source = source
        self.ctx = ctx
        self.consumer: Any = consumer
        self.splits: dict[tuple[str, int], KafkaSplit] = {}
        #: every partition this reader has had (discovery starts only the others)
        self.known: set[tuple[str, int]] = set()
        #: the bounded splits read to their end (kept in checkpoints: a restore knows the
        #: partitions as read, and discovery never starts them again)
        self.finished: dict[tuple[str, int], KafkaSplit] = {}
        #: splits added since the last poll, announced to the output (``split_started``)
        #: so that they hold the watermark back before their first record (M-W1)
        self._unannounced: list[str] = []
        #: final offsets of splits that finished since the last commit (group_id only)
        self._finished_offsets: dict[tuple[str, int], int] = {}
        interval = source.discovery_interval_s
        self._next_discovery = time.monotonic() if interval is not None else None
        #: the topic of every message when the source reads one named topic (no need to
        #: ask each message)
        self._single_topic = (
            source.topics[0] if source.pattern is None and len(source.topics) == 1 else None
        )
        #: the one decode function of both fetch paths for registry formats (value or
        #: key), made per reader: its registry caches are per process
        self._registry: RegistryDecoder | None = None
        if source.schema_registry is not None:
            self._registry = RegistryDecoder(
                source.schema_registry,
                value=source.value_decoding,
                plain_format=source.format,
                key=source.key_decoding,
                key_field=source.key_field,
                timestamp_field=source.timestamp_field,
                schema=source.schema,
                max_record_bytes=source.max_record_bytes,
            )
        self._arrow = (
            None if source.schema is None or self._registry is not None else _ArrowDecoder(source)
        )
        #: when to look at the partitions' high watermarks again (source lag metric)
        self._next_lag = 0.0
        #: the direct fetcher (``fetch="auto"`` over plaintext), None once the reader
        #: reads through librdkafka
        self._direct: DirectFetcher | None = None
        #: directly fetched batches not emitted yet: (split key, batch, offset after it,
        #: the dead letters of its records)
        self._ready: deque[tuple[tuple[str, int], Batch | None, int, list[Any]]] = deque()
        #: splits at EARLIEST not given to the direct fetcher yet, and until when to try
        self._unresolved: dict[tuple[str, int], float] = {}
        self._next_resolve = 0.0
        #: the last offset librdkafka gave each partition (its records must grow)
        self._last_offsets: dict[tuple[str, int], int] = {}
        #: per partition, a record after a gap held back until what follows it shows
        #: that it skipped nothing (``_in_order``)
        self._held: dict[tuple[str, int], Any] = {}
        #: partitions whose client position went past a refused record (a forged one
        #: claimed an offset there): the split's position stops after the last emitted
        self._beyond: dict[tuple[str, int], int] = {}
        #: per partition, the largest offset a refused record claimed while no record
        #: emitted is past it yet: librdkafka's position (which only moves forward) is
        #: past it, the records below it that follow are still to come, so the split's
        #: position stops after the last record emitted until one emitted passes it
        self._forged: dict[tuple[str, int], int] = {}
        #: per partition, the fetch position of its last end event: every record
        #: before it has been handed over
        self._eof: dict[tuple[str, int], int] = {}
        if source.fetch == "auto" and direct_fetch_possible(source.properties):
            self._direct = DirectFetcher(
                self._leaders,
                committed_only=source.isolation == "read_committed",
                max_batch_bytes=max_batch_bytes(source.max_record_bytes),
            )

    def _owns(self, topic: str, partition: int) -> bool:
        return owner_of(topic, partition, self.ctx.parallelism) == self.ctx.subtask_index

    def add_splits(self, splits: list[KafkaSplit]) -> None:
        """Take over the splits this subtask owns (copies; others, and repeats, are
        dropped) and assign their partitions at their offsets."""
        ck = confluent_kafka()
        new: list[Any] = []
        for split in splits:
            key = (split.topic, split.partition)
            if key in self.known or not self._owns(*key):
                continue
            self.known.add(key)
            if split.finished:
                self.finished[key] = replace(split)
                continue
            split = self.splits[key] = replace(split)
            self._unannounced.append(split.split_id)
            if self._direct is not None:
                if split.offset == EARLIEST:
                    # resolved at the next polls: a partition just created may have no
                    # leader yet (the request fails until it has one)
                    self._unresolved[key] = time.monotonic() + REQUEST_TIMEOUT_S
                else:
                    self._direct.assign(key, split.offset, split.end)
                continue
            new.append(ck.TopicPartition(split.topic, split.partition, split.offset))
        if new:
            self.consumer.incremental_assign(new)

    def _resolve_earliest(self) -> None:
        """Give the direct fetcher the splits that start at their partition's first
        offset, once the broker tells it (a request each, of at most
        :data:`EARLIEST_WAIT_S`); one still unknown after :data:`REQUEST_TIMEOUT_S`
        hands the reader over to librdkafka, which resolves it itself."""
        ck = confluent_kafka()
        assert self._direct is not None
        now = time.monotonic()
        if now < self._next_resolve:
            return
        self._next_resolve = now + EARLIEST_RETRY_S
        for key, deadline in list(self._unresolved.items()):
            split = self.splits.get(key)
            if split is None:
                del self._unresolved[key]
                continue
            try:
                low, _ = self.consumer.get_watermark_offsets(
                    ck.TopicPartition(*key), timeout=EARLIEST_WAIT_S
                )
            except ck.KafkaException as e:
                if time.monotonic() > deadline:
                    raise FetchUnavailable(
                        f"the first offset of {split.split_id} stayed unknown for "
                        f"{REQUEST_TIMEOUT_S:.0f} s: {e}"
                    ) from e
                try:  # the client's metadata may not know the partition yet
                    self.consumer.list_topics(key[0], timeout=EARLIEST_WAIT_S)
                except ck.KafkaException:
                    pass
                continue
            del self._unresolved[key]
            split.offset = int(low)
            self._direct.assign(key, split.offset, split.end)

    def _leaders(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, int]]:
        """Each partition's leader broker address, from the consumer's metadata."""
        ck = confluent_kafka()
        found: dict[tuple[str, int], tuple[str, int]] = {}
        for topic in sorted({t for t, _ in wanted}):
            try:
                meta = self.consumer.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
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

    def _to_librdkafka(self, why: FetchUnavailable) -> None:
        """Continue every split through librdkafka from its offset."""
        ck = confluent_kafka()
        assert self._direct is not None
        log.warning(
            "KafkaSource subtask %d: direct fetching stopped (%s); reading through "
            "librdkafka from the same offsets",
            self.ctx.subtask_index,
            why,
        )
        self._direct.close()
        self._direct = None
        self._unresolved.clear()  # librdkafka starts them at the beginning itself
        if self.splits:
            self.consumer.incremental_assign(
                [ck.TopicPartition(s.topic, s.partition, s.offset) for s in self.splits.values()]
            )

    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit what the consumer has ready, one batch per partition, and move every
        partition's position to the consumer's (past control markers and aborted
        records too). A bounded split ends when its position reaches its end."""
        if self._next_discovery is not None and time.monotonic() >= self._next_discovery:
            self._discover()
        if self._unannounced:
            for split_id in self._unannounced:
                output.split_started(split_id)
            self._unannounced = []
        if not self.splits:
            return (
                InputStatus.END_OF_INPUT if self.source.bounded else InputStatus.NOTHING_AVAILABLE
            )
        messages: Any = None
        got = False
        if self._direct is not None:
            messages = self._poll_direct(output)
        if self._direct is None:
            messages = self.consumer.consume(num_messages=MAX_BATCH, timeout=0)
            if messages:
                messages, got = self._events(messages)
            if messages or self._held:
                self._emit(messages, output)
            self._advance(output)
            messages = messages or got
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + LAG_INTERVAL_S
            self.pending_records = self._lag()
        if self.source.bounded and not self.splits:
            return InputStatus.END_OF_INPUT
        return InputStatus.MORE_AVAILABLE if messages else InputStatus.NOTHING_AVAILABLE

    def _lag(self) -> int | None:
        """Records between each split's offset and its partition's high watermark (or
        its end), from the client's cached watermarks (no request); None while no
        partition's watermark is known yet."""
        ck = confluent_kafka()
        total: int | None = None
        for split in self.splits.values():
            if self._direct is not None:
                high = self._direct.high_watermarks.get((split.topic, split.partition))
                if high is not None:
                    end = high if split.end is None else min(high, split.end)
                    total = (total or 0) + max(0, end - split.offset)
                continue
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
        if total is None and not self.splits:
            return 0
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
        report = self._reporter(output)
        runs_of = self._runs(messages, message) if messages else {}
        for key in self._held:
            runs_of.setdefault(key, [])
        for key, runs in runs_of.items():
            split = self.splits.get(key)
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
            batch: Batch | None
            if self._registry is not None:
                batch = self._registry_batch(msgs, message, keys, output)
            elif self._arrow is not None:
                batch = self._arrow.decode(msgs, report, keys)
            else:
                batch = self._rows(msgs, message, output, keys)
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
            split = self.splits[key]
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
                self._malformed(
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
                self._malformed(
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
                ck.TopicPartition(*key), timeout=REQUEST_TIMEOUT_S
            )
        except ck.KafkaException:
            return None
        return int(high)

    def _poll_direct(self, output: ReaderOutput) -> bool:
        """One batch of the direct fetcher's records emitted (fetching when none is
        waiting); True when it emitted one or more are waiting."""
        assert self._direct is not None
        if not self._ready:
            try:
                if self._unresolved:
                    self._resolve_earliest()
                for records in self._direct.poll():
                    self._decode_records(records)
            except FetchUnavailable as e:
                self._to_librdkafka(e)
                return False
        emitted = False
        if self._ready:
            key, batch, offset, dead = self._ready.popleft()
            split = self.splits.get(key)
            if split is not None:
                for record in dead:
                    output.emit_dead_letter(record)
                if batch is not None:
                    output.emit_from_split(split.split_id, batch)
                    emitted = True
                split.offset = offset
        self._advance_direct(output)
        return emitted or bool(self._ready)

    def _decode_records(self, records: PartitionRecords) -> None:
        """Decode one partition's directly fetched records and queue them in batches of
        at most :data:`MAX_BATCH` records (as librdkafka's path emits them), each with
        the offset its split moves to once it is emitted."""
        key = (records.topic, records.partition)
        split = self.splits.get(key)
        if split is None:
            return  # a partition just given up
        batch: Batch | None = None
        # dead letters go out with the batch they belong to (in the same poll as the
        # split's move past them), never before: a checkpoint between the two would
        # hold the dead letter and an offset before its record, and a restore would
        # send it again
        dead = _DeadLetters()
        if len(records):
            if self._registry is not None:
                batch = self._registry_records(records, dead)
            elif self._arrow is not None:
                batch = self._arrow.decode_records(records, self._reporter(dead))
            else:
                batch = self._rows_from(
                    records.values(),
                    records.keys,
                    lambda: list(
                        zip(records.timestamp_kinds.tolist(), records.timestamps.tolist())
                    ),
                    records.messages,
                    dead,
                )
        # a refused batch (forged offsets, a decompression bomb) fails the job here, or
        # its dead letter goes out with the part of the fetch whose offset passes it
        refused = deque(self._refused(records))
        end = records.next_offset if split.end is None else min(records.next_offset, split.end)
        rows = 0 if batch is None else len(batch)
        if (
            batch is not None
            and rows > MAX_BATCH
            and rows == len(records)
            and self.source.debezium is None  # an envelope gives 0, 1 or 2 rows
        ):
            # one row per record: cut it, each part moving the split past its last record
            offsets = records.offsets
            start = 0
            while rows - start > MAX_BATCH:
                stop = start + MAX_BATCH
                after = int(offsets[stop - 1]) + 1
                passed = []
                while refused and refused[0]["offset"] < after:
                    passed.append(refused.popleft())
                self._ready.append((key, _slice(batch, start, stop), after, passed))
                start = stop
            batch = _slice(batch, start, rows)
        self._ready.append((key, batch, end, [*refused, *dead.records]))

    def _refused(self, records: PartitionRecords) -> list[dict[str, Any]]:
        """The dead letters of the batches the direct fetch refused (forged offsets, a
        decompression bomb: issue 37 items 2 and 7), in offset order; with
        ``on_error="fail"`` the first one fails the job, naming it."""
        letters = _DeadLetters()
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

    def _registry_batch(
        self, msgs: list[Any], message: Any, keys: list[Any] | None, output: ReaderOutput
    ) -> Batch | None:
        """One partition's messages (librdkafka's path) through the registry decoder,
        the function the direct path's :meth:`_registry_records` calls too."""
        assert self._registry is not None

        def stamps() -> tuple[Any, Any]:
            pairs = np.array(list(map(message.timestamp, msgs)), dtype=np.int64).reshape(-1, 2)
            return pairs[:, 0], pairs[:, 1]

        bad: set[int] = set()

        def malformed(i: int, raw: Any, error: str, schema_id: int | None, **more: Any) -> None:
            bad.add(i)
            self._malformed(msgs[i], raw, error, output, schema_id=schema_id, **more)

        batch = self._registry.decode(
            list(map(message.value, msgs)),
            (lambda: keys) if keys is not None else lambda: list(map(message.key, msgs)),
            stamps,
            malformed,
        )
        if self.source.debezium is not None:
            return self._debezium_registry(batch, bad, msgs.__getitem__, len(msgs), output)
        return batch

    def _registry_records(self, records: PartitionRecords, output: ReaderOutput) -> Batch | None:
        """One partition's directly fetched records through the registry decoder (as
        :meth:`_registry_batch`)."""
        assert self._registry is not None
        messages: list[Any] = []

        bad: set[int] = set()

        def message_at(i: int) -> Any:
            if not messages:
                messages.extend(records.messages())
            return messages[i]

        def malformed(i: int, raw: Any, error: str, schema_id: int | None, **more: Any) -> None:
            bad.add(i)
            self._malformed(message_at(i), raw, error, output, schema_id=schema_id, **more)

        batch = self._registry.decode(
            records.values,
            records.keys,
            lambda: (records.timestamp_kinds, records.timestamps),
            malformed,
            raw=(records.array(), records.value_starts, records.value_lengths),
        )
        if self.source.debezium is not None:
            return self._debezium_registry(batch, bad, message_at, len(records), output)
        return batch

    def _reporter(self, output: ReaderOutput) -> Any:
        def report(m: Any, raw: Any, error: str) -> None:
            self._malformed(m, raw, error, output)

        return report

    def _advance_direct(self, output: ReaderOutput) -> None:
        """Finish the bounded splits the direct fetcher has read to their end."""
        assert self._direct is not None
        for key, split in list(self.splits.items()):
            if split.finished:
                self.finished[key] = self.splits.pop(key)
                self._finished_offsets[key] = split.offset
                output.split_finished(split.split_id)
                self._direct.remove(key)

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

    def _rows(
        self, msgs: list[Any], message: Any, output: ReaderOutput, keys: list[Any] | None = None
    ) -> RowBatch | None:
        """The records of one partition's messages as a RowBatch (None if none);
        ``keys``: their keys when already read."""
        return self._rows_from(
            list(map(message.value, msgs)),
            (lambda: keys) if keys is not None else lambda: list(map(message.key, msgs)),
            lambda: list(map(message.timestamp, msgs)),
            lambda: msgs,
            output,
        )

    def _rows_from(
        self,
        values: list[Any],
        keys: Any,
        stamps: Any,
        messages: Any,
        output: ReaderOutput,
    ) -> RowBatch | None:
        """The records of one partition as a RowBatch (None if none): decoded at once
        when every value is well-formed, else record by record (``messages()``).
        ``keys()`` and ``stamps()`` give the records' keys and ``(kind, timestamp)``."""
        source = self.source
        if source.debezium is not None:
            return self._debezium_rows(values, messages, output)
        records = _decode_all(values, source.format, source.max_record_bytes)
        if records is None:  # a tombstone, or a record that fails alone: one by one
            records = [
                r for r in (self._record(m, output) for m in messages()) if r is not _MALFORMED
            ]
            return RowBatch(records) if records else None
        key_field, ts_field = source.key_field, source.timestamp_field
        if key_field is None and ts_field is None:
            return RowBatch(records)
        records = [r if isinstance(r, dict) else {"value": r} for r in records]
        if key_field is not None:
            for r, k in zip(records, keys()):
                r[key_field] = None if k is None else k.decode("utf-8", "replace")
        if ts_field is not None:
            for r, (kind, ts) in zip(records, stamps()):
                r[ts_field] = None if kind == 0 else ts
        return RowBatch(records)

    def _debezium_rows(
        self, values: list[Any], messages: Any, output: ReaderOutput
    ) -> Batch | None:
        """One partition's Debezium-JSON values as changelog rows (:mod:`.debezium`):
        decoded as JSON (at once, or one by one as :meth:`_record`, which reports what
        does not decode), then converted, a malformed envelope reported by its message."""
        source = self.source
        assert source.debezium is not None
        envelopes = _decode_all(values, "json", source.max_record_bytes)
        if envelopes is not None:
            listed: list[Any] = []

            def message_at(i: int) -> Any:
                if not listed:
                    listed.extend(messages())
                return listed[i]

            return source.debezium.convert(envelopes, message_at, self._envelope_reporter(output))
        # one by one, decoding and converting each record in turn: the first malformed
        # one (in offset order) fails the job
        report = self._envelope_reporter(output)
        rows: list[Any] = []
        kinds: list[int] = []
        for m in messages():
            envelope = self._record(m, output)
            if envelope is not _MALFORMED:
                source.debezium.add(envelope, 0, [m].__getitem__, report, rows, kinds)
        return debezium_batch(rows, kinds)

    def _debezium_registry(
        self, batch: Batch | None, bad: set[int], message_at: Any, n: int, output: ReaderOutput
    ) -> Batch | None:
        """A registry decoder's records of ``n`` messages (those at the indices ``bad``
        reported malformed left out) converted from Debezium envelopes."""
        assert self.source.debezium is not None and isinstance(batch, (RowBatch, type(None)))
        if batch is None:
            return None
        kept = [i for i in range(n) if i not in bad]
        return self.source.debezium.convert(
            batch.rows, lambda j: message_at(kept[j]), self._envelope_reporter(output)
        )

    def _envelope_reporter(self, output: ReaderOutput) -> Any:
        """Reports a malformed Debezium envelope with its record's value as ``raw``: the
        text of a JSON one, the bytes (and ``schema_id``) of an Avro one."""

        def report(m: Any, _envelope: Any, error: str) -> None:
            value = m.value()
            if self._registry is None:
                self._malformed(m, value.decode("utf-8", "replace"), error, output)
                return
            try:
                schema_id: int | None = schema_id_of(value)
            except WireFormatError:
                schema_id = None
            self._malformed(m, value, error, output, schema_id=schema_id)

        return report

    def _advance(self, output: ReaderOutput) -> None:
        """Every split's offset := the consumer's position; finish bounded splits."""
        ck = confluent_kafka()
        positions = self.consumer.position(
            [ck.TopicPartition(s.topic, s.partition) for s in self.splits.values()]
        )
        done: list[Any] = []
        for tp in positions:
            split = self.splits[(tp.topic, tp.partition)]
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
                self.finished[(tp.topic, tp.partition)] = self.splits.pop((tp.topic, tp.partition))
                self._finished_offsets[(tp.topic, tp.partition)] = split.offset
                output.split_finished(split.split_id)
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

    def _discover(self) -> None:
        """Start the partitions this subtask owns that it has never had, at their
        earliest offset."""
        interval = self.source.discovery_interval_s
        assert interval is not None
        self._next_discovery = time.monotonic() + interval
        try:
            parts = _partitions(self.consumer, self.source)
        except ConfigurationError as e:
            if self.source.pattern is not None or self.known:
                log.warning("KafkaSource partition discovery failed: %s", e)
                return
            raise
        self.add_splits([KafkaSplit(t, p, EARLIEST) for t, p in parts])

    def _record(self, m: Any, output: ReaderOutput) -> Any:
        """The record of message ``m``, or ``_MALFORMED`` after reporting it."""
        source = self.source
        value = m.value()
        record: Any
        if value is None:
            record = None
        elif len(value) > source.max_record_bytes:
            raw, error = oversized(len(value), source.max_record_bytes, value)
            self._malformed(m, raw, error, output)
            return _MALFORMED
        elif source.format == "bytes":
            record = value
        else:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError as e:
                self._malformed(
                    m, value.decode("utf-8", "replace"), f"not valid UTF-8: {e}", output
                )
                return _MALFORMED
            if source.format == "text":
                record = text
            else:
                try:
                    record = json.loads(text)
                except DECODE_ERRORS as e:
                    self._malformed(m, text, decode_error("JSON", e), output)
                    return _MALFORMED
        if source.key_field is None and source.timestamp_field is None:
            return record
        if not isinstance(record, dict):
            record = {"value": record}
        if source.key_field is not None:
            key = m.key()
            record[source.key_field] = None if key is None else key.decode("utf-8", "replace")
        if source.timestamp_field is not None:
            kind, ts = m.timestamp()
            record[source.timestamp_field] = None if kind == 0 else ts
        return record

    def _malformed(self, m: Any, raw: Any, error: str, output: ReaderOutput, **fields: Any) -> None:
        """Report message ``m`` as malformed; ``fields``: more of its position (the
        registry formats add ``schema_id``, None when the record is not framed, and
        with a registry ``key_format`` ``raw_key``, the key's bytes)."""
        report_malformed(
            self.source.on_error,
            output,
            what="kafka record",
            location=f"{m.topic()}[{m.partition()}]@{m.offset()}",
            raw=raw,
            error=error,
            topic=m.topic(),
            partition=m.partition(),
            offset=m.offset(),
            **fields,
        )

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: :data:`IDLE_WAIT_MS`, or less until discovery is due."""
        if self._next_discovery is None:
            return IDLE_WAIT_MS
        return max(0.0, min(IDLE_WAIT_MS, (self._next_discovery - time.monotonic()) * 1000))

    def snapshot_positions(self) -> list[KafkaSplit]:
        """Copies of the unfinished splits, each with its next offset, then of the
        finished ones (bounded: at their ends), so that a restore, also into an unbounded
        source with partition discovery, never reads a finished partition again."""
        return [replace(s) for s in (*self.splits.values(), *self.finished.values())]

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[Any]) -> None:
        """Commit the offsets of ``checkpoint_id`` to ``group_id`` (if given), for
        monitoring; asynchronous, best effort (never read back on restore)."""
        if self.source.group_id is None or self.consumer is None:
            return
        ck = confluent_kafka()
        offsets = {(s.topic, s.partition): s.offset for s in positions if s.offset >= 0}
        offsets.update(self._finished_offsets)
        self._finished_offsets = {}
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
        if self._direct is not None:
            self._direct.close()
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.close()


_MALFORMED = object()
#: the C JSON scanner of a default decoder: ``scan(text, 0)`` -> ``(value, end)``
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_VALUE = itemgetter(0)
_END = itemgetter(1)


class _DeadLetters(ReaderOutput):
    """Collects the dead letters of records being decoded (nothing else is emitted
    while decoding)."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def emit(self, batch: Batch) -> None:  # pragma: no cover - never called
        raise AssertionError("decoding emits dead letters only")


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


def _decode_all(values: list[Any], fmt: str, limit: int) -> list[Any] | None:
    """Every value decoded as ``fmt`` with C-level calls only, exactly as one by one
    (``json``: what ``json.loads`` gives); None when any value would not decode alone
    the same way (a tombstone, oversize, bad UTF-8 or JSON, surrounding whitespace):
    the caller then decodes record by record."""
    if None in values or max(map(len, values)) > limit:
        return None
    if fmt == "bytes":
        return values
    try:
        texts = list(map(bytes.decode, values))
        if fmt == "text":
            return texts
        # a value the scanner rejects may end the map early (StopIteration): count them
        scanned = list(map(_SCAN, texts, repeat(0)))
    except Exception:  # noqa: BLE001 - any failure: decode one by one, which reports it
        return None
    if len(scanned) != len(texts) or list(map(_END, scanned)) != list(map(len, texts)):
        return None  # rejected, or text after the value (json.loads would refuse it)
    return list(map(_VALUE, scanned))


#: whitespace JSON allows around a value
_JSON_WS = b" \t\r\n"


class _ArrowDecoder:
    """Decodes one partition's messages with ``source.schema`` into one RecordBatch
    (``KafkaSource(schema=...)``)."""

    def __init__(self, source: KafkaSource) -> None:
        import pyarrow.json as pj

        assert source.schema is not None
        self.pj = pj
        self.source = source
        self.schema: pa.Schema = source.schema
        self.names = self.schema.names
        fields = list(self.schema)
        if source.key_field is not None:
            fields.append(pa.field(source.key_field, pa.string()))
        if source.timestamp_field is not None:
            fields.append(pa.field(source.timestamp_field, pa.int64()))
        self.out_schema = pa.schema(fields, metadata=self.schema.metadata)
        #: the compiled reader of flat objects, made on the first directly fetched poll
        self.flat: Any = None
        self.options = {
            nl: pj.ParseOptions(
                explicit_schema=self.schema,
                unexpected_field_behavior="ignore",
                newlines_in_values=nl,
            )
            for nl in (False, True)
        }

    def read(self, joined: bytes, n: int, one_a_line: bool = False) -> tuple[pa.Table | None, str]:
        """``n`` JSON objects (``{...}``), joined by newlines, decoded at once:
        ``(table, "")``, or ``(None, why)`` when they are not ``n`` valid objects.
        ``one_a_line``: the caller checked that ``joined`` holds ``n - 1`` newlines."""
        if not joined.isascii():
            try:
                joined.decode("utf-8")  # the JSON reader does not check UTF-8
            except UnicodeDecodeError as e:
                return None, f"not valid UTF-8: {e}"
        newlines = not one_a_line and joined.count(b"\n") != n - 1
        try:
            table = self.pj.read_json(
                io.BytesIO(joined),
                read_options=self.pj.ReadOptions(
                    use_threads=False, block_size=min(max(len(joined) + 1, 1 << 16), 2**31 - 1)
                ),
                parse_options=self.options[newlines],
            )
        except (pa.ArrowException, ValueError) as e:
            return None, str(e)
        if table.num_rows != n:
            return None, "more than one JSON value"
        return table, ""

    def decode(
        self, msgs: list[Any], malformed: Any, keys: list[Any] | None = None
    ) -> pa.RecordBatch | None:
        """One RecordBatch of the schema's columns (plus key and timestamp columns) for
        the good records of ``msgs``, in order; ``malformed(message, raw, error)`` for
        each bad one, in offset order, before (with on_error="fail" it raises).
        ``keys``: the records' keys when already read."""
        message: Any = type(msgs[0])
        values = list(map(message.value, msgs))
        if None in values:  # a tombstone: a row of nulls
            values = [b"{}" if v is None else v for v in values]
        # Decoded at once only when each value (whitespace around it stripped) starts
        # with "{" and ends with "}": then none can run into the next (a newline inside
        # a string is invalid JSON, and "}" then "{" never continues a value), so n rows
        # mean one per record.
        n = len(values)
        limit = self.source.max_record_bytes
        joined = b"\n".join(values)
        table: pa.Table | None = None
        lines = values
        if (
            # no newline inside a value, and each one between "}" and "{": the common
            # case, checked without a call per record
            joined.count(b"\n") == n - 1
            and joined.count(b"}\n{") == n - 1
            and joined[:1] == b"{"
            and joined[-1:] == b"}"
            and (len(joined) <= limit or max(map(len, values)) <= limit)
        ):
            table, _ = self.read(joined, n, one_a_line=True)
        else:
            lines = list(map(bytes.strip, values, repeat(_JSON_WS)))
            if (
                max(map(len, values)) <= limit
                and all(map(bytes.startswith, lines, repeat(b"{")))
                and all(map(bytes.endswith, lines, repeat(b"}")))
            ):
                table, _ = self.read(b"\n".join(lines), n)
        kept: list[int] | None = None
        if table is None:
            table, kept = self._one_by_one(msgs, values, lines, malformed)
            if table is None:
                return None
            msgs = [msgs[i] for i in kept]
            keys = None if keys is None else [keys[i] for i in kept]
        stamps: Any = None
        if self.source.timestamp_field is not None:
            stamps = np.array(list(map(message.timestamp, msgs)), dtype=np.int64).reshape(-1, 2)
            stamps = (stamps[:, 0], stamps[:, 1])
        return self._batch(
            table,
            (lambda: keys) if keys is not None else lambda: list(map(message.key, msgs)),
            stamps,
        )

    def decode_records(self, records: PartitionRecords, malformed: Any) -> pa.RecordBatch | None:
        """:meth:`decode` for directly fetched records: read in one compiled pass
        straight from the fetched bytes when each value is a flat JSON object
        (:mod:`lockgate.connectors.formats.flat_json`, the same result as pyarrow's reader);
        else handed to pyarrow's JSON reader from the fetched bytes when each is one
        object on one line; else :meth:`decode` of their messages."""
        if int(records.value_lengths.max()) > self.source.max_record_bytes:
            return self.decode(records.messages(), malformed)
        if self.flat is None:
            try:
                from lockgate.connectors.formats.flat_json import FlatJsonReader

                self.flat = FlatJsonReader(self.schema)
            except Exception as e:  # noqa: BLE001 - numba unusable here: pyarrow decodes every poll
                log.warning("KafkaSource: the compiled JSON reader is unavailable (%r)", e)
                self.flat = False
        table = None
        if self.flat:
            table = self.flat.read(records.array(), records.value_starts, records.value_lengths)
        if table is not None:
            stamps = (records.timestamp_kinds, records.timestamps)
            return self._batch(table, records.keys, stamps)
        lines = records.json_object_lines()
        if lines is not None:
            table, _ = self.read(lines, len(records), one_a_line=True)
        if table is None:
            return self.decode(records.messages(), malformed)
        return self._batch(table, records.keys, (records.timestamp_kinds, records.timestamps))

    def _batch(self, table: pa.Table, keys: Any, stamps: Any) -> pa.RecordBatch:
        """The schema's columns of ``table``, then the key column (``keys()``) and the
        timestamp column (``stamps``: kinds and timestamps, kind 0 for none)."""
        columns = [table.column(name).combine_chunks() for name in self.names]
        if self.source.key_field is not None:
            columns.append(key_column(keys()))
        if self.source.timestamp_field is not None:
            kinds, ts = stamps
            columns.append(pa.array(ts, type=pa.int64(), mask=np.asarray(kinds) == 0))
        return pa.RecordBatch.from_arrays(columns, schema=self.out_schema)

    def _one_by_one(
        self, msgs: list[Any], values: list[bytes], lines: list[bytes], malformed: Any
    ) -> tuple[pa.Table | None, list[int]]:
        """The good records' table and indices, after reporting the bad ones: each
        checked alone for size, UTF-8 and being one object, then decoded by halves (a
        range that decodes at once is good; a bad record is found in log steps)."""
        limit = self.source.max_record_bytes
        bad: dict[int, tuple[str, str]] = {}
        candidates: list[int] = []
        for i, (value, line) in enumerate(zip(values, lines)):
            if len(value) > limit:
                bad[i] = oversized(len(value), limit, value)
                continue
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError as e:
                bad[i] = (value.decode("utf-8", "replace"), f"not valid UTF-8: {e}")
                continue
            if not (line.startswith(b"{") and line.endswith(b"}")):
                bad[i] = (text, "invalid JSON for the schema: not a JSON object")
                continue
            candidates.append(i)
        pieces: list[pa.Table] = []
        kept: list[int] = []

        def solve(indices: list[int]) -> None:
            table, why = self.read(b"\n".join([lines[i] for i in indices]), len(indices))
            if table is not None:
                pieces.append(table)
                kept.extend(indices)
            elif len(indices) == 1:
                i = indices[0]
                bad[i] = (values[i].decode("utf-8"), f"invalid JSON for the schema: {why}")
            else:
                half = len(indices) // 2
                solve(indices[:half])
                solve(indices[half:])

        if candidates:
            solve(candidates)
        for i in sorted(bad):
            malformed(msgs[i], *bad[i])
        if not pieces:
            return None, []
        return pa.concat_tables(pieces), kept


# --------------------------------------------------------------------------- arguments


def _check_topics(topics: object) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    if isinstance(topics, re.Pattern):
        if not isinstance(topics.pattern, str):
            raise ConfigurationError(
                f"{OWNER} topics pattern must be a str pattern (re.compile('orders-.*')), "
                f"got {topics!r}"
            )
        return (), topics
    names = (topics,) if isinstance(topics, str) else topics
    if not isinstance(names, Sequence) or isinstance(names, (bytes, bytearray)):
        raise ConfigurationError(
            f"{OWNER} topics must be a topic name, a list of names, or a compiled regular "
            f"expression (re.compile(...)) matching topic names, got {topics!r}"
        )
    valid = re.compile(r"[A-Za-z0-9._-]{1,249}")
    if not names or not all(isinstance(n, str) and valid.fullmatch(n) for n in names):
        raise ConfigurationError(
            f"{OWNER} topics must be non-empty names of letters, digits, '.', '_' and "
            f"'-' (at most 249; at least one name), got {topics!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{OWNER} topic names must be distinct, got {list(names)!r}")
    return tuple(names), None


def _check_start(
    start: object, topics: tuple[str, ...], pattern: re.Pattern[str] | None, group_id: str | None
) -> StartArg:
    how = (
        "'earliest', 'latest', 'committed', an int of epoch milliseconds, or a dict of "
        "offsets {partition: offset} (one topic) or {(topic, partition): offset}"
    )
    if isinstance(start, str):
        if start not in START_MODES:
            raise ConfigurationError(f"{OWNER} start must be {how}, got {start!r}")
        if start == "committed" and group_id is None:
            raise ConfigurationError(
                f"{OWNER} start='committed' reads the offsets committed by a consumer group: "
                "pass group_id"
            )
        return start
    if isinstance(start, bool) or not isinstance(start, (int, Mapping)):
        raise ConfigurationError(f"{OWNER} start must be {how}, got {start!r}")
    if isinstance(start, int):
        if start < 0:
            raise ConfigurationError(
                f"{OWNER} start as a timestamp must be epoch milliseconds >= 0, got {start!r}"
            )
        return start
    offsets: dict[tuple[str, int], int] = {}
    for key, offset in start.items():
        if isinstance(key, int) and not isinstance(key, bool):
            if pattern is not None or len(topics) != 1:
                raise ConfigurationError(
                    f"{OWNER} start {{partition: offset}} needs exactly one named topic; with "
                    f"several topics or a pattern key the offsets by (topic, partition), got {key!r}"
                )
            topic, partition = topics[0], key
        elif (
            isinstance(key, tuple)
            and len(key) == 2
            and isinstance(key[0], str)
            and isinstance(key[1], int)
            and not isinstance(key[1], bool)
        ):
            topic, partition = key
        else:
            raise ConfigurationError(
                f"{OWNER} start offsets must be keyed by partition (an int) or (topic, "
                f"partition), got key {key!r}"
            )
        if partition < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(
                f"{OWNER} start offsets need a partition >= 0 and an int offset >= 0 (the "
                f"first offset to read), got {key!r}: {offset!r}"
            )
        offsets[(topic, partition)] = offset
    if not offsets:
        raise ConfigurationError(f"{OWNER} start offsets must not be empty; use 'earliest'")
    return offsets


def _check_field(arg: str, value: object, meaning: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(
            f"{OWNER} {arg} must be None or a non-empty str (the record field that receives "
            f"{meaning}), got {value!r}"
        )
    return value


def _check_key_format(key_format: object, key_field: str | None) -> str | None:
    if key_format is None:
        return None
    if key_format not in REGISTRY_FORMATS:
        raise ConfigurationError(
            f"{OWNER} key_format must be None (keys as UTF-8 text) or a registry format "
            f"({', '.join(repr(f) for f in REGISTRY_FORMATS)}: keys written by a Schema "
            f"Registry serializer), got {key_format!r}"
        )
    if key_field is None:
        raise ConfigurationError(
            f"{OWNER} key_format={key_format!r} decodes each record's key into key_field: "
            "pass key_field='<the field that receives the key>'"
        )
    return str(key_format)


def _check_reader(fmt: str | None, arg: str, reader_schema: object) -> RegistryFormat | None:
    """The registry format ``fmt`` with its reader schema (argument ``arg``) checked;
    None for a plain format (which takes no reader schema)."""
    if fmt in REGISTRY_FORMATS:
        assert fmt is not None
        return check_registry_format(OWNER, arg, fmt, reader_schema)
    if reader_schema is not None:
        side = "key_format" if arg.startswith("key") else "format"
        raise ConfigurationError(
            f"{OWNER} {arg} resolves records of a registry format ({side}='avro', "
            f"'protobuf' or 'json_schema'), but {side} is {fmt!r}: drop {arg}, or pass "
            f"{side}='avro' (or 'protobuf', 'json_schema') with schema_registry="
        )
    return None


def _check_schema(
    schema: object,
    fmt: str,
    key_field: str | None,
    timestamp_field: str | None,
    key_format: str | None = None,
) -> pa.Schema | None:
    if schema is None:
        return None
    if not isinstance(schema, pa.Schema):
        raise ConfigurationError(
            f"{OWNER} schema must be None or a pyarrow.Schema (pa.schema([('key', "
            f"pa.int64()), ...]): the columns JSON values decode into), got {schema!r}"
        )
    if fmt != "json" and fmt not in REGISTRY_FORMATS:
        raise ConfigurationError(
            f"{OWNER} schema decodes JSON or registry-encoded values into Arrow columns, so "
            f"it needs format='json', 'avro', 'protobuf' or 'json_schema', got format={fmt!r}; "
            "drop schema or pass one of those formats"
        )
    if key_format is not None:
        raise ConfigurationError(
            f"{OWNER} schema with key_format={key_format!r} is not supported (the key column "
            "of an Arrow batch is the key's UTF-8 text): drop schema to get dicts with the "
            "decoded key, or drop key_format"
        )
    names = schema.names
    if not names or len(set(names)) != len(names) or not all(names):
        raise ConfigurationError(
            f"{OWNER} schema needs at least one field and distinct, non-empty field names, "
            f"got {names!r}"
        )
    for arg, field in (("key_field", key_field), ("timestamp_field", timestamp_field)):
        if field is not None and field in names:
            raise ConfigurationError(
                f"{OWNER} {arg}={field!r} is also a schema field; the source adds it as a "
                "column of its own: rename one of them"
            )
    if TS_COLUMN in names:
        raise ConfigurationError(f"{OWNER} schema must not use the reserved name {TS_COLUMN!r}")
    if fmt != "json":
        return schema  # decoded records become its columns through pa.RecordBatch.from_pylist
    import pyarrow.json as pj

    try:
        pj.read_json(
            io.BytesIO(b"{}"),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowException, ValueError) as e:
        raise ConfigurationError(
            f"{OWNER} schema {schema} cannot be read from JSON by pyarrow ({e}); use types "
            "the JSON reader supports (integers, floats, bool, string, timestamp, list, "
            "struct)"
        ) from e
    return schema


def _check_interval(value: object) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ConfigurationError(
            f"{OWNER} partition_discovery_interval must be None (no discovery) or a positive "
            f"number of seconds or timedelta (how often to look for new partitions), got {value!r}"
        )
    return float(seconds)
