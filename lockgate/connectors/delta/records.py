"""Records to Arrow tables of a Delta table's schema, for :class:`~lockgate.connectors.DeltaSink`.

A record that does not fit the schema fails with an error naming the field, the
record, and what the table expects; nothing is silently dropped or truncated (an
unknown field is an error too).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...core.batch import Batch, RowBatch, to_arrow, to_rows, user_view

_ARROW_ERRORS = (
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    pa.ArrowNotImplementedError,
    TypeError,
    OverflowError,
)


class RecordSchemaError(TypeError):
    """A record does not fit the Delta table's schema; the message names the field."""


def _normalize(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    return t


def infer_schema(batch: Batch, where: str) -> pa.Schema:
    """The schema of ``batch``'s records (every column nullable), for a table created from
    them. Raises RecordSchemaError for records that are not dicts of typed fields."""
    try:
        arrow = to_arrow(user_view(batch), operator=where)
    except TypeError as e:
        raise RecordSchemaError(str(e)) from e
    schema = arrow.schema.remove_metadata()
    untyped = [f.name for f in schema if pa.types.is_null(f.type)]
    if untyped:
        raise RecordSchemaError(
            f"{where}: column(s) {', '.join(map(repr, untyped))} are None in every record of "
            "the first batch, so their type is unknown: give DeltaSink a schema= (a "
            "pyarrow.Schema) for a table that does not exist yet"
        )
    if len(schema) == 1 and schema.names == ["value"] and not isinstance(batch, pa.RecordBatch):
        rows = to_rows(batch)
        if rows and not isinstance(rows[0], dict):
            raise RecordSchemaError(
                f"{where}: records must be dicts (one key per column), got {rows[0]!r} "
                f"({type(rows[0]).__name__})"
            )
    return pa.schema([pa.field(f.name, _normalize(f.type), nullable=True) for f in schema])


def conform(batch: Batch, schema: pa.Schema, where: str) -> pa.Table:
    """``batch``'s records as a table of exactly ``schema``: missing nullable fields are
    null; an unknown field, a value of the wrong type and a null in a non-nullable field
    raise RecordSchemaError naming the field and the first record that does not fit."""
    if isinstance(batch, RowBatch):
        return _from_rows(batch.rows, schema, where)
    view = user_view(batch)
    assert isinstance(view, pa.RecordBatch)
    unknown = [n for n in view.schema.names if n not in schema.names]
    if unknown:
        raise RecordSchemaError(
            f"{where}: field {unknown[0]!r} is not a column of the table (columns: "
            f"{', '.join(schema.names)}); drop or rename it upstream"
        )
    columns = []
    for f in schema:
        if f.name not in view.schema.names:
            column: pa.Array = pa.nulls(view.num_rows, f.type)
        else:
            column = view.column(f.name)
            if column.type != f.type:
                try:
                    column = column.cast(f.type, safe=True)
                except _ARROW_ERRORS as e:
                    rows = view.select([f.name]).to_pylist()
                    _raise_for_field(rows, f, where, e)
        if not f.nullable and column.null_count:
            _raise_null(view.to_pylist(), f, where)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _from_rows(rows: list[Any], schema: pa.Schema, where: str) -> pa.Table:
    names = set(schema.names)
    for r in rows:
        if not isinstance(r, dict):
            raise RecordSchemaError(
                f"{where}: records must be dicts (one key per column), got {r!r} "
                f"({type(r).__name__})"
            )
        if not names.issuperset(r):
            extra = next(k for k in r if k not in names)
            raise RecordSchemaError(
                f"{where}: field {extra!r} of record {r!r} is not a column of the table "
                f"(columns: {', '.join(schema.names)}); drop or rename it upstream"
            )
    columns = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            column = pa.array(values, type=f.type, from_pandas=False)
        except _ARROW_ERRORS as e:
            _raise_for_field(rows, f, where, e)
        if not f.nullable and column.null_count:
            _raise_null(rows, f, where)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _raise_for_field(rows: list[Any], f: pa.Field, where: str, cause: Exception) -> Any:
    for r in rows:
        value = r.get(f.name)
        try:
            pa.array([value], type=f.type)
        except _ARROW_ERRORS:
            raise RecordSchemaError(
                f"{where}: field {f.name!r} of record {r!r} holds {value!r} "
                f"({type(value).__name__}), which does not fit the table's column "
                f"{f.name!r} of type {f.type} ({cause})"
            ) from cause
    raise RecordSchemaError(
        f"{where}: field {f.name!r} does not fit the table's column of type {f.type}: {cause}"
    ) from cause


def _raise_null(rows: list[Any], f: pa.Field, where: str) -> None:
    record = next((r for r in rows if r.get(f.name) is None), None)
    raise RecordSchemaError(
        f"{where}: field {f.name!r} of record {record!r} is missing or None, but the table's "
        f"column {f.name!r} ({f.type}) is not nullable"
    )
