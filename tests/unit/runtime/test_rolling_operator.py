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
from lockgate.runtime.context import RuntimeContext
from lockgate.runtime.operators.base import Output
from lockgate.runtime.operators.rolling import RollingAggregate, RollingAggregateOperator
from lockgate.state.backends import HashMapStateBackend, RocksDBStateBackend


class _Collect(Output):
    def __init__(self) -> None:
        self.batches: list[Any] = []

    def emit(self, batch: Any) -> None:
        self.batches.append(batch)

    def emit_side(self, tag: str, batch: Any) -> None:
        pass

    def emit_element(self, element: Any) -> None:
        pass


@pytest.fixture(params=["heap", "rocksdb"])
def make_op(request: Any, tmp_path: Any) -> Any:
    made: list[RollingAggregateOperator] = []

    def make(kind: str) -> tuple[RollingAggregateOperator, _Collect]:
        backend = (
            HashMapStateBackend()
            if request.param == "heap"
            else RocksDBStateBackend(local_dir=str(tmp_path))
        )
        op = RollingAggregateOperator(RollingAggregate(kind, "v"), KeySelector("k"))
        ctx = RuntimeContext(
            task_name="t",
            operator_name="rolling",
            operator_uid="rolling",
            subtask_index=0,
            parallelism=1,
            max_parallelism=128,
            state_backend=backend,
        )
        out = _Collect()
        op.setup("t", "rolling", ctx, out)
        op.initialize_state(None)
        op.open()
        made.append(op)
        return op, out

    yield make
    for op in made:
        op.close()


def test_an_int_column_over_a_float_running_sum_stays_float(make_op: Any) -> None:
    op, out = make_op("sum")
    op.process_batch(RowBatch([{"k": 1, "v": 0.5}, {"k": 2, "v": 1.0}]))
    op.process_batch(pa.RecordBatch.from_pydict({"k": [1, 2, 3], "v": [2, 2, 2]}))
    column = out.batches[-1].column(1)
    assert column.type == pa.float64()
    assert column.to_pylist() == [2.5, 3.0, 2.0]


def test_an_unsigned_column_beyond_int64(make_op: Any) -> None:
    big = pa.array([2**63, 1, 2**64 - 1], pa.uint64())
    op, out = make_op("max")
    op.process_batch(pa.RecordBatch.from_arrays([pa.array([1, 1, 2]), big], names=["k", "v"]))
    assert out.batches[-1].column(1).to_pylist() == [2**63, 2**63, 2**64 - 1]
    op, out = make_op("sum")
    with pytest.raises(Exception, match=r"went past int64.*cast 'v' to float64"):
        op.process_batch(pa.RecordBatch.from_arrays([pa.array([1, 1, 2]), big], names=["k", "v"]))
