"""State schema evolution: the contract between the type a savepoint's state was
written with and the type the restoring job declares (docs/state_evolution.md).

Accepted, each reported as a change:

* a field added: filled with its default (dataclass / NamedTuple default), else null
  when its type admits None;
* a field removed: its values are dropped;
* a numeric type widened: int8 → int16 → int32 → int64, float32 → float64, any int →
  float64; a non-null type becoming nullable;
* a field renamed through ``aliases={"new": "old"}`` on the descriptor (dotted paths
  for nested fields);
* fields reordered (no change at all: fields match by name).

Refused, with :class:`IncompatibleStateError` naming the operator, the state, the field
(dotted path) and both types: any other change of type (narrowed, a different kind of
value, nullable → non-null), and a field added with no default whose type does not
admit None.

:func:`evolve` decides without touching data and returns the :class:`Evolution`;
:meth:`Evolution.migrate` rewrites an Arrow array of the old type into the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from .types import ListNode, MapNode, ScalarNode, StructNode, TypeNode

_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINTS = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]


class IncompatibleStateError(ConfigurationError):
    """Restored state whose type the job's descriptor cannot read (see the module
    docstring for what is accepted). ``reasons`` lists every refusal found."""

    def __init__(self, message: str, reasons: list[str] | None = None) -> None:
        super().__init__(message)
        self.reasons = list(reasons or [])


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether ``old`` → ``new`` is an accepted numeric widening (or no change)."""
    if old == new:
        return True
    for ladder in (_INTS, _UINTS, _FLOATS):
        if old in ladder and new in ladder:
            return ladder.index(old) <= ladder.index(new)
    if old in _UINTS and new in _INTS:
        return _UINTS.index(old) < _INTS.index(new)
    if (old in _INTS or old in _UINTS) and new == pa.float64():
        return True
    if pa.types.is_timestamp(old) and pa.types.is_timestamp(new):
        return old.tz == new.tz and _unit_rank(old.unit) <= _unit_rank(new.unit)
    if old in (pa.string(), pa.large_string()) and new in (pa.string(), pa.large_string()):
        return True
    binaries = (pa.binary(), pa.large_binary())
    return old in binaries and new in binaries


def _unit_rank(unit: str) -> int:
    return ["s", "ms", "us", "ns"].index(unit)


@dataclass
class Evolution:
    """What restoring a state of type ``writer`` as ``reader`` changes (``changes``,
    human-readable; empty when the types are the same)."""

    writer: pa.DataType
    reader: TypeNode
    aliases: dict[str, str]
    changes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def migrate(self, array: pa.Array) -> pa.Array:
        """``array`` (of the writer type) as an array of the reader type."""
        if not self.changes and array.type == self.reader.arrow:
            return array
        return _migrate(array, self.reader, self.aliases, "")


def evolve(
    writer: pa.DataType,
    writer_nullable: bool,
    reader: TypeNode,
    aliases: dict[str, str],
    where: str,
) -> Evolution:
    """Check that state written as ``writer`` restores as ``reader``; raises
    :class:`IncompatibleStateError` naming ``where`` (operator uid and state) with every
    refused change."""
    changes: list[str] = []
    refused: list[str] = []
    _compare(writer, writer_nullable, reader, aliases, "", changes, refused)
    if refused:
        raise IncompatibleStateError(
            f"{where}: the restored state cannot be read with the declared type: "
            + "; ".join(refused)
            + ". Keep the old type, change it only as docs/state_evolution.md allows (add a "
            "field with a default or as optional, remove a field, widen a number, rename "
            "with aliases=), or give the state a new name to start it empty",
            refused,
        )
    return Evolution(writer, reader, aliases, changes)


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _shown(path: str) -> str:
    return f"field {path!r}" if path else "the value"


def _compare(
    old: pa.DataType,
    old_nullable: bool,
    new: TypeNode,
    aliases: dict[str, str],
    path: str,
    changes: list[str],
    refused: list[str],
) -> None:
    if old_nullable and not new.nullable:
        refused.append(
            f"{_shown(path)} was nullable ({old}) and is now non-null ({new.describe()}); "
            "declare it Optional"
        )
        return
    if not old_nullable and new.nullable and path != "":
        changes.append(f"{_shown(path)} became nullable")
    if isinstance(new, StructNode):
        _compare_struct(old, new, aliases, path, changes, refused)
    elif isinstance(new, ListNode):
        if not (pa.types.is_list(old) or pa.types.is_large_list(old)):
            refused.append(f"{_shown(path)} changed type from {old} to {new.describe()}")
            return
        item = old.value_field
        _compare(item.type, item.nullable, new.item, aliases, f"{path}[]", changes, refused)
    elif isinstance(new, MapNode):
        if not pa.types.is_map(old):
            refused.append(f"{_shown(path)} changed type from {old} to {new.describe()}")
            return
        _compare(old.key_type, False, new.key, aliases, f"{path}{{key}}", changes, refused)
        item = old.item_field
        _compare(item.type, item.nullable, new.value, aliases, f"{path}{{}}", changes, refused)
    else:
        assert isinstance(new, ScalarNode)
        if old.equals(new.arrow, check_metadata=False):
            return
        if widens(old, new.arrow):
            changes.append(f"{_shown(path)} widened from {old} to {new.arrow}")
            return
        refused.append(f"{_shown(path)} changed type from {old} to {new.arrow}")


def _compare_struct(
    old: pa.DataType,
    new: StructNode,
    aliases: dict[str, str],
    path: str,
    changes: list[str],
    refused: list[str],
) -> None:
    if not pa.types.is_struct(old):
        refused.append(f"{_shown(path)} changed type from {old} to {new.describe()}")
        return
    old_fields = {f.name: f for f in old}
    sources: list[str] = []
    for f in new.fields:
        full = _path(path, f.name)
        source = _source_name(f.name, full, aliases, old_fields)
        if source is None:
            if f.has_default:
                changes.append(f"{_shown(full)} added (default {f.default_value()!r})")
            elif f.node.nullable:
                changes.append(f"{_shown(full)} added (null)")
            else:
                refused.append(
                    f"{_shown(full)} was added with type {f.node.describe()} but has no "
                    "default and does not admit None; give it a default or make it Optional"
                )
            continue
        if source != f.name:
            changes.append(f"{_shown(_path(path, source))} renamed to {f.name!r}")
        sources.append(source)
        of = old_fields[source]
        _compare(of.type, of.nullable, f.node, aliases, full, changes, refused)
    for name in old_fields:
        if name not in sources:
            changes.append(f"{_shown(_path(path, name))} removed (its values are dropped)")
    if [n for n in old_fields if n in sources] != sources:
        changes.append(f"fields of {_shown(path)} reordered")


def _source_name(
    name: str, full: str, aliases: dict[str, str], old_fields: dict[str, Any]
) -> str | None:
    """The old field a new field reads: itself, else its alias (by dotted path or by
    bare name)."""
    if name in old_fields:
        return name
    old = aliases.get(full) or aliases.get(name)
    if old is not None:
        old = old.rsplit(".", 1)[-1]
        if old in old_fields:
            return old
    return None


def _migrate(array: pa.Array, node: TypeNode, aliases: dict[str, str], path: str) -> pa.Array:
    old = array.type
    if old == node.arrow:
        return array
    if isinstance(node, StructNode):
        old_fields = {f.name: i for i, f in enumerate(old)}
        children = array.flatten()
        out = []
        for f in node.fields:
            full = _path(path, f.name)
            source = _source_name(f.name, full, aliases, old_fields)
            if source is None:
                if f.has_default:
                    out.append(f.node.to_arrow([f.default_value() for _ in range(len(array))]))
                else:
                    out.append(pa.nulls(len(array), f.node.arrow))
                continue
            out.append(_migrate(children[old_fields[source]], f.node, aliases, full))
        return pa.StructArray.from_arrays(
            out,
            fields=list(node.arrow),
            mask=array.is_null() if array.null_count else None,
        )
    if isinstance(node, ListNode):
        items = _migrate(array.values, node.item, aliases, f"{path}[]")
        return pa.ListArray.from_arrays(
            array.offsets,
            items,
            type=node.arrow,
            mask=array.is_null() if array.null_count else None,
        )
    if isinstance(node, MapNode):
        keys = _migrate(array.keys, node.key, aliases, f"{path}{{key}}")
        items = _migrate(array.items, node.value, aliases, f"{path}{{}}")
        offsets = array.offsets
        return pa.MapArray.from_arrays(
            offsets,
            keys,
            items,
            type=node.arrow,
            mask=array.is_null() if array.null_count else None,
        )
    return array.cast(node.arrow, safe=True)


__all__ = ["Evolution", "IncompatibleStateError", "evolve", "widens"]
