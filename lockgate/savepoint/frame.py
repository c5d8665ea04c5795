"""One state of a savepoint as rows ``(key, namespace, value)``, convertible to Arrow,
pandas and Spark."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigurationError
from .arrow import COLUMNS, rows_to_arrow
from .errors import MissingDependencyError, StateConversionError
from .model import StateKind
from .rows import Row


class StateFrame:
    """The rows of one state of one operator (see :mod:`lockgate.savepoint.rows` for
    which rows each kind gives). Columns are exactly ``key``, ``namespace``, ``value``;
    rows are sorted by key when the keys are sortable.

    The values are the objects read from the savepoint, shared by every conversion of
    this frame: copy one before mutating it.
    """

    def __init__(self, uid: str, name: str, kind: StateKind, rows: list[Row]) -> None:
        self.uid = uid
        self.name = name
        self.kind = kind
        self._rows = rows

    @property
    def columns(self) -> tuple[str, ...]:
        return COLUMNS

    @property
    def rows(self) -> list[Row]:
        """The rows as ``(key, namespace, value)`` tuples of Python values (a new list)."""
        return list(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __repr__(self) -> str:
        return (
            f"StateFrame(operator={self.uid!r}, state={self.name!r}, "
            f"kind={self.kind.value!r}, rows={len(self._rows)})"
        )

    def _what(self) -> str:
        return f"state {self.name!r} ({self.kind.value}) of operator {self.uid!r}"

    def to_arrow(self) -> pa.Table:
        """A ``pyarrow.Table`` with types inferred from the values (tuples become
        structs, keyed map state values Arrow maps). Raises :class:`StateConversionError`
        naming the state when Arrow cannot type the values."""
        return rows_to_arrow(self._rows, self.kind, self._what())

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` of ``object`` columns holding the exact Python values
        (no conversion: a tuple stays a tuple, an int with None beside it stays an int).
        Needs pandas (``pip install pandas``): :class:`MissingDependencyError` otherwise."""
        try:
            import pandas as pd
        except ImportError as e:
            raise MissingDependencyError(
                f"StateFrame.to_pandas() ({self._what()}) needs pandas, which is not "
                "installed: pip install pandas (or use to_arrow())"
            ) from e
        columns = [np.empty(len(self._rows), dtype=object) for _ in COLUMNS]
        for r, row in enumerate(self._rows):
            for column, value in zip(columns, row):
                column[r] = value  # one by one: a list or tuple value is never unpacked
        return pd.DataFrame(dict(zip(COLUMNS, columns)), columns=list(COLUMNS), copy=False)

    def to_spark(self, spark: Any) -> Any:
        """A Spark DataFrame with the rows of :meth:`to_arrow` (created from the Arrow
        table, so pandas is not needed). ``spark``: a ``SparkSession``. Raises
        :class:`StateConversionError` when Arrow or Spark cannot type the values."""
        create = getattr(spark, "createDataFrame", None)
        if not callable(create):
            raise ConfigurationError(
                f"StateFrame.to_spark(spark) needs a SparkSession, got "
                f"{type(spark).__name__}; pass e.g. SparkSession.builder.getOrCreate()"
            )
        table = self.to_arrow()
        try:
            return create(table)
        except Exception as e:  # Spark raises many types for what it cannot type
            raise StateConversionError(
                f"{self._what()}: Spark cannot create a DataFrame from its Arrow table "
                f"(schema {table.schema.to_string(show_schema_metadata=False)!r}): {e}; use "
                "to_pandas() or to_arrow() to read it"
            ) from e
