"""Declaring built-in window aggregates: :class:`WindowAggregate` (one aggregate: its
kind, column and output column) and the ``lg.agg`` builders (:data:`agg`), checked when
they are declared. How each kind computes is in :mod:`.aggregate_kinds`; what they compute
(the SQL semantics) is in the docstring of :mod:`.aggregates`."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.state_records import state_record
from ..errors import ConfigurationError
from . import distinct_values as dv

KINDS = (
    "count",
    "sum",
    "min",
    "max",
    "mean",
    "first",
    "last",
    "count_distinct",
    "approx_count_distinct",
)
"""The built-in aggregate kinds."""

DISTINCT_KINDS = ("count_distinct", "approx_count_distinct")
"""Kinds that keep each row's distinct values (or a sketch of them)."""

WINDOW_START = "window_start"
WINDOW_END = "window_end"


@state_record("window.aggregate")
@dataclass(frozen=True)
class WindowAggregate:
    """One built-in aggregate: ``kind`` of ``column`` (None: ``count()`` of records),
    written to the output column ``name``."""

    kind: str
    column: str | None
    name: str
    #: ``approx_count_distinct`` only: the relative standard error asked for
    relative_error: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(
                f"unknown window aggregate {self.kind!r}; use one of {', '.join(KINDS)}"
            )
        if self.kind == "approx_count_distinct":
            error = dv.check_relative_error(
                self.relative_error, f"lg.agg.approx_count_distinct({self.column!r})"
            )
            object.__setattr__(self, "relative_error", error)
            dv.datasketches()  # missing: say which extra installs it, now
        elif self.relative_error is not None:
            raise ConfigurationError(
                f"lg.agg.{self.kind} takes no relative_error (only "
                "lg.agg.approx_count_distinct does)"
            )
        if self.column is None and self.kind != "count":
            raise ConfigurationError(
                f"lg.agg.{self.kind} needs a column name, e.g. lg.agg.{self.kind}('v')"
            )
        if self.column is not None and not (isinstance(self.column, str) and self.column):
            raise ConfigurationError(
                f"lg.agg.{self.kind}: the column must be a non-empty string, got {self.column!r}"
            )
        if not (isinstance(self.name, str) and self.name):
            raise ConfigurationError(
                f"lg.agg.{self.kind}: name must be a non-empty string, got {self.name!r}"
            )

    @property
    def lg_k(self) -> int | None:
        """``approx_count_distinct``: the HLL sketch's ``lg_k`` for ``relative_error``."""
        return None if self.relative_error is None else dv.lg_k_for(self.relative_error)

    def __repr__(self) -> str:
        arg = "" if self.column is None else repr(self.column)
        if self.relative_error is not None:
            arg += f", relative_error={self.relative_error!r}"
        return f"lg.agg.{self.kind}({arg}) as {self.name!r}"


def _make(
    kind: str, column: str | None, name: str | None, relative_error: float | None = None
) -> WindowAggregate:
    if name is None:
        name = kind if column is None else f"{kind}_{column}"
    return WindowAggregate(kind, column, name, relative_error)


class AggregateBuilders:
    """The ``lg.agg`` namespace: builders of :class:`WindowAggregate`. The output
    column is ``name`` or, by default, ``"<kind>_<column>"`` (``"count"`` for ``count()``)."""

    @staticmethod
    def count(column: str | None = None, *, name: str | None = None) -> WindowAggregate:
        """Records in the window; with ``column``, its non-null values. int64."""
        return _make("count", column, name)

    @staticmethod
    def sum(column: str, *, name: str | None = None) -> WindowAggregate:
        """Sum of the non-null values; null if none."""
        return _make("sum", column, name)

    @staticmethod
    def min(column: str, *, name: str | None = None) -> WindowAggregate:
        """Smallest non-null value; null if none."""
        return _make("min", column, name)

    @staticmethod
    def max(column: str, *, name: str | None = None) -> WindowAggregate:
        """Largest non-null value; null if none."""
        return _make("max", column, name)

    @staticmethod
    def mean(column: str, *, name: str | None = None) -> WindowAggregate:
        """Mean of the non-null values (float64); null if none."""
        return _make("mean", column, name)

    @staticmethod
    def first(column: str, *, name: str | None = None) -> WindowAggregate:
        """Non-null value with the smallest timestamp (ties: earliest arrival)."""
        return _make("first", column, name)

    @staticmethod
    def last(column: str, *, name: str | None = None) -> WindowAggregate:
        """Non-null value with the largest timestamp (ties: latest arrival)."""
        return _make("last", column, name)

    @staticmethod
    def count_distinct(column: str, *, name: str | None = None) -> WindowAggregate:
        """Exact number of distinct non-null values (int64, 0 if none). Each window
        keeps its distinct values: for very many per window, use
        :meth:`approx_count_distinct`."""
        return _make("count_distinct", column, name)

    @staticmethod
    def approx_count_distinct(
        column: str, *, relative_error: float = 0.02, name: str | None = None
    ) -> WindowAggregate:
        """Estimated number of distinct non-null values (int64, 0 if none): a
        mergeable HyperLogLog sketch (Apache DataSketches; ``pip install
        'lockgate[sketches]'``) of fixed size per window. ``relative_error``, from
        0.001 to 0.25, is the estimate's relative standard error; it sets the
        sketch's ``lg_k`` (``1.04 / sqrt(2**lg_k) <= relative_error``: 0.02 -> 12,
        4 KiB per window at most)."""
        return _make("approx_count_distinct", column, name, relative_error)


agg = AggregateBuilders()


__all__ = [
    "DISTINCT_KINDS",
    "KINDS",
    "WINDOW_END",
    "WINDOW_START",
    "AggregateBuilders",
    "WindowAggregate",
    "agg",
]
