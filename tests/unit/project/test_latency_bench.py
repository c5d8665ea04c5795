"""The latency bench's own parts (``bench/latency.py``, issue 42): the queries keep the
send-time head a latency is read from (A encodes the truncated payload, B prepends the
count, C the joined value), the percentiles are those of the sorted latencies, the
series groups by send time, the throttle sleeps by record counts, and the cases and
arguments are checked. No broker needed."""

from __future__ import annotations

import argparse
import base64
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[3] / "bench" / "latency.py"
_spec = importlib.util.spec_from_file_location("lockgate_bench_latency", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_query_a_keeps_the_send_time_and_encodes_the_truncated_payload() -> None:
    head = b"%019d|" % 1_765_000_000_123_456_789
    payload = b"y" * (bench.TRUNCATE + 10)
    out = bench.query_a(head + payload)
    assert out[: bench.HEAD] == head
    assert int(out[: bench.HEAD - 1]) == 1_765_000_000_123_456_789
    assert base64.b64decode(out[bench.HEAD :]) == payload[: bench.TRUNCATE]


def test_percentiles_are_read_from_the_sorted_latencies() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unsorted
    got = bench.percentiles(values)
    assert got == {"p50": 51.0, "p90": 91.0, "p95": 96.0, "p99": 100.0, "max": 100.0}
    assert bench.percentiles([]) == {}


def test_query_b_prepends_the_count_after_the_send_time() -> None:
    head = b"%019d|" % 1_765_000_000_000_000_001
    value = head + b"x" * 1180
    out = bench.query_b(value, 42)
    assert out[: bench.HEAD] == head
    count, _, encoded = out[bench.HEAD :].partition(b"|")
    assert count == b"42"
    assert base64.b64decode(encoded) == b"x" * 1180
    # the key is the payload (truncated), without the head: one key for the suite's data
    other = b"%019d|" % 7 + b"x" * 1180
    assert bench.payload_key(value) == bench.payload_key(other) == b"x" * 1180
    assert len(bench.payload_key(head + b"y" * (bench.TRUNCATE + 5))) == bench.TRUNCATE


def test_query_c_keys_fall_in_the_table_and_the_output_carries_the_joined_value() -> None:
    value = b"%019d|" % 5 + b"x" * 100
    keys = {bench.with_random_key(value)["key"] for _ in range(2000)}
    assert min(keys) >= 0 and max(keys) < bench.LOOKUP_ROWS
    assert len(keys) > 1000  # random, not one key
    row = {"key": 21, "x": 21, "y": 42, "value": value}
    out = bench.query_c(row)
    assert out.startswith(b"%019d|42|" % 5)
    assert base64.b64decode(out[bench.HEAD + 3 :]) == b"x" * 100


def test_the_lookup_table_maps_x_to_twice_x_in_parquet_and_csv(tmp_path: Path) -> None:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    paths = bench.write_lookup_table(tmp_path)
    table = pq.read_table(paths["parquet"])
    assert table.num_rows == bench.LOOKUP_ROWS
    assert table.column("y").to_pylist() == [2 * x for x in table.column("x").to_pylist()]
    csv = pacsv.read_csv(
        Path(paths["csv"]) / "table.csv",
        read_options=pacsv.ReadOptions(column_names=["x", "y"]),
    )
    assert csv.equals(table)


def test_the_throttle_sleeps_only_inside_its_record_range() -> None:
    slept: list[float] = []
    throttle = bench.LG.Throttle(lo=200, hi=500, per_s=1000.0, sleep=slept.append)
    for i in range(1000):
        assert throttle(b"%d" % i) == b"%d" % i  # records pass through unchanged
    assert slept == [0.1, 0.1, 0.1]  # at records 200, 300 and 400: 100 records at 1000/s


def test_window_series_groups_by_send_time() -> None:
    start = 1_000_000_000_000
    sent = [start + int(t * 1e9) for t in (0.1, 0.2, 4.9, 5.0, 5.5, 12.0)]
    lat = [10.0, 20.0, 30.0, 100.0, 200.0, 7.0]
    series = bench.window_series(sent, lat, start, 5.0)
    assert [(w["t_s"], w["n"]) for w in series] == [(0.0, 3), (5.0, 2), (10.0, 1)]
    assert series[0]["p50"] == 20.0 and series[0]["p99"] == 30.0
    assert series[1]["p99"] == 200.0
    assert bench.window_series([], [], start, 5.0) == []


def test_cases_parse_with_rates_and_unknown_names_are_refused() -> None:
    assert bench.parse_cases("floor, local-A@50000", 10_000) == [
        ("floor", 10_000),
        ("local-A", 50_000),
    ]
    assert [n for n, _ in bench.parse_cases("all", 1)] == [s.partition("@")[0] for s in bench.ALL]
    assert all(s.partition("@")[0] in bench.CASES for s in bench.ALL)
    with pytest.raises(ValueError, match="unknown case 'flink-Z'"):
        bench.parse_cases("floor,flink-Z", 1)
    with pytest.raises(ValueError, match="positive integer"):
        bench.parse_cases("local-A@fast", 1)
    with pytest.raises(ValueError, match="empty"):
        bench.parse_cases(" , ", 1)


def test_arguments_are_checked_and_quick_shortens_the_run() -> None:
    args = bench.parse_args(["--quick", "--cases", "floor"])
    assert (args.seconds, args.warmup) == (8.0, 3.0)
    with pytest.raises(SystemExit):
        bench.parse_args(["--seconds", "5", "--warmup", "5"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--rate", "0"])


def test_over_floor_subtracts_the_floor_of_the_same_run() -> None:
    row = {"p50": 40.0, "p90": 70.0, "p95": 80.0, "p99": 100.5}
    floor = {"p50": 30.0, "p90": 50.0, "p95": 60.0, "p99": 65.25}
    assert bench.over_floor(row, floor) == {"p50": 10.0, "p90": 20.0, "p95": 20.0, "p99": 35.25}


def test_the_flink_statements_and_sink_settings() -> None:
    spec = importlib.util.spec_from_file_location(
        "lgbench_latency_flink", _PATH.parent / "latency_flink.py"
    )
    assert spec is not None and spec.loader is not None
    flink = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flink)
    args = argparse.Namespace(
        query="B", input="in", output="out", bootstrap="b:9092", table="/tmp/t",
        exactly_once=False,
    )  # fmt: skip
    insert = flink.sql_statements(args)[-1]
    assert "PARTITION BY payload ORDER BY proctime" in insert
    assert flink.sink_options(args)["sink.delivery-guarantee"] == "at-least-once"
    args.exactly_once = True
    assert flink.sink_options(args)["sink.delivery-guarantee"] == "exactly-once"
    assert "sink.transactional-id-prefix" in flink.sink_options(args)
    args.query = "C"
    statements = flink.sql_statements(args)
    assert len(statements) == 4 and "'connector' = 'filesystem'" in statements[2]
    assert "RAND() * 10000" in statements[-1] and "JOIN lookup" in statements[-1]


def test_a_missing_peer_environment_says_how_to_make_it(tmp_path: Path) -> None:
    peers = bench.load_bench_module("latency_peers")
    with pytest.raises(RuntimeError, match=r"bash bench/setup_peers.sh no-such-peer"):
        peers.peer_python("no-such-peer")
