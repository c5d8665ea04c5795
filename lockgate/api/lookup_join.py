"""The arguments of ``DataStream.lookup_join``, checked on the driver when the job is
built, and the operator recipe they make."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..runtime.operators.lookup.operator import HOWS, LookupJoinOperator
from .lookup_table import LookupTable


def lookup_join_factory(
    table: Any,
    on: Any,
    table_key: Any,
    *,
    refresh: Any,
    how: Any,
    table_suffix: Any,
) -> OperatorFactory[LookupJoinOperator]:
    """The recipe of the join's operator; ConfigurationError for any bad argument."""
    if not isinstance(table, LookupTable):
        raise ConfigurationError(
            f"lookup_join takes a LookupTable, got {type(table).__name__}: build one with "
            "lg.LookupTable.parquet(path), .csv(path), .json(path), .delta(uri), "
            ".iceberg(catalog, table), .postgres(dsn, query) or .from_source(source)"
        )
    if isinstance(on, bool) or not (
        (isinstance(on, str) and on) or (isinstance(on, int) and on >= 0)
    ):
        raise ConfigurationError(
            f"lookup_join on= must be the stream's key field (a non-empty str), or its "
            f"position for tuple records (an int >= 0), got {on!r}"
        )
    if not isinstance(table_key, str) or not table_key:
        raise ConfigurationError(
            f"lookup_join table_key= must be the table's key column (a non-empty str), "
            f"got {table_key!r}"
        )
    if how not in HOWS:
        raise ConfigurationError(
            f"lookup_join how= must be 'inner' (only records with a table row) or 'left' "
            f"(every record, with nulls where the table has no row), got {how!r}"
        )
    refresh_ms: int | None = None
    if refresh is not None:
        if not isinstance(refresh, timedelta):
            raise ConfigurationError(
                f"lookup_join refresh= must be a datetime.timedelta (or None: load the "
                f"table once), got {refresh!r}"
            )
        refresh_ms = int(refresh.total_seconds() * 1000)
        if refresh_ms <= 0:
            raise ConfigurationError(
                f"lookup_join refresh= must be positive (at least 1 ms), got {refresh!r}; "
                "give None to load the table once"
            )
    if not isinstance(table_suffix, str) or not table_suffix:
        raise ConfigurationError(
            f"lookup_join table_suffix= must be a non-empty str, got {table_suffix!r}"
        )
    kwargs = {
        "table": table.source,
        "on": on,
        "table_key": table_key,
        "how": how,
        "refresh_ms": refresh_ms,
        "suffix": table_suffix,
    }
    return OperatorFactory(LookupJoinOperator, kwargs)
