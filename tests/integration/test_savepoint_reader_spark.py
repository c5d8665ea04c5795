"""The offline savepoint reader into Spark: ``StateFrame.to_spark`` (M-S1, M-T4).

A checkpoint with every state kind (parallelism 2) is written with the real storage,
read with ``lockgate.savepoint.read`` and turned into DataFrames of the shared
``local[2]`` Spark session; the collected rows must equal the state written.
"""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.core.key_groups import key_group_for
from lockgate.savepoint import StateConversionError, read

pytestmark = pytest.mark.spark

MAX_PARALLELISM = 128
COUNTS = ({"a": 1, "c": 3}, {"b": 2, "d": None})
LISTS = ({"a": [1, 2]}, {"b": []})
MAPS = ({"a": {"x": 1.5}}, {"b": {"y": 2.0, "z": 3.0}})
AVERAGES = ({("k", 1): (6, 3)}, {("k", 2): (5, 1)})  # tuple keys, (sum, count) accumulators


def _keyed(states: dict[str, tuple[str, dict[Any, Any]]]) -> dict[str, Any]:
    snapshot: dict[str, Any] = {}
    for name, (kind, entries) in states.items():
        groups: dict[int, dict[Any, Any]] = {}
        for key, value in entries.items():
            groups.setdefault(key_group_for(key, MAX_PARALLELISM), {})[key] = value
        snapshot[name] = {"kind": kind, "key_groups": groups}
    return {"format": 1, "max_parallelism": MAX_PARALLELISM, "states": snapshot}


def _subtask(i: int) -> dict[str, Any]:
    return {
        "lockgate_state": 1,
        "keyed": _keyed(
            {
                "count": ("value", COUNTS[i]),
                "seen": ("list", LISTS[i]),
                "attributes": ("map", MAPS[i]),
                "total": ("reducing", COUNTS[i]),
                "average": ("aggregating", AVERAGES[i]),
            }
        ),
        "operator": {
            "buffer": {"mode": "split", "items": [f"p{i}", f"q{i}"]},
            "offsets": {"mode": "union", "items": [i * 10]},
        },
        "broadcast": {"rules": {"max": 10, "min": 1}},
        "function": {"seen_records": 5 + i},
    }


@pytest.fixture
def savepoint(tmp_path: Any) -> str:
    storage = FileSystemCheckpointStorage(str(tmp_path / "sp"))
    operators = {
        "counter": [_subtask(0), _subtask(1)],
        "source": [{"splits": [("file-0", 120)]}, {"splits": [("file-1", 40)]}],
        "mixed": [_keyed({"v": ("value", {"a": 1, "b": "x"})})],
    }
    handles: dict[str, dict[int, Any]] = {}
    for uid, states in operators.items():
        for subtask, state in enumerate(states):
            handles.setdefault(uid, {})[subtask] = storage.write_state(
                4,
                f"op-{uid}-{subtask}",
                {"operator": uid, "subtask": subtask, "state": state, "parallelism": len(states)},
            )
    checkpoint = CompletedCheckpoint(4, 1, 2, operator_states=handles, is_savepoint=True)
    return storage.write_metadata(4, checkpoint.to_metadata())


@pytest.fixture
def spark(spark_executor: Any) -> Any:
    return spark_executor.spark


def collected(spark: Any, savepoint: str, uid: str, name: str) -> list[dict[str, Any]]:
    df = read(savepoint, allow_pickle=True).state(uid, name).to_spark(spark)
    assert df.columns == ["key", "namespace", "value"]
    return [row.asDict(recursive=True) for row in df.collect()]


def expected(pairs: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    return [{"key": k, "namespace": None, "value": v} for k, v in pairs]


def merged(parts: tuple[dict[Any, Any], ...]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for part in parts:
        out.update(part)
    return out


def test_m_t4_keyed_value_list_map_and_reducing_state_equal_the_state_written(
    spark: Any, savepoint: str
) -> None:
    assert collected(spark, savepoint, "counter", "count") == expected(
        sorted(merged(COUNTS).items())
    )
    assert collected(spark, savepoint, "counter", "total") == expected(
        sorted(merged(COUNTS).items())
    )
    assert collected(spark, savepoint, "counter", "seen") == expected(sorted(merged(LISTS).items()))
    assert collected(spark, savepoint, "counter", "attributes") == expected(
        sorted(merged(MAPS).items())
    )


def test_m_t4_map_state_is_a_spark_map_column(spark: Any, savepoint: str) -> None:
    from pyspark.sql.types import DoubleType, MapType, StringType

    df = read(savepoint, allow_pickle=True).state("counter", "attributes").to_spark(spark)
    assert df.schema["value"].dataType == MapType(StringType(), DoubleType(), True)
    assert df.schema["key"].dataType == StringType()


def test_aggregating_state_shows_the_accumulator_and_tuple_keys_are_structs(
    spark: Any, savepoint: str
) -> None:
    assert collected(spark, savepoint, "counter", "average") == [
        {"key": {"_1": "k", "_2": 1}, "namespace": None, "value": {"_1": 6, "_2": 3}},
        {"key": {"_1": "k", "_2": 2}, "namespace": None, "value": {"_1": 5, "_2": 1}},
    ]


def test_m_t4_operator_union_and_broadcast_state_equal_the_state_written(
    spark: Any, savepoint: str
) -> None:
    assert collected(spark, savepoint, "counter", "buffer") == expected(
        [(None, "p0"), (None, "q0"), (None, "p1"), (None, "q1")]
    )
    assert collected(spark, savepoint, "counter", "offsets") == expected([(None, 0), (None, 10)])
    assert collected(spark, savepoint, "counter", "rules") == expected([("max", 10), ("min", 1)])


def test_m_t4_raw_and_function_state_give_one_row_per_subtask(spark: Any, savepoint: str) -> None:
    assert collected(spark, savepoint, "source", "_raw") == expected(
        [
            (0, {"splits": [{"_1": "file-0", "_2": 120}]}),
            (1, {"splits": [{"_1": "file-1", "_2": 40}]}),
        ]
    )  # tuples are structs
    assert collected(spark, savepoint, "counter", "_function") == expected(
        [(0, {"seen_records": 5}), (1, {"seen_records": 6})]
    )


def test_spark_rows_equal_the_arrow_rows(spark: Any, savepoint: str) -> None:
    sp = read(savepoint, allow_pickle=True)
    for uid, info in sp.operators().items():
        for state in info.states:
            if uid == "mixed":
                continue
            frame = sp.state(uid, state.name)
            assert [
                r.asDict(recursive=True) for r in frame.to_spark(spark).collect()
            ] == frame.to_arrow().to_pylist(maps_as_pydicts="strict"), f"{uid}/{state.name}"


def test_values_spark_cannot_type_raise_naming_the_state(spark: Any, savepoint: str) -> None:
    with pytest.raises(StateConversionError, match=r"'v'.*'mixed'.*to_pandas\(\)"):
        read(savepoint, allow_pickle=True).state("mixed", "v").to_spark(spark)
