"""lockgate's own state objects as named, versioned records (docs/savepoint_format.md).

A source split, a sink's transaction, a file set: what lockgate itself keeps in a
checkpoint is written as a *record*, not as a pickle: a stable name (``"kafka.split"``),
a format version and its fields (a dict of plain values, arrays and other records). The
name, not the Python class, is what the file holds, so classes can move between modules
and releases can change them while older files stay readable; reading a record runs no
code named by the file: the name is looked up in :data:`RECORD_MODULES`, a table in this
module, and only lockgate's own modules listed there are ever imported.

Rules for a change of a record's layout (checked by ``tests/compat/``):

* a field added with a default needs nothing (older files decode to the default);
* any other change (a field removed, renamed, retyped, a meaning changed) bumps
  ``version`` and gives ``upgrade(version, fields) -> fields``, which turns the fields of
  each older version into those of the current one;
* a name is never reused for something else.

A class becomes a record with :func:`state_record`. Dataclasses give their fields as they
are; other classes define ``__state_fields__(self) -> dict`` and, unless
``cls(**fields)`` builds them again, a classmethod ``__from_state_fields__(cls, fields)``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

#: record name -> the lockgate module that defines it: the only modules a state file
#: can cause to be imported (a name that is not here is refused)
RECORD_MODULES: dict[str, str] = {
    "batch.rows": "lockgate.core.batch",
    "files.split": "lockgate.connectors.files.source",
    "files.done": "lockgate.connectors.files.source",
    "files.transaction": "lockgate.connectors.files.sink",
    "sequence.split": "lockgate.connectors.builtin.sequence",
    "collection.split": "lockgate.connectors.builtin.collection",
    "kafka.split": "lockgate.connectors.kafka.split",
    "kafka.transaction": "lockgate.connectors.kafka.transactions",
    "redis.split": "lockgate.connectors.redis.stream",
    "nats.split": "lockgate.connectors.nats.jetstream",
    "postgres.transaction": "lockgate.connectors.postgres.sink",
    "postgres_cdc.stream_split": "lockgate.connectors.postgres.cdc.splits",
    "postgres_cdc.chunk_split": "lockgate.connectors.postgres.cdc.splits",
    "postgres_cdc.chunk_range": "lockgate.connectors.postgres.cdc.snapshot",
    "postgres_cdc.column": "lockgate.connectors.postgres.cdc.types",
    "delta.transaction": "lockgate.connectors.delta.sink",
    "delta.data_file": "lockgate.connectors.delta.files",
    "iceberg.transaction": "lockgate.connectors.iceberg.sink",
    "window.aggregate": "lockgate.windowing.aggregate_specs",
    "window.aggregation": "lockgate.windowing.aggregates",
    "window.accumulators": "lockgate.windowing.aggregates",
    "window_join.state": "lockgate.runtime.operators.join.window_join",
    "checkpoint.state_handle": "lockgate.checkpoint.types",
}

Upgrade = Callable[[int, dict[str, Any]], dict[str, Any]]
C = TypeVar("C", bound=type)


class RecordFormatError(ValueError):
    """A record this lockgate cannot decode: an unknown name, a newer version, fields
    that do not fit."""


@dataclasses.dataclass(frozen=True)
class RecordSpec:
    """How one class is written: its record ``name``, the ``version`` written now and
    the ``upgrade`` of older versions' fields."""

    cls: type
    name: str
    version: int
    upgrade: Upgrade | None

    def fields_of(self, obj: Any) -> dict[str, Any]:
        custom = getattr(obj, "__state_fields__", None)
        if custom is not None:
            return dict(custom())
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}

    def build(self, version: int, fields: dict[str, Any], where: str) -> Any:
        if version > self.version:
            raise RecordFormatError(
                f"{where}: record {self.name!r} version {version} was written by a newer "
                f"lockgate; this one reads versions up to {self.version}"
            )
        if version < self.version:
            if self.upgrade is None:
                raise RecordFormatError(
                    f"{where}: record {self.name!r} version {version} has no upgrade to "
                    f"version {self.version} (a layout change without a migration)"
                )
            fields = self.upgrade(version, dict(fields))
        try:
            custom = getattr(self.cls, "__from_state_fields__", None)
            if custom is not None:
                return custom(fields)
            return self.cls(**fields)
        except (TypeError, ValueError) as e:
            raise RecordFormatError(
                f"{where}: record {self.name!r} version {version} does not fit "
                f"{self.cls.__qualname__} ({e}); its fields: {sorted(fields)}"
            ) from e


_BY_NAME: dict[str, RecordSpec] = {}
_BY_CLASS: dict[type, RecordSpec] = {}


def state_record(name: str, version: int = 1, upgrade: Upgrade | None = None) -> Callable[[C], C]:
    """Make a class a state record named ``name`` (see the module docstring)."""

    def register(cls: C) -> C:
        module = RECORD_MODULES.get(name)
        if module != cls.__module__:
            raise RecordFormatError(
                f"state record {name!r} ({cls.__qualname__}) is defined in {cls.__module__}, "
                f"but RECORD_MODULES says {module!r}: update the table in "
                "lockgate/core/state_records.py"
            )
        if not dataclasses.is_dataclass(cls) and not hasattr(cls, "__state_fields__"):
            raise RecordFormatError(
                f"state record {name!r}: {cls.__qualname__} is neither a dataclass nor "
                "defines __state_fields__ / __from_state_fields__"
            )
        spec = RecordSpec(cls, name, version, upgrade)
        _BY_NAME[name] = spec
        _BY_CLASS[cls] = spec
        return cls

    return register


def spec_of(cls: type) -> RecordSpec | None:
    """The record spec of ``cls`` (None: not a state record)."""
    return _BY_CLASS.get(cls)


def spec_named(name: str, where: str) -> RecordSpec:
    """The spec of the record ``name``, importing its lockgate module if need be."""
    spec = _BY_NAME.get(name)
    if spec is not None:
        return spec
    module = RECORD_MODULES.get(name)
    if module is None:
        raise RecordFormatError(
            f"{where}: unknown state record {name!r} (written by a newer lockgate, or not "
            "by lockgate)"
        )
    importlib.import_module(module)
    spec = _BY_NAME.get(name)
    if spec is None:  # pragma: no cover - tests/unit/state/test_state_records.py checks the table
        raise RecordFormatError(f"{where}: {module} defines no state record {name!r}")
    return spec


__all__ = [
    "RECORD_MODULES",
    "RecordFormatError",
    "RecordSpec",
    "spec_named",
    "spec_of",
    "state_record",
]
