"""Records into Kafka messages for the KafkaSink (JSON, text, bytes, Arrow columns, the
changelog and Schema Registry formats), sent through a producer, their delivery
watched: the one place a record becomes a message and a failure is tied to its
record."""

from __future__ import annotations

import json
import threading
import time
from itertools import repeat
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from ...core.batch import TS_COLUMN, Batch, is_scalar_schema, to_rows, user_view
from ...runtime.context import RuntimeContext
from ..formats.json_columns import json_values
from ..formats.json_values import json_default
from .changelog import CHANGELOG_FORMATS, ChangelogEncoder
from .common import config_admin, confluent_kafka, topic_max_message_bytes
from .transactions import fenced_message, is_fenced

#: how long a flush waits for the brokers to acknowledge what was sent
FLUSH_TIMEOUT_S = 120.0
#: the least bytes a record takes in a batch of its own beyond its key and value (a v2
#: batch header, 61, and the record's length, attributes, timestamp and offset deltas,
#: key and value lengths and header count, one byte each at least)
_RECORD_OVERHEAD = 68
#: librdkafka's MSG_SIZE_TOO_LARGE (the producer's limit, and the broker's answer) and
#: RECORD_LIST_TOO_LARGE
_SIZE_ERRORS = (10, 18)
#: how long a failed send waits for the delivery reports of the batch that failed it
_REPORT_WAIT_S = 5.0


class SinkSettings(Protocol):
    """What a :class:`RecordEncoder` reads of its KafkaSink (see its docstring)."""

    bootstrap_servers: str
    topic: Any
    format: str
    key: Any
    changelog_key: tuple[str, ...] | None
    properties: dict[str, Any]
    registry_writer: Any
    key_writer: Any


class RecordEncoder:
    """Turns records into Kafka messages for one subtask and watches their delivery:
    a record too large for the limits is refused before it is sent, one a broker
    refuses is named by its delivery report (its subtask, number in the attempt, topic,
    key and size), never dropped."""

    def __init__(self, sink: SinkSettings, ctx: RuntimeContext) -> None:
        self.sink = sink
        self.ctx = ctx
        #: records produced by this subtask in this attempt (a record's position)
        self.count = 0
        #: (size, description, error, transactional id) of each record the brokers
        #: refused; guarded by ``_failures_lock`` (the exactly-once sink flushes one
        #: transaction's producer on the checkpoint's thread while the task writes the next)
        self.failures: list[tuple[int, str, Any, str | None]] = []
        self._failures_lock = threading.Lock()
        #: the transactional id of the producer in use (None: not transactional)
        self.tid: str | None = None
        #: topic -> its max.message.bytes when a record can be checked against it before
        #: it is sent (None: compression is on, a batch's size is not the records' sizes)
        self._limits: dict[str, int | None] = {}
        #: the admin client of the limits' lookups (one per encoder; dropped by close)
        self._config_admin: Any = None
        #: the changelog formats' encoder (None for the others)
        self.changelog = (
            ChangelogEncoder(sink.format, sink.changelog_key, f"KafkaSink of {ctx.operator_name!r}")
            if sink.format in CHANGELOG_FORMATS
            else None
        )
        self._compressed = str(
            sink.properties.get("compression.type", sink.properties.get("compression.codec", ""))
        ).lower() not in ("", "none")

    def where(self, n: int) -> str:
        return (
            f"record #{n} of subtask {self.ctx.subtask_index + 1}/{self.ctx.parallelism} of "
            f"{self.ctx.operator_name!r} in attempt {self.ctx.attempt_number}"
        )

    def delivered(self, error: Any, message: Any, tid: str | None = None) -> None:
        """librdkafka's delivery report (only failures are reported) of a record sent
        through the producer of transactional id ``tid`` (None: not transactional)."""
        if error is not None:
            key = message.key()
            value = message.value() or b""
            failure = (
                len(value),
                f"the broker refused a record for topic {message.topic()!r} partition "
                f"{message.partition()} (key {key!r}, value {value[:80]!r}..., "
                f"{len(value)} bytes): {error.str()}",
                error,
                tid,
            )
            with self._failures_lock:
                self.failures.append(failure)

    def _take_failures(self, tid: str | None) -> list[tuple[int, str, Any, str | None]]:
        """Remove and return the failures of ``tid``'s producer (every failure when
        ``tid`` is None); the others stay for their own producer's check."""
        with self._failures_lock:
            if tid is None:
                taken, self.failures = self.failures, []
            else:
                taken = [f for f in self.failures if f[3] in (None, tid)]
                self.failures = [f for f in self.failures if f[3] not in (None, tid)]
        return taken

    def check(self, tid: str | None = None) -> None:
        """Raise for records the brokers refused (the largest named first: the brokers
        refuse a whole batch of records for one that is too large); a refusal because
        another producer of the transactional id (``tid``, by default :attr:`tid`) took
        over says so."""
        tid = self.tid if tid is None else tid
        failures = sorted(self._take_failures(tid), key=lambda f: f[0], reverse=True)
        if not failures:
            return
        fenced = [f for f in failures if is_fenced(f[2])]
        if fenced and tid is not None:
            raise RuntimeError(
                f"KafkaSink of {self.ctx.operator_name!r}: {fenced[0][1]}: {fenced_message(tid)}"
            )
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        too_large = failures[0][2] is not None and failures[0][2].code() in _SIZE_ERRORS
        hint = (
            "a record over the topic's max.message.bytes must be made smaller (or the limit "
            "raised): it is never dropped"
            if too_large
            else "no record is dropped: the attempt fails and its transaction is rolled back"
        )
        raise ValueError(f"KafkaSink of {self.ctx.operator_name!r}: {failures[0][1]}{more}; {hint}")

    def limit(self, topic: str) -> int | None:
        """The largest ``key + value`` size of a record the broker can take in ``topic``
        (its max.message.bytes less a batch's and a record's least overhead), or None
        when it cannot be told before sending (compression on, or the limit unknown)."""
        if topic not in self._limits:
            limit = None
            if not self._compressed:
                if self._config_admin is None:
                    self._config_admin = config_admin(
                        self.sink.bootstrap_servers, self.sink.properties
                    )
                limit = topic_max_message_bytes(
                    self.sink.bootstrap_servers,
                    self.sink.properties,
                    topic,
                    admin=self._config_admin,
                )
            self._limits[topic] = None if limit is None else limit - _RECORD_OVERHEAD
        return self._limits[topic]

    def close(self) -> None:
        """Drop the admin client of the limits' lookups (librdkafka's admin client has no
        close: the last reference going destroys its handle)."""
        self._config_admin = None

    def encode_value(self, record: Any, n: int, topic: str | None = None) -> bytes:
        """``record`` (the ``n``-th of the attempt, going to ``topic``) encoded as the
        sink's format; a ValueError with its position when it cannot be."""
        fmt = self.sink.format
        if self.sink.registry_writer is not None:
            return self._registry_encode(self.sink.registry_writer, record, n, topic, "record")
        try:
            if fmt == "json":
                return json.dumps(
                    record, default=json_default, ensure_ascii=False, allow_nan=False
                ).encode()
            if fmt == "text":
                if not isinstance(record, str):
                    raise TypeError(f"format='text' takes str records, got {type(record).__name__}")
                return record.encode()
            if not isinstance(record, (bytes, bytearray, memoryview)):
                raise TypeError(f"format='bytes' takes bytes records, got {type(record).__name__}")
            return bytes(record)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"KafkaSink cannot encode {self.where(n)} as {fmt}: {e}; record: {record!r:.200}"
            ) from e

    def encode_key(self, record: Any, n: int, topic: str | None = None) -> bytes | None:
        """The key of ``record`` (the ``n``-th of the attempt, going to ``topic``): None,
        bytes as they are, UTF-8 text of anything else, or encoded as ``key_format``."""
        key = self.sink.key
        if key is None:
            return None
        try:
            value = key(record) if callable(key) else record[key]
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(
                f"KafkaSink cannot take the key of {self.where(n)}: {type(e).__name__}: {e}; "
                f"record: {record!r:.200}"
            ) from e
        if self.sink.key_writer is not None and value is not None:
            return self._registry_encode(self.sink.key_writer, value, n, topic, "key")
        if value is None or isinstance(value, bytes):
            return value
        return str(value).encode()

    def _registry_encode(
        self, writer: Any, value: Any, n: int, topic: str | None, what: str
    ) -> bytes:
        """``value`` (the ``n``-th record's value or key, going to ``topic``) encoded by
        a registry format's ``writer``; a ValueError with its position when it does not
        fit the schema. The schema's id is resolved first (once per subject): a registry
        that refuses or cannot be reached is not the record's fault and raises as it is."""
        assert topic is not None, "a registry format's subject depends on the topic"
        schema_id = writer.schema_id(topic)
        try:
            return bytes(writer.encode(value, schema_id))
        except (TypeError, ValueError) as e:
            of = f"{self.where(n)}" if what == "record" else f"the key of {self.where(n)}"
            raise ValueError(
                f"KafkaSink cannot encode {of} for topic {topic!r} as {writer.format} "
                f"(schema id {schema_id} of subject {writer.subject(topic)!r}): {e}; "
                f"{what}: {value!r:.200}"
            ) from e

    def produce(self, producer: Any, batch: Batch) -> int:
        """Send ``batch``'s records; returns how many. An Arrow batch going to one topic
        as JSON or Avro is encoded a column at a time (:func:`json_values`,
        :meth:`RegistryWriter.encode_columns`: the same bytes)."""
        topic = self.sink.topic
        if self.changelog is not None:
            return self._produce_changes(producer, batch)
        encoded = None if callable(topic) else self._encode_columns(batch)
        if encoded is not None:
            values, keys = encoded
            assert isinstance(topic, str)
            limit = self.limit(topic)
            for value, key in zip(values, keys):
                if limit is not None and len(value) + (len(key) if key else 0) > limit:
                    self._too_large(topic, value, key)
                self._send(producer, topic, value, key)
        else:
            rows = self._rows(batch)
            for record in rows:
                n = self.count
                name = topic(record) if callable(topic) else topic
                value = self.encode_value(record, n, name)
                key = self.encode_key(record, n, name)
                limit = self.limit(name)
                if limit is not None and len(value) + (len(key) if key else 0) > limit:
                    self._too_large(name, value, key)
                self._send(producer, name, value, key)
        producer.poll(0)
        self.check()
        return batch.num_rows if isinstance(batch, pa.RecordBatch) else len(batch)

    def _produce_changes(self, producer: Any, batch: Batch) -> int:
        """A changelog format: send ``batch``'s changes as keyed records (tombstones for
        deletes); returns how many records were sent."""
        assert self.changelog is not None
        topic = self.sink.topic
        sent = 0
        for record, value, key in self.changelog.messages(batch):
            name = topic(record) if callable(topic) else topic
            limit = self.limit(name)
            if limit is not None and len(value or b"") + len(key or b"") > limit:
                self._too_large(name, value or b"", key)
            self._send(producer, name, value, key)
            sent += 1
        producer.poll(0)
        self.check()
        return sent

    def _rows(self, batch: Batch) -> list[Any]:
        """``batch``'s records; for a registry format, an Arrow map column's values as
        dicts (Avro and Protobuf maps), not Arrow's lists of pairs."""
        if (
            (self.sink.registry_writer is None and self.sink.key_writer is None)
            or not isinstance(batch, pa.RecordBatch)
            or is_scalar_schema(batch.schema)
        ):
            return to_rows(batch)
        try:
            return list(user_view(batch).to_pylist(maps_as_pydicts="strict"))  # type: ignore[union-attr]
        except KeyError as e:
            raise ValueError(
                f"KafkaSink cannot encode an Arrow batch of {batch.num_rows} records from "
                f"{self.where(self.count)} on as {self.sink.format}: a map column holds the "
                f"key {e} twice in one record, which a map of the schema cannot hold"
            ) from e

    def _too_large(self, name: str, value: bytes, key: bytes | None) -> None:
        """Raise for the record about to be sent, which ``name`` cannot take."""
        limit = self._limits[name]
        assert limit is not None
        raise ValueError(
            f"KafkaSink cannot send {self.where(self.count)} to topic {name!r} (key {key!r}, "
            f"value {value[:80]!r}..., {len(value)} bytes): with its key it is over the "
            f"topic's max.message.bytes ({limit + _RECORD_OVERHEAD}, of which a batch of one "
            f"record takes {_RECORD_OVERHEAD} bytes itself); a record is never dropped: make "
            "it smaller, raise the topic's max.message.bytes, or compress (properties "
            "{'compression.type': ...})"
        )

    def _send(self, producer: Any, name: str, value: bytes | None, key: bytes | None) -> None:
        """Queue one record (waiting while librdkafka's queue is full)."""
        ck = confluent_kafka()
        while True:
            try:
                producer.produce(name, value, key)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: serve deliveries
            except ck.KafkaException as e:
                self._failed_send(producer, e, name, value, key)
        self.count += 1

    def _failed_send(
        self, producer: Any, e: Exception, name: str, value: bytes | None, key: bytes | None
    ) -> None:
        """Raise for a record librdkafka would not queue. A transaction that failed
        already (the broker refused an earlier record of it) refuses every later record:
        the refused record's delivery report is served first and named, not the record
        that happened to come next."""
        error = e.args[0] if e.args else None
        producer.poll(0)
        if getattr(error, "txn_requires_abort", lambda: False)():
            deadline = time.monotonic() + _REPORT_WAIT_S
            while not self.failures and time.monotonic() < deadline:
                producer.poll(0.05)  # bounded: the failed batch's reports are on their way
        self.check()
        if is_fenced(error) and self.tid is not None:
            raise RuntimeError(
                f"KafkaSink cannot send {self.where(self.count)} to topic {name!r}: "
                f"{error}: {fenced_message(self.tid)}"
            ) from e
        reason = str(error.str()) if error is not None and hasattr(error, "str") else str(e)
        hint = (
            "a record is never dropped: make it smaller or raise message.max.bytes"
            if getattr(error, "code", lambda: None)() in _SIZE_ERRORS
            else "no record is dropped: the attempt fails and its transaction is rolled back"
        )
        raise ValueError(
            f"KafkaSink cannot send {self.where(self.count)} to topic {name!r} (key "
            f"{key!r}, {len(value or b'')} bytes): {reason}; {hint}"
        ) from e

    def _encode_columns(self, batch: Batch) -> tuple[list[bytes], Any] | None:
        """Values and keys of an Arrow batch encoded a column at a time, or None when
        the record-by-record encoding is needed (not JSON or Avro, a key function or
        key format, a column type :func:`json_values` or the Avro column encoder
        (:meth:`RegistryWriter.encode_columns`) does not take)."""
        sink = self.sink
        registry = sink.registry_writer
        if (
            not isinstance(batch, pa.RecordBatch)
            or sink.key_writer
            or not (sink.format == "json" or (registry is not None and registry.format == "avro"))
        ):
            return None
        keys: Any = repeat(None)
        if sink.key is not None:
            if callable(sink.key) or is_scalar_schema(batch.schema):
                return None
            index = batch.schema.get_field_index(sink.key)
            if index < 0 or sink.key == TS_COLUMN:
                return None
            column = batch.column(index)
            if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
                return None
            keys = pc.cast(pc.cast(column, pa.string()), pa.binary()).to_pylist()
        if registry is not None:
            assert isinstance(sink.topic, str)
            values = registry.encode_columns(batch, sink.topic)
        else:
            values = json_values(batch)
        if values is None:
            return None
        return values, keys

    def flush(self, producer: Any, tid: str | None = None) -> None:
        """Wait until every record sent through ``producer`` (the transactional id
        ``tid``'s, by default :attr:`tid`'s) is acknowledged (or refused: then raise)."""
        left = producer.flush(FLUSH_TIMEOUT_S)
        self.check(tid)
        if left:
            raise TimeoutError(
                f"KafkaSink of {self.ctx.operator_name!r}: {left} records were not "
                f"acknowledged by {self.sink.bootstrap_servers} within {FLUSH_TIMEOUT_S} s"
            )
