"""Short ``repr`` excerpts of records and values for error messages."""

from __future__ import annotations

from typing import Any

#: the longest excerpt an error message quotes (a record can be megabytes)
EXCERPT_CHARS = 300


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters with a note of the full length.

    Never raises: a value whose ``repr`` fails is described by its type."""
    try:
        text = repr(value)
    except Exception as e:  # noqa: BLE001 - an error message must not fail in turn
        return f"<{type(value).__name__} whose repr() failed: {type(e).__name__}>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters in all)"
