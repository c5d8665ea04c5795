"""Building a savepoint from data: :func:`write`, the write side of the state processor
API (the mirror of :func:`lockgate.savepoint.read`).

``write(path, states, max_parallelism=128)`` makes a new savepoint folder from frames
shaped as :meth:`Savepoint.state` returns them: ``states`` maps ``(uid, state name)`` to
a pandas DataFrame, a ``pyarrow.Table`` or a Spark DataFrame with columns ``key`` and
``value`` (keyed state), or ``value`` alone (operator list state), or a
:class:`State` naming the kind and, optionally, the type::

    lockgate.savepoint.write("/savepoints/bootstrap", {
        ("counter", "count"): counts_df,                          # keyed value state
        ("profiles", "profile"): State(profiles_df, type=Profile),
        ("router", "rules"): State(rules_df, kind="broadcast"),
    })

A job started from it (``restore_from=`` / ``lockgate run --restore``) sees exactly
that state, at any parallelism up to ``max_parallelism`` (its operators must set the
same max parallelism). Keyed state is written typed (Arrow columns, see
docs/state_evolution.md): the value column's Arrow type is the type written, read by
the job's ``type=`` under the evolution contract (a struct column restores as a
dataclass whose fields match by name); ``State(..., typed=False)`` writes pickled values
for a job whose descriptor has no ``type=``. A Spark DataFrame is written by the
executors, one task per range of key groups, not through the driver.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from ..checkpoint.coordinator.completed_store import CompletedCheckpoint
from ..checkpoint.fs_storage import KIND_JSON, KIND_PICKLE, encode_file
from ..checkpoint.savepoints import check_savepoint_target
from ..checkpoint.state_tree import encode_tree
from ..checkpoint.storage import METADATA, storage_options_of
from ..checkpoint.storage_url import open_storage
from ..checkpoint.types import StateHandle
from ..core.key_groups import (
    DEFAULT_MAX_PARALLELISM,
    check_max_parallelism,
    key_groups_of_column,
    key_groups_of_keys,
    subtasks_for_key_groups,
)
from ..errors import ConfigurationError
from ..state.typed.columns import layout_metadata, stored_node, table_bytes
from ..state.typed.registry import typed_entry
from ..state.typed.types import StateType, state_type

KEYED_KINDS = ("value", "list", "map")
OPERATOR_KINDS = ("operator_list", "union_list", "broadcast")


@dataclass(frozen=True)
class State:
    """One state to write: ``frame`` (pandas, Arrow or Spark), its ``kind`` ("value",
    "list", "map", "operator_list", "union_list" or "broadcast"), optionally the
    ``type`` of its values (what a descriptor's ``type=`` takes; ``key_type`` for map
    state) and ``typed`` (False: pickled values, for descriptors without ``type=``)."""

    frame: Any
    kind: str = "value"
    type: Any = None
    key_type: Any = None
    typed: bool = True


def write(
    path: str | os.PathLike[str],
    states: Mapping[tuple[str, str], Any],
    *,
    max_parallelism: int = DEFAULT_MAX_PARALLELISM,
    parallelism: int | None = None,
) -> str:
    """Write a new savepoint at ``path`` holding ``states`` (see the module docstring);
    return its location. ``parallelism``: how many subtask files keyed state is split
    into (default: the Spark DataFrame's partitions, else 1; any parallelism up to
    ``max_parallelism`` restores it). Raises ConfigurationError for a bad argument or a
    folder that already holds a savepoint."""
    target = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(target, str):
        raise ConfigurationError(f"lockgate.savepoint.write: path must be a folder, got {path!r}")
    check_savepoint_target(target)
    mp = check_max_parallelism(max_parallelism)
    if not isinstance(states, Mapping) or not states:
        raise ConfigurationError(
            "lockgate.savepoint.write(path, states): states must be a non-empty dict "
            "{(operator uid, state name): frame or lockgate.savepoint.State}"
        )
    by_uid: dict[str, dict[str, State]] = {}
    for ident, given in states.items():
        if (
            not isinstance(ident, tuple)
            or len(ident) != 2
            or not all(isinstance(x, str) and x for x in ident)
        ):
            raise ConfigurationError(
                f"lockgate.savepoint.write: each key of states is (operator uid, state name), "
                f"got {ident!r}"
            )
        spec = given if isinstance(given, State) else State(given)
        _check_state(ident, spec)
        by_uid.setdefault(ident[0], {})[ident[1]] = spec
    storage = open_storage(target)
    operators: dict[str, dict[int, StateHandle]] = {}
    for uid, named in sorted(by_uid.items()):
        operators[uid] = _write_operator(storage, target, uid, named, mp, parallelism)
    now = int(time.time() * 1000)
    completed = CompletedCheckpoint(
        checkpoint_id=1,
        trigger_timestamp=now,
        completion_timestamp=now,
        operator_states=operators,
        is_savepoint=True,
        job_name="lockgate.savepoint.write",
    )
    payload = json.dumps(completed.to_metadata(), allow_nan=False).encode("utf-8")
    storage.write_file(
        METADATA, encode_file(payload, KIND_JSON, storage_options_of(storage)), atomic=True
    )
    location: str = getattr(storage, "url", target)
    return location


def _check_state(ident: tuple[str, str], spec: State) -> None:
    where = f"lockgate.savepoint.write: state {ident!r}"
    if spec.kind not in KEYED_KINDS + OPERATOR_KINDS:
        raise ConfigurationError(
            f"{where}: kind must be one of {', '.join(KEYED_KINDS + OPERATOR_KINDS)}, got "
            f"{spec.kind!r}"
        )
    if _is_spark(spec.frame) and spec.kind not in KEYED_KINDS:
        raise ConfigurationError(
            f"{where}: {spec.kind} state is small: give a pandas or Arrow frame"
        )
    if not (_is_spark(spec.frame) or isinstance(spec.frame, pa.Table) or _is_pandas(spec.frame)):
        raise ConfigurationError(
            f"{where}: the frame must be a pandas DataFrame, a pyarrow.Table or a Spark "
            f"DataFrame, got {type(spec.frame).__name__}"
        )
    columns = (
        list(spec.frame.columns)
        if not isinstance(spec.frame, pa.Table)
        else spec.frame.column_names
    )
    needed = ["value"] if spec.kind in ("operator_list", "union_list") else ["key", "value"]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ConfigurationError(
            f"{where}: the frame has columns {columns}; {spec.kind} state needs "
            f"{', '.join(needed)} (as lockgate.savepoint.read(...).state(...) gives them)"
        )


def _is_spark(frame: Any) -> bool:
    return type(frame).__module__.startswith("pyspark.sql") and hasattr(frame, "mapInArrow")


def _is_pandas(frame: Any) -> bool:
    return type(frame).__module__.startswith("pandas") and hasattr(frame, "to_dict")


def _arrow(frame: Any, columns: list[str]) -> pa.Table:
    if isinstance(frame, pa.Table):
        return frame.select(columns)
    return pa.Table.from_pandas(frame[columns], preserve_index=False)


def _local_rows(spec: State) -> Any:
    """The ``key``, ``value`` rows of a local frame: Arrow for typed state, the pandas
    frame itself for pickled values (any Python object)."""
    if not spec.typed and _is_pandas(spec.frame):
        return spec.frame[["key", "value"]]
    return _arrow(spec.frame, ["key", "value"])


def _state_type(uid: str, name: str, spec: State) -> StateType | None:
    if spec.type is None:
        return None
    kind = spec.kind if spec.kind in KEYED_KINDS else "value"
    return state_type(spec.type, f"state ({uid!r}, {name!r})", key_type=spec.key_type, kind=kind)


def _write_operator(
    storage: Any,
    target: str,
    uid: str,
    named: dict[str, State],
    mp: int,
    parallelism: int | None,
) -> dict[int, StateHandle]:
    keyed = {n: s for n, s in named.items() if s.kind in KEYED_KINDS}
    others = {n: s for n, s in named.items() if s.kind not in KEYED_KINDS}
    spark = {n: s for n, s in keyed.items() if _is_spark(s.frame)}
    if parallelism is None:
        first = next(iter(spark.values()), None)
        parallelism = min(mp, first.frame.rdd.getNumPartitions()) if first else 1
    if not isinstance(parallelism, int) or not 1 <= parallelism <= mp:
        raise ConfigurationError(
            f"lockgate.savepoint.write: parallelism must be an int in 1..max_parallelism "
            f"({mp}), got {parallelism!r}"
        )
    layout = _Layout(uid, mp, parallelism, *_operator_parts(others))
    if len(spark) == 1 and len(keyed) == 1:
        # the executors write the subtask files themselves; the driver only the rest
        name, spec = next(iter(spark.items()))
        handles = _spark_write(target, layout, name, spec, _state_type(uid, name, spec))
        for subtask in range(parallelism):
            if subtask not in handles:
                handles[subtask] = layout.write(storage, subtask, {})
        return handles
    parts: dict[int, dict[str, Any]] = {i: {} for i in range(parallelism)}
    for name, spec in keyed.items():
        st = _state_type(uid, name, spec)
        if _is_spark(spec.frame):  # several keyed states: encoded by executors, merged here
            entries = _spark_entries(spec, st, mp, parallelism)
        else:
            entries = list(_entries_for(_local_rows(spec), spec, st, mp, parallelism))
        for subtask, entry in entries:
            parts[subtask][name] = entry
    return {
        subtask: layout.write(storage, subtask, parts[subtask] if keyed else None)
        for subtask in range(parallelism)
    }


def _operator_parts(others: dict[str, State]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operator list and broadcast parts of an operator's payload."""
    operator_part: dict[str, Any] = {}
    broadcast_part: dict[str, Any] = {}
    for name, spec in others.items():
        if spec.kind == "broadcast":
            table = _arrow(spec.frame, ["key", "value"])
            broadcast_part[name] = dict(
                zip(table.column("key").to_pylist(), table.column("value").to_pylist())
            )
        else:
            items = _arrow(spec.frame, ["value"]).column("value").to_pylist()
            mode = "split" if spec.kind == "operator_list" else "union"
            operator_part[name] = {"mode": mode, "items": items}
    return operator_part, broadcast_part


@dataclass(frozen=True)
class _Layout:
    """How one operator's subtask files are made (picklable, for Spark tasks)."""

    uid: str
    max_parallelism: int
    parallelism: int
    operator_part: dict[str, Any]
    broadcast_part: dict[str, Any]

    def write(self, storage: Any, subtask: int, keyed: dict[str, Any] | None) -> StateHandle:
        snapshot = (
            None
            if keyed is None
            else {"format": 1, "max_parallelism": self.max_parallelism, "states": keyed}
        )
        payload = {
            "lockgate_state": 1,
            "keyed": snapshot,
            # split list state lives in subtask 0; broadcast state in every subtask
            "operator": self.operator_part if subtask == 0 and self.operator_part else None,
            "broadcast": self.broadcast_part or None,
            "timers": None,
            "function": None,
        }
        return write_subtask_file(storage, self.uid, subtask, self.parallelism, payload)


def write_subtask_file(
    storage: Any, uid: str, subtask: int, parallelism: int, state: Any
) -> StateHandle:
    """Write one operator subtask's state file into the savepoint folder ``storage``."""
    name = f"op-{uid}-{subtask}.{secrets.token_hex(8)}"
    payload = encode_tree(
        {"operator": uid, "subtask": subtask, "state": state, "parallelism": parallelism}
    )
    data = encode_file(payload, KIND_PICKLE, storage_options_of(storage))
    storage.write_file(name, data)
    return StateHandle(name, len(data), zlib.crc32(payload))


# -- keyed state --------------------------------------------------------------------------------
def _typed_table(table: pa.Table, spec: State, st: StateType | None, mp: int) -> pa.Table:
    """``key_group``, ``key``, ``value`` with the layout's metadata."""
    keys = table.column("key").combine_chunks()
    values = table.column("value").combine_chunks()
    if st is not None:
        values = stored_node(spec.kind, st, False).to_arrow(values.to_pylist())
    else:
        if spec.kind == "map" and pa.types.is_list(values.type):
            values = _pairs_to_map(values)
        values = observed_nullability(values)
    groups = key_groups_of_column(keys, mp).astype(np.int32)
    encoding = "tuple" if pa.types.is_struct(keys.type) else "arrow"
    schema = pa.schema(
        [
            pa.field("key_group", pa.int32(), nullable=False),
            pa.field("key", keys.type),
            pa.field("value", values.type, nullable=values.null_count > 0),
        ],
        metadata=layout_metadata(
            spec.kind, False, encoding, st.describe() if st is not None else str(values.type)
        ),
    )
    return pa.Table.from_arrays([pa.array(groups, pa.int32()), keys, values], schema=schema)


def observed_nullability(array: pa.Array) -> pa.Array:
    """``array`` with every nested field that holds no null marked non-null: a frame's
    Arrow type says every field is nullable, the data says which are (what a job's
    non-Optional dataclass field reads under the evolution contract)."""
    t = array.type
    if pa.types.is_struct(t):
        children = [observed_nullability(c) for c in array.flatten()]
        fields = [pa.field(f.name, c.type, nullable=c.null_count > 0) for f, c in zip(t, children)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_list(t):
        items = observed_nullability(array.values)
        item = pa.field(t.value_field.name, items.type, nullable=items.null_count > 0)
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(array.offsets, items, type=pa.list_(item), mask=mask)
    if pa.types.is_map(t):
        items = observed_nullability(array.items)
        value = pa.field("value", items.type, nullable=items.null_count > 0)
        mask = array.is_null() if array.null_count else None
        return pa.MapArray.from_arrays(
            array.offsets, array.keys, items, type=pa.map_(t.key_type, value), mask=mask
        )
    return array


def _pairs_to_map(values: pa.Array) -> pa.Array:
    """A list of (key, value) structs (what pandas dicts become) as an Arrow map."""
    items = values.flatten()
    keys, vals = items.flatten()
    return pa.MapArray.from_arrays(values.offsets, keys, vals)


def _untyped_groups(table: Any, mp: int) -> dict[int, dict[Any, Any]]:
    """``{key_group: {key: value}}`` of an Arrow table or a pandas frame (whose values
    stay the Python objects they are: pickled values need not be Arrow types)."""
    if isinstance(table, pa.Table):
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
    else:
        keys = table["key"].tolist()
        values = table["value"].tolist()
    groups = key_groups_of_keys(keys, mp)
    out: dict[int, dict[Any, Any]] = {}
    for kg, key, value in zip(groups.tolist(), keys, values):
        out.setdefault(kg, {})[key] = value
    return out


def _entries_for(
    table: Any, spec: State, st: StateType | None, mp: int, parallelism: int
) -> Iterator[tuple[int, Any]]:
    if not spec.typed:
        groups = _untyped_groups(table, mp)
        subtasks = subtasks_for_key_groups(
            np.array(sorted(groups), dtype=np.int64), parallelism, mp
        )
        split: dict[int, dict[int, Any]] = {}
        for kg, subtask in zip(sorted(groups), subtasks.tolist()):
            split.setdefault(subtask, {})[kg] = groups[kg]
        for subtask, key_groups in split.items():
            yield subtask, {"kind": spec.kind, "key_groups": key_groups}
        return
    typed = _typed_table(table, spec, st, mp)
    subtasks = subtasks_for_key_groups(
        typed.column("key_group").to_numpy().astype(np.int64), parallelism, mp
    )
    for subtask in np.unique(subtasks).tolist():
        part = typed.filter(pa.array(subtasks == subtask))
        yield subtask, typed_entry(spec.kind, table_bytes(part))


def _spark_entries(
    spec: State, st: StateType | None, mp: int, parallelism: int
) -> list[tuple[int, Any]]:
    """Each subtask's entry of one state, encoded on the executors and returned (for an
    operator with several keyed states, whose subtask files hold them all)."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    spec_local = State(None, spec.kind, spec.type, spec.key_type, spec.typed)

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        for subtask, entry in _entries_for(table, spec_local, st, mp, parallelism):
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([subtask], pa.int32()),
                    pa.array([cloudpickle.dumps(entry, protocol=5)], pa.binary()),
                ],
                names=["subtask", "entry"],
            )

    out_schema = StructType(
        [StructField("subtask", IntegerType()), StructField("entry", BinaryType())]
    )
    rows = _by_subtask(spec.frame, mp, parallelism).mapInArrow(encode, out_schema).collect()
    return [(int(r["subtask"]), _loads(r["entry"])) for r in rows]


def _spark_write(
    target: str, layout: _Layout, name: str, spec: State, st: StateType | None
) -> dict[int, StateHandle]:
    """Write the subtask files of one Spark keyed state on the executors (one task per
    range of subtasks); return the handles."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    spec_local = State(None, spec.kind, spec.type, spec.key_type, spec.typed)
    mp, parallelism = layout.max_parallelism, layout.parallelism

    def write_files(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        storage = open_storage(target)
        table = pa.concat_tables(tables)
        for subtask, entry in _entries_for(table, spec_local, st, mp, parallelism):
            h = layout.write(storage, subtask, {name: entry})
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([subtask], pa.int32()),
                    pa.array([h.path]),
                    pa.array([h.size], pa.int64()),
                    pa.array([h.checksum], pa.int64()),
                ],
                names=["subtask", "path", "size", "checksum"],
            )

    out_schema = StructType(
        [
            StructField("subtask", IntegerType()),
            StructField("path", StringType()),
            StructField("size", LongType()),
            StructField("checksum", LongType()),
        ]
    )
    rows = _by_subtask(spec.frame, mp, parallelism).mapInArrow(write_files, out_schema).collect()
    return {
        int(r["subtask"]): StateHandle(r["path"], int(r["size"]), int(r["checksum"])) for r in rows
    }


def _by_subtask(frame: Any, mp: int, parallelism: int) -> Any:
    """``key``, ``value`` of ``frame``, range-partitioned by the subtask each key belongs
    to (so that no subtask spans two tasks)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    selected = frame.select("key", "value")

    def with_subtask(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            groups = key_groups_of_column(b.column(0), mp)
            subtasks = subtasks_for_key_groups(groups.astype(np.int64), parallelism, mp)
            yield b.append_column("subtask", pa.array(subtasks.astype(np.int32)))

    schema = StructType([*selected.schema.fields, StructField("subtask", IntegerType())])
    with_col = selected.mapInArrow(with_subtask, schema)
    return with_col.repartitionByRange(parallelism, "subtask").drop("subtask")


def _loads(blob: bytes) -> Any:
    import pickle

    return pickle.loads(blob)  # bytes, dicts and ints this module pickled just now


__all__ = ["State", "write", "write_subtask_file"]
