"""Session windows of one key that overlap or touch merge into one; the merged window
keeps the state of its earliest existing window and reports which other states to
merge into it. The vectorized merge and the per-key SessionWindowSet agree with a
naive interval merge and with each other."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.errors import ConfigurationError
from lockgate.windowing.assigners import TimeWindow
from lockgate.windowing.session_merge import (
    NO_STATE,
    SessionAdd,
    SessionWindowSet,
    merge_session_windows,
)


def naive_merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge intervals that overlap or touch, the textbook way."""
    out: list[list[int]] = []
    for s, e in sorted(windows):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


window_st = st.tuples(st.integers(-200, 200), st.integers(1, 40)).map(lambda p: (p[0], p[0] + p[1]))
keyed_st = st.lists(st.tuples(st.integers(0, 4), window_st), max_size=30)


def existing_from(raw: list[tuple[int, tuple[int, int]]]) -> list[tuple[int, int, int]]:
    """Disjoint, non-touching windows per key (as a previous merge leaves them), shuffled."""
    by_key: dict[int, list[tuple[int, int]]] = {}
    for k, w in raw:
        by_key.setdefault(k, []).append(w)
    out = [(k, s, e) for k, ws in by_key.items() for s, e in naive_merge(ws)]
    out.reverse()
    return out


def columns(rows: list[tuple[int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return arr[:, 0], arr[:, 1], arr[:, 2]


@settings(max_examples=300, deadline=None)
@given(old_raw=keyed_st, new=keyed_st)
def test_vectorized_merge_equals_a_naive_interval_merge_per_key(old_raw, new) -> None:
    old = existing_from(old_raw)
    new_rows = [(k, s, e) for k, (s, e) in new]
    m = merge_session_windows(*columns(old), *columns(new_rows))

    by_key: dict[int, list[tuple[int, int]]] = {}
    for k, s, e in old + new_rows:
        by_key.setdefault(k, []).append((s, e))
    expected = [(k, s, e) for k in sorted(by_key) for s, e in naive_merge(by_key[k])]
    got = list(zip(m.key.tolist(), m.start.tolist(), m.end.tolist()))
    assert got == expected

    # every input window lies inside the result it maps to, of its own key
    for rows, to_result in ((old, m.existing_to_result), (new_rows, m.new_to_result)):
        for (k, s, e), r in zip(rows, to_result.tolist()):
            assert m.key[r] == k and m.start[r] <= s and e <= m.end[r]

    # state: the earliest existing window of each result; the others merge into it
    for r in range(len(m)):
        members = [i for i, x in enumerate(m.existing_to_result.tolist()) if x == r]
        if not members:
            assert m.state_id[r] == NO_STATE
            continue
        lead = min(members, key=lambda i: old[i][1])
        assert m.state_id[r] == lead
        pairs = sorted(zip(m.merged_from.tolist(), m.merged_into.tolist()))
        assert [p for p in pairs if p[1] == lead] == sorted((i, lead) for i in members if i != lead)
    assert len(m.merged_from) == len(old) - int((m.state_id != NO_STATE).sum())

    # timers: retired = existing windows whose bounds changed; changed = results that
    # are not an existing window
    old_set = {(k, s, e) for k, s, e in old}
    assert m.changed.tolist() == [t not in old_set for t in got]
    got_set = set(got)
    assert m.retired.tolist() == [t not in got_set for t in old]


def test_windows_that_touch_merge_and_windows_one_millisecond_apart_do_not() -> None:
    m = merge_session_windows([], [], [], [7, 7, 7], [0, 10, 21], [10, 20, 30])
    assert list(zip(m.start.tolist(), m.end.tolist())) == [(0, 20), (21, 30)]
    assert m.new_to_result.tolist() == [0, 0, 1]


def test_a_new_window_bridging_two_sessions_merges_their_states_into_the_earlier_one() -> None:
    m = merge_session_windows(
        [1, 1], [0, 20], [10, 30], [1], [8], [22], existing_state_id=[100, 200]
    )
    assert (m.start.tolist(), m.end.tolist()) == ([0], [30])
    assert m.state_id.tolist() == [100]
    assert m.merged_from.tolist() == [200] and m.merged_into.tolist() == [100]
    assert m.retired.tolist() == [True, True] and m.changed.tolist() == [True]


def test_a_new_window_inside_an_existing_one_changes_nothing() -> None:
    m = merge_session_windows([3], [0], [100], [3, 3], [10, 90], [20, 100])
    assert (m.start.tolist(), m.end.tolist()) == ([0], [100])
    assert m.state_id.tolist() == [0]
    assert len(m.merged_from) == 0
    assert m.retired.tolist() == [False] and m.changed.tolist() == [False]
    assert m.new_to_result.tolist() == [0, 0]


def test_keys_never_merge_with_each_other_and_untouched_windows_are_kept() -> None:
    m = merge_session_windows([1, 2], [0, 0], [10, 10], [2, 3], [5, 5], [12, 12])
    assert list(zip(m.key.tolist(), m.start.tolist(), m.end.tolist())) == [
        (1, 0, 10),
        (2, 0, 12),
        (3, 5, 12),
    ]
    assert m.state_id.tolist() == [0, 1, NO_STATE]
    assert m.changed.tolist() == [False, True, True]
    assert m.retired.tolist() == [False, True]


def test_overlapping_existing_windows_are_merged_and_their_states_reported() -> None:
    m = merge_session_windows([0, 0], [5, 0], [15, 10], [], [], [])
    assert (m.start.tolist(), m.end.tolist()) == ([0], [15])
    assert m.state_id.tolist() == [1]
    assert m.merged_from.tolist() == [0] and m.merged_into.tolist() == [1]


def test_merging_nothing_gives_nothing() -> None:
    m = merge_session_windows([], [], [], [], [], [])
    assert len(m) == 0 and len(m.merged_from) == 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (([1], [0], [10], [1, 2], [0], [5]), "one length"),
        (([1], [10], [10], [], [], []), "end > start"),
        (([1.5], [0], [10], [], [], []), "integer array"),
        (([1], [0], [10], [], [], [], [1, 2]), "state ids"),
    ],
)
def test_malformed_window_arrays_are_rejected(args, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        merge_session_windows(*args)


# --- the per-key set ------------------------------------------------------------------


def test_adding_windows_reports_fresh_sessions_growth_and_bridging() -> None:
    s = SessionWindowSet()
    a, b = TimeWindow(0, 10), TimeWindow(20, 30)
    assert s.add(a) == SessionAdd(a, a, (), (), True)
    assert s.add(b) == SessionAdd(b, b, (), (), True)
    inside = s.add(TimeWindow(2, 5))
    assert inside == SessionAdd(a, a, (), (), False)
    bridge = s.add(TimeWindow(10, 20))
    assert bridge == SessionAdd(TimeWindow(0, 30), a, (a, b), (b,), False)
    assert s.windows() == [TimeWindow(0, 30)]
    assert s.state_window(TimeWindow(0, 30)) == a
    grow = s.add(TimeWindow(25, 40))
    assert grow == SessionAdd(TimeWindow(0, 40), a, (TimeWindow(0, 30),), (), False)


def test_retiring_a_window_removes_it_and_returns_its_state_window() -> None:
    s = SessionWindowSet()
    s.add(TimeWindow(0, 10))
    s.add(TimeWindow(5, 12))
    s.add(TimeWindow(50, 60))
    assert s.retire(TimeWindow(0, 12)) == TimeWindow(0, 10)
    assert s.windows() == [TimeWindow(50, 60)] and TimeWindow(0, 12) not in s
    with pytest.raises(KeyError, match="not a window"):
        s.retire(TimeWindow(0, 12))


def test_a_session_set_survives_snapshot_and_pickle_with_its_state_windows() -> None:
    s = SessionWindowSet()
    for w in (TimeWindow(0, 10), TimeWindow(30, 40), TimeWindow(8, 15)):
        s.add(w)
    restored = SessionWindowSet.from_snapshot(s.snapshot())
    assert restored == s and pickle.loads(pickle.dumps(s)) == s
    assert restored.state_window(TimeWindow(0, 15)) == TimeWindow(0, 10)
    assert restored.add(TimeWindow(15, 30)).merged_state_windows == (TimeWindow(30, 40),)


def test_restoring_overlapping_windows_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="overlap or touch"):
        SessionWindowSet(
            {TimeWindow(0, 10): TimeWindow(0, 10), TimeWindow(10, 20): TimeWindow(10, 20)}
        )


@settings(max_examples=200, deadline=None)
@given(adds=st.lists(window_st, max_size=25))
def test_the_per_key_set_equals_a_naive_merge_and_keeps_track_of_every_state(adds) -> None:
    s = SessionWindowSet()
    live_states: set[TimeWindow] = set()
    for i, (a, b) in enumerate(adds):
        w = TimeWindow(a, b)
        result = s.add(w)
        assert result.window.start <= a and b <= result.window.end
        if result.is_new:
            live_states.add(w)
        for gone in result.merged_state_windows:
            live_states.remove(gone)
        assert {s.state_window(x) for x in s.windows()} == live_states
        assert [(x.start, x.end) for x in s.windows()] == naive_merge(adds[: i + 1])


@settings(max_examples=300, deadline=None)
@given(old_raw=st.lists(window_st, max_size=15), new=st.lists(window_st, min_size=1, max_size=15))
def test_one_by_one_and_vectorized_merges_end_with_the_same_sessions_holding_the_same_records(
    old_raw, new
) -> None:
    """Simulate what an operator does with the reports: each window's state holds the
    records (window ids) added to it; merged states are folded into the target."""
    old = naive_merge(old_raw)

    # one by one
    s = SessionWindowSet({TimeWindow(a, b): TimeWindow(a, b) for a, b in old})
    content: dict[TimeWindow, set[str]] = {
        TimeWindow(a, b): {f"old{i}"} for i, (a, b) in enumerate(old)
    }
    for j, (a, b) in enumerate(new):
        r = s.add(TimeWindow(a, b))
        target = content.setdefault(r.state_window, set())
        for gone in r.merged_state_windows:
            target |= content.pop(gone)
        target.add(f"new{j}")
    one_by_one = {(w.start, w.end): content[s.state_window(w)] for w in s.windows()}
    assert set().union(*content.values()) == set().union(*one_by_one.values())

    # vectorized
    m = merge_session_windows(
        [0] * len(old),
        [a for a, _ in old],
        [b for _, b in old],
        [0] * len(new),
        [a for a, _ in new],
        [b for _, b in new],
    )
    state: dict[int, set[str]] = {i: {f"old{i}"} for i in range(len(old))}
    for f, into in zip(m.merged_from.tolist(), m.merged_into.tolist()):
        state[into] |= state.pop(f)
    results = [state[sid] if sid != NO_STATE else set() for sid in m.state_id.tolist()]
    for j, r in enumerate(m.new_to_result.tolist()):
        results[r].add(f"new{j}")
    vectorized = {(a, b): c for a, b, c in zip(m.start.tolist(), m.end.tolist(), results)}
    assert len(state) == int((m.state_id != NO_STATE).sum())  # no state left behind

    assert one_by_one == vectorized


def test_one_by_one_a_fresh_earlier_session_can_own_the_merged_state() -> None:
    """The incremental set treats a session it created as existing: its state, the
    earliest, is the one kept when a later window bridges it to an older session."""
    s = SessionWindowSet({TimeWindow(10, 20): TimeWindow(10, 20)})
    s.add(TimeWindow(0, 5))
    r = s.add(TimeWindow(5, 10))
    assert r.window == TimeWindow(0, 20) and r.state_window == TimeWindow(0, 5)
    assert r.merged_state_windows == (TimeWindow(10, 20),)
