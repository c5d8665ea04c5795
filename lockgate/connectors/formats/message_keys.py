"""Message keys (bytes) as an Arrow column, the same for every connector and format that
puts a record's key into a field."""

from __future__ import annotations

import pyarrow as pa


def key_column(keys: list[bytes | None]) -> pa.Array:
    """Message keys as an Arrow string column, as a source's ``key_field`` gives
    them: UTF-8 text, invalid bytes replaced, None for a record without a key."""
    binary = pa.array(keys, type=pa.binary())
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if k is None else k.decode("utf-8", "replace") for k in keys], type=pa.string()
        )
