"""The one interface of the Kafka source's value decoders (rows of JSON, text or bytes;
Arrow batches of a schema; Schema Registry formats), whichever path fetched the
records: librdkafka's messages or the direct fetch's
:class:`~lockgate.connectors.kafka.record_batches.PartitionRecords`."""

from __future__ import annotations

from typing import Any, Protocol

from ...core.batch import Batch
from ..base import ReaderOutput
from .record_batches import PartitionRecords


class RecordDecoder(Protocol):
    """Decodes one partition's records of one poll into one batch (None when none is
    left). Guarantees, on both paths alike: the good records in offset order; each
    malformed one reported through ``output`` (failing the job, or one dead letter
    each, in offset order) and left out; the same rows, columns and errors as decoding
    each record alone."""

    def decode_messages(
        self, msgs: list[Any], message: Any, keys: list[Any] | None, output: ReaderOutput
    ) -> Batch | None:
        """librdkafka's messages ``msgs`` of one partition (``message``: their class,
        whose unbound methods read them at C speed); ``keys``: their keys when already
        read, else None."""
        ...

    def decode_fetched(self, records: PartitionRecords, output: ReaderOutput) -> Batch | None:
        """One partition's directly fetched records."""
        ...
