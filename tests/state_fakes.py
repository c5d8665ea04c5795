"""Fakes shared by the keyed state handle tests: a table that returns copies (as the
RocksDB backend's does) and the backend attributes the handles read."""

from __future__ import annotations

import pickle
from typing import Any

from lockgate.core.clock import ManualClock
from lockgate.state.ttl import MIN_WATERMARK


class CopyingTable:
    """A table with only the protocol the handles may use, whose ``get`` and ``pop``
    return deserialized copies (as the RocksDB backend's do)."""

    def __init__(self) -> None:
        self.data: dict[Any, bytes] = {}

    def get(self, key: Any, default: Any) -> Any:
        raw = self.data.get(key)
        return default if raw is None else pickle.loads(raw)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.data[key] = pickle.dumps(value)

    def pop(self, key: Any, default: Any) -> Any:
        raw = self.data.pop(key, None)
        return default if raw is None else pickle.loads(raw)

    def contents(self) -> dict[Any, Any]:
        return {k: pickle.loads(v) for k, v in self.data.items()}


class Host:
    """The backend attributes the handles read (current key and TTL time)."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.current_key: Any = None
        self.clock = clock or ManualClock()
        self.current_watermark = MIN_WATERMARK
        self.current_timestamp: int | None = None


def flat(materialized: dict[str, Any], name: str) -> dict[Any, Any]:
    """Every entry of state ``name`` of a canonical snapshot, over all key groups."""
    out: dict[Any, Any] = {}
    for entries in materialized["states"][name]["key_groups"].values():
        out.update(entries)
    return out
