"""Built-in aggregates: a batch's partials go into a window's table by
``WindowTable.ensure_distinct`` (one row per code, as ``ensure``); the windows one
watermark fires leave as one Arrow batch (in end, then start order, each result
stamped with its window's ``end - 1``), flushed early at ``FIRE_BATCH_ROWS``
results; other contents still emit per window."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from test_window_operator import main_batches, make, recs, tumbling, wm

import lockgate as lg
from lockgate.core.batch import timestamps_of
from lockgate.core.elements import StreamStatus, Watermark
from lockgate.runtime.operators.window import operator as window_module
from lockgate.runtime.operators.window.contents import BuiltinContents
from lockgate.runtime.operators.window.store import AlignedStore, WindowTable
from lockgate.windowing.aggregates import WindowAggregation
from lockgate.windowing.assigners import WindowAssignment


def test_a_watermarks_windows_leave_as_one_arrow_batch_in_end_order() -> None:
    h = make(tumbling())
    h.process(recs(("a", 2500), ("a", 100), ("b", 1200), ("b", 2999), ("c", 2001)))
    wm(h, 5000)
    assert len(h.batches) == 1 and isinstance(h.batches[0], pa.RecordBatch)
    (rows, stamps) = main_batches(h)[0]
    got = [(r["window_start"], r["k"], r["count"]) for r in rows]
    assert got[:2] == [(0, "a", 1), (1000, "b", 1)]
    assert sorted(got[2:]) == [(2000, "a", 1), (2000, "b", 1), (2000, "c", 1)]
    assert stamps == [r["window_end"] - 1 for r in rows]
    assert list(timestamps_of(h.batches[0])) == stamps
    kinds = [e if isinstance(e, (Watermark, StreamStatus)) else "batch" for e in h.elements]
    assert kinds == ["batch", Watermark(5000)]


def test_the_batch_is_flushed_early_at_fire_batch_rows(monkeypatch: Any) -> None:
    monkeypatch.setattr(window_module, "FIRE_BATCH_ROWS", 2)
    h = make(tumbling())
    h.process(recs(("a", 100), ("b", 200), ("a", 1100), ("a", 2100), ("b", 2200)))
    wm(h, 5000)
    sizes = [len(rows) for rows, _ in main_batches(h)]
    # [0, 1000) has 2 results: flushed; [1000, 2000) has 1 and [2000, 3000) 2: 3
    assert sizes == [2, 3]
    starts = [r["window_start"] for rows, _ in main_batches(h) for r in rows]
    assert starts == [0, 0, 1000, 2000, 2000]


def test_other_contents_still_emit_each_window_on_its_own() -> None:
    h = make(tumbling(), reduce=lambda a, b: {**a, "n": a["n"] + b["n"]})
    h.process(recs(("a", 100), ("a", 1100), n=1))
    wm(h, 5000)
    assert [len(rows) for rows, _ in main_batches(h)] == [1, 1]


def test_ensure_distinct_gives_each_code_its_one_row() -> None:
    contents = BuiltinContents(WindowAggregation.of(lg.agg.count()))
    a, b = WindowTable(0, 1000, contents), WindowTable(0, 1000, contents)
    for codes in ([5, 2, 9], [9, 7, 2, 11], [3], [11, 5]):
        arr = np.asarray(codes, dtype=np.int64)
        rows = a.ensure_distinct(arr, contents)
        b.ensure(arr, contents)
        assert a.codes[rows].tolist() == codes  # the row of each code holds it
        assert a.lookup(arr).tolist() == rows.tolist()
        assert sorted(a.codes.tolist()) == sorted(b.codes.tolist())  # each code once
    assert len(a) == len(a.payload) == len(a.fired) == 6


def test_a_window_fired_whole_shares_its_arrays_and_a_late_change_copies_them() -> None:
    """``AlignedStore.fire`` of a table none of whose rows fired hands out the table's
    own arrays (no copy); a later write (a late record within the allowed lateness)
    must then copy them (copy-on-write, as snapshots do: M-T3), so the rows already
    emitted never change."""
    contents = BuiltinContents(WindowAggregation.of(lg.agg.count()))
    store = AlignedStore(contents)
    codes = np.array([4, 1, 4, 7], dtype=np.int64)
    ts = np.array([10, 20, 30, 40], dtype=np.int64)
    data = pa.record_batch({"x": [0, 0, 0, 0]})
    whole = WindowAssignment(np.arange(4), np.zeros(4, np.int64), np.full(4, 1000, np.int64))
    store.add(data, codes, ts, whole)
    (table,) = store.due(999)
    first = store.fire(table)
    counts = dict(zip(first.codes.tolist(), first.payload.results()["count"].to_pylist()))
    assert counts == {4: 2, 1: 1, 7: 1}
    assert first.payload is table.payload and table.shared and not table.pending
    one = WindowAssignment(np.arange(1), np.zeros(1, np.int64), np.full(1, 1000, np.int64))
    store.add(data.slice(0, 1), codes[:1], ts[:1], one)  # a late record for key 4
    assert dict(zip(first.codes.tolist(), first.payload.results()["count"].to_pylist())) == counts
    again = store.fire(table)  # only the changed row fires again
    assert again.codes.tolist() == [4]
    assert again.payload.results()["count"].to_pylist() == [3]
