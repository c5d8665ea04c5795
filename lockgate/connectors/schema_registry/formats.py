"""Reading registry-encoded Kafka records: the formats, their arguments, and the one
decode function both fetch paths of
:class:`~lockgate.connectors.kafka.source.KafkaSource` go through.

:class:`RegistryFormat` is what a source keeps of ``format=`` / ``key_format=`` and
their reader schemas, checked when the source is made and picklable (it travels to
Spark workers). :class:`RegistryDecoder`, made by each reader (so the registry
client's caches and the parsed schemas are per process), decodes one partition's
records of one poll: every value (and, with ``key_format``, every key) framed by the
Confluent wire format is decoded by its format's decoder (:mod:`.avro_read`,
:mod:`.protobuf_read`, :mod:`.json_schema_read`), and the records go out as one
RowBatch of dicts, or with ``schema=`` as one Arrow RecordBatch of exactly the
schema's columns (plus the key and timestamp columns); flat Avro records go straight
from the fetched bytes into those columns in one compiled pass (:mod:`.avro_columns`)
when it can take the whole poll.

A record that is not framed, whose schema id the registry does not know, whose payload
does not decode, or that cannot be resolved to the reader schema is malformed (the
"Bad input" rule): the caller reports it, in offset order, with its ``schema_id`` (None
when unframed). A writer's schema that cannot decode records (fastavro cannot parse
it, it refers to other schemas, an invalid JSON Schema) is not a record's fault either:
:class:`WriterSchemaError` fails the job. A registry that cannot be reached is not a
record's fault: the
client's :class:`~.client.SchemaRegistryUnavailable` (after its bounded retries)
propagates and fails the job, which restarts from its checkpoint (M-X1: nothing is
skipped, the split's position never passed the record).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ...core.batch import Batch, RowBatch
from ...errors import ConfigurationError
from ..base import DECODE_ERRORS, decode_error, oversized
from ..formats.message_keys import key_column
from .wire import WireFormatError, schema_id_of
from .writer_schemas import (
    SCHEMA_TYPES,
    MalformedValue,
    ParsedCache,
    WriterSchemaError,
    bad_writer_schema,
    registered_writer,
    writer_schema,
)

if TYPE_CHECKING:
    from .client import SchemaRegistry

__all__ = [
    "SCHEMA_TYPES",
    "MalformedValue",
    "ParsedCache",
    "RegistryDecoder",
    "RegistryFormat",
    "WriterSchemaError",
    "bad_writer_schema",
    "check_registry_format",
    "registered_writer",
    "writer_schema",
]


@dataclass(frozen=True)
class RegistryFormat:
    """One side (value or key) of a source's records: its registry ``format`` and the
    reader schema (Avro: JSON data or None; Protobuf: a
    :class:`~.protobuf_read.MessageClassRef`; JSON Schema: JSON data or None)."""

    format: str
    reader_schema: Any = None

    def decoder(self, registry: SchemaRegistry) -> Any:
        """A decoder of this side's values (``decode(schema_id, value)``)."""
        if self.format == "avro":
            from .avro_read import AvroValueDecoder

            return AvroValueDecoder(registry, self.reader_schema)
        if self.format == "protobuf":
            from .protobuf_read import ProtobufValueDecoder

            return ProtobufValueDecoder(registry, self.reader_schema)
        from .json_schema_read import JsonSchemaValueDecoder

        return JsonSchemaValueDecoder(registry, self.reader_schema)


def check_registry_format(owner: str, arg: str, fmt: str, reader_schema: object) -> RegistryFormat:
    """``fmt`` (a registry format) with its ``reader_schema`` checked (``arg``: the
    argument's name, e.g. ``reader_schema``); ConfigurationError saying how to fix."""
    if fmt == "protobuf":
        from .protobuf_read import MessageClassRef, is_message_class

        if not is_message_class(reader_schema):
            raise ConfigurationError(
                f"{owner} format 'protobuf' parses each record with a message class: pass "
                f"{arg}=<the generated class, e.g. orders_pb2.Order> (as Flink's "
                f"protobuf.message-class-name), got {reader_schema!r}"
            )
        return RegistryFormat(fmt, MessageClassRef(reader_schema))
    if reader_schema is None:
        return RegistryFormat(fmt)
    if fmt == "avro":
        from .avro_read import parse_reader_schema
    else:
        from .json_schema_read import parse_reader_schema
    try:
        return RegistryFormat(fmt, parse_reader_schema(reader_schema))
    except (ValueError, ImportError) as e:
        what = "an Avro schema" if fmt == "avro" else "a JSON Schema"
        raise ConfigurationError(
            f"{owner} {arg} must be {what} (a dict or its JSON text) for format {fmt!r}: "
            f"{e}; got {reader_schema!r:.200}"
        ) from e


#: ``malformed(index, raw, error, schema_id, **fields)``: report record ``index`` of the
#: poll; ``fields``: more for its dead letter (with ``key_format``: ``raw_key``, the
#: key's bytes)
Report = Callable[..., None]


def _decode_plain(value: bytes, fmt: str) -> Any:
    """A value of a plain format (json, text, bytes): what the source gives without a
    registry; MalformedValue when it does not decode."""
    if fmt == "bytes":
        return value
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedValue(f"not valid UTF-8: {e}") from e
    if fmt == "text":
        return text
    try:
        return json.loads(text)
    except DECODE_ERRORS as e:
        raise MalformedValue(decode_error("JSON", e)) from e


class RegistryDecoder:
    """Decodes one partition's records of one poll for a source with a registry format
    (value or key); the one function both fetch paths call (:meth:`decode`)."""

    def __init__(
        self,
        registry: SchemaRegistry,
        *,
        value: RegistryFormat | None,
        plain_format: str,
        key: RegistryFormat | None,
        key_field: str | None,
        timestamp_field: str | None,
        schema: pa.Schema | None,
        max_record_bytes: int,
    ) -> None:
        self.value = None if value is None else value.decoder(registry)
        self.plain_format = plain_format
        self.key = None if key is None else key.decoder(registry)
        self.key_field = key_field
        self.timestamp_field = timestamp_field
        self.schema = schema
        self.limit = max_record_bytes
        self.out_schema: pa.Schema | None = None
        if schema is not None:
            for side in (self.value, self.key):
                if side is not None and hasattr(side, "uuid_as_text"):
                    side.uuid_as_text = True  # Avro: a uuid's column is a string
        #: the compiled Avro readers by schema id (``schema=`` with Avro values only)
        self._fast: ParsedCache | None = None
        if schema is not None and value is not None and value.format == "avro" and key is None:
            self._fast = ParsedCache(1000)
        if schema is not None:
            fields = list(schema)
            if key_field is not None:
                fields.append(pa.field(key_field, pa.string()))
            if timestamp_field is not None:
                fields.append(pa.field(timestamp_field, pa.int64()))
            self.out_schema = pa.schema(fields, metadata=schema.metadata)

    def _key(self, key: bytes | None) -> Any:
        """A record's key decoded by ``key_format``; :class:`_WithId` when malformed."""
        if key is None:
            return None
        assert self.key is not None
        schema_id: int | None = None
        try:
            if len(key) > self.limit:
                raise MalformedValue(oversized(len(key), self.limit, key)[1])
            schema_id = schema_id_of(key)
            return self.key.decode(schema_id, key)
        except (MalformedValue, WireFormatError) as e:
            raise _WithId(f"its key: {e}", schema_id) from e

    def _columns(
        self, values: Any, raw: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    ) -> pa.Table | None:
        """Avro values read by the compiled reader (:mod:`.avro_columns`) straight into
        the schema's columns, or None when it cannot take them (then they are decoded
        the general way, which reports what is wrong)."""
        from .avro_read import AvroValueDecoder

        assert isinstance(self.value, AvroValueDecoder)
        if raw is None:
            listed = values() if callable(values) else values
            if not listed or None in listed:
                return None
            try:  # the poll's first schema id: joining the values is worth it only
                # when the compiled reader takes that schema
                first = self._fast_reader(schema_id_of(listed[0]))
            except WireFormatError:
                return None
            if first is None:
                return None
            lengths = np.fromiter(map(len, listed), dtype=np.int64, count=len(listed))
            buffer = np.frombuffer(b"".join(listed), dtype=np.uint8)
            starts = np.zeros(len(lengths), dtype=np.int64)
            np.cumsum(lengths[:-1], out=starts[1:])
        else:
            buffer, starts, lengths = raw
        if len(lengths) == 0 or int(lengths.min()) < 5 or int(lengths.max()) > self.limit:
            return None
        heads = buffer[starts[:, None] + np.arange(5)]
        if heads[:, 0].any() or not bool((heads[:, 1:] == heads[0, 1:]).all()):
            return None
        reader = self._fast_reader(int.from_bytes(heads[0, 1:].tobytes(), "big"))
        if reader is None:
            return None
        try:
            return reader.read(buffer, starts, lengths)
        except ImportError:  # numba missing: the general path decodes every poll
            reader.usable = False
            return None

    def _fast_reader(self, schema_id: int) -> Any:
        """The compiled reader of ``schema_id``'s records (made once per id), or None
        when it cannot read them (or the registry does not know the id)."""
        from .avro_columns import AvroColumnsReader
        from .avro_read import AvroValueDecoder

        assert self._fast is not None and self.schema is not None
        assert isinstance(self.value, AvroValueDecoder)
        reader = self._fast.get(schema_id)
        if reader is None:
            try:
                writer, _, plan, _, _ = self.value._writer(schema_id)
            except MalformedValue:
                return None
            resolved = self.value.reader is not None
            # without a reader schema the records are as written: nothing to resolve
            reader = AvroColumnsReader(
                writer, plan if resolved else ((), ()), resolved, self.schema
            )
            self._fast.put(schema_id, reader)
        return reader if reader.usable else None

    def decode(
        self,
        values: Sequence[bytes | None] | Callable[[], Sequence[bytes | None]],
        keys: Callable[[], Sequence[bytes | None]],
        stamps: Callable[[], tuple[Any, Any]],
        malformed: Report,
        raw: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> Batch | None:
        """One batch of the good records among ``values`` (one partition's, in offset
        order), None when none is good; ``keys()`` gives their keys, ``stamps()`` their
        timestamp kinds and timestamps (kind 0: none). Each bad record is reported by
        ``malformed(index, raw, error, schema_id)`` in offset order (``raw``: its
        value's bytes; with ``key_format`` also ``raw_key=`` its key's bytes), before the
        batch is made (with ``on_error="fail"`` the first
        one raises). ``values`` may be a function giving them (called only when
        needed); ``raw``: the values as ``(buffer, starts, lengths)`` (directly fetched
        records), for the compiled Avro reader."""
        if self._fast is not None:
            table = self._columns(values, raw)
            if table is not None:
                n = table.num_rows
                key_list = keys() if self.key_field is not None else None
                return self._finish(table, list(range(n)), key_list, stamps)
        if callable(values):
            values = values()
        n = len(values)
        key_list = keys() if (self.key is not None or self.key_field is not None) else None
        records: list[Any] = []
        kept: list[int] = []
        bad: list[tuple[int, Any, str, int | None]] = []
        #: the value's schema id of each record kept (a row the schema's columns cannot
        #: hold is reported with it)
        ids: dict[int, int | None] = {}
        self._ids = ids
        value_side = self.value
        decode_value = value_side.decode if value_side is not None else None
        key_side = self.key
        key_field = self.key_field
        plain = self.plain_format
        limit = self.limit
        for i in range(n):
            value = values[i]
            schema_id: int | None = None
            try:
                if value is None:
                    record = None
                elif len(value) > limit:
                    cut, error = oversized(len(value), limit, value)
                    bad.append((i, cut, error, None))
                    continue
                elif decode_value is not None:
                    schema_id = schema_id_of(value)
                    record = decode_value(schema_id, value)
                else:
                    record = _decode_plain(value, plain)
                if key_side is not None:
                    assert key_list is not None
                    key = self._key(key_list[i])
                    if not isinstance(record, dict):
                        record = {"value": record}
                    record[key_field] = key
            except _WithId as e:
                bad.append((i, value, _naming(str(e), e.schema_id), e.schema_id))
                continue
            except (MalformedValue, WireFormatError) as e:
                bad.append((i, value, _naming(str(e), schema_id), schema_id))
                continue
            records.append(record)
            kept.append(i)
            ids[i] = schema_id
        if self.schema is None:
            batch: Batch | None = self._rows(records, kept, key_list, stamps)
        else:
            batch = self._arrow(records, kept, key_list, stamps, bad, values)
        for i, raw, error, schema_id in sorted(bad, key=lambda b: b[0]):
            if key_side is not None:  # the key's bytes too: a bad key is not lost
                assert key_list is not None
                malformed(i, raw, error, schema_id, raw_key=key_list[i])
            else:
                malformed(i, raw, error, schema_id)
        return batch

    def _rows(
        self,
        records: list[Any],
        kept: list[int],
        key_list: Sequence[bytes | None] | None,
        stamps: Callable[[], tuple[Any, Any]],
    ) -> RowBatch | None:
        if not records:
            return None
        key_field, ts_field = self.key_field, self.timestamp_field
        if key_field is None and ts_field is None:
            return RowBatch(records)
        records = [r if isinstance(r, dict) else {"value": r} for r in records]
        if key_field is not None and self.key is None:
            assert key_list is not None
            for r, i in zip(records, kept):
                k = key_list[i]
                r[key_field] = None if k is None else k.decode("utf-8", "replace")
        if ts_field is not None:
            kinds, ts = stamps()
            for r, i in zip(records, kept):
                r[ts_field] = None if int(kinds[i]) == 0 else int(ts[i])
        return RowBatch(records)

    def _arrow(
        self,
        records: list[Any],
        kept: list[int],
        key_list: Sequence[bytes | None] | None,
        stamps: Callable[[], tuple[Any, Any]],
        bad: list[tuple[int, Any, str, int | None]],
        values: Sequence[bytes | None],
    ) -> pa.RecordBatch | None:
        """The records as one RecordBatch of the schema's columns; a record that does
        not fit them (not a record, a field of another type) joins ``bad``."""
        assert self.schema is not None and self.out_schema is not None
        rows: list[dict[str, Any]] = []
        fit: list[int] = []
        for r, i in zip(records, kept):
            if r is None:
                rows.append({})  # a tombstone: a row of nulls, as the JSON reader gives
            elif isinstance(r, dict):
                rows.append(r)
            else:
                why = f"a {type(r).__name__} is not a record of the schema's columns"
                bad.append((i, values[i], why, self._ids.get(i)))
                continue
            fit.append(i)
        table = self._table(rows, fit, bad, values)
        if table is None:
            return None
        return self._finish(table[0], [fit[j] for j in table[1]], key_list, stamps)

    def _finish(
        self,
        table: pa.RecordBatch | pa.Table,
        rows_kept: list[int],
        key_list: Sequence[bytes | None] | None,
        stamps: Callable[[], tuple[Any, Any]],
    ) -> pa.RecordBatch:
        """The schema's columns of ``table`` (the records ``rows_kept`` of the poll),
        then the key and timestamp columns."""
        assert self.schema is not None and self.out_schema is not None
        columns = [table.column(name) for name in self.schema.names]
        if isinstance(table, pa.Table):
            columns = [c.combine_chunks() for c in columns]
        if self.key_field is not None:
            assert key_list is not None
            columns.append(key_column([key_list[i] for i in rows_kept]))
        if self.timestamp_field is not None:
            kinds, ts = stamps()
            idx = np.asarray(rows_kept, dtype=np.int64)
            k = np.asarray(kinds)[idx]
            columns.append(pa.array(np.asarray(ts)[idx], type=pa.int64(), mask=k == 0))
        return pa.RecordBatch.from_arrays(columns, schema=self.out_schema)

    def _table(
        self,
        rows: list[dict[str, Any]],
        fit: list[int],
        bad: list[Any],
        values: Sequence[bytes | None],
    ) -> tuple[pa.RecordBatch, list[int]] | None:
        """``rows`` converted at once; when that fails, by halves (a range that converts
        is good; a bad row is found in log steps and joins ``bad``)."""
        if not rows:
            return None
        schema = self.schema
        try:
            return pa.RecordBatch.from_pylist(rows, schema=schema), list(range(len(rows)))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        pieces: list[pa.RecordBatch] = []
        good: list[int] = []

        def solve(lo: int, hi: int) -> None:
            try:
                pieces.append(pa.RecordBatch.from_pylist(rows[lo:hi], schema=schema))
                good.extend(range(lo, hi))
                return
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
                if hi - lo == 1:
                    why = f"it does not fit the schema's columns: {e}"
                    bad.append((fit[lo], values[fit[lo]], why, self._ids.get(fit[lo])))
                    return
            mid = (lo + hi) // 2
            solve(lo, mid)
            solve(mid, hi)

        solve(0, len(rows))
        if not pieces:
            return None
        return pa.Table.from_batches(pieces).combine_chunks().to_batches()[0], good


def _naming(error: str, schema_id: int | None) -> str:
    """``error`` naming ``schema_id`` (when the record has one)."""
    if schema_id is None or f"schema id {schema_id}" in error:
        return error
    return f"{error} (schema id {schema_id})"


class _WithId(MalformedValue):
    def __init__(self, message: str, schema_id: int | None) -> None:
        super().__init__(message)
        self.schema_id = schema_id
