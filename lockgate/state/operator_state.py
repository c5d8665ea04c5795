"""Operator state: list state a function keeps per operator subtask (M-T4).

A function asks for it in ``open`` with ``ctx.get_operator_list_state(descriptor)``
(redistributed on restore: the elements of every old subtask are split evenly among
the new subtasks) or ``ctx.get_union_list_state(descriptor)`` (on restore every new
subtask gets the elements of all old subtasks), like Flink's operator state store.

Guarantees:

* At the parallelism the snapshot was taken with, each subtask gets back exactly the
  elements it snapshotted (split mode), or everything (union mode).
* At another parallelism, split-mode elements are concatenated in old-subtask order
  and dealt out in contiguous, even chunks (sizes differ by at most one), so no
  element is lost or duplicated across the new subtasks.
* The synchronous snapshot copies the lists, so changing them afterwards never
  changes a snapshot (M-T3). Restored state a function never asks for again is
  kept and snapshotted as is, so it is not lost by a job that stops using it for
  one run.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..errors import ConfigurationError
from .descriptors import ListStateDescriptor, StateDescriptor

T = TypeVar("T")

SPLIT = "split"
UNION = "union"


class OperatorListState(Generic[T]):
    """A list of elements of one operator subtask (not scoped to a key)."""

    __slots__ = ("_items", "mode", "name")

    def __init__(self, name: str, mode: str, items: list[T] | None = None) -> None:
        self.name = name
        self.mode = mode
        self._items: list[T] = items if items is not None else []

    def get(self) -> list[T]:
        """The elements (the live list: mutating it changes the state)."""
        return self._items

    def add(self, value: T) -> None:
        if value is None:
            raise ConfigurationError(
                f"operator list state '{self.name}': cannot add None; add a value"
            )
        self._items.append(value)

    def add_all(self, values: Iterable[T]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[T]) -> None:
        """Replace the elements with ``values``."""
        items = list(values)
        if any(v is None for v in items):
            raise ConfigurationError(
                f"operator list state '{self.name}': update() got a None element"
            )
        self._items = items

    def clear(self) -> None:
        self._items = []

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"OperatorListState({self.name!r}, {self.mode}, {len(self._items)} elements)"


def even_chunk(items: Sequence[Any], index: int, count: int) -> list[Any]:
    """The ``index``-th of ``count`` contiguous chunks of ``items`` whose sizes differ by
    at most one (the first ``len % count`` chunks are one longer)."""
    base, extra = divmod(len(items), count)
    start = index * base + min(index, extra)
    return list(items[start : start + base + (1 if index < extra else 0)])


class OperatorStateStore:
    """The operator state of one operator subtask."""

    def __init__(self, operator_name: str) -> None:
        self.operator_name = operator_name
        self._states: dict[str, OperatorListState[Any]] = {}

    # -- for functions ------------------------------------------------------------
    def get_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListState[Any]:
        """Split-redistributed list state (Flink's ``getListState``)."""
        return self._get(descriptor, SPLIT)

    def get_union_list_state(self, descriptor: ListStateDescriptor[Any]) -> OperatorListState[Any]:
        """Union-redistributed list state (Flink's ``getUnionListState``)."""
        return self._get(descriptor, UNION)

    def _get(self, descriptor: StateDescriptor[Any], mode: str) -> OperatorListState[Any]:
        if not isinstance(descriptor, ListStateDescriptor):
            raise ConfigurationError(
                f"operator '{self.operator_name}': operator state is list state; pass "
                f"lg.ListStateDescriptor('name'), got {descriptor!r}"
            )
        state = self._states.get(descriptor.name)
        if state is None:
            state = self._states[descriptor.name] = OperatorListState(descriptor.name, mode)
        elif state.mode != mode:
            raise ConfigurationError(
                f"operator '{self.operator_name}': operator state '{descriptor.name}' is "
                f"{state.mode} list state (in this run or in the restored snapshot), but was "
                f"asked for as {mode} list state; use the same method as before or a new name"
            )
        return state

    # -- snapshots (M-T3, M-T4) --------------------------------------------------------
    def is_empty(self) -> bool:
        return not self._states

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """A deep copy of every list: ``{name: {"mode": "split"|"union", "items": [...]}}``."""
        return {
            name: {"mode": s.mode, "items": copy.deepcopy(s._items)}
            for name, s in self._states.items()
        }

    def restore(
        self,
        old: Mapping[int, dict[str, dict[str, Any]] | None],
        subtask: int,
        parallelism: int,
        same_parallelism: bool,
    ) -> None:
        """Take over operator state from the snapshots of the old subtasks (``old``:
        old subtask index -> its operator state, or None)."""
        by_name: dict[str, tuple[str, dict[int, list[Any]]]] = {}
        for i in sorted(old):
            for name, entry in (old[i] or {}).items():
                mode = entry.get("mode") if isinstance(entry, dict) else None
                if mode not in (SPLIT, UNION):
                    raise ConfigurationError(
                        f"operator '{self.operator_name}': restored operator state '{name}' "
                        f"of old subtask {i} has mode {mode!r}, not 'split' or 'union'"
                    )
                known = by_name.setdefault(name, (mode, {}))
                if known[0] != mode:
                    raise ConfigurationError(
                        f"operator '{self.operator_name}': restored operator state '{name}' "
                        f"is both {known[0]} and {mode} list state in the snapshot"
                    )
                known[1][i] = list(entry.get("items", []))
        for name, (mode, lists) in by_name.items():
            every = [x for i in sorted(lists) for x in lists[i]]
            if mode == UNION:
                items = every
            elif same_parallelism:
                items = lists.get(subtask, [])
            else:
                items = even_chunk(every, subtask, parallelism)
            self._states[name] = OperatorListState(name, mode, items)
