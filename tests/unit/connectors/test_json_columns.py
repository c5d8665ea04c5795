"""``json_values``: the JSON text of an Arrow batch's records, a column at a time, must be
byte for byte what ``json.dumps(record, ensure_ascii=False)`` gives for each record of
``to_rows`` (what the Kafka sink writes record by record), or None."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from lockgate.connectors.formats.json_columns import json_values
from lockgate.core.batch import scalar_batch, to_rows, with_timestamps


def one_by_one(batch: pa.RecordBatch) -> list[bytes]:
    return [json.dumps(r, ensure_ascii=False).encode() for r in to_rows(batch)]


def test_integers_of_every_width_booleans_strings_and_nulls_match_json_dumps() -> None:
    rng = np.random.default_rng(5)
    n = 2_000
    columns = {
        "i64": pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),
        "u64": pa.array(rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),
        "i8": pa.array(rng.integers(-128, 127, n, dtype=np.int8)),
        "u16": pa.array(rng.integers(0, 65535, n, dtype=np.uint16)),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "s": pa.array(
            [["", "plain", "é ü ✓", "emoji 🦀", "a'b", "tab\u007f"][i % 6] for i in range(n)],
            mask=rng.random(n) < 0.1,
        ),
        "ls": pa.array([f"x{i}" for i in range(n)], type=pa.large_string()),
        "nulls": pa.array([None] * n, type=pa.int64()),
        'odd "name" é': pa.array(range(n)),
    }
    batch = pa.RecordBatch.from_pydict(columns)
    assert json_values(batch) == one_by_one(batch)
    edges = pa.RecordBatch.from_pydict(
        {"a": pa.array([-(2**63), 2**63 - 1, 0]), "b": pa.array([0, 2**64 - 1, 1], pa.uint64())}
    )
    assert json_values(edges) == one_by_one(edges)


def test_scalar_batches_and_event_time_columns_are_encoded_as_records_are() -> None:
    scalars = scalar_batch(pa.array([1, None, -3]))
    assert json_values(scalars) == one_by_one(scalars) == [b"1", b"null", b"-3"]
    stamped = with_timestamps(
        pa.RecordBatch.from_pydict({"k": [1, 2]}), np.array([5, 6], dtype=np.int64)
    )
    assert json_values(stamped) == one_by_one(stamped) == [b'{"k": 1}', b'{"k": 2}']
    assert json_values(pa.RecordBatch.from_pydict({"k": pa.array([], pa.int64())})) == []


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1.5, 2.0]),  # Python and Arrow write floats differently
        pa.array(['say "hi"', "x"]),  # needs escaping
        pa.array(["back\\slash", "x"]),
        pa.array(["new\nline", "x"]),
        pa.array([[1], [2]]),
        pa.array([b"raw", b"x"]),
    ],
)
def test_columns_it_does_not_encode_give_none_for_the_record_by_record_path(column) -> None:
    assert json_values(pa.RecordBatch.from_arrays([column], names=["c"])) is None


def test_two_columns_of_one_name_give_none() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    assert json_values(batch) is None
