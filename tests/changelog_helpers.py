"""Helpers of the changelog tests: a changelog applied to a table, each key's changes,
and a Delta table's rows by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lockgate as lg


def apply(changes: list[lg.Change], key: str = "id") -> dict[Any, dict[str, Any]]:
    """A changelog applied to a table: additions (+I, +U) upsert, retractions (-U, -D)
    delete."""
    table: dict[Any, dict[str, Any]] = {}
    for c in changes:
        if c.kind.is_addition:
            table[c.value[key]] = c.value
        else:
            table.pop(c.value[key], None)
    return table


def by_key(changes: list[lg.Change], key: str = "id") -> dict[Any, list[lg.Change]]:
    """Each key's changes in the order they came (the order across keys depends on the
    parallel paths; within one key it is kept)."""
    out: dict[Any, list[lg.Change]] = {}
    for c in changes:
        out.setdefault(c.value[key], []).append(c)
    return out


def delta_rows(path: Path, key: str = "id") -> dict[Any, dict[str, Any]]:
    """A Delta table's rows by ``key``; fails if a key appears twice."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    out = {r[key]: r for r in rows}
    assert len(out) == len(rows), "a key appears twice in the Delta table"
    return out
