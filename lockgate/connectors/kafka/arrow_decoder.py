"""Kafka JSON values decoded against a pyarrow schema (``KafkaSource(schema=...)``):
one Arrow RecordBatch per partition and poll, read at once (a compiled pass over the
directly fetched bytes for flat objects, else pyarrow's JSON reader), and record by
record (in halves) only to find the malformed ones of a poll."""

from __future__ import annotations

import io
import logging
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.batch import Batch
from ..base import ReaderOutput, oversized
from ..formats.message_keys import key_column
from .malformed import reporter
from .record_batches import PartitionRecords
from .source_settings import SourceSettings

log = logging.getLogger(__name__)

#: whitespace JSON allows around a value
_JSON_WS = b" \t\r\n"


class ArrowDecoder:
    """:class:`~lockgate.connectors.kafka.record_decoder.RecordDecoder` of
    ``KafkaSource(schema=...)`` (JSON values): one partition's records into one
    RecordBatch of the schema's columns."""

    def __init__(self, source: SourceSettings) -> None:
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

    def decode_messages(
        self, msgs: list[Any], message: Any, keys: list[Any] | None, output: ReaderOutput
    ) -> Batch | None:
        """librdkafka's messages of one partition: :meth:`decode`."""
        return self.decode(msgs, reporter(self.source.on_error, output), keys)

    def decode_fetched(self, records: PartitionRecords, output: ReaderOutput) -> Batch | None:
        """Directly fetched records of one partition: :meth:`decode_records`."""
        return self.decode_records(records, reporter(self.source.on_error, output))

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
