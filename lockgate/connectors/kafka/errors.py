"""Errors of the compiled Kafka record decoding, shared by :mod:`.record_batches`
(the batch headers) and :mod:`.framing` (the records)."""

from __future__ import annotations


class CorruptBatch(ValueError):
    """Fetched bytes that are not valid record batches."""
