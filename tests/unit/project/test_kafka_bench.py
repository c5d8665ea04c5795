"""The Kafka bench's own parts (``bench/kafka.py``, issue 20): the expected window counts
it checks every system against, the check noticing a missing, duplicated or wrong result,
and the batch JSON decode of its ``arrow`` case. No broker needed."""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import pyarrow as pa

# Loaded under another name: as ``kafka`` it would be taken for kafka-python.
_PATH = Path(__file__).resolve().parents[3] / "bench" / "kafka.py"
_spec = importlib.util.spec_from_file_location("lockgate_bench_kafka", _PATH)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_expected_counts_are_the_per_key_one_second_window_counts_of_the_data() -> None:
    n = 30_000
    keys, ts = bench.event_columns(0, n)
    brute = collections.Counter(
        (int(k), int(t) - int(t) % 1000) for k, t in zip(keys, ts, strict=True)
    )
    expected = bench.expected_counts(n)
    assert {(k, w): c for (k, w, c) in expected} == dict(brute)
    assert sum(c for (_, _, c) in expected) == n
    assert set(expected.values()) == {1}
    # disorder stays within the 500 ms the watermarks allow
    assert max(int(ts[: i + 1].max()) - int(ts[i]) for i in range(0, n, 97)) < bench.DISORDER_MS


def test_compare_reports_missing_duplicated_and_wrong_results() -> None:
    expected = bench.expected_counts(20_000)
    assert bench.compare(expected, collections.Counter(expected))["verified"] is True
    rows = list(expected)
    seen = collections.Counter(expected)
    del seen[rows[0]]  # missing
    seen[rows[1]] += 1  # written twice
    k, w, c = rows[2]
    del seen[rows[2]]
    seen[(k, w, c + 1)] += 1  # a wrong count: unexpected, and its right one missing
    got = bench.compare(expected, seen)
    assert (got["missing"], got["duplicates"], got["unexpected"]) == (2, 1, 1)
    assert got["verified"] is False


def test_the_arrow_decode_reads_key_and_ts_from_a_batch_of_raw_json_values() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b'{"key":3,"ts":1700000000123}', b'{"key":-1,"ts":5,"x":1}'])],
        names=["value"],
    )
    table = bench._decode_json(batch)
    assert table.to_pydict() == {"key": [3, -1], "ts": [1700000000123, 5]}
