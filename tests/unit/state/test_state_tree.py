"""The state tree of state files (lockgate.checkpoint.state_tree, docs/savepoint_format.md):
plain values round-trip without pickles, objects are pickled parts that a reader leaves
unloaded unless allowed, files of the older one-pickle format still read, and a broken
or newer tree is refused (M-S1)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import lockgate as lg
from lockgate.checkpoint.state_tree import (
    TREE_VERSION,
    WALK_LIMIT,
    PickledValue,
    TreeFormatError,
    decode_tree,
    encode_tree,
    has_pickles,
)
from lockgate.savepoint import State


@dataclasses.dataclass
class Split:
    topic: str
    offset: int


PLAIN = {
    "lockgate_state": 1,
    "n": [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**80, -(2**70)],
    "f": [0.5, float("inf"), -0.0],
    "s": ["", "é", "\ud800 lone surrogate"],
    "b": b"\x00\xff" * 10,
    "t": (1, ("a", (None,))),
    "d": {1: "int key", (1, 2): "tuple key", None: "none key", b"k": "bytes key"},
}


def test_plain_values_round_trip_without_any_pickle() -> None:
    data = encode_tree(PLAIN)
    assert data[:6] == b"LGST" + TREE_VERSION.to_bytes(2, "little")
    lazy = decode_tree(data, unpickle=False)
    assert lazy == PLAIN and not has_pickles(lazy)
    assert type(lazy["t"]) is tuple and type(lazy["t"][1]) is tuple


def test_objects_are_pickled_parts_left_unloaded_unless_allowed_and_plain_data_is_not() -> None:
    value = {
        "typed": b"arrow bytes",
        "splits": [Split("t", 5)],
        "big": list(range(WALK_LIMIT + 1)),
        "names": frozenset({"a", "b"}),
    }
    data = encode_tree(value)
    lazy = decode_tree(data, unpickle=False)
    assert lazy["typed"] == b"arrow bytes"
    assert isinstance(lazy["splits"][0], PickledValue), "a user's object is a pickled part"
    assert lazy["big"] == list(range(WALK_LIMIT + 1)), "a large plain list is data"
    assert lazy["names"] == frozenset({"a", "b"})
    assert lazy["splits"][0].load() == Split("t", 5)
    assert decode_tree(data) == value


def test_objects_shared_inside_and_across_pickled_parts_stay_shared() -> None:
    shared = Split("t", 1)
    restored = decode_tree(encode_tree({"a": [shared, shared], "b": [shared], "c": 1}))
    assert restored["a"][0] is restored["a"][1] is restored["b"][0]
    lazy = decode_tree(encode_tree({"a": [shared], "b": [shared]}), unpickle=False)
    assert lazy["b"][0].load() is lazy["a"][0].load()


def test_a_file_of_the_older_one_pickle_format_is_one_placeholder_or_unpickled() -> None:
    old = pickle.dumps({"state": [Split("t", 1)]}, protocol=5)
    assert isinstance(decode_tree(old, unpickle=False), PickledValue)
    assert decode_tree(old) == {"state": [Split("t", 1)]}


def test_a_newer_or_broken_tree_is_refused_naming_the_file() -> None:
    data = encode_tree({"a": 1})
    newer = data[:4] + (TREE_VERSION + 1).to_bytes(2, "little") + data[6:]
    with pytest.raises(
        TreeFormatError, match=rf"chk-1/op: state tree version {TREE_VERSION + 1} .* newer"
    ):
        decode_tree(newer, where="chk-1/op")
    with pytest.raises(TreeFormatError, match="truncated"):
        decode_tree(data[:-3], where="chk-1/op")
    with pytest.raises(TreeFormatError, match="unknown tag"):
        decode_tree(data[:6] + b"Z", where="chk-1/op")
    with pytest.raises(TreeFormatError, match="after the state tree"):
        decode_tree(data + b"N", where="chk-1/op")


class Tripwire:
    """Unpickling it creates the file ``path``: proof that code named by a file ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (self.path, "w"))


def test_reading_typed_state_runs_nothing_of_a_pickled_tripwire_in_a_neighbouring_file(
    tmp_path: Path,
) -> None:
    """A savepoint with typed state in one operator and, in another operator's file, a
    pickled value that creates a file when unpickled: listing and reading the typed
    state, and checking a job against it, execute nothing; only allow_pickle=True does."""
    marker = tmp_path / "tripwire-fired"
    location = lg.savepoint.write(
        tmp_path / "sp",
        {
            ("typed", "count"): pd.DataFrame({"key": [1, 2], "value": [10, 20]}),
            ("untyped", "blob"): State(
                pd.DataFrame({"key": [1], "value": [Tripwire(str(marker))]}), typed=False
            ),
        },
    )
    sp = lg.savepoint.read(location)
    assert sorted(sp.operators()) == ["typed", "untyped"]
    assert [s.name for s in sp.operators()["untyped"].states] == ["blob"]
    assert sp.state("typed", "count").rows == [(1, None, 10), (2, None, 20)]
    with pytest.raises(lg.savepoint.PickledStateError, match=r"'blob'.*allow_pickle=True"):
        sp.state("untyped", "blob")
    assert not marker.exists(), "reading typed state unpickled the neighbour's tripwire"
    lg.savepoint.read(location, allow_pickle=True).state("untyped", "blob")
    assert marker.exists()  # the tripwire works: it fires when pickles are allowed
