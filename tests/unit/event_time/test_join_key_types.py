"""Key types across the two inputs of a join or keyed connect (issue 23): equal values of
compatible types (integer widths; string, large_string and dictionary strings) are one
key on every two-input path, and kinds that never match fail with a ConfigurationError
naming both keys and how to fix it, instead of silently producing nothing."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_joined_streams import TUMBLING, scripted

import lockgate as lg
from lockgate.core.key_hash import hash_array, hash_keys
from lockgate.core.key_types import (
    KeyKindCheck,
    arrow_kind,
    canonical_key_columns,
    key_kinds,
)
from lockgate.errors import ConfigurationError

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]


def column(values: list[Any], t: Any) -> pa.Array:
    if t == "dictionary":
        return pa.array(values, type=pa.string()).dictionary_encode()
    return pa.array(values, type=t)


# -- what key groups and keyed state already do: equal values hash alike --------------------
@pytest.mark.parametrize("t", INT_TYPES)
def test_every_integer_width_hashes_like_python_ints_so_key_groups_agree(t: pa.DataType) -> None:
    values = [0, 1, 7, 100]
    assert (hash_array(pa.array(values, type=t)) == hash_keys(values)).all()
    assert pa.array(values, type=t).to_pylist() == values  # and keyed state holds ints


@pytest.mark.parametrize("t", [pa.string(), pa.large_string(), "dictionary"])
def test_strings_of_every_encoding_hash_like_python_strs(t: Any) -> None:
    values = ["a", "", "bé", "a"]
    assert (hash_array(column(values, t)) == hash_keys(values)).all()


def test_an_int_and_an_equal_float_hash_to_different_key_groups() -> None:
    """Why integer-vs-float keys are refused rather than matched."""
    assert hash_keys([1])[0] != hash_keys([1.0])[0]


# -- canonical key columns -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("t", "values", "canonical"),
    [
        *[(t, [1, 2], pa.int64()) for t in INT_TYPES],
        (pa.float32(), [1.5], pa.float64()),
        (pa.large_string(), ["x"], pa.string()),
        ("dictionary", ["x", "y", "x"], pa.string()),
        (pa.large_binary(), [b"x"], pa.binary()),
    ],
)
def test_key_columns_are_cast_to_one_type_per_kind_and_other_columns_kept(
    t: Any, values: list[Any], canonical: pa.DataType
) -> None:
    batch = pa.RecordBatch.from_arrays(
        [column(values, t), pa.array(np.arange(len(values), dtype=np.int32))], names=["k", "v"]
    )
    out = canonical_key_columns(batch, ["k"])
    assert out.schema.field("k").type == canonical
    assert out.column("k").to_pylist() == values
    assert out.schema.field("v").type == pa.int32()


def test_a_column_of_the_canonical_type_is_not_copied() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2])], names=["k"])
    assert canonical_key_columns(batch, ["k"]) is batch


def test_kinds_of_arrow_types_and_python_keys_agree() -> None:
    assert arrow_kind(pa.int32()) == arrow_kind(pa.uint64()) == key_kinds(3)[0] == "integer"
    assert arrow_kind(pa.dictionary(pa.int32(), pa.large_string())) == key_kinds("x")[0]
    assert arrow_kind(pa.float32()) == key_kinds(np.float64(1.0))[0] == "float"
    assert key_kinds((1, "a")) == ("integer", "string")
    assert key_kinds(None) == (None,)


def test_the_check_names_both_keys_their_types_and_the_fix() -> None:
    check = KeyKindCheck("interval join 'J'", ("the left key ('a')", "the right key ('b')"))
    check.observe(1, ("string",), "large_string")
    check.observe(1, ("string",), "string")
    with pytest.raises(ConfigurationError) as e:
        check.observe(0, ("integer",), "int32")
    message = str(e.value)
    assert "interval join 'J'" in message
    assert "the left key ('a') is int32 but the right key ('b') is large_string" in message
    assert "Cast one side" in message


def test_the_check_leaves_unknown_kinds_and_none_keys_alone() -> None:
    check = KeyKindCheck("j", ("l", "r"))
    check.observe(0, (None,), "NoneType")
    check.observe(1, ("integer",), "int")
    check.observe(0, ("integer",), "int64")  # None did not count as the left's kind
    check.observe(0, ("float", None), "x")  # another width of key: not compared


# -- small jobs on the local executor, one per two-input path --------------------------------
def caster(t: Any) -> Any:
    def cast(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.schema.get_field_index("k")
        col = batch.column(i)
        new = (
            pc.cast(col, pa.string()).dictionary_encode() if t == "dictionary" else pc.cast(col, t)
        )
        return batch.set_column(i, pa.field("k", new.type), new)

    return cast


class Pairs(lg.ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        yield (left["v"], right["v"])


class SharedCount(lg.KeyedCoProcessFunction):
    """Counts records per key in state both inputs share."""

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count"))

    def _bump(self, value: Any) -> Any:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield (value["v"], n)

    def process_element1(self, value: Any, ctx: Any) -> Any:
        return self._bump(value)

    def process_element2(self, value: Any, ctx: Any) -> Any:
        return self._bump(value)


PATHS = [
    "window join",
    "window join fn",
    "co-group",
    "interval join",
    "interval join fn",
    "connect",
]


def job(path: str, left_type: Any, right_type: Any, lv: Any, rv: Any, parallelism: int = 2) -> Any:
    env = lg.StreamEnvironment(parallelism=parallelism)
    left = [{"k": lv, "ts": 10 + i, "v": i} for i in range(3)]
    right = [{"k": rv, "ts": 20, "v": 100}]
    a, b = scripted(env, left, right)
    a = a.map_batches(caster(left_type))
    b = b.map_batches(caster(right_type))
    if path == "window join":
        out = a.join(b).where("k").equal_to("k").window(TUMBLING).apply()
        out = out.map(lambda r: (r["v_left"], r["v_right"]))
    elif path == "window join fn":
        out = (
            a.join(b).where("k").equal_to("k").window(TUMBLING).apply(lambda x, y: (x["v"], y["v"]))
        )
    elif path == "co-group":
        out = (
            a.co_group(b)
            .where("k")
            .equal_to("k")
            .window(TUMBLING)
            .apply(lambda ls, rs: [(len(ls), len(rs))])
        )
    elif path == "interval join":
        out = a.key_by("k").interval_join(b.key_by("k")).between(-100, 100).process()
        out = out.map(lambda r: (r["v_left"], r["v_right"], type(r["k"]).__name__))
    elif path == "interval join fn":
        out = a.key_by("k").interval_join(b.key_by("k")).between(-100, 100).process(Pairs())
    else:
        out = a.key_by("k").connect(b.key_by("k")).process(SharedCount())
    return sorted(out.execute_and_collect(path, executor=lg.LocalExecutor()))


EXPECTED = {
    "window join": [(0, 100), (1, 100), (2, 100)],
    "window join fn": [(0, 100), (1, 100), (2, 100)],
    "co-group": [(3, 1)],
    "interval join": [(0, 100, "int"), (1, 100, "int"), (2, 100, "int")],
    "interval join fn": [(0, 100), (1, 100), (2, 100)],
    # one key: the four records count 1..4 in the state both inputs share
    "connect": None,
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("left_type", "right_type"),
    [(pa.int64(), pa.int32()), (pa.uint16(), pa.int64()), (pa.int8(), pa.uint64())],
)
def test_equal_integer_keys_of_different_widths_join_on_every_path(
    path: str, left_type: pa.DataType, right_type: pa.DataType
) -> None:
    got = job(path, left_type, right_type, 7, 7)
    if path == "connect":
        assert sorted(n for _, n in got) == [1, 2, 3, 4]
    else:
        assert got == EXPECTED[path]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("left_type", "right_type"),
    [
        (pa.string(), pa.large_string()),
        ("dictionary", pa.string()),
        (pa.large_string(), "dictionary"),
    ],
)
def test_equal_string_keys_of_different_encodings_join_on_every_path(
    path: str, left_type: Any, right_type: Any
) -> None:
    got = job(path, left_type, right_type, "x", "x")
    if path == "connect":
        assert sorted(n for _, n in got) == [1, 2, 3, 4]
    elif path == "interval join":
        assert got == [(v, 100, "str") for v in range(3)]
    else:
        assert got == EXPECTED[path]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("left_type", "right_type", "lv", "rv", "types"),
    [
        (pa.int64(), pa.string(), 1, "1", r"is (int64|int) but .* is (string|str);"),
        (pa.int32(), pa.float64(), 1, 1.0, r"is (int32|int) but .* is (double|float);"),
    ],
)
def test_keys_of_kinds_that_never_match_fail_naming_both_keys(
    path: str, left_type: Any, right_type: Any, lv: Any, rv: Any, types: str
) -> None:
    """Parallelism 1: the check runs in a subtask that sees records of both inputs (an
    int and a float key hash to different key groups)."""
    with pytest.raises(lg.errors.JobFailedError) as e:
        job(path, left_type, right_type, lv, rv, parallelism=1)
    message = str(e.value)
    assert "ConfigurationError" in message
    assert "never match" in message and "Cast one side" in message
    # Arrow types where the path sees columns, Python types where it sees key values
    assert re.search(types, message), message
    assert "is not restartable" in message
