"""M-E1 / M-E2: the stream elements a channel carries exist, are small values and pickle."""

from __future__ import annotations

import dataclasses
import pickle

import cloudpickle
import pyarrow as pa
import pytest

from lockgate.core import elements as el
from lockgate.core.batch import RowBatch, scalar_batch


def every_control_element() -> list[object]:
    return [
        el.Watermark(17),
        el.Watermark(el.MAX_WATERMARK),
        el.StreamStatus.IDLE,
        el.StreamStatus.ACTIVE,
        el.CheckpointBarrier(3, 1_700_000_000_000),
        el.CheckpointBarrier(
            4,
            1_700_000_000_001,
            el.CheckpointOptions(el.CheckpointType.SAVEPOINT, unaligned=False),
        ),
        el.CheckpointBarrier(
            5, 1, el.CheckpointOptions(el.CheckpointType.CHECKPOINT, unaligned=True)
        ),
        el.CancellationMarker(6),
        el.END_OF_PARTITION,
    ]


def test_every_element_kind_of_rule_M_E1_exists_in_the_elements_module() -> None:
    for name in (
        "Watermark",
        "StreamStatus",
        "CheckpointBarrier",
        "CancellationMarker",
        "END_OF_PARTITION",
        "CheckpointOptions",
        "CheckpointType",
    ):
        assert hasattr(el, name), f"lockgate.core.elements lacks {name} (M-E1)"
    assert {s.name for s in el.StreamStatus} == {"IDLE", "ACTIVE"}


@pytest.mark.parametrize("element", every_control_element(), ids=repr)
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_every_control_element_survives_pickling_unchanged_M_E1(element: object, dumps) -> None:
    copy = pickle.loads(dumps(element))
    assert copy == element
    assert type(copy) is type(element)


def test_end_of_partition_stays_one_singleton_after_pickling_so_identity_checks_work() -> None:
    copy = pickle.loads(pickle.dumps(el.END_OF_PARTITION))
    assert copy is el.END_OF_PARTITION
    assert el.EndOfPartition() is el.END_OF_PARTITION


def test_batches_of_both_representations_survive_pickling() -> None:
    arrow = pa.RecordBatch.from_pylist([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    assert pickle.loads(pickle.dumps(arrow)).equals(arrow)
    scalars = scalar_batch([1, 2, 3])
    back = pickle.loads(pickle.dumps(scalars))
    assert back.equals(scalars) and back.schema.metadata == scalars.schema.metadata
    rows = RowBatch([{"a": 1}, (1, 2), "x", None])
    assert pickle.loads(pickle.dumps(rows)) == rows


@pytest.mark.parametrize(
    "element", [e for e in every_control_element() if dataclasses.is_dataclass(e)], ids=repr
)
def test_control_elements_are_immutable(element: object) -> None:
    field = dataclasses.fields(element)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(element, field, 99)


def test_a_barrier_carries_id_timestamp_and_options_and_defaults_to_an_aligned_checkpoint_M_E2() -> (
    None
):
    b = el.CheckpointBarrier(checkpoint_id=7, timestamp=123)
    assert (b.checkpoint_id, b.timestamp) == (7, 123)
    assert b.options.type is el.CheckpointType.CHECKPOINT
    assert b.options.unaligned is False


def test_a_savepoint_barrier_can_never_be_unaligned_M_E2() -> None:
    with pytest.raises(ValueError, match="aligned"):
        el.CheckpointOptions(el.CheckpointType.SAVEPOINT, unaligned=True)


def test_the_max_watermark_marks_the_end_of_event_time_M_W1() -> None:
    assert el.Watermark(el.MAX_WATERMARK).is_max
    assert not el.Watermark(el.MAX_WATERMARK - 1).is_max
    assert el.MIN_WATERMARK < 0 < el.MAX_WATERMARK
