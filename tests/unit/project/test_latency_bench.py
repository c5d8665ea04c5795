"""The latency bench's own parts (``bench/latency.py``, issue 42): Query A keeps the
send-time head a latency is read from and encodes the truncated payload, and the
percentiles are those of the sorted latencies. No broker needed."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

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
