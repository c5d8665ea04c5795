"""Record fields as JSON: what ``json.dumps`` needs for the types JSON lacks."""

from __future__ import annotations

import datetime
import decimal
from typing import Any


def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default`` for record fields JSON has no type for (dates, decimals,
    bytes, sets and tuples); anything else raises ``TypeError`` naming the field's type.
    Shared by the JSON-writing sinks (``FileSink``, ``KafkaSink``, the registry's JSON Schema
    writer)."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"a record field of type {type(value).__name__} ({value!r}) is not JSON")
