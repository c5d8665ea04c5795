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

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import (
    DEFAULT_MAX_RECORD_BYTES,
    Source,
    SourceReader,
    check_bool,
    check_max_record_bytes,
    check_on_error,
)
from ..formats.debezium import (
    DEBEZIUM_FORMATS,
    DebeziumConverter,
    check_debezium,
    check_not_debezium,
)
from .client_logging import librdkafka_config
from .common import (
    check_bootstrap_servers,
    check_format,
    check_properties,
    check_schema_registry,
    confluent_kafka,
)
from .partitions import partitions_of, resolve_offsets
from .reader import KafkaReader
from .source_options import (
    FETCH_DEFAULTS,
    FETCH_MODES,
    ISOLATION,
    OWNER,
    RESERVED,
    StartArg,
    TopicsArg,
    check_field,
    check_interval,
    check_key_format,
    check_reader,
    check_schema,
    check_start,
    check_topics,
)
from .split import EARLIEST, KafkaSplit, owner_of

log = logging.getLogger(__name__)

__all__ = ["EARLIEST", "KafkaSource", "KafkaSplit", "owner_of"]


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
    :class:`~lockgate.connectors.formats.debezium.DebeziumConverter` into changelog rows with
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
        self.topics, self.pattern = check_topics(topics)
        if group_id is not None and (not isinstance(group_id, str) or not group_id):
            raise ConfigurationError(
                f"{OWNER} group_id must be None or a non-empty str (the consumer group that "
                f"receives the checkpointed offsets), got {group_id!r}"
            )
        self.group_id = group_id
        self.start = check_start(start, self.topics, self.pattern, group_id)
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
        self.key_field = check_field("key_field", key_field, "the record's key")
        self.timestamp_field = check_field(
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
        self.discovery_interval_s = check_interval(partition_discovery_interval)
        if self.bounded and self.discovery_interval_s is not None:
            raise ConfigurationError(
                f"{OWNER}: bounded=True reads the partitions of the job's start up to their "
                "end offsets then, so it cannot discover partitions; drop "
                "partition_discovery_interval or pass bounded=False"
            )
        self.max_record_bytes = check_max_record_bytes(OWNER, max_record_bytes)
        self.key_format = check_key_format(key_format, self.key_field)
        self.schema_registry = check_schema_registry(
            OWNER, schema_registry, {"format": self.format, "key_format": self.key_format}
        )
        #: the registry formats' reader schemas, checked (picklable: a Protobuf class
        #: travels as its descriptors)
        self.value_decoding = check_reader(self.format, "reader_schema", reader_schema)
        self.key_decoding = check_reader(self.key_format, "key_reader_schema", key_reader_schema)
        self.schema = check_schema(
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
            partitions_of(consumer, self)
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
                for r in resolve_offsets(consumer, self, missing, first):
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
            parts = partitions_of(consumer, self)
            return resolve_offsets(consumer, self, parts, self._first_offsets)
        finally:
            consumer.close()

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        """A reader with its own consumer (nothing assigned until splits are added)."""
        return KafkaReader(self, ctx, self._consumer(self.group_id))

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
