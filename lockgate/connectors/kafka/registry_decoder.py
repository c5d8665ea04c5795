"""Kafka values (and keys) of the Schema Registry formats (Avro, Protobuf, JSON Schema),
and Debezium-Avro envelopes, through the one
:class:`~lockgate.connectors.schema_registry.formats.RegistryDecoder` of both fetch
paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.batch import Batch, RowBatch
from ..base import ReaderOutput
from ..schema_registry.formats import RegistryDecoder
from ..schema_registry.wire import WireFormatError, schema_id_of
from .malformed import report_message
from .record_batches import PartitionRecords
from .source_settings import SourceSettings


class RegistryRecordDecoder:
    """:class:`~lockgate.connectors.kafka.record_decoder.RecordDecoder` of a
    ``schema_registry`` source. Made per reader: the registry's caches are per
    process."""

    def __init__(self, source: SourceSettings) -> None:
        self.source = source
        self.registry = RegistryDecoder(
            source.schema_registry,
            value=source.value_decoding,
            plain_format=source.format,
            key=source.key_decoding,
            key_field=source.key_field,
            timestamp_field=source.timestamp_field,
            schema=source.schema,
            max_record_bytes=source.max_record_bytes,
        )

    def _report(self, m: Any, raw: Any, error: str, output: ReaderOutput, **fields: Any) -> None:
        report_message(self.source.on_error, m, raw, error, output, **fields)

    def decode_messages(
        self, msgs: list[Any], message: Any, keys: list[Any] | None, output: ReaderOutput
    ) -> Batch | None:
        """One partition's messages (librdkafka's path) through the registry decoder,
        the function the direct path's :meth:`decode_fetched` calls too."""

        def stamps() -> tuple[Any, Any]:
            pairs = np.array(list(map(message.timestamp, msgs)), dtype=np.int64).reshape(-1, 2)
            return pairs[:, 0], pairs[:, 1]

        bad: set[int] = set()

        def malformed(i: int, raw: Any, error: str, schema_id: int | None, **more: Any) -> None:
            bad.add(i)
            self._report(msgs[i], raw, error, output, schema_id=schema_id, **more)

        batch = self.registry.decode(
            list(map(message.value, msgs)),
            (lambda: keys) if keys is not None else lambda: list(map(message.key, msgs)),
            stamps,
            malformed,
        )
        if self.source.debezium is not None:
            return self._debezium_registry(batch, bad, msgs.__getitem__, len(msgs), output)
        return batch

    def decode_fetched(self, records: PartitionRecords, output: ReaderOutput) -> Batch | None:
        """One partition's directly fetched records through the registry decoder (as
        :meth:`decode_messages`)."""
        messages: list[Any] = []

        bad: set[int] = set()

        def message_at(i: int) -> Any:
            if not messages:
                messages.extend(records.messages())
            return messages[i]

        def malformed(i: int, raw: Any, error: str, schema_id: int | None, **more: Any) -> None:
            bad.add(i)
            self._report(message_at(i), raw, error, output, schema_id=schema_id, **more)

        batch = self.registry.decode(
            records.values,
            records.keys,
            lambda: (records.timestamp_kinds, records.timestamps),
            malformed,
            raw=(records.array(), records.value_starts, records.value_lengths),
        )
        if self.source.debezium is not None:
            return self._debezium_registry(batch, bad, message_at, len(records), output)
        return batch

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

    def _envelope_reporter(self, output: ReaderOutput) -> Callable[[Any, Any, str], None]:
        """Reports a malformed Debezium-Avro envelope with its record's bytes as ``raw``
        and its ``schema_id`` (None when it is not framed)."""

        def report(m: Any, _envelope: Any, error: str) -> None:
            value = m.value()
            try:
                schema_id: int | None = schema_id_of(value)
            except WireFormatError:
                schema_id = None
            self._report(m, value, error, output, schema_id=schema_id)

        return report
