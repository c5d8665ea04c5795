"""Reporting a Kafka record that cannot be read: it fails the job naming
``topic[partition]@offset``, or goes to the dead-letter output (``on_error``), never
dropped; and :class:`DeadLetters`, which holds a decoding's dead letters until the
batch they belong to goes out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.batch import Batch
from ..base import ReaderOutput, report_malformed

#: ``report(message, raw, error)``: a decoder's way to report one malformed message
Reporter = Callable[[Any, Any, str], None]


def report_message(
    on_error: str, m: Any, raw: Any, error: str, output: ReaderOutput, **fields: Any
) -> None:
    """Report message ``m`` (a librdkafka message, or one made of directly fetched
    bytes) as malformed; ``fields``: more of its position (the registry formats add
    ``schema_id``, None when the record is not framed, and with a registry
    ``key_format`` ``raw_key``, the key's bytes). Raises
    :class:`~lockgate.errors.MalformedRecordError` unless ``on_error`` is
    ``"dead_letter"``."""
    report_malformed(
        on_error,
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


def reporter(on_error: str, output: ReaderOutput) -> Reporter:
    """:func:`report_message` as a decoder's ``report(message, raw, error)``."""

    def report(m: Any, raw: Any, error: str) -> None:
        report_message(on_error, m, raw, error, output)

    return report


class DeadLetters(ReaderOutput):
    """Collects the dead letters of records being decoded (nothing else is emitted
    while decoding), so that they go out with the batch whose position passes them."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def emit(self, batch: Batch) -> None:  # pragma: no cover - never called
        raise AssertionError("decoding emits dead letters only")
