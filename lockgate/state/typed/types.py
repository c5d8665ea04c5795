"""State types: what ``type=`` on a state descriptor may name, as Arrow types.

:func:`state_type` turns a descriptor's ``type=`` into a :class:`StateType`, a tree of
nodes each of which knows its Arrow type and converts a list of Python values to an
Arrow array (:meth:`StateType.to_arrow`) and back (:meth:`StateType.from_arrow`):

=====================================  =============================  ===========================
``type=``                              Arrow type                     Python value read back
=====================================  =============================  ===========================
``int`` / ``float`` / ``str``          int64 / float64 / string       the same
``bool`` / ``bytes``                   bool / binary                  the same
``datetime.datetime`` / ``date``       timestamp[us] / date32         the same
``X | None`` (``Optional[X]``)         X, nullable                    X or None
``list[X]`` / ``tuple[X, ...]``        list<X>                        list / tuple
``dict[K, V]``                         map<K, V>                      dict
a dataclass / ``NamedTuple``           struct of its fields           an instance
a ``TypedDict``                        struct of its keys             a dict
a ``pyarrow.DataType``                 itself                         what ``to_pylist`` gives
a ``pyarrow.Schema``                   struct of its fields           a dict
=====================================  =============================  ===========================

A field of a dataclass or ``TypedDict`` is nullable only when its annotation admits
None. Conversions never import or call anything but the classes the descriptor named.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


_MISSING: Any = _NoDefault()

_SCALARS: dict[Any, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
    datetime.datetime: pa.timestamp("us"),
    datetime.date: pa.date32(),
}


class StateTypeError(ConfigurationError):
    """A ``type=`` a state descriptor cannot store, or a value that does not fit it."""


class TypeNode:
    """One node of a state type: its Arrow type and its conversions."""

    arrow: pa.DataType
    nullable: bool = False

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        raise NotImplementedError

    def from_arrow(self, array: pa.Array) -> list[Any]:
        raise NotImplementedError

    def describe(self) -> str:
        return str(self.arrow)


class ScalarNode(TypeNode):
    """A value Arrow converts itself (int, str, ..., or a user's ``pyarrow.DataType``)."""

    def __init__(self, arrow: pa.DataType, nullable: bool = False, name: str = "") -> None:
        self.arrow = arrow
        self.nullable = nullable
        self._name = name or str(arrow)

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        return pa.array(values, type=self.arrow)

    def from_arrow(self, array: pa.Array) -> list[Any]:
        return array.to_pylist()

    def describe(self) -> str:
        return self._name


class ListNode(TypeNode):
    """``list[X]`` (or ``tuple[X, ...]`` with ``as_tuple``)."""

    def __init__(self, item: TypeNode, nullable: bool = False, as_tuple: bool = False) -> None:
        self.item = item
        self.arrow = pa.list_(pa.field("item", item.arrow, nullable=item.nullable))
        self.nullable = nullable
        self._tuple = as_tuple

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        offsets = [0]
        flat: list[Any] = []
        mask = []
        for v in values:
            if v is None:
                mask.append(True)
            else:
                mask.append(False)
                if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
                    raise TypeError(f"expected a list, got {type(v).__name__} {v!r}")
                flat.extend(v)
            offsets.append(len(flat))
        items = self.item.to_arrow(flat)
        return pa.ListArray.from_arrays(
            pa.array(offsets, pa.int32()),
            items,
            type=self.arrow,
            mask=pa.array(mask, pa.bool_()) if any(mask) else None,
        )

    def from_arrow(self, array: pa.Array) -> list[Any]:
        items = self.item.from_arrow(array.flatten())
        lengths = array.value_lengths().to_pylist()
        out: list[Any] = []
        pos = 0
        as_tuple = self._tuple
        for n in lengths:
            if n is None:
                out.append(None)
                continue
            chunk = items[pos : pos + n]
            pos += n
            out.append(tuple(chunk) if as_tuple else chunk)
        return out

    def describe(self) -> str:
        return f"{'tuple' if self._tuple else 'list'}[{self.item.describe()}]"


class MapNode(TypeNode):
    """``dict[K, V]``, stored as an Arrow map."""

    def __init__(self, key: TypeNode, value: TypeNode, nullable: bool = False) -> None:
        self.key = key
        self.value = value
        self.arrow = pa.map_(key.arrow, pa.field("value", value.arrow, nullable=value.nullable))
        self.nullable = nullable

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        offsets = [0]
        keys: list[Any] = []
        items: list[Any] = []
        mask = []
        for v in values:
            if v is None:
                mask.append(True)
            else:
                if not isinstance(v, dict):
                    raise TypeError(f"expected a dict, got {type(v).__name__} {v!r}")
                mask.append(False)
                keys.extend(v.keys())
                items.extend(v.values())
            offsets.append(len(keys))
        return pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            self.key.to_arrow(keys),
            self.value.to_arrow(items),
            type=self.arrow,
            mask=pa.array(mask, pa.bool_()) if any(mask) else None,
        )

    def from_arrow(self, array: pa.Array) -> list[Any]:
        keys = self.key.from_arrow(array.keys)
        items = self.value.from_arrow(array.items)
        offsets = array.offsets.to_pylist()
        valid = array.is_valid().to_pylist() if array.null_count else None
        out: list[Any] = []
        for i in range(len(array)):
            if valid is not None and not valid[i]:
                out.append(None)
                continue
            lo, hi = offsets[i], offsets[i + 1]
            out.append(dict(zip(keys[lo:hi], items[lo:hi])))
        return out

    def describe(self) -> str:
        return f"dict[{self.key.describe()}, {self.value.describe()}]"


@dataclasses.dataclass(frozen=True)
class StructField:
    """One field of a struct node: its name, type, and default (``_MISSING`` if none;
    ``factory`` True when the default is a factory to call)."""

    name: str
    node: TypeNode
    default: Any = _MISSING
    factory: bool = False

    def default_value(self) -> Any:
        return self.default() if self.factory else self.default

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING


class StructNode(TypeNode):
    """A dataclass, ``NamedTuple``, ``TypedDict`` or ``pyarrow.Schema``: an Arrow struct.
    ``make`` builds the Python value from a dict of field values (None: the dict)."""

    def __init__(
        self,
        fields: list[StructField],
        name: str,
        read: Callable[[Any, str], Any],
        make: Callable[..., Any] | None,
        nullable: bool = False,
    ) -> None:
        self.fields = fields
        self.arrow = pa.struct(
            [pa.field(f.name, f.node.arrow, nullable=f.node.nullable) for f in fields]
        )
        self.nullable = nullable
        self._name = name
        self._read = read
        self._make = make
        # a dataclass whose instances keep their fields in __dict__ (no __slots__, no
        # __post_init__): rebuilt as pickle rebuilds it
        self._plain_instances = (
            make is not None
            and dataclasses.is_dataclass(make)
            and not hasattr(make, "__slots__")
            and not hasattr(make, "__post_init__")
        )
        self._tuple_instances = make is not None and _is_named_tuple(make)

    def field(self, name: str) -> StructField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def to_arrow(self, values: Sequence[Any]) -> pa.Array:
        mask = [v is None for v in values]
        nulls = any(mask)
        read = self._read
        children = []
        for f in self.fields:
            name = f.name
            column = (
                [None if v is None else read(v, name) for v in values]
                if nulls
                else [read(v, name) for v in values]
            )
            children.append(f.node.to_arrow(column))
        return pa.StructArray.from_arrays(
            children,
            fields=list(self.arrow),
            mask=pa.array(mask, pa.bool_()) if nulls else None,
        )

    def from_arrow(self, array: pa.Array) -> list[Any]:
        children = array.flatten()
        columns = [f.node.from_arrow(c) for f, c in zip(self.fields, children)]
        names = [f.name for f in self.fields]
        make = self._make
        if make is None:
            rows: list[Any] = [dict(zip(names, vals)) for vals in zip(*columns)]
        elif self._plain_instances:
            # as unpickling does: a new instance and its fields, no __init__ call
            new = object.__new__
            cls: Any = make
            rows = []
            append = rows.append
            for vals in zip(*columns):
                obj = new(cls)
                obj.__dict__ = dict(zip(names, vals))
                append(obj)
        elif self._tuple_instances:
            named: Any = make
            rows = [named._make(vals) for vals in zip(*columns)]  # a NamedTuple
        else:
            rows = [make(**dict(zip(names, vals))) for vals in zip(*columns)]
        if not self.fields:
            rows = [({} if make is None else make()) for _ in range(len(array))]
        if array.null_count:
            valid = array.is_valid().to_pylist()
            rows = [r if ok else None for r, ok in zip(rows, valid)]
        return rows

    def describe(self) -> str:
        return self._name


def _attr(value: Any, name: str) -> Any:
    if type(value) is dict:  # a record read from a frame or a savepoint
        return value.get(name)
    try:
        return getattr(value, name)
    except AttributeError:
        raise TypeError(f"{type(value).__name__} {value!r} has no field {name!r}") from None


def _item(value: Any, name: str) -> Any:
    try:
        return value[name]
    except (KeyError, TypeError, IndexError):
        if isinstance(value, dict):
            return None  # an absent key of a TypedDict (total=False) is null
        raise TypeError(f"expected a dict with key {name!r}, got {value!r}") from None


def _optional_args(spec: Any, where: str) -> tuple[Any, bool]:
    """``(inner, True)`` for ``X | None`` / ``Optional[X]``, else ``(spec, False)``."""
    origin = typing.get_origin(spec)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        args = [a for a in typing.get_args(spec) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(spec)) == 2:
            return args[0], True
        raise StateTypeError(
            f"{where}: a union of several types ({spec!r}) cannot be stored as typed state; use one "
            "type, optionally with None"
        )
    return spec, False


def _is_typed_dict(spec: Any) -> bool:
    return isinstance(spec, type) and issubclass(spec, dict) and hasattr(spec, "__total__")


def _is_named_tuple(spec: Any) -> bool:
    return isinstance(spec, type) and issubclass(spec, tuple) and hasattr(spec, "_fields")


def _hints(cls: type, where: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as e:  # a forward reference that does not resolve
        raise StateTypeError(
            f"{where}: the annotations of {cls.__qualname__} cannot be resolved ({e}); "
            "define the types it names at module level"
        ) from e


def build_node(spec: Any, where: str, nullable: bool = False) -> TypeNode:
    """The node of ``spec`` (see the module docstring); raises :class:`StateTypeError`
    naming ``where`` for a type that cannot be stored."""
    inner, optional = _optional_args(spec, where)
    if optional:
        return build_node(inner, where, nullable=True)
    if isinstance(spec, pa.Schema):
        fields = [StructField(f.name, _arrow_node(f.type, f.nullable)) for f in spec]
        return StructNode(fields, "pyarrow schema", _item, None, nullable)
    if isinstance(spec, pa.DataType):
        return _arrow_node(spec, nullable)
    if spec in _SCALARS:
        return ScalarNode(_SCALARS[spec], nullable, spec.__name__)
    origin = typing.get_origin(spec)
    args = typing.get_args(spec)
    if origin is list and len(args) == 1:
        return ListNode(build_node(args[0], where), nullable)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return ListNode(build_node(args[0], where), nullable, as_tuple=True)
    if origin is dict and len(args) == 2:
        key = build_node(args[0], where)
        if key.nullable or not isinstance(key, ScalarNode):
            raise StateTypeError(
                f"{where}: the keys of {spec!r} must be a non-null scalar type (int, str, ...)"
            )
        return MapNode(key, build_node(args[1], where), nullable)
    if dataclasses.is_dataclass(spec) and isinstance(spec, type):
        hints = _hints(spec, where)
        fields = []
        for f in dataclasses.fields(spec):
            if f.default is not dataclasses.MISSING:
                default, factory = f.default, False
            elif f.default_factory is not dataclasses.MISSING:
                default, factory = f.default_factory, True
            else:
                default, factory = _MISSING, False
            fields.append(StructField(f.name, build_node(hints[f.name], where), default, factory))
        return StructNode(fields, spec.__qualname__, _attr, spec, nullable)
    if _is_named_tuple(spec):
        hints = _hints(spec, where)
        defaults = getattr(spec, "_field_defaults", {})
        fields = [
            StructField(name, build_node(hints.get(name, Any), where), defaults.get(name, _MISSING))
            for name in spec._fields
        ]
        return StructNode(fields, spec.__qualname__, _attr, spec, nullable)
    if _is_typed_dict(spec):
        hints = _hints(spec, where)
        fields = [StructField(name, build_node(hint, where)) for name, hint in hints.items()]
        return StructNode(fields, spec.__qualname__, _item, None, nullable)
    raise StateTypeError(
        f"{where}: type={spec!r} cannot be stored as typed state; use int, float, str, bool, "
        "bytes, datetime, date, list[X], tuple[X, ...], dict[K, V], X | None, a dataclass, a "
        "NamedTuple, a TypedDict, a pyarrow.DataType or a pyarrow.Schema (or leave type= out "
        "to keep pickled, not evolvable values)"
    )


def _arrow_node(arrow: pa.DataType, nullable: bool) -> TypeNode:
    """A node for a pyarrow type: structs, lists and maps keep their structure (so that
    their fields can evolve); anything else converts through Arrow itself."""
    if pa.types.is_struct(arrow):
        fields = [StructField(f.name, _arrow_node(f.type, f.nullable)) for f in arrow]
        return StructNode(fields, str(arrow), _item, None, nullable)
    if pa.types.is_list(arrow):
        return ListNode(_arrow_node(arrow.value_type, arrow.value_field.nullable), nullable)
    if pa.types.is_map(arrow):
        return MapNode(
            _arrow_node(arrow.key_type, False),
            _arrow_node(arrow.item_type, arrow.item_field.nullable),
            nullable,
        )
    return ScalarNode(arrow, nullable)


def arrow_node(arrow: pa.DataType, nullable: bool = False) -> TypeNode:
    """The node of a type read from a savepoint (structs become dicts)."""
    return _arrow_node(arrow, nullable)


class StateType:
    """The type of one state's values (list elements, map values, accumulators):
    ``spec`` as the descriptor gave it, ``node`` its conversions, ``key`` the user-key
    node of map state (None for other kinds), ``aliases`` ``{new field: old field}``."""

    def __init__(
        self,
        spec: Any,
        node: TypeNode,
        key: TypeNode | None = None,
        aliases: dict[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.node = node
        self.key = key
        self.aliases = dict(aliases or {})

    def describe(self) -> str:
        if self.key is not None:
            return f"dict[{self.key.describe()}, {self.node.describe()}]"
        return self.node.describe()

    def __repr__(self) -> str:
        return f"StateType({self.describe()})"


def state_type(
    spec: Any,
    where: str,
    *,
    key_type: Any = None,
    aliases: Any = None,
    kind: str = "value",
) -> StateType:
    """The :class:`StateType` of a descriptor's ``type=`` (``key_type=`` for map state)."""
    node = build_node(spec, where)
    key = None
    if kind == "map":
        if key_type is None:
            raise StateTypeError(
                f"{where}: typed map state needs the type of its user keys too: "
                "MapStateDescriptor(name, key_type=str, type=...)"
            )
        key = build_node(key_type, where)
        if key.nullable or not isinstance(key, ScalarNode):
            raise StateTypeError(
                f"{where}: key_type={key_type!r} must be a non-null scalar type (int, str, ...)"
            )
    elif key_type is not None:
        raise StateTypeError(f"{where}: key_type= is for MapStateDescriptor only")
    return StateType(spec, node, key, check_aliases(aliases, where))


def check_aliases(aliases: Any, where: str) -> dict[str, str]:
    """``aliases`` as ``{new field name: old field name}`` (dotted paths for nested
    fields), checked."""
    if aliases is None:
        return {}
    if not isinstance(aliases, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in aliases.items()
    ):
        raise StateTypeError(
            f"{where}: aliases= must be a dict {{new field name: old field name}} of "
            f"non-empty strings, got {aliases!r}"
        )
    return dict(aliases)


__all__ = [
    "ListNode",
    "MapNode",
    "ScalarNode",
    "StateType",
    "StateTypeError",
    "StructField",
    "StructNode",
    "TypeNode",
    "arrow_node",
    "build_node",
    "check_aliases",
    "state_type",
]
