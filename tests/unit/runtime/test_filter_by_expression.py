"""An expression filter evaluates its predicate on whole batches in the task thread
(``filter_by_expression``): the same rows, columns and metadata as
``RecordBatch.filter``, event timestamps included."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lockgate.core.batch import timestamps_of, with_timestamps
from lockgate.runtime.operators.basic import filter_by_expression


@pytest.mark.parametrize(
    ("expression", "kept"),
    [
        (pc.field("keep"), [0, 3, 6, 9]),
        (pc.field("v") > 100, []),
        (pc.field("v") >= 0, list(range(10))),
    ],
)
def test_it_keeps_the_rows_whose_predicate_is_true_with_their_timestamps(
    expression: pc.Expression, kept: list[int]
) -> None:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(np.arange(10)),
            pa.array([f"s{i}" for i in range(10)]),
            pa.array(np.arange(10) % 3 == 0),
        ],
        names=["v", "s", "keep"],
    )
    batch = with_timestamps(batch, np.arange(10, dtype=np.int64) * 7)
    batch = batch.replace_schema_metadata({"origin": "test"})
    out = filter_by_expression(batch, expression)
    assert out.equals(batch.filter(expression))
    assert out.column("v").to_pylist() == kept
    assert list(timestamps_of(out)) == [7 * i for i in kept]
    assert out.schema.metadata == {b"origin": b"test"}
