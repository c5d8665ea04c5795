"""JSON text for the records of an Arrow batch, a column at a time: exactly the bytes
``json.dumps(record, ensure_ascii=False)`` gives for each record of
:func:`~lockgate.core.batch.to_rows` (a dict per row, or the bare value of a scalar
batch), built with Arrow compute kernels instead of one ``json.dumps`` per record.

Columns of integers, booleans and strings (with nulls) are encoded here; a string
column is taken only when no value needs escaping (no ``"``, ``\\``, or control
character below U+0020). Any other column (floats, whose text Python and Arrow write
differently, timestamps, nested types) makes :func:`json_values` return None, and the
caller encodes record by record.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from ...core.batch import is_scalar_schema, user_view

#: a character ``json.dumps(..., ensure_ascii=False)`` escapes
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


def _column_text(column: pa.Array) -> pa.Array | None:
    """Each value's JSON text ("null" for a null), or None when the column's type is
    not encoded here."""
    kind = column.type
    if pa.types.is_integer(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, "true", "false")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if pa.types.is_large_string(kind):
            if column.nbytes >= 2**31:
                return None  # more text than a string column holds
            column = pc.cast(column, pa.string())
        if (
            column.null_count < len(column)
            and pc.any(pc.match_substring_regex(column, _NEEDS_ESCAPE)).as_py()
        ):
            return None
        text = pc.binary_join_element_wise('"', column, '"', "")
    else:
        return None
    if column.null_count:
        text = pc.fill_null(text, "null")
    return text


def json_values(batch: pa.RecordBatch) -> list[bytes] | None:
    """Each record's JSON text as UTF-8 bytes, or None when a column is of a type not
    encoded here (the caller then encodes record by record)."""
    if is_scalar_schema(batch.schema):
        text = _column_text(batch.column(0))
    else:
        view = user_view(batch)
        assert isinstance(view, pa.RecordBatch)
        if view.num_columns == 0 or len(set(view.schema.names)) != view.num_columns:
            return None  # to_pylist would keep one of two same-named columns
        parts: list[object] = []
        for i, name in enumerate(view.schema.names):
            value = _column_text(view.column(i))
            if value is None:
                return None
            parts.append(("{" if i == 0 else ", ") + json.dumps(name, ensure_ascii=False) + ": ")
            parts.append(value)
        parts.append("}")
        text = pc.binary_join_element_wise(*parts, "")
    if text is None:
        return None
    result: list[bytes] = pc.cast(text, pa.binary()).to_pylist()
    return result
