"""The offline savepoint reader: ``lockgate.savepoint.read`` (M-S1, M-S3, M-T4).

Checkpoint folders are written here with the real filesystem storage, in the layout
the runtime writes (``{"operator", "subtask", "state", "parallelism"}`` per state file,
``_metadata`` last), for every state kind at parallelism 2.
"""

from __future__ import annotations

import os
import sys
import types
from collections import namedtuple
from typing import Any

import pyarrow as pa
import pytest

from lockgate.checkpoint.coordinator.completed_store import CompletedCheckpoint
from lockgate.checkpoint.fs_storage import FileSystemCheckpointStorage
from lockgate.core.key_groups import key_group_for
from lockgate.errors import ConfigurationError
from lockgate.recovery.restore import RestoreError
from lockgate.savepoint import (
    MissingDependencyError,
    OperatorInfo,
    Savepoint,
    SavepointFormatError,
    StateConversionError,
    StateInfo,
    StateKind,
    read,
)

MAX_PARALLELISM = 128


# --------------------------------------------------------------------------- helpers


def write_checkpoint(
    root: Any, checkpoint_id: int, operators: dict[str, list[Any]], *, is_savepoint: bool = False
) -> str:
    """Write checkpoint ``checkpoint_id`` under ``root``: per operator uid the state ``S`` of
    each subtask (list index = subtask; None = that subtask wrote no file). Returns the
    ``chk-<id>`` folder."""
    storage = FileSystemCheckpointStorage(str(root))
    handles: dict[str, dict[int, Any]] = {}
    for uid, states in operators.items():
        for subtask, state in enumerate(states):
            if state is None:
                continue
            payload = (
                {"vertex": 1, "subtask": subtask, "inputs": [], "outputs": []}
                if uid.startswith("channels:")
                else {
                    "operator": uid,
                    "subtask": subtask,
                    "state": state,
                    "parallelism": len(states),
                }
            )
            handles.setdefault(uid, {})[subtask] = storage.write_state(
                checkpoint_id, f"op-{uid.replace(':', '_')}-{subtask}", payload
            )
    checkpoint = CompletedCheckpoint(
        checkpoint_id,
        1000 + checkpoint_id,
        2000 + checkpoint_id,
        operator_states=handles,
        is_savepoint=is_savepoint,
    )
    return storage.write_metadata(checkpoint_id, checkpoint.to_metadata())


def keyed(states: dict[str, tuple[str, dict[Any, Any]]]) -> dict[str, Any]:
    """A canonical keyed snapshot: per state name its kind and ``{key: stored}``, grouped
    by key group as the backend groups them."""
    snapshot: dict[str, Any] = {}
    for name, (kind, entries) in states.items():
        groups: dict[int, dict[Any, Any]] = {}
        for key, value in entries.items():
            groups.setdefault(key_group_for(key, MAX_PARALLELISM), {})[key] = value
        snapshot[name] = {"kind": kind, "key_groups": groups}
    return {"format": 1, "max_parallelism": MAX_PARALLELISM, "states": snapshot}


def typed(**entries: Any) -> dict[str, Any]:
    return {"lockgate_state": 1, **entries}


#: the live state of a keyed operator at parallelism 2, per subtask
COUNTS = ({"a": 1, "c": 3, "e": None}, {"b": 2, "d": 4})
LISTS = ({"a": [1, 2], "c": []}, {"b": [3]})
MAPS = ({"a": {"x": 1, "y": 2}}, {"b": {"z": 3}, "c": {}})
SUMS = ({"a": 10.5}, {"b": -1.0})
AVERAGES = ({"a": (6, 3)}, {"b": (5, 1)})  # the accumulators (sum, count)


def keyed_subtask(i: int) -> dict[str, Any]:
    return keyed(
        {
            "count": ("value", COUNTS[i]),
            "seen": ("list", LISTS[i]),
            "attributes": ("map", MAPS[i]),
            "total": ("reducing", SUMS[i]),
            "average": ("aggregating", AVERAGES[i]),
        }
    )


@pytest.fixture
def checkpoint(tmp_path: Any) -> str:
    """One checkpoint with every state kind, at parallelism 2."""
    rules = {"max": 10, "min": 1}
    return write_checkpoint(
        tmp_path / "checkpoints",
        7,
        {
            "counter": [
                typed(
                    keyed=keyed_subtask(0),
                    operator={
                        "buffer": {"mode": "split", "items": ["p", "q"]},
                        "offsets": {"mode": "union", "items": [0]},
                    },
                    broadcast={"rules": rules},
                    function={"seen_records": 5},
                ),
                typed(
                    keyed=keyed_subtask(1),
                    operator={
                        "buffer": {"mode": "split", "items": ["r"]},
                        "offsets": {"mode": "union", "items": [9, 8]},
                    },
                    broadcast={"rules": dict(rules)},
                    function={"seen_records": 6},
                ),
            ],
            "source": [{"splits": [("file-0", 120)]}, {"splits": [("file-1", 40)]}],
            "legacy-keyed": [keyed({"n": ("value", {"a": 1})}), keyed({"n": ("value", {"b": 2})})],
            "channels:3": [{"in-flight": 0}, {"in-flight": 1}],
        },
    )


def frame_rows(sp: Savepoint, uid: str, name: str) -> list[dict[str, Any]]:
    """The rows of a state through the Arrow table (dicts of Python values)."""
    rows: list[dict[str, Any]] = sp.state(uid, name).to_arrow().to_pylist()
    return rows


def merged(parts: tuple[dict[Any, Any], ...]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for part in parts:
        out.update(part)
    return out


# --------------------------------------------------------------------------- listing


def test_m_s1_operators_lists_every_operator_with_its_parallelism_and_state_kinds(
    checkpoint: str,
) -> None:
    sp = read(checkpoint, allow_pickle=True)
    operators = sp.operators()
    assert list(operators) == ["counter", "legacy-keyed", "source"]  # no channels:3
    assert operators["counter"] == OperatorInfo(
        "counter",
        2,
        (
            StateInfo("_function", StateKind.RAW),
            StateInfo("attributes", StateKind.MAP),
            StateInfo("average", StateKind.AGGREGATING),
            StateInfo("buffer", StateKind.OPERATOR_LIST),
            StateInfo("count", StateKind.VALUE),
            StateInfo("offsets", StateKind.UNION_LIST),
            StateInfo("rules", StateKind.BROADCAST),
            StateInfo("seen", StateKind.LIST),
            StateInfo("total", StateKind.REDUCING),
        ),
        MAX_PARALLELISM,
    )
    assert operators["source"] == OperatorInfo("source", 2, (StateInfo("_raw", StateKind.RAW),))
    assert operators["legacy-keyed"].state_names() == ["n"]
    assert operators["legacy-keyed"].states[0].kind == "value"  # kinds compare as strings


def test_the_checkpoint_id_kind_and_repr_are_those_of_the_checkpoint_read(
    checkpoint: str, tmp_path: Any
) -> None:
    sp = read(checkpoint, allow_pickle=True)
    assert sp.checkpoint_id == 7
    assert sp.is_savepoint is False
    assert repr(sp) == (
        f"Savepoint(path={checkpoint!r}, checkpoint 7, "
        "operators=['counter', 'legacy-keyed', 'source'])"
    )
    savepoint = write_checkpoint(tmp_path / "sp", 3, {"op": [{"x": 1}]}, is_savepoint=True)
    assert read(savepoint, allow_pickle=True).is_savepoint is True
    assert "savepoint 3" in repr(read(savepoint, allow_pickle=True))


# --------------------------------------------------------------------------- keyed state


def test_m_t4_keyed_value_state_gives_one_row_per_key_of_every_subtask_sorted_by_key(
    checkpoint: str,
) -> None:
    rows = frame_rows(read(checkpoint, allow_pickle=True), "counter", "count")
    assert rows == [
        {"key": k, "namespace": None, "value": v} for k, v in sorted(merged(COUNTS).items())
    ]
    table = read(checkpoint, allow_pickle=True).state("counter", "count").to_arrow()
    assert table.column_names == ["key", "namespace", "value"]
    assert table.schema.field("key").type == pa.string()
    assert table.schema.field("value").type == pa.int64()


def test_m_t4_keyed_list_state_gives_the_list_of_each_key(checkpoint: str) -> None:
    assert frame_rows(read(checkpoint, allow_pickle=True), "counter", "seen") == [
        {"key": "a", "namespace": None, "value": [1, 2]},
        {"key": "b", "namespace": None, "value": [3]},
        {"key": "c", "namespace": None, "value": []},
    ]


def test_m_t4_keyed_map_state_gives_the_dict_of_each_key_as_an_arrow_map(checkpoint: str) -> None:
    frame = read(checkpoint, allow_pickle=True).state("counter", "attributes")
    table = frame.to_arrow()
    assert table.schema.field("value").type == pa.map_(pa.string(), pa.int64())
    assert [(r["key"], dict(r["value"])) for r in table.to_pylist()] == sorted(merged(MAPS).items())
    assert frame.rows == [(k, None, v) for k, v in sorted(merged(MAPS).items())]


def test_m_t4_reducing_and_aggregating_state_give_the_value_and_the_accumulator(
    checkpoint: str,
) -> None:
    sp = read(checkpoint, allow_pickle=True)
    assert sp.state("counter", "total").rows == [("a", None, 10.5), ("b", None, -1.0)]
    # aggregating state shows the accumulator ((sum, count) here), not get_result()
    assert sp.state("counter", "average").rows == [("a", None, (6, 3)), ("b", None, (5, 1))]
    assert frame_rows(sp, "counter", "average") == [
        {"key": "a", "namespace": None, "value": {"_1": 6, "_2": 3}},
        {"key": "b", "namespace": None, "value": {"_1": 5, "_2": 1}},
    ]


def test_the_keyed_snapshot_an_operator_saved_directly_is_read_as_keyed_state(
    checkpoint: str,
) -> None:
    assert read(checkpoint, allow_pickle=True).state("legacy-keyed", "n").rows == [
        ("a", None, 1),
        ("b", None, 2),
    ]


def test_keys_that_cannot_be_compared_keep_subtask_order(tmp_path: Any) -> None:
    path = write_checkpoint(
        tmp_path, 1, {"op": [keyed({"v": ("value", {"z": 1})}), keyed({"v": ("value", {3: 2})})]}
    )
    assert read(path, allow_pickle=True).state("op", "v").rows == [("z", None, 1), (3, None, 2)]


def test_tuple_keys_become_struct_keys_in_arrow(tmp_path: Any) -> None:
    Point = namedtuple("Point", ["x", "y"])
    path = write_checkpoint(
        tmp_path,
        1,
        {
            "op": [
                keyed({"v": ("value", {("b", 2): 1, ("a", 9): 2})}),
                keyed({"n": ("value", {Point(1, 2): "p"})}),
            ]
        },
    )
    sp = read(path, allow_pickle=True)
    assert frame_rows(sp, "op", "v") == [
        {"key": {"_1": "a", "_2": 9}, "namespace": None, "value": 2},
        {"key": {"_1": "b", "_2": 2}, "namespace": None, "value": 1},
    ]
    assert frame_rows(sp, "op", "n")[0]["key"] == {"x": 1, "y": 2}


def test_keyed_values_are_stripped_of_ttl_wrappers_with_strip_ttl(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, Any]] = []

    def strip_ttl(kind: str, stored: Any) -> Any:
        calls.append((kind, stored))
        return stored["v"]

    fake = types.ModuleType("lockgate.state.ttl")
    fake.strip_ttl = strip_ttl  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lockgate.state.ttl", fake)
    path = write_checkpoint(
        tmp_path,
        1,
        {"op": [typed(keyed=keyed({"m": ("map", {"a": {"v": {"x": 1}, "expires": 5}})}))]},
    )
    assert read(path, allow_pickle=True).state("op", "m").rows == [("a", None, {"x": 1})]
    assert calls == [("map", {"v": {"x": 1}, "expires": 5})]


def test_an_incremental_rocksdb_checkpoint_is_refused_pointing_to_a_savepoint(
    tmp_path: Any,
) -> None:
    path = write_checkpoint(
        tmp_path, 1, {"op": [typed(keyed={"backend": "rocksdb", "sst_files": ["000012.sst"]})]}
    )
    with pytest.raises(
        SavepointFormatError, match=r"RocksDBStateBackend\(incremental=True\).*savepoint"
    ):
        read(path, allow_pickle=True)


# --------------------------------------------------------------------------- other state


def test_m_t4_operator_list_state_gives_one_row_per_element_subtasks_in_order(
    checkpoint: str,
) -> None:
    sp = read(checkpoint, allow_pickle=True)
    assert sp.state("counter", "buffer").rows == [
        (None, None, "p"),
        (None, None, "q"),
        (None, None, "r"),
    ]
    assert sp.state("counter", "offsets").rows == [
        (None, None, 0),
        (None, None, 9),
        (None, None, 8),
    ]
    table = sp.state("counter", "buffer").to_arrow()
    assert table.schema.field("key").type == pa.null()


def test_m_t4_broadcast_state_gives_the_map_entries_of_subtask_0_once(
    tmp_path: Any, checkpoint: str
) -> None:
    assert read(checkpoint, allow_pickle=True).state("counter", "rules").rows == [
        ("max", None, 10),
        ("min", None, 1),
    ]
    # the entries come from subtask 0 only (were the two different)
    path = write_checkpoint(
        tmp_path / "b",
        1,
        {"op": [typed(broadcast={"r": {"k": 0}}), typed(broadcast={"r": {"other": 1}})]},
    )
    assert read(path, allow_pickle=True).state("op", "r").rows == [("k", None, 0)]


def test_m_t4_source_splits_and_function_state_are_raw_rows_keyed_by_subtask(
    checkpoint: str,
) -> None:
    sp = read(checkpoint, allow_pickle=True)
    assert sp.state("source", "_raw").rows == [
        (0, None, {"splits": [("file-0", 120)]}),
        (1, None, {"splits": [("file-1", 40)]}),
    ]
    assert sp.state("counter", "_function").rows == [
        (0, None, {"seen_records": 5}),
        (1, None, {"seen_records": 6}),
    ]


def test_state_written_by_one_subtask_only_counts_both_in_the_parallelism(tmp_path: Any) -> None:
    path = write_checkpoint(
        tmp_path, 1, {"op": [None, typed(operator={"l": {"mode": "split", "items": [1]}})]}
    )
    sp = read(path, allow_pickle=True)
    assert sp.operators()["op"].parallelism == 2
    assert sp.state("op", "l").rows == [(None, None, 1)]


# --------------------------------------------------------------------------- conversions


def test_values_arrow_cannot_type_raise_naming_the_state_and_to_pandas(tmp_path: Any) -> None:
    path = write_checkpoint(tmp_path, 1, {"op": [keyed({"mixed": ("value", {"a": 1, "b": "x"})})]})
    frame = read(path, allow_pickle=True).state("op", "mixed")
    with pytest.raises(StateConversionError, match=r"'mixed'.*'op'.*to_pandas\(\)"):
        frame.to_arrow()
    assert frame.rows == [("a", None, 1), ("b", None, "x")]


def test_to_pandas_gives_the_exact_python_values(checkpoint: str) -> None:
    pytest.importorskip("pandas")
    sp = read(checkpoint, allow_pickle=True)
    df = sp.state("counter", "count").to_pandas()
    assert list(df.columns) == ["key", "namespace", "value"]
    assert list(df.itertuples(index=False, name=None)) == [
        (k, None, v) for k, v in sorted(merged(COUNTS).items())
    ]
    assert [type(v) for v in df["value"]] == [int, int, int, int, type(None)]  # no NaN
    average = sp.state("counter", "average").to_pandas()
    assert list(average["value"]) == [(6, 3), (5, 1)]  # tuples stay tuples
    seen = sp.state("counter", "seen").to_pandas()
    assert list(seen["value"]) == [[1, 2], [3], []]
    raw = sp.state("source", "_raw").to_pandas()
    assert list(raw["value"]) == [{"splits": [("file-0", 120)]}, {"splits": [("file-1", 40)]}]


def test_to_pandas_without_pandas_says_how_to_install_it(
    checkpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    with pytest.raises(MissingDependencyError, match="pip install pandas"):
        read(checkpoint, allow_pickle=True).state("counter", "count").to_pandas()


def test_to_spark_rejects_what_is_not_a_spark_session(checkpoint: str) -> None:
    with pytest.raises(ConfigurationError, match="needs a SparkSession, got str"):
        read(checkpoint, allow_pickle=True).state("counter", "count").to_spark("spark")


def test_an_empty_state_is_an_empty_table_with_the_three_columns(tmp_path: Any) -> None:
    path = write_checkpoint(tmp_path, 1, {"op": [keyed({"v": ("value", {})})]})
    table = read(path, allow_pickle=True).state("op", "v").to_arrow()
    assert table.num_rows == 0
    assert table.column_names == ["key", "namespace", "value"]


# --------------------------------------------------------------------------- bad input


def test_an_unknown_operator_or_state_is_refused_listing_what_exists(checkpoint: str) -> None:
    sp = read(checkpoint, allow_pickle=True)
    with pytest.raises(
        ConfigurationError,
        match=r"no operator with uid 'nope'.*\['counter', 'legacy-keyed', 'source'\]",
    ):
        sp.state("nope", "count")
    with pytest.raises(ConfigurationError, match=r"no state named 'nope'.*'_function'.*'total'"):
        sp.state("counter", "nope")
    with pytest.raises(ConfigurationError, match="no operator with uid 'channels:3'"):
        sp.state("channels:3", "in-flight")


def test_m_r3_a_storage_root_reads_its_newest_checkpoint(tmp_path: Any) -> None:
    write_checkpoint(tmp_path, 1, {"op": [{"n": 1}]})
    write_checkpoint(tmp_path, 2, {"op": [{"n": 2}]})
    sp = read(str(tmp_path), allow_pickle=True)
    assert sp.checkpoint_id == 2
    assert sp.state("op", "_raw").rows == [(0, None, {"n": 2})]
    assert read(tmp_path / "chk-1").checkpoint_id == 1  # os.PathLike too


def test_a_missing_path_is_refused_and_nothing_is_created(tmp_path: Any) -> None:
    missing = tmp_path / "no" / "such" / "chk-3"
    with pytest.raises(ConfigurationError, match="does not exist"):
        read(str(missing), allow_pickle=True)
    with pytest.raises(ConfigurationError, match="does not exist"):
        read("file://" + str(missing))
    assert not os.path.exists(tmp_path / "no")
    file = tmp_path / "file.txt"
    file.write_text("x")
    with pytest.raises(ConfigurationError, match="is a file"):
        read(str(file), allow_pickle=True)


@pytest.mark.parametrize("path", ["", "  ", None, 3])
def test_a_path_that_is_not_a_string_is_refused(path: Any) -> None:
    with pytest.raises(ConfigurationError, match="path must be the folder"):
        read(path, allow_pickle=True)


def test_a_folder_without_a_checkpoint_raises_restore_error(tmp_path: Any) -> None:
    with pytest.raises(RestoreError, match="no intact completed checkpoint"):
        read(str(tmp_path), allow_pickle=True)


# ------------------------------------------------------------ join state is not readable


def joined_job_checkpoint(tmp_path: Any) -> str:
    """A real job on the local executor with a window join, a window co-group, an
    interval join and a plain window aggregate, stopped after two checkpoints; the
    storage folder."""
    import lockgate as lg
    from conftest import wait_for_checkpoints
    from lockgate.connectors import DiscardingSink, SequenceSource

    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    env.checkpoint_config.externalized = lg.ExternalizedRetention.RETAIN_ON_CANCELLATION
    ws = lg.WatermarkStrategy.for_bounded_out_of_orderness(10).with_timestamp_assigner(
        lambda v: int(v) // 10
    )

    def side(name: str) -> lg.DataStream:
        source = SequenceSource(0, 10**12, rows_per_second=2_000, batch_size=100)
        return (
            env.from_source(source, name=name, watermark_strategy=ws)
            .uid(name)
            .set_parallelism(1)
            .map(lambda v: {"k": v % 50, "v": v}, name=f"{name}-rec")
            .uid(f"{name}-rec")
        )

    a, b = side("a"), side("b")
    windows = lg.TumblingEventTimeWindows.of(10_000)
    joins = {
        "wjoin": a.join(b).where("k").equal_to("k").window(windows).apply(),
        "cogroup": a.co_group(b)
        .where("k")
        .equal_to("k")
        .window(windows)
        .apply(lambda ls, rs: [len(ls)]),
        "ijoin": a.key_by("k").interval_join(b.key_by("k")).between(-5, 5).process(),
        "window": a.key_by("k").window(windows).reduce(lambda x, y: y),
    }
    for uid, stream in joins.items():
        stream.uid(uid).sink_to(DiscardingSink()).uid(f"{uid}-sink")
    client = env.execute_async("joins", executor=lg.LocalExecutor())
    try:
        wait_for_checkpoints(client, 2)
    finally:
        client.cancel()
        client.wait(60)
    return str(tmp_path / "chk")


def test_join_state_is_listed_but_refused_naming_the_operator(tmp_path: Any) -> None:
    sp = read(joined_job_checkpoint(tmp_path), allow_pickle=True)
    operators = sp.operators()
    for uid, what in (
        ("wjoin", "a window join"),
        ("cogroup", "a window co-group"),
        ("ijoin", "an interval join"),
    ):
        assert [s.name for s in operators[uid].states] == ["_function"]
        with pytest.raises(SavepointFormatError) as e:
            sp.state(uid, "_function")
        message = str(e.value)
        assert f"operator {uid!r} is {what}" in message, message
        assert "not readable with lockgate.savepoint" in message
        assert "restores the job" in message
    # other window operators' state stays readable as raw rows
    rows = sp.state("window", "_function").rows
    assert [subtask for subtask, _, _ in rows] == [0, 1]
