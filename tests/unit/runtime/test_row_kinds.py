"""Row kinds in the data unit (lockgate.core.row_kind, lockgate.core.batch): carried by
every batch operation, across the Spark wire and in recorded channel state (M-R1), left
out of what users see; lg.Change and RowKind.parse reject what they cannot take."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.checkpoint.channel_state import freeze, thaw
from lockgate.core.batch import (
    KIND_COLUMN,
    RowBatch,
    concat,
    has_changes,
    kinds_of,
    slice_batch,
    take,
    to_arrow,
    to_rows,
    user_view,
    with_kinds,
    with_timestamps,
)
from lockgate.core.partitioners import split_by_target
from lockgate.core.row_kind import changes_made
from lockgate.executor.spark.wire import decode, encode

KINDS = np.array([0, 1, 2, 3], dtype=np.int8)


def rows() -> RowBatch:
    return RowBatch([{"id": i} for i in range(4)], np.arange(4, dtype=np.int64) * 10, KINDS)


def test_row_batches_keep_kinds_through_take_slice_concat_and_to_arrow() -> None:
    b = rows()
    assert kinds_of(take(b, np.array([3, 0]))).tolist() == [3, 0]
    assert kinds_of(slice_batch(b, 1, 2)).tolist() == [1, 2]
    assert kinds_of(concat([b, RowBatch([{"id": 9}])])).tolist() == [0, 1, 2, 3, 0]
    arrow = to_arrow(b)
    assert kinds_of(arrow).tolist() == KINDS.tolist()
    assert kinds_of(with_timestamps(b, None)).tolist() == KINDS.tolist()
    assert to_rows(arrow) == [{"id": i} for i in range(4)], "users never see the column"
    assert KIND_COLUMN not in user_view(arrow).schema.names
    assert has_changes(b) and not has_changes(with_kinds(b, np.zeros(4, np.int8)))


def test_arrow_batches_keep_kinds_through_take_and_filter_and_a_scalar_batch_stays_scalar() -> None:
    arrow = with_kinds(lg.core.batch.scalar_batch(pa.array([5, 6, 7, 8])), KINDS)
    assert to_rows(arrow) == [5, 6, 7, 8]
    assert kinds_of(arrow.filter(pa.array([True, False, True, False]))).tolist() == [0, 2]
    assert kinds_of(take(arrow, np.array([1]))).tolist() == [1]


@pytest.mark.parametrize("make", [rows, lambda: to_arrow(rows())], ids=["rows", "arrow"])
def test_key_partitioning_splits_kinds_with_their_records(make) -> None:
    parts = dict(split_by_target(make(), np.array([1, 0, 1, 0]), 2))
    assert kinds_of(parts[0]).tolist() == [1, 3]
    assert kinds_of(parts[1]).tolist() == [0, 2]


def test_the_spark_wire_and_channel_state_carry_kinds_and_read_the_earlier_layout() -> None:
    header, body = encode(rows(), generation=3)
    back = decode(memoryview(header), memoryview(body), 3)
    assert kinds_of(back).tolist() == KINDS.tolist() and back.rows == rows().rows
    assert kinds_of(thaw(freeze(rows()))).tolist() == KINDS.tolist()
    plain = RowBatch([1, 2], np.array([5, 6], dtype=np.int64))
    old = thaw(freeze(plain))  # no kinds: the (rows, timestamps) layout of earlier releases
    assert old.rows == [1, 2] and old.kinds is None and old.timestamps.tolist() == [5, 6]


def test_change_parses_kinds_and_counts_what_was_made() -> None:
    before = changes_made()
    c = lg.Change("-D", {"id": 1})
    assert c.kind is lg.RowKind.DELETE and changes_made() != before
    assert lg.RowKind.parse("update_after") is lg.RowKind.UPDATE_AFTER
    assert lg.RowKind.parse(1) is lg.RowKind.UPDATE_BEFORE
    assert [k.short for k in lg.RowKind] == ["+I", "-U", "+U", "-D"]
    with pytest.raises(ValueError, match=r"not a row kind: 'x'; use lg.RowKind.INSERT"):
        lg.Change("x", 1)
    with pytest.raises(ValueError, match="not a row kind: True"):
        lg.RowKind.parse(True)
