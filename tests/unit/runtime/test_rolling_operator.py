"""The rolling aggregate operator (``keyed.sum/min/max``) on batches whose types change
under it: an Arrow int column over a key whose running value is a float, an unsigned
column beyond int64. Each test would fail if a running value were truncated or wrapped
on its way into the output column."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lockgate.core.batch import RowBatch
from lockgate.core.partitioners import KeySelector
from lockgate.runtime.operators.rolling import RollingAggregate, RollingAggregateOperator
from lockgate.state.backends import HashMapStateBackend, RocksDBStateBackend
from lockgate.testing import OperatorHarness


@pytest.fixture(params=["heap", "rocksdb"])
def make_op(request: Any, tmp_path: Any) -> Any:
    made: list[OperatorHarness] = []

    def make(kind: str) -> OperatorHarness:
        backend = (
            HashMapStateBackend()
            if request.param == "heap"
            else RocksDBStateBackend(local_dir=str(tmp_path))
        )
        op = RollingAggregateOperator(RollingAggregate(kind, "v"), KeySelector("k"))
        h = OperatorHarness(op, state_backend=backend, name="t", uid="rolling").open()
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_an_int_column_over_a_float_running_sum_stays_float(make_op: Any) -> None:
    h = make_op("sum")
    h.process(RowBatch([{"k": 1, "v": 0.5}, {"k": 2, "v": 1.0}]))
    h.process(pa.RecordBatch.from_pydict({"k": [1, 2, 3], "v": [2, 2, 2]}))
    column = h.batches[-1].column(1)
    assert column.type == pa.float64()
    assert column.to_pylist() == [2.5, 3.0, 2.0]


def test_an_unsigned_column_beyond_int64(make_op: Any) -> None:
    big = pa.array([2**63, 1, 2**64 - 1], pa.uint64())
    h = make_op("max")
    h.process(pa.RecordBatch.from_arrays([pa.array([1, 1, 2]), big], names=["k", "v"]))
    assert h.batches[-1].column(1).to_pylist() == [2**63, 2**63, 2**64 - 1]
    h = make_op("sum")
    with pytest.raises(Exception, match=r"went past int64.*cast 'v' to float64"):
        h.process(pa.RecordBatch.from_arrays([pa.array([1, 1, 2]), big], names=["k", "v"]))
