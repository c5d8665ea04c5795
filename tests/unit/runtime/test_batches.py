"""The data unit (DESIGN §2): Arrow batches, scalar batches and RowBatches of any Python object."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lockgate.core import batch as b


class Opaque:
    """An object Arrow cannot hold."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n

    def __hash__(self) -> int:
        return hash(self.n)


def test_a_multi_column_arrow_batch_reads_as_dicts() -> None:
    batch = pa.RecordBatch.from_pylist([{"k": "a", "v": 1}, {"k": "b", "v": None}])
    assert b.to_rows(batch) == [{"k": "a", "v": 1}, {"k": "b", "v": None}]


def test_a_scalar_batch_reads_as_its_bare_values_not_as_dicts() -> None:
    batch = b.scalar_batch([3, 1, 2])
    assert b.is_scalar_schema(batch.schema)
    assert b.to_rows(batch) == [3, 1, 2]
    assert batch.schema.names == [b.SCALAR_COLUMN]


def test_a_single_column_batch_named_value_without_the_marker_still_reads_as_dicts() -> None:
    batch = pa.RecordBatch.from_pylist([{"value": 1}])
    assert not b.is_scalar_schema(batch.schema)
    assert b.to_rows(batch) == [{"value": 1}]


def test_scalar_batches_accept_numpy_and_arrow_arrays() -> None:
    assert b.to_rows(b.scalar_batch(np.arange(3))) == [0, 1, 2]
    assert b.to_rows(b.scalar_batch(pa.array(["x", "y"]))) == ["x", "y"]


def test_row_batches_of_dicts_convert_to_arrow_and_back() -> None:
    rows = [{"k": "a", "v": 1.5}, {"k": "b", "v": 2.5}]
    arrow = b.to_arrow(b.RowBatch(rows))
    assert isinstance(arrow, pa.RecordBatch)
    assert arrow.schema.names == ["k", "v"]
    assert b.to_rows(arrow) == rows


def test_row_batches_of_bare_values_convert_to_scalar_arrow_batches_and_back() -> None:
    arrow = b.to_arrow(b.RowBatch([1, 2, 3]))
    assert b.is_scalar_schema(arrow.schema)
    assert b.to_rows(arrow) == [1, 2, 3]


def test_an_arrow_batch_is_returned_as_is_by_to_arrow() -> None:
    batch = pa.RecordBatch.from_pylist([{"a": 1}])
    assert b.to_arrow(batch) is batch


def test_a_row_batch_holds_objects_arrow_cannot_and_to_rows_hands_back_the_same_objects() -> None:
    objs = [Opaque(1), Opaque(2), {"mixed": Opaque(3)}, (1, "two")]
    rb = b.RowBatch(objs)
    assert len(rb) == 4 and b.num_rows(rb) == 4
    out = b.to_rows(rb)
    assert all(x is y for x, y in zip(out, objs))


def test_converting_unholdable_objects_to_arrow_raises_a_type_error_naming_the_operator() -> None:
    with pytest.raises(TypeError) as err:
        b.to_arrow(b.RowBatch([Opaque(1)]), operator="map_batches 'vectorize'")
    text = str(err.value)
    assert "map_batches 'vectorize'" in text
    assert "Opaque" in text


def test_take_slice_and_concat_keep_record_order_for_both_representations() -> None:
    arrow = b.scalar_batch(list(range(10)))
    rows = b.RowBatch([Opaque(i) for i in range(10)])
    idx = np.array([7, 2, 5])
    assert b.to_rows(b.take(arrow, idx)) == [7, 2, 5]
    assert b.to_rows(b.take(rows, idx)) == [Opaque(7), Opaque(2), Opaque(5)]
    assert b.to_rows(b.slice_batch(arrow, 3, 2)) == [3, 4]
    assert b.to_rows(b.slice_batch(rows, 3, 2)) == [Opaque(3), Opaque(4)]
    parts = [b.slice_batch(arrow, 0, 4), b.slice_batch(arrow, 4, 6)]
    joined = b.concat(parts)
    assert isinstance(joined, pa.RecordBatch) and b.to_rows(joined) == list(range(10))
    assert b.is_scalar_schema(joined.schema)


def test_concat_of_mixed_representations_falls_back_to_rows_in_order() -> None:
    mixed = b.concat([b.scalar_batch([1, 2]), b.RowBatch([Opaque(3)]), b.scalar_batch([4])])
    assert isinstance(mixed, b.RowBatch)
    assert b.to_rows(mixed) == [1, 2, Opaque(3), 4]


def test_concat_of_arrow_batches_with_different_schemas_keeps_every_record() -> None:
    first = pa.RecordBatch.from_pylist([{"a": 1}])
    second = pa.RecordBatch.from_pylist([{"b": "x"}])
    assert b.to_rows(b.concat([first, second])) == [{"a": 1}, {"b": "x"}]


def test_nbytes_is_exact_for_arrow_and_grows_with_rows_for_row_batches() -> None:
    arrow = b.scalar_batch(np.arange(1000, dtype=np.int64))
    assert b.nbytes(arrow) == arrow.nbytes >= 8000
    small = b.nbytes(b.RowBatch([{"k": "word", "v": i} for i in range(10)]))
    large = b.nbytes(b.RowBatch([{"k": "word", "v": i} for i in range(1000)]))
    assert 0 < small < large
    assert large >= 1000 * 50, "a RowBatch of 1000 small dicts cannot take under 50 bytes a row"
    assert b.nbytes(b.RowBatch([])) == 0


def test_is_batch_recognises_batches_and_nothing_else() -> None:
    assert b.is_batch(b.scalar_batch([1]))
    assert b.is_batch(b.RowBatch([]))
    assert not b.is_batch([1, 2])
    assert not b.is_batch(pa.table({"a": [1]}))
