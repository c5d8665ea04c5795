"""The timer service: deduplicated event-time and processing-time timers per key, fired
in timestamp order with the timer's key as the current key (M-W6), snapshotted by key
group with copy-on-write views (M-T3, M-T4) and restored at another parallelism."""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lockgate as lg
from lockgate.core.clock import ManualClock
from lockgate.core.elements import MAX_WATERMARK, MIN_WATERMARK
from lockgate.core.key_groups import key_group_for, key_group_range
from lockgate.errors import ConfigurationError, CorruptStreamError, UnsupportedKeyError
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.time.timers import (
    TIMER_SNAPSHOT_FORMAT,
    InternalTimer,
    InternalTimerService,
    TimerService,
    TimerServiceBusyError,
)

MP = 16


def service(
    max_parallelism: int = MP, clock: ManualClock | None = None, **kwargs: Any
) -> InternalTimerService:
    return InternalTimerService(
        "sessions", max_parallelism, clock=clock if clock is not None else ManualClock(), **kwargs
    )


class Recorder:
    """An ``on_timer`` callback that records what fired."""

    def __init__(self) -> None:
        self.fired: list[InternalTimer] = []

    def __call__(self, timer: InternalTimer) -> None:
        self.fired.append(timer)


def fire_all_event_time(svc: InternalTimerService) -> list[InternalTimer]:
    rec = Recorder()
    svc.advance_watermark(MAX_WATERMARK, rec)
    return rec.fired


def all_timers(svc: InternalTimerService) -> tuple[set[InternalTimer], set[InternalTimer]]:
    return set(svc.event_time_timers()), set(svc.processing_time_timers())


# -- deduplication and deletion ---------------------------------------------------------
def test_registering_the_same_timer_twice_keeps_one_and_it_fires_once() -> None:
    svc = service()
    assert svc.register_event_time_timer("a", 10) is True
    assert svc.register_event_time_timer("a", 10) is False
    svc.register_processing_time_timer("a", 10)
    svc.register_processing_time_timer("a", 10)
    assert svc.num_event_time_timers() == 1
    assert svc.num_processing_time_timers() == 1
    assert fire_all_event_time(svc) == [InternalTimer(10, "a", None)]


def test_timers_differing_in_key_timestamp_or_namespace_are_distinct() -> None:
    svc = service()
    for timer in [(10, "a", None), (10, "b", None), (11, "a", None), (10, "a", "w1")]:
        svc.register_event_time_timer(timer[1], timer[0], timer[2])
    assert svc.num_event_time_timers() == 4
    assert len(fire_all_event_time(svc)) == 4


def test_event_time_and_processing_time_timers_are_separate_queues() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.register_processing_time_timer("a", 10)
    assert svc.delete_processing_time_timer("a", 10) is True
    assert svc.num_event_time_timers() == 1
    assert svc.next_processing_time() is None
    assert svc.next_event_time() == 10


def test_a_deleted_timer_does_not_fire_and_deleting_a_missing_one_does_nothing() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.register_event_time_timer("b", 10)
    svc.register_event_time_timer("c", 20)
    assert svc.delete_event_time_timer("a", 10) is True
    assert svc.delete_event_time_timer("a", 10) is False
    assert svc.delete_event_time_timer("zzz", 99) is False
    assert svc.delete_event_time_timer("c", 20) is True  # empties its timestamp
    assert svc.next_event_time() == 10
    assert fire_all_event_time(svc) == [InternalTimer(10, "b")]
    assert svc.num_event_time_timers() == 0


def test_a_timer_deleted_then_registered_again_fires_once() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.delete_event_time_timer("a", 10)
    svc.register_event_time_timer("a", 10)
    assert fire_all_event_time(svc) == [InternalTimer(10, "a")]


def test_many_deletes_leave_the_queue_consistent() -> None:
    svc = service()
    for ts in range(1000):
        svc.register_event_time_timer(ts % 7, ts)
    for ts in range(0, 1000, 2):
        svc.delete_event_time_timer(ts % 7, ts)
    for ts in range(0, 200, 2):  # re-register some deleted timestamps
        svc.register_event_time_timer(ts % 7, ts)
    fired = fire_all_event_time(svc)
    expected = sorted(set(range(1, 1000, 2)) | set(range(0, 200, 2)))
    assert [t.timestamp for t in fired] == expected


# -- firing (M-W6) ----------------------------------------------------------------------
def test_M_W6_advancing_the_watermark_fires_due_timers_in_timestamp_order_only() -> None:
    svc = service()
    for key, ts in [("c", 30), ("a", 5), ("b", 20), ("d", 41), ("e", 40), ("f", 10)]:
        svc.register_event_time_timer(key, ts)
    rec = Recorder()
    assert svc.advance_watermark(30, rec) == 4
    assert [(t.timestamp, t.key) for t in rec.fired] == [(5, "a"), (10, "f"), (20, "b"), (30, "c")]
    assert svc.current_watermark == 30
    assert svc.next_event_time() == 40
    rec2 = Recorder()
    svc.advance_watermark(40, rec2)
    assert rec2.fired == [InternalTimer(40, "e")]


def test_M_W6_timers_with_equal_timestamps_fire_in_registration_order() -> None:
    svc = service()
    keys = ["k3", "k1", "k9", "k2", "k7"]
    for key in keys:
        svc.register_event_time_timer(key, 100)
    assert [t.key for t in fire_all_event_time(svc)] == keys


def test_M_W6_each_timer_fires_with_its_key_as_the_current_key() -> None:
    """The callback contract: the operator's callback sets the backend's current key;
    user code in on_timer then reads the state of the timer's key."""
    backend = HeapKeyedStateBackend("sessions", MP, clock=ManualClock())
    counts = backend.get_state(lg.ValueStateDescriptor("count"))
    svc = service()
    timers = svc.facade(lambda: backend.current_key)
    for key, n in [("a", 1), ("b", 2), ("c", 3)]:
        backend.current_key = key
        counts.update(n)
        timers.register_event_time_timer(100 + n)
    seen: list[tuple[Any, Any, int]] = []

    def on_timer(timer: InternalTimer) -> None:
        backend.current_key = timer.key
        seen.append((backend.current_key, counts.value(), timer.timestamp))

    backend.current_key = "somebody else"
    svc.advance_watermark(1000, on_timer)
    assert seen == [("a", 1, 101), ("b", 2, 102), ("c", 3, 103)]


def test_M_W6_the_watermark_is_current_while_its_timers_fire() -> None:
    svc = service()
    svc.register_event_time_timer("a", 5)
    watermarks: list[int] = []
    svc.advance_watermark(7, lambda t: watermarks.append(svc.current_watermark))
    assert watermarks == [7]


def test_timers_registered_while_firing_fire_in_the_same_advance_when_due() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.register_event_time_timer("b", 10)
    svc.register_event_time_timer("c", 20)
    order: list[tuple[int, Any]] = []

    def on_timer(timer: InternalTimer) -> None:
        order.append((timer.timestamp, timer.key))
        if timer.key == "a":
            svc.register_event_time_timer("a2", 15)  # due: fires in this advance
            svc.register_event_time_timer("a3", 10)  # same timestamp: fires after "b"
            svc.register_event_time_timer("late", 50)  # not due
        if timer.key == "c":
            svc.register_event_time_timer("c-early", 12)  # earlier than c: fires next

    svc.advance_watermark(30, on_timer)
    assert order == [(10, "a"), (10, "b"), (10, "a3"), (15, "a2"), (20, "c"), (12, "c-early")]
    assert svc.event_time_timers() == [InternalTimer(50, "late")]


def test_an_earlier_timer_registered_by_a_callback_fires_before_the_rest_of_the_tie() -> None:
    svc = service()
    for key in ["x", "y", "z"]:
        svc.register_event_time_timer(key, 20)
    order: list[Any] = []

    def on_timer(timer: InternalTimer) -> None:
        order.append(timer.key)
        if timer.key == "x":
            svc.register_event_time_timer("early", 5)

    svc.advance_watermark(20, on_timer)
    assert order == ["x", "early", "y", "z"]


def test_a_timer_deleted_by_an_earlier_callback_does_not_fire() -> None:
    svc = service()
    for key in ["a", "b", "c"]:
        svc.register_event_time_timer(key, 10)
    svc.register_event_time_timer("d", 11)
    order: list[Any] = []

    def on_timer(timer: InternalTimer) -> None:
        order.append(timer.key)
        if timer.key == "a":
            svc.delete_event_time_timer("b", 10)
            svc.delete_event_time_timer("c", 10)
            svc.delete_event_time_timer("d", 11)
            svc.register_event_time_timer("c", 10)  # back, at the end of the tie

    svc.advance_watermark(100, on_timer)
    assert order == ["a", "c"]


def test_a_callback_re_registering_its_own_timer_for_later_keeps_it_pending() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.advance_watermark(10, lambda t: svc.register_event_time_timer(t.key, t.timestamp + 10))
    assert svc.event_time_timers() == [InternalTimer(20, "a")]


def test_a_timer_registered_at_or_below_the_watermark_fires_on_the_next_advance() -> None:
    svc = service()
    svc.advance_watermark(100, Recorder())
    svc.register_event_time_timer("a", 50)
    rec = Recorder()
    svc.advance_watermark(100, rec)  # an equal watermark is allowed
    assert rec.fired == [InternalTimer(50, "a")]


def test_a_watermark_that_goes_back_is_refused() -> None:
    svc = service()
    svc.advance_watermark(100, Recorder())
    with pytest.raises(CorruptStreamError, match="below the current watermark 100"):
        svc.advance_watermark(99, Recorder())
    assert svc.current_watermark == 100


def test_the_watermark_starts_at_the_minimum() -> None:
    assert service().current_watermark == MIN_WATERMARK


def test_a_callback_that_raises_loses_only_its_own_timer_and_the_service_stays_usable() -> None:
    svc = service()
    svc.register_event_time_timer("a", 1)
    svc.register_event_time_timer("b", 2)

    def boom(timer: InternalTimer) -> None:
        raise RuntimeError("user code failed")

    with pytest.raises(RuntimeError, match="user code failed"):
        svc.advance_watermark(10, boom)
    assert not svc.firing
    assert svc.event_time_timers() == [InternalTimer(2, "b")]
    assert fire_all_event_time(svc) == [InternalTimer(2, "b")]


def test_a_nested_advance_snapshot_or_restore_inside_a_callback_is_refused() -> None:
    svc = service()
    for ts in (1, 2, 3, 4):
        svc.register_event_time_timer("a", ts)
    errors: list[BaseException] = []
    calls = [
        lambda: svc.advance_watermark(10, Recorder()),
        lambda: svc.on_processing_time(10, Recorder()),
        svc.snapshot_view,
        lambda: svc.restore([], range(MP)),
    ]

    def on_timer(timer: InternalTimer) -> None:
        try:
            calls[timer.timestamp - 1]()
        except TimerServiceBusyError as e:
            errors.append(e)

    svc.advance_watermark(10, on_timer)
    assert len(errors) == 4
    assert "while timers are firing" in str(errors[0])


# -- processing time ----------------------------------------------------------------------
def test_processing_time_comes_from_the_injectable_clock() -> None:
    clock = ManualClock(start_ms=1_000)
    svc = service(clock=clock)
    timers = svc.facade(lambda: "k")
    assert timers.current_processing_time() == 1_000
    clock.advance(250)
    assert svc.current_processing_time() == 1_250


def test_due_processing_time_timers_fire_in_order_and_the_next_wake_up_is_reported() -> None:
    clock = ManualClock(start_ms=0)
    svc = service(clock=clock)
    timers = {"k": svc.facade(lambda: "k"), "j": svc.facade(lambda: "j")}
    timers["k"].register_processing_time_timer(300)
    timers["j"].register_processing_time_timer(100)
    timers["k"].register_processing_time_timer(200)
    assert svc.next_processing_time() == 100
    clock.advance(250)
    rec = Recorder()
    assert svc.on_processing_time(svc.current_processing_time(), rec) == 2
    assert rec.fired == [InternalTimer(100, "j"), InternalTimer(200, "k")]
    assert svc.next_processing_time() == 300
    clock.advance(50)
    rec = Recorder()
    svc.on_processing_time(clock.time_ms(), rec)
    assert rec.fired == [InternalTimer(300, "k")]
    assert svc.next_processing_time() is None


def test_processing_time_timers_registered_while_firing_fire_when_already_due() -> None:
    svc = service()
    svc.register_processing_time_timer("a", 10)
    order: list[Any] = []

    def on_timer(timer: InternalTimer) -> None:
        order.append((timer.timestamp, timer.key))
        if timer.key == "a":
            svc.register_processing_time_timer("b", 5)
            svc.register_processing_time_timer("c", 1_000)

    svc.on_processing_time(100, on_timer)
    assert order == [(10, "a"), (5, "b")]
    assert svc.next_processing_time() == 1_000


def test_the_wake_up_hook_hears_of_each_registration_that_makes_the_next_time_earlier() -> None:
    heard: list[int] = []
    svc = service(on_earlier_processing_time=heard.append)
    svc.register_processing_time_timer("a", 500)
    svc.register_processing_time_timer("b", 700)  # later: no new wake-up
    svc.register_processing_time_timer("c", 300)
    svc.register_processing_time_timer("c", 300)  # duplicate: nothing new
    svc.register_processing_time_timers(["x", "y"], [900, 200])
    svc.register_event_time_timer("e", 1)  # event time: not a wake-up
    assert heard == [500, 300, 200]


# -- the user-facing facade ---------------------------------------------------------------
def test_the_facade_binds_timers_to_the_key_current_at_each_call() -> None:
    svc = service()
    box = {"key": "a"}
    timers = svc.facade(lambda: box["key"])
    timers.register_event_time_timer(10)
    box["key"] = "b"
    timers.register_event_time_timer(10)
    timers.register_processing_time_timer(5)
    timers.delete_event_time_timer(10)  # b's, not a's
    assert svc.event_time_timers() == [InternalTimer(10, "a")]
    assert svc.processing_time_timers() == [InternalTimer(5, "b")]
    timers.delete_processing_time_timer(5)
    assert svc.num_processing_time_timers() == 0


def test_the_facade_reports_the_current_watermark() -> None:
    svc = service()
    timers = TimerService(svc, lambda: "a")
    assert timers.current_watermark() == MIN_WATERMARK
    svc.advance_watermark(42, Recorder())
    assert timers.current_watermark() == 42


@pytest.mark.parametrize("bad", [1.5, 10.0, "10", None, True, 2**63, -(2**63) - 1, [10]])
@pytest.mark.parametrize(
    "method",
    [
        "register_event_time_timer",
        "register_processing_time_timer",
        "delete_event_time_timer",
        "delete_processing_time_timer",
    ],
)
def test_the_facade_rejects_timestamps_that_are_not_int64_milliseconds(
    method: str, bad: Any
) -> None:
    svc = service()
    timers = svc.facade(lambda: "a")
    with pytest.raises(ConfigurationError, match=method):
        getattr(timers, method)(bad)
    assert svc.num_event_time_timers() == svc.num_processing_time_timers() == 0


def test_the_facade_suggests_rounding_a_float_timestamp() -> None:
    timers = service().facade(lambda: "a")
    with pytest.raises(ConfigurationError, match=r"int\(ts\)"):
        timers.register_event_time_timer(1.5)


def test_the_facade_accepts_numpy_integers_and_stores_python_ints() -> None:
    svc = service()
    svc.facade(lambda: "a").register_event_time_timer(np.int64(7))
    [timer] = svc.event_time_timers()
    assert type(timer.timestamp) is int and timer.timestamp == 7


def test_the_facade_needs_a_service_and_a_current_key_provider() -> None:
    with pytest.raises(ConfigurationError, match="current_key provider"):
        TimerService(service(), "a")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="InternalTimerService"):
        TimerService(object(), lambda: "a")  # type: ignore[arg-type]


def test_an_unhashable_key_is_reported_as_an_unsupported_key() -> None:
    svc = service()
    with pytest.raises(UnsupportedKeyError, match="hashable key"):
        svc.register_event_time_timer(["a", "list"], 10)


def test_the_internal_service_validates_timestamps_too() -> None:
    svc = service()
    with pytest.raises(ConfigurationError, match="register_event_time_timer"):
        svc.register_event_time_timer("a", "10")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="advance_watermark"):
        svc.advance_watermark(1.0, Recorder())  # type: ignore[arg-type]


# -- bulk registration ----------------------------------------------------------------------
def test_bulk_registration_equals_one_by_one_registration_including_dedupe() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 50, 5_000).tolist()
    ts = (rng.integers(0, 20, 5_000) * 1000).tolist()
    ns = [f"w{t}" if i % 3 else None for i, t in enumerate(ts)]
    bulk, single = service(), service()
    added = bulk.register_event_time_timers(keys, ts, namespaces=ns)
    for k, t, n in zip(keys, ts, ns):
        single.register_event_time_timer(k, t, n)
    assert added == single.num_event_time_timers() == bulk.num_event_time_timers()
    assert bulk.event_time_timers() == single.event_time_timers()  # same order, ties included
    assert bulk.register_event_time_timers(keys, ts, namespaces=ns) == 0


@pytest.mark.parametrize("distinct_timestamps", [1, 20, 4_000])
def test_grouped_bulk_registration_of_one_window_equals_one_by_one_registration(
    distinct_timestamps: int,
) -> None:
    """The path a window operator takes: one call per window (one namespace)."""
    rng = np.random.default_rng(distinct_timestamps)
    keys = rng.integers(0, 300, 5_000)
    ts = rng.integers(0, distinct_timestamps, 5_000) * 10
    bulk, single = service(), service()
    bulk.register_event_time_timer(7, 0, "w")  # some timers exist already
    single.register_event_time_timer(7, 0, "w")
    added = bulk.register_event_time_timers(keys, ts, "w")
    for k, t in zip(keys.tolist(), ts.tolist()):
        single.register_event_time_timer(k, t, "w")
    assert added + 1 == single.num_event_time_timers() == bulk.num_event_time_timers()
    assert bulk.event_time_timers() == single.event_time_timers()
    assert all(type(t.key) is int for t in bulk.event_time_timers())


def test_bulk_registration_accepts_numpy_and_arrow_columns() -> None:
    svc = service()
    keys = pa.array(["a", "b", "a"])
    assert svc.register_event_time_timers(keys, np.array([5, 5, 5], dtype=np.int32)) == 2
    assert svc.register_processing_time_timers(np.array([1, 2]), pa.array([9, 8])) == 2
    assert svc.event_time_timers() == [InternalTimer(5, "a"), InternalTimer(5, "b")]
    assert [type(t.key) for t in svc.processing_time_timers()] == [int, int]


def test_bulk_registration_into_a_timestamp_that_already_has_timers_dedupes() -> None:
    svc = service()
    svc.register_event_time_timer("k0", 1000)
    keys = [f"k{i % 100}" for i in range(1_000)]
    assert svc.register_event_time_timers(keys, [1000] * 1_000) == 99
    assert svc.num_event_time_timers() == 100


@pytest.mark.parametrize(
    "keys,timestamps,namespaces,match",
    [
        (["a", "b"], [1], None, "2 keys but 1 timestamps"),
        (["a"], [1], ["w", "v"], "2 namespaces"),
        ("abc", [1, 2, 3], None, "sequence of keys"),
        (np.zeros((1, 1)), [1], None, "flat sequence of keys"),
        (["a"], [1.5], None, "integer timestamps"),
        (["a"], pa.array([None], type=pa.int64()), None, "without nulls"),
        (["a"], [[1]], None, "flat sequence"),
        (["a"], ["1"], None, "integer timestamps"),
        (["a"], np.array([2**64 - 1], dtype=np.uint64), None, "above"),
    ],
)
def test_bulk_registration_rejects_malformed_arguments(
    keys: Any, timestamps: Any, namespaces: Any, match: str
) -> None:
    svc = service()
    with pytest.raises(ConfigurationError, match=match):
        svc.register_event_time_timers(keys, timestamps, namespaces=namespaces)
    assert svc.num_event_time_timers() == 0


# -- snapshots (M-T3, M-T4) ---------------------------------------------------------------
def payload_timers(payload: dict[str, Any], queue: str) -> list[tuple[int, Any, Any]]:
    return [e for groups in payload["key_groups"].values() for e in groups[queue]]


def test_M_T4_the_snapshot_is_picklable_and_groups_each_timer_with_its_keys_key_group() -> None:
    svc = service()
    for i in range(200):
        svc.register_event_time_timer(f"user-{i}", 1_000 + i % 5)
        svc.register_processing_time_timer(i, 50_000 - i, namespace=("w", i % 3))
    payload = pickle.loads(pickle.dumps(svc.snapshot()))
    assert payload["format"] == TIMER_SNAPSHOT_FORMAT
    assert payload["max_parallelism"] == MP
    for kg, queues in payload["key_groups"].items():
        for queue in ("event_time", "processing_time"):
            for _ts, key, _ in queues[queue]:
                assert key_group_for(key, MP) == kg
            stamps = [e[0] for e in queues[queue]]
            assert stamps == sorted(stamps)
    assert sorted(payload_timers(payload, "event_time")) == sorted(
        tuple(t) for t in svc.event_time_timers()
    )
    assert len(payload_timers(payload, "processing_time")) == 200


def test_M_T3_a_taken_snapshot_view_never_changes_after_later_writes_and_firings() -> None:
    svc = service()
    for key in range(20):
        svc.register_event_time_timer(key, 100)  # one shared timestamp
        svc.register_event_time_timer(key, 1_000 + key)  # one timestamp each
        svc.register_processing_time_timer(key, 7)
    before = svc.snapshot()
    view = svc.snapshot_view()
    svc.register_event_time_timer("new", 100)  # write into a frozen bucket
    svc.register_event_time_timer("new", 100, "w")  # ... under a new namespace
    svc.delete_event_time_timer(3, 100)  # delete inside a frozen bucket
    svc.delete_event_time_timer(4, 1_004)  # delete a frozen bucket's last timer
    svc.register_event_time_timer(4, 1_004)  # ... and recreate it
    svc.register_event_time_timers(list(range(100)), [100] * 100)  # bulk into frozen
    svc.on_processing_time(10, Recorder())  # fire a frozen bucket
    svc.advance_watermark(1_010, Recorder())  # fire more frozen buckets
    assert view.materialize() == before
    assert view.size_hint() == 60
    assert svc.snapshot() != before


WRITES_AFTER_A_SNAPSHOT = {
    "register, same namespace": lambda s: s.register_event_time_timer("new", 100),
    "register, new namespace": lambda s: s.register_event_time_timer("new", 100, "w"),
    "bulk, one timestamp": lambda s: s.register_event_time_timers(list(range(100)), [100] * 100),
    "bulk, grouped": lambda s: s.register_event_time_timers(
        list(range(200)), [100 if i % 2 else 1_001 for i in range(200)]
    ),
    "bulk, distinct timestamps": lambda s: s.register_event_time_timers(
        list(range(30, 130)), [1_000 + i for i in range(100)]
    ),
    "bulk, per-timer namespaces": lambda s: s.register_event_time_timers(
        [50, 51], [100, 100], namespaces=[None, "w"]
    ),
    "delete inside a bucket": lambda s: s.delete_event_time_timer(3, 100),
    "delete a bucket's last timer": lambda s: s.delete_event_time_timer(4, 1_004),
    "fire a shared bucket": lambda s: s.advance_watermark(100, Recorder()),
    "fire lone timers": lambda s: s.on_processing_time(10, Recorder()),
    "restore into": lambda s: s.restore([filled().snapshot()], range(MP)),
}


@pytest.mark.parametrize("write", sorted(WRITES_AFTER_A_SNAPSHOT))
def test_M_T3_no_kind_of_write_after_a_snapshot_changes_the_view(write: str) -> None:
    svc = service()
    for key in range(20):
        svc.register_event_time_timer(key, 100)
        svc.register_event_time_timer(key, 1_000 + key)
        svc.register_processing_time_timer(key, key % 3)
    view = svc.snapshot_view()
    before = svc.snapshot()
    WRITES_AFTER_A_SNAPSHOT[write](svc)
    assert svc.snapshot() != before  # the write did change the live timers
    assert view.materialize() == before


def test_lazy_deletion_does_not_let_the_heap_grow_without_bound() -> None:
    svc = service()
    for round_ in range(50):
        for i in range(100):
            svc.register_event_time_timer("k", round_ * 1_000 + i)
        for i in range(100):
            svc.delete_event_time_timer("k", round_ * 1_000 + i)
    svc.register_event_time_timer("k", 5)
    assert len(svc._event._heap) <= 200
    assert fire_all_event_time(svc) == [InternalTimer(5, "k")]


def test_M_T3_a_second_snapshot_sees_the_writes_after_the_first() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    first = svc.snapshot_view()
    svc.register_event_time_timer("b", 10)
    second = svc.snapshot_view()
    svc.register_event_time_timer("c", 10)
    svc.delete_event_time_timer("a", 10)
    assert [e[1] for e in payload_timers(first.materialize(), "event_time")] == ["a"]
    assert sorted(e[1] for e in payload_timers(second.materialize(), "event_time")) == ["a", "b"]
    assert svc.event_time_timers() == [InternalTimer(10, "b"), InternalTimer(10, "c")]


def test_M_T3_the_view_materializes_on_another_thread_while_the_task_keeps_registering() -> None:
    svc = service()
    svc.register_event_time_timers(list(range(5_000)), [i % 10 for i in range(5_000)])
    expected = svc.snapshot()
    view = svc.snapshot_view()
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.update(result=view.materialize()))
    worker.start()
    for i in range(5_000):
        svc.register_event_time_timer(i, i % 10 + 1)
        svc.delete_event_time_timer(i, i % 10)
    worker.join(timeout=60)
    assert box["result"] == expected


def test_a_released_view_cannot_be_materialized() -> None:
    view = service().snapshot_view()
    view.release()
    view.release()
    with pytest.raises(ConfigurationError, match="released"):
        view.materialize()


def test_an_empty_service_snapshots_and_restores_to_an_empty_service() -> None:
    payload = service().snapshot()
    assert payload["key_groups"] == {}
    restored = service()
    restored.restore([payload], range(MP))
    assert restored.num_event_time_timers() == restored.num_processing_time_timers() == 0


def filled(max_parallelism: int = MP) -> InternalTimerService:
    svc = service(max_parallelism)
    for i in range(300):
        svc.register_event_time_timer(f"k{i}", 1_000 + i % 17)
        svc.register_event_time_timer(f"k{i}", 5_000, namespace=("window", i % 4))
        svc.register_processing_time_timer(i, 90_000 + i)
    return svc


def test_M_T4_restoring_at_the_same_parallelism_restores_every_timer() -> None:
    svc = filled()
    restored = service()
    restored.restore([pickle.loads(pickle.dumps(svc.snapshot()))], range(MP))
    assert all_timers(restored) == all_timers(svc)
    assert [t.timestamp for t in fire_all_event_time(restored)] == sorted(
        t.timestamp for t in svc.event_time_timers()
    )


def test_M_T4_rescaling_1_to_3_splits_timers_by_key_group_and_3_to_2_merges_them() -> None:
    original = filled()
    payload = original.snapshot()
    three = []
    for i in range(3):
        sub = service()
        sub.restore([payload], key_group_range(i, 3, MP))
        three.append(sub)
        for timer in sub.event_time_timers() + sub.processing_time_timers():
            assert key_group_for(timer.key, MP) in key_group_range(i, 3, MP)
    split = [all_timers(s) for s in three]
    for q in (0, 1):
        parts = [s[q] for s in split]
        assert sum(len(p) for p in parts) == len(all_timers(original)[q])  # no duplicates
        assert set().union(*parts) == all_timers(original)[q]  # none lost
        assert all(parts)  # every subtask got some
    payloads = [pickle.loads(pickle.dumps(s.snapshot())) for s in three]
    two = []
    for i in range(2):
        sub = service()
        sub.restore(payloads, key_group_range(i, 2, MP))
        two.append(sub)
    for q in (0, 1):
        parts = [all_timers(s)[q] for s in two]
        assert sum(len(p) for p in parts) == len(all_timers(original)[q])
        assert parts[0] | parts[1] == all_timers(original)[q]


def test_M_T4_restore_keeps_a_timer_present_in_several_payloads_once() -> None:
    svc = filled()
    payload = svc.snapshot()
    restored = service()
    restored.restore([payload, payload], range(MP))
    assert restored.num_event_time_timers() == svc.num_event_time_timers()


def test_restore_reports_the_earliest_restored_processing_time_to_the_wake_up_hook() -> None:
    svc = filled()
    heard: list[int] = []
    restored = service(on_earlier_processing_time=heard.append)
    restored.restore([svc.snapshot()], range(MP))
    assert heard == [90_000]


def test_a_restored_service_starts_at_the_minimum_watermark_and_fires_restored_timers() -> None:
    svc = service()
    svc.register_event_time_timer("a", 10)
    svc.advance_watermark(5, Recorder())
    restored = service()
    restored.restore([svc.snapshot()], range(MP))
    assert restored.current_watermark == MIN_WATERMARK
    rec = Recorder()
    restored.advance_watermark(10, rec)
    assert rec.fired == [InternalTimer(10, "a")]


@pytest.mark.parametrize(
    "payload,match",
    [
        ({"format": 1, "states": {}}, "not a timer snapshot"),
        ("nope", "not a timer snapshot"),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 2,
                "max_parallelism": MP,
                "key_groups": {},
            },
            "version 2",
        ),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 1,
                "max_parallelism": 32,
                "key_groups": {},
            },
            "max_parallelism 32",
        ),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 1,
                "max_parallelism": MP,
                "key_groups": [1],
            },
            "'key_groups' mapping",
        ),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 1,
                "max_parallelism": MP,
                "key_groups": {0: {"event_time": [(1.5, "a", None)]}},
            },
            "timestamp: int",
        ),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 1,
                "max_parallelism": MP,
                "key_groups": {0: {"event_time": {"a": 1}}},
            },
            "not a list",
        ),
        (
            {
                "format": TIMER_SNAPSHOT_FORMAT,
                "version": 1,
                "max_parallelism": MP,
                "key_groups": {0: [1]},
            },
            "not a mapping",
        ),
    ],
)
def test_restore_rejects_what_is_not_a_matching_timer_snapshot(payload: Any, match: str) -> None:
    svc = service()
    with pytest.raises(ConfigurationError, match=match):
        svc.restore([payload], range(MP))
    assert svc.num_event_time_timers() == 0


def test_restore_needs_a_key_group_range_and_a_list_of_payloads() -> None:
    svc = service()
    payload = filled().snapshot()
    with pytest.raises(ConfigurationError, match="as a range"):
        svc.restore([payload], [0, 1])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="wrap it in a list"):
        svc.restore(payload, range(MP))  # type: ignore[arg-type]


def test_key_groups_outside_the_range_are_skipped_without_being_checked() -> None:
    svc = service()
    bad = {
        "format": TIMER_SNAPSHOT_FORMAT,
        "version": 1,
        "max_parallelism": MP,
        "key_groups": {MP - 1: "garbage"},
    }
    svc.restore([bad], range(MP - 1))
    assert svc.num_event_time_timers() == 0


# -- property test against a reference model -------------------------------------------------
KEYS = st.one_of(st.integers(0, 12), st.sampled_from(["a", "b", "c", "d"]))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("reg_e"), KEYS, st.integers(0, 60), st.sampled_from([None, "w"])),
        st.tuples(st.just("del_e"), KEYS, st.integers(0, 60), st.sampled_from([None, "w"])),
        st.tuples(st.just("reg_p"), KEYS, st.integers(0, 60), st.just(None)),
        st.tuples(st.just("del_p"), KEYS, st.integers(0, 60), st.just(None)),
        st.tuples(
            st.just("bulk_e"),
            st.lists(st.tuples(KEYS, st.integers(0, 60)), max_size=80),
            st.just(0),
            st.sampled_from([None, "w"]),
        ),
        st.tuples(st.just("advance"), st.integers(0, 15), st.just(0), st.just(None)),
        st.tuples(st.just("proc"), st.integers(0, 60), st.just(0), st.just(None)),
        st.tuples(st.just("snapshot"), st.just(None), st.just(0), st.just(None)),
        st.tuples(st.just("rescale"), st.integers(1, 4), st.just(0), st.just(None)),
    ),
    max_size=60,
)


class Model:
    """The reference: timers as insertion-ordered lists, fired by a stable sort."""

    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[int, Any, Any]]] = {"e": [], "p": []}
        self.watermark = MIN_WATERMARK

    def register(self, q: str, timer: tuple[int, Any, Any]) -> None:
        if timer not in self.queues[q]:
            self.queues[q].append(timer)

    def delete(self, q: str, timer: tuple[int, Any, Any]) -> None:
        if timer in self.queues[q]:
            self.queues[q].remove(timer)

    def fire(self, q: str, limit: int) -> list[tuple[int, Any, Any]]:
        due = sorted((t for t in self.queues[q] if t[0] <= limit), key=lambda t: t[0])
        self.queues[q] = [t for t in self.queues[q] if t[0] > limit]
        return due


def by_tie(timers: list[tuple[int, Any, Any]]) -> dict[tuple[int, Any], list[Any]]:
    out: dict[tuple[int, Any], list[Any]] = {}
    for t, key, ns in timers:
        out.setdefault((t, ns), []).append(key)
    return out


def rescaled(svc: InternalTimerService, parallelism: int) -> InternalTimerService:
    """Snapshot, restore at ``parallelism``, snapshot those, restore into one subtask."""
    payload = pickle.loads(pickle.dumps(svc.snapshot()))
    parts = []
    for i in range(parallelism):
        sub = service(svc.max_parallelism)
        sub.restore([payload], key_group_range(i, parallelism, svc.max_parallelism))
        parts.append(sub.snapshot())
    merged = service(svc.max_parallelism)
    merged.restore(parts, range(svc.max_parallelism))
    return merged


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_the_service_behaves_like_a_reference_model_across_snapshots_and_rescaling(
    ops: list[tuple[str, Any, int, Any]],
) -> None:
    svc = service(max_parallelism=8)
    model = Model()
    exact_ties = True  # until a rescale reorders ties (any stable order is allowed there)
    views: list[tuple[Any, dict[str, Any]]] = []
    for op, a, b, ns in ops:
        if op == "reg_e":
            svc.register_event_time_timer(a, b, ns)
            model.register("e", (b, a, ns))
        elif op == "del_e":
            svc.delete_event_time_timer(a, b, ns)
            model.delete("e", (b, a, ns))
        elif op == "reg_p":
            svc.register_processing_time_timer(a, b)
            model.register("p", (b, a, None))
        elif op == "del_p":
            svc.delete_processing_time_timer(a, b)
            model.delete("p", (b, a, None))
        elif op == "bulk_e":
            svc.register_event_time_timers([k for k, _ in a] * 2, [t for _, t in a] * 2, ns)
            for k, t in a:
                model.register("e", (t, k, ns))
        elif op in ("advance", "proc"):
            rec = Recorder()
            if op == "advance":
                limit = max(model.watermark, 0) + a
                model.watermark = limit
                svc.advance_watermark(limit, rec)
                expected = model.fire("e", limit)
            else:
                svc.on_processing_time(a, rec)
                expected = model.fire("p", a)
            got = [tuple(t) for t in rec.fired]
            assert [t[0] for t in got] == sorted(t[0] for t in got)  # M-W6: in order
            assert sorted(map(repr, got)) == sorted(map(repr, expected))
            if exact_ties:  # per (timestamp, namespace): keys in registration order
                assert by_tie(got) == by_tie(expected)
        elif op == "snapshot":
            views.append((svc.snapshot_view(), svc.snapshot()))
        elif op == "rescale":
            svc = rescaled(svc, a)
            model.watermark = MIN_WATERMARK
            exact_ties = False
        pending = (svc.event_time_timers(), svc.processing_time_timers())
        for q, timers in zip("ep", pending):
            assert len(timers) == len(model.queues[q])
            assert set(map(tuple, timers)) == set(model.queues[q])
        assert svc.num_event_time_timers() == len(model.queues["e"])
        expected_next = min((t[0] for t in model.queues["p"]), default=None)
        assert svc.next_processing_time() == expected_next
    for view, taken in views:  # M-T3: every view still shows what it saw
        assert view.materialize() == taken


# -- micro-benchmark (reported, not asserted) ----------------------------------------------
def test_micro_benchmark_of_bulk_registration_and_firing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One timer per (key, window): 200k registrations over 20k keys and 10 window ends,
    half of them duplicates; then 100k distinct-timestamp registrations one by one."""
    n = 200_000
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 20_000, n).tolist()
    ends = (rng.integers(0, 10, n) * 60_000 + 59_999).astype(np.int64)
    svc = service(128)
    start = time.perf_counter()
    added = svc.register_event_time_timers(keys, ends)
    bulk_s = time.perf_counter() - start
    start = time.perf_counter()
    snap = svc.snapshot_view()
    view_s = time.perf_counter() - start
    start = time.perf_counter()
    payload = snap.materialize()
    materialize_s = time.perf_counter() - start
    start = time.perf_counter()
    fired = svc.advance_watermark(MAX_WATERMARK, lambda t: None)
    fire_s = time.perf_counter() - start
    one = service(128)
    start = time.perf_counter()
    for i in range(100_000):
        one.register_processing_time_timer(i, 1_000_000 + i)
    single_s = time.perf_counter() - start
    start = time.perf_counter()
    fired_single = one.on_processing_time(MAX_WATERMARK, lambda t: None)
    fire_single_s = time.perf_counter() - start
    restored = service(128)
    start = time.perf_counter()
    restored.restore([payload], range(128))
    restore_s = time.perf_counter() - start
    assert fired == added == restored.num_event_time_timers()
    assert fired_single == 100_000
    with capsys.disabled():
        print(
            f"\n[timer bench] bulk register {n / bulk_s:,.0f}/s ({added:,} distinct); "
            f"fire {fired / fire_s:,.0f}/s; single register {100_000 / single_s:,.0f}/s; "
            f"fire distinct timestamps {fired_single / fire_single_s:,.0f}/s; "
            f"snapshot view {view_s * 1e3:.2f} ms; materialize {materialize_s * 1e3:.0f} ms; "
            f"restore {added / restore_s:,.0f}/s"
        )


def test_M_T4_a_restored_nan_key_timer_is_the_one_nan_key() -> None:
    """Issue 18 item 11: every NaN is one key (as Flink's ``Double.equals``). A timer of
    the NaN key comes back from a checkpoint as a new NaN object; restored, it must be
    the same timer as one registered again for the NaN key (not a second one), and fire
    with the key the keyed state knows (``CANONICAL_NAN``)."""
    from lockgate.core.key_hash import CANONICAL_NAN

    svc = service()
    assert svc.register_event_time_timer(CANONICAL_NAN, 10)
    restored = service()
    restored.restore([pickle.loads(pickle.dumps(svc.snapshot()))], range(MP))
    assert not restored.register_event_time_timer(CANONICAL_NAN, 10), (
        "the restored NaN timer and the NaN key's timer are one timer"
    )
    [timer] = fire_all_event_time(restored)
    assert timer.key is CANONICAL_NAN, "fires with the NaN key the keyed state uses"
