"""Kafka values as rows: ``format="json"`` (the decoded value), ``"text"``,
``"bytes"``, and Debezium-JSON envelopes converted into changelog rows. A poll's values
are decoded at once with C-level calls when each would decode alone the same way, else
record by record, so that the errors and results are those of decoding each record
alone."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import repeat
from operator import itemgetter
from typing import Any

from ...core.batch import Batch, RowBatch
from ..base import DECODE_ERRORS, ReaderOutput, decode_error, oversized
from ..formats.debezium import batch_of as debezium_batch
from .malformed import report_message
from .record_batches import PartitionRecords
from .source_settings import SourceSettings

_MALFORMED = object()
#: the C JSON scanner of a default decoder: ``scan(text, 0)`` -> ``(value, end)``
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_VALUE = itemgetter(0)
_END = itemgetter(1)


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


class RowDecoder:
    """:class:`~lockgate.connectors.kafka.record_decoder.RecordDecoder` of rows (no
    ``schema`` and no registry format)."""

    def __init__(self, source: SourceSettings) -> None:
        self.source = source

    def _report(self, m: Any, raw: Any, error: str, output: ReaderOutput) -> None:
        report_message(self.source.on_error, m, raw, error, output)

    def decode_fetched(self, records: PartitionRecords, output: ReaderOutput) -> Batch | None:
        """Directly fetched records as rows (see :meth:`_rows_from`)."""
        return self._rows_from(
            records.values(),
            records.keys,
            lambda: list(zip(records.timestamp_kinds.tolist(), records.timestamps.tolist())),
            records.messages,
            output,
        )

    def decode_messages(
        self, msgs: list[Any], message: Any, keys: list[Any] | None, output: ReaderOutput
    ) -> Batch | None:
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

    def _record(self, m: Any, output: ReaderOutput) -> Any:
        """The record of message ``m``, or ``_MALFORMED`` after reporting it."""
        source = self.source
        value = m.value()
        record: Any
        if value is None:
            record = None
        elif len(value) > source.max_record_bytes:
            raw, error = oversized(len(value), source.max_record_bytes, value)
            self._report(m, raw, error, output)
            return _MALFORMED
        elif source.format == "bytes":
            record = value
        else:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError as e:
                self._report(m, value.decode("utf-8", "replace"), f"not valid UTF-8: {e}", output)
                return _MALFORMED
            if source.format == "text":
                record = text
            else:
                try:
                    record = json.loads(text)
                except DECODE_ERRORS as e:
                    self._report(m, text, decode_error("JSON", e), output)
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

    def _envelope_reporter(self, output: ReaderOutput) -> Callable[[Any, Any, str], None]:
        """Reports a malformed Debezium-JSON envelope with its record's value (as text)
        as ``raw``."""

        def report(m: Any, _envelope: Any, error: str) -> None:
            self._report(m, m.value().decode("utf-8", "replace"), error, output)

        return report
