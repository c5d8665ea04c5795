"""State time-to-live: expiry in processing time (a ManualClock) and in event time
(watermarks), update types, visibility, per element (list) and per entry (map)
granularity, cleanup on access and on snapshot (M-T3: measured when the synchronous
part ran), and TTL state in snapshots and restores (M-T4).

Behaviour tests run over the heap backend and over ``CopyingTable``, a table with
only the handles' protocol whose ``get`` returns copies (as the RocksDB backend's)."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import pytest

import lockgate as lg
from lockgate.api.functions import AggregateFunction
from lockgate.core.clock import ManualClock
from lockgate.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from lockgate.state.handles import create_handle
from lockgate.state.keyed import HeapKeyedStateBackend
from lockgate.state.ttl import (
    MIN_WATERMARK,
    StateTtlConfig,
    TtlValue,
    drop_expired,
    strip_ttl,
)
from state_fakes import CopyingTable, Host, flat

TTL = 100


class Env:
    """One keyed state store under test: the heap backend or a copying table."""

    def __init__(self, where: str) -> None:
        self.clock = ManualClock(1_000)
        self.heap = HeapKeyedStateBackend("ttl op", clock=self.clock)
        self.host: Any = self.heap if where == "heap" else Host(self.clock)
        self.tables: dict[str, CopyingTable] | None = None if where == "heap" else {}

    def state(self, desc: StateDescriptor[Any]) -> Any:
        if self.tables is None:
            return self.heap.get_state(desc)
        table = self.tables.setdefault(desc.name, CopyingTable())
        return create_handle(self.host, table, desc, "test")

    def key(self, key: Any) -> None:
        self.host.current_key = key

    def stored(self, name: str) -> dict[Any, Any]:
        """key -> stored form (with TTL wrappers)."""
        if self.tables is None:
            return dict(self.heap.entries().get(name, {}))
        table = self.tables[name]
        return {k: pickle.loads(v) for k, v in table.data.items()}

    def watermark(self, wm: int) -> None:
        self.host.current_watermark = wm

    def record_time(self, ts: int | None) -> None:
        self.host.current_timestamp = ts


@pytest.fixture(params=["heap", "copying table"])
def env(request: pytest.FixtureRequest) -> Env:
    return Env(request.param)


def with_ttl(desc: StateDescriptor[Any], **kw: Any) -> StateDescriptor[Any]:
    desc.enable_time_to_live(StateTtlConfig(kw.pop("ttl", TTL), **kw))
    return desc


# -- the configuration -------------------------------------------------------------------------


def test_a_config_takes_a_timedelta_or_milliseconds_and_equal_configs_compare_equal() -> None:
    a = StateTtlConfig(timedelta(seconds=2))
    assert a.ttl_ms == 2000 and a == StateTtlConfig(2000)
    assert a != StateTtlConfig(2000, update_type="on_read_and_write")
    assert (a.update_type, a.visibility, a.time_characteristic, a.cleanup_on_snapshot) == (
        "on_create_and_write",
        "never_return_expired",
        "processing_time",
        True,
    )
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.ttl_ms = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ttl": 0}, "ttl must be positive"),
        ({"ttl": -5}, "ttl must be positive"),
        ({"ttl": timedelta(0)}, "ttl must be positive"),
        ({"ttl": "1h"}, "ttl must be a datetime.timedelta or an int"),
        ({"ttl": True}, "ttl must be a datetime.timedelta or an int"),
        ({"ttl": 1, "update_type": "on_read"}, "update_type must be one of 'on_create_and_write'"),
        ({"ttl": 1, "visibility": "always"}, "visibility must be one of 'never_return_expired'"),
        ({"ttl": 1, "time_characteristic": "ingestion"}, "time_characteristic must be one of"),
        ({"ttl": 1, "cleanup_on_snapshot": 1}, "cleanup_on_snapshot must be True or False"),
    ],
)
def test_a_bad_config_is_a_configuration_error_naming_the_setting(
    kwargs: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(lg.ConfigurationError, match=message):
        StateTtlConfig(kwargs.pop("ttl"), **kwargs)


def test_the_pyflink_style_builder_and_constants() -> None:
    built = (
        StateTtlConfig.new_builder(timedelta(minutes=1))
        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
        .set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)
        .set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.EventTime)
        .disable_cleanup_on_snapshot()
        .build()
    )
    assert built == StateTtlConfig(
        60_000,
        update_type="on_read_and_write",
        visibility="return_expired_if_not_cleaned_up",
        time_characteristic="event_time",
        cleanup_on_snapshot=False,
    )
    shorthand = (
        StateTtlConfig.new_builder(5)
        .update_ttl_on_read_and_write()
        .return_expired_if_not_cleaned_up()
        .use_event_time()
        .use_processing_time()
        .cleanup_full_snapshot()
        .set_ttl(7)
        .build()
    )
    assert shorthand == StateTtlConfig(
        7, update_type="on_read_and_write", visibility="return_expired_if_not_cleaned_up"
    )
    with pytest.raises(lg.ConfigurationError, match="update_type"):
        StateTtlConfig.new_builder(5).set_update_type("sometimes")
    with pytest.raises(lg.ConfigurationError, match="ttl must be positive"):
        StateTtlConfig.new_builder(0)


@pytest.mark.parametrize("bad", [None, 1000, timedelta(seconds=1), {"ttl": 1}])
def test_enable_time_to_live_needs_a_state_ttl_config(bad: Any) -> None:
    desc: ValueStateDescriptor[Any] = ValueStateDescriptor("v")
    with pytest.raises(
        lg.ConfigurationError,
        match=r"ValueStateDescriptor\('v'\).enable_time_to_live needs an "
        r"lg.StateTtlConfig",
    ):
        desc.enable_time_to_live(bad)
    assert desc.ttl_config is None


def test_handles_of_one_state_must_share_the_ttl_config() -> None:
    b = HeapKeyedStateBackend("op", clock=ManualClock())
    b.get_state(with_ttl(ValueStateDescriptor("v")))
    b.get_state(with_ttl(ValueStateDescriptor("v")))  # an equal config is fine
    with pytest.raises(lg.ConfigurationError, match="'v' is already registered with TTL"):
        b.get_state(ValueStateDescriptor("v"))
    with pytest.raises(lg.ConfigurationError, match="same descriptor settings"):
        b.get_state(with_ttl(ValueStateDescriptor("v"), ttl=5))


def test_ttl_values_are_small_picklable_tuples() -> None:
    tv = TtlValue([1], 5)
    assert pickle.loads(pickle.dumps(tv)) == tv and tv.value == [1] and tv.timestamp == 5


# -- processing time: value, reducing, aggregating ----------------------------------------------


def test_processing_time_a_value_expires_ttl_after_its_write_and_is_cleaned_up_on_access(
    env: Env,
) -> None:
    s = env.state(with_ttl(ValueStateDescriptor("v", default="none")))
    env.key("a")
    s.update("x")
    assert env.stored("v") == {"a": TtlValue("x", 1_000)}
    env.clock.advance(TTL - 1)
    assert s.value() == "x"
    env.clock.advance(1)  # now == stamp + ttl
    assert env.stored("v") == {"a": TtlValue("x", 1_000)}, "still stored until accessed"
    assert s.value() == "none"
    assert env.stored("v") == {}, "the read deleted the expired value"


def test_processing_time_on_create_and_write_reads_do_not_extend_the_lifetime_but_writes_do(
    env: Env,
) -> None:
    s = env.state(with_ttl(ValueStateDescriptor("v")))
    env.key("a")
    s.update(1)
    env.clock.advance(60)
    assert s.value() == 1
    env.clock.advance(40)
    assert s.value() is None, "the read at +60 did not extend it"
    s.update(2)
    env.clock.advance(60)
    s.update(3)  # a write restarts the lifetime
    env.clock.advance(60)
    assert s.value() == 3


def test_processing_time_on_read_and_write_reads_extend_the_lifetime(env: Env) -> None:
    s = env.state(with_ttl(ValueStateDescriptor("v"), update_type="on_read_and_write"))
    env.key("a")
    s.update(1)
    for _ in range(5):
        env.clock.advance(TTL - 1)
        assert s.value() == 1
    assert env.stored("v") == {"a": TtlValue(1, 1_000 + 5 * (TTL - 1))}
    env.clock.advance(TTL)
    assert s.value() is None


def test_return_expired_if_not_cleaned_up_returns_an_expired_value_once(env: Env) -> None:
    s = env.state(
        with_ttl(
            ValueStateDescriptor("v", default=0), visibility="return_expired_if_not_cleaned_up"
        )
    )
    env.key("a")
    s.update(7)
    env.clock.advance(TTL * 3)
    assert s.value() == 7, "not cleaned up yet, so it is returned"
    assert s.value() == 0, "that read cleaned it up"


def test_processing_time_reducing_state_starts_over_after_expiry(env: Env) -> None:
    s = env.state(with_ttl(ReducingStateDescriptor("r", lambda a, b: a + b)))
    env.key("a")
    s.add(1)
    env.clock.advance(50)
    s.add(2)  # a write: the lifetime restarts
    env.clock.advance(60)
    assert s.get() == 3
    env.clock.advance(TTL)
    s.add(10)
    assert s.get() == 10, "the expired sum is not reduced into"
    env.clock.advance(TTL)
    assert s.get() is None and env.stored("r") == {}


class Count(AggregateFunction):
    def create_accumulator(self) -> list[int]:
        return [0]

    def add(self, value: int, acc: list[int]) -> list[int]:
        acc[0] += 1
        return acc

    def get_result(self, acc: list[int]) -> int:
        return acc[0]


def test_processing_time_aggregating_state_uses_a_new_accumulator_after_expiry(env: Env) -> None:
    s = env.state(with_ttl(AggregatingStateDescriptor("n", Count())))
    env.key("a")
    s.add("x")
    s.add("y")
    assert s.get() == 2
    env.clock.advance(TTL)
    assert s.get() is None
    s.add("z")
    assert s.get() == 1
    assert env.stored("n") == {"a": TtlValue([1], 1_000 + TTL)}


# -- processing time: per list element and per map entry ----------------------------------------


def test_list_elements_expire_one_by_one_and_an_all_expired_list_is_absent(env: Env) -> None:
    s = env.state(with_ttl(ListStateDescriptor("l")))
    env.key("a")
    s.add("t0")
    env.clock.advance(30)
    s.add_all(["t30a", "t30b"])
    env.clock.advance(40)
    s.add("t70")
    env.clock.advance(30)  # now = +100: t0 expired
    assert s.get() == ["t30a", "t30b", "t70"]
    assert [e.value for e in env.stored("l")["a"]] == ["t30a", "t30b", "t70"], "cleaned up"
    env.clock.advance(30)
    assert list(s) == ["t70"]
    env.clock.advance(40)
    assert s.get() == [] and env.stored("l") == {}


def test_list_update_stamps_every_element_now_and_reads_restamp_with_on_read_and_write(
    env: Env,
) -> None:
    s = env.state(with_ttl(ListStateDescriptor("l"), update_type="on_read_and_write"))
    env.key("a")
    s.add(1)
    env.clock.advance(80)
    s.update([2, 3])
    assert env.stored("l") == {"a": [TtlValue(2, 1_080), TtlValue(3, 1_080)]}
    env.clock.advance(80)
    assert s.get() == [2, 3]  # a read: restamped at +160
    env.clock.advance(80)
    assert s.get() == [2, 3]
    env.clock.advance(TTL)
    assert s.get() == []


def test_list_return_expired_returns_expired_elements_once(env: Env) -> None:
    s = env.state(with_ttl(ListStateDescriptor("l"), visibility="return_expired_if_not_cleaned_up"))
    env.key("a")
    s.add("old")
    env.clock.advance(TTL)
    s.add("new")
    assert s.get() == ["old", "new"]
    assert s.get() == ["new"]


def test_map_entries_expire_one_by_one(env: Env) -> None:
    s = env.state(with_ttl(MapStateDescriptor("m")))
    env.key("a")
    s.put("early", 1)
    env.clock.advance(50)
    s.put_all({"late": 2, "later": 3})
    env.clock.advance(50)  # "early" expired
    assert "early" not in s and s.get("early", "gone") == "gone"
    with pytest.raises(KeyError):
        s["early"]
    assert s.keys() == ["late", "later"] and len(s) == 2 and not s.is_empty()
    assert s["late"] == 2 and s.items() == [("late", 2), ("later", 3)]
    s.put("early", 9)  # a new write
    env.clock.advance(50)
    assert s.items() == [("early", 9)]
    env.clock.advance(50)
    assert s.is_empty() and env.stored("m") == {}


def test_map_reads_restamp_only_the_entries_read_with_on_read_and_write(env: Env) -> None:
    s = env.state(with_ttl(MapStateDescriptor("m"), update_type="on_read_and_write"))
    env.key("a")
    s.put_all({"read": 1, "unread": 2})
    env.clock.advance(90)
    assert s.get("read") == 1
    assert s.contains("read")
    assert s.keys() == ["read", "unread"]  # keys() does not read values
    env.clock.advance(20)
    assert s.items() == [("read", 1)]
    env.clock.advance(90)
    assert s.values() == [1], "items() was a read at +110"
    env.clock.advance(TTL)
    assert len(s) == 0


def test_map_return_expired_shows_an_expired_entry_once_and_del_of_it_works(env: Env) -> None:
    s = env.state(with_ttl(MapStateDescriptor("m"), visibility="return_expired_if_not_cleaned_up"))
    env.key("a")
    s.put_all({"x": 1, "y": 2})
    env.clock.advance(TTL)
    assert s.get("x") == 1
    assert "x" not in s
    del s["y"]  # visible (not cleaned up) until now
    assert env.stored("m") == {}


def test_map_delete_of_an_expired_entry_is_a_key_error_when_it_is_never_returned(env: Env) -> None:
    s = env.state(with_ttl(MapStateDescriptor("m")))
    env.key("a")
    s.put("x", 1)
    env.clock.advance(TTL)
    with pytest.raises(KeyError):
        del s["x"]
    s.remove("x")
    assert env.stored("m") == {}


# -- event time ---------------------------------------------------------------------------------


def event_ttl(desc: StateDescriptor[Any], **kw: Any) -> StateDescriptor[Any]:
    return with_ttl(desc, time_characteristic="event_time", **kw)


def test_event_time_a_value_is_stamped_with_the_record_timestamp_and_expires_by_watermark(
    env: Env,
) -> None:
    s = env.state(event_ttl(ValueStateDescriptor("v")))
    env.key("a")
    env.record_time(5_000)
    s.update("x")
    assert env.stored("v") == {"a": TtlValue("x", 5_000)}
    env.clock.advance(10 * TTL)
    assert s.value() == "x", "processing time does not expire event-time TTL"
    env.watermark(5_000 + TTL - 1)
    assert s.value() == "x"
    env.watermark(5_000 + TTL)
    assert s.value() is None and env.stored("v") == {}


def test_event_time_without_a_record_timestamp_a_write_is_stamped_with_the_watermark(
    env: Env,
) -> None:
    s = env.state(event_ttl(ListStateDescriptor("l")))
    env.key("a")
    assert s.get() == []
    env.watermark(2_000)
    s.add("at wm")  # e.g. in a timer without a timestamp
    env.record_time(2_050)
    s.add("at ts")
    assert env.stored("l") == {"a": [TtlValue("at wm", 2_000), TtlValue("at ts", 2_050)]}
    env.watermark(2_000 + TTL)
    assert s.get() == ["at ts"]
    env.watermark(2_050 + TTL)
    assert s.get() == [] and env.stored("l") == {}


def test_event_time_nothing_expires_before_the_first_watermark(env: Env) -> None:
    s = env.state(event_ttl(MapStateDescriptor("m")))
    env.key("a")
    s.put("x", 1)  # stamped MIN_WATERMARK
    assert s.items() == [("x", 1)]
    env.watermark(MIN_WATERMARK + TTL)
    assert s.items() == []


def test_event_time_on_read_and_write_restamps_with_the_current_record(env: Env) -> None:
    s = env.state(event_ttl(ReducingStateDescriptor("r", max), update_type="on_read_and_write"))
    env.key("a")
    env.record_time(1_000)
    s.add(3)
    env.record_time(1_090)
    env.watermark(1_050)
    assert s.get() == 3  # restamped 1_090
    env.watermark(1_000 + TTL)
    assert s.get() == 3
    env.watermark(1_090 + TTL)
    assert s.get() is None


# -- cleanup on snapshot (heap) -----------------------------------------------------------------


def heap() -> HeapKeyedStateBackend:
    return HeapKeyedStateBackend("ttl op", max_parallelism=16, clock=ManualClock(0))


def advance(b: HeapKeyedStateBackend, ms: int) -> None:
    clock = b.clock
    assert isinstance(clock, ManualClock)
    clock.advance(ms)


def test_m_t3_materialize_leaves_out_what_was_expired_when_the_synchronous_part_ran() -> None:
    b = heap()
    v = b.get_state(with_ttl(ValueStateDescriptor("v")))
    lst = b.get_state(with_ttl(ListStateDescriptor("l")))
    m = b.get_state(with_ttl(MapStateDescriptor("m")))
    plain = b.get_state(ValueStateDescriptor("plain"))
    for key in ("old", "young"):  # "old" written at 0, "young" at 50
        b.current_key = key
        v.update(key)
        lst.add(key)
        m.put(key, 1)
        plain.update(key)
        if key == "old":
            advance(b, 50)
    lst.add("young too")
    m.put("old", 2)  # a rewrite at 50
    advance(b, 50)  # now 100: the writes at 0 expired
    snap = b.snapshot()
    advance(b, 1_000)  # everything expires before materialize
    got = snap.materialize()
    snap.release()
    assert flat(got, "v") == {"young": TtlValue("young", 50)}
    assert flat(got, "l") == {"young": [TtlValue("young", 50), TtlValue("young too", 50)]}
    assert flat(got, "m") == {"young": {"young": TtlValue(1, 50), "old": TtlValue(2, 50)}}
    assert flat(got, "plain") == {"old": "old", "young": "young"}, "state without TTL is all kept"
    assert sorted(b.keys("v")) == ["old", "young"], "snapshot cleanup does not touch live state"


def test_m_t3_snapshot_cleanup_in_event_time_uses_the_watermark_at_snapshot_time() -> None:
    b = heap()
    s = b.get_state(event_ttl(MapStateDescriptor("m")))
    b.current_key = "k"
    b.current_timestamp = 0
    s.put("early", 1)
    b.current_timestamp = 60
    s.put("late", 2)
    b.current_watermark = TTL
    snap = b.snapshot()
    b.current_watermark = 10 * TTL
    got = flat(snap.materialize(), "m")
    snap.release()
    assert got == {"k": {"late": TtlValue(2, 60)}}


def test_m_t3_cleanup_on_snapshot_can_be_turned_off() -> None:
    b = heap()
    s = b.get_state(with_ttl(ValueStateDescriptor("v"), cleanup_on_snapshot=False))
    b.current_key = "k"
    s.update(1)
    advance(b, TTL)
    snap = b.snapshot()
    assert flat(snap.materialize(), "v") == {"k": TtlValue(1, 0)}
    snap.release()


def test_m_t3_snapshot_cleanup_never_changes_the_frozen_layers_other_snapshots_read() -> None:
    b = heap()
    s = b.get_state(with_ttl(ListStateDescriptor("l")))
    b.current_key = "k"
    s.add("a")
    advance(b, 60)
    s.add("b")
    first = b.snapshot()
    advance(b, 50)
    second = b.snapshot()
    assert flat(second.materialize(), "l") == {"k": [TtlValue("b", 60)]}
    assert flat(first.materialize(), "l") == {"k": [TtlValue("a", 0), TtlValue("b", 60)]}
    second.release()
    first.release()
    assert b.entries()["l"] == {"k": [TtlValue("a", 0), TtlValue("b", 60)]}


def test_m_t3_ttl_state_is_isolated_from_writes_after_the_snapshot() -> None:
    b = heap()
    s = b.get_state(with_ttl(MapStateDescriptor("m"), update_type="on_read_and_write"))
    b.current_key = "k"
    s.put("x", [1])
    snap = b.snapshot()
    advance(b, 10)
    v = s["x"]  # a read: restamps
    v.append(2)
    s["x"] = v
    s["y"] = 0
    assert flat(snap.materialize(), "m") == {"k": {"x": TtlValue([1], 0)}}
    snap.release()
    assert b.entries()["m"] == {"k": {"x": TtlValue([1, 2], 10), "y": TtlValue(0, 10)}}


def test_m_t3_a_ttl_wrapped_mutable_value_changed_in_place_after_a_snapshot_does_not_change_it() -> (
    None
):
    b = heap()
    v = b.get_state(with_ttl(ValueStateDescriptor("v")))
    agg = b.get_state(with_ttl(AggregatingStateDescriptor("n", Count())))
    b.current_key = "k"
    v.update(["a"])
    agg.add("x")
    snap = b.snapshot()
    v.value().append("b")  # in place, no update()
    agg.add("y")  # Count.add changes the list in place
    got = snap.materialize()
    snap.release()
    assert flat(got, "v") == {"k": TtlValue(["a"], 0)}
    assert flat(got, "n") == {"k": TtlValue([1], 0)}
    assert v.value() == ["a", "b"] and agg.get() == 2


def test_m_t3_an_immutable_ttl_wrapped_value_is_not_copied_on_read_after_a_snapshot() -> None:
    b = heap()
    v = b.get_state(with_ttl(ValueStateDescriptor("v")))
    b.current_key = "k"
    value = ("t", 1)
    v.update(value)
    snap = b.snapshot()
    assert v.value() is value
    snap.release()


# -- TTL state in snapshots and restores (M-T4) -------------------------------------------------


def test_m_t4_restored_ttl_state_keeps_its_timestamps_and_expires_on_schedule() -> None:
    b = heap()
    s = b.get_state(with_ttl(ListStateDescriptor("l")))
    b.current_key = "k"
    s.add(1)
    advance(b, 50)
    s.add(2)
    snap = b.snapshot()
    data = pickle.loads(pickle.dumps(snap.materialize()))
    snap.release()
    restored = HeapKeyedStateBackend("ttl op", max_parallelism=16, clock=ManualClock(TTL))
    restored.restore([data], range(16))
    r = restored.get_state(with_ttl(ListStateDescriptor("l")))
    restored.current_key = "k"
    assert r.get() == [2]
    advance(restored, 50)
    assert r.get() == []


@pytest.mark.parametrize("written_with_ttl", [True, False])
def test_m_t4_changing_the_ttl_setting_of_restored_state_is_refused(written_with_ttl: bool) -> None:
    b = heap()
    desc: MapStateDescriptor[Any] = MapStateDescriptor("m")
    s = b.get_state(with_ttl(desc) if written_with_ttl else desc)
    b.current_key = "k"
    s.put("x", 1)
    snap = b.snapshot()
    data = snap.materialize()
    snap.release()
    restored = heap()
    restored.restore([data], range(16))
    other: MapStateDescriptor[Any] = MapStateDescriptor("m")
    with pytest.raises(
        lg.ConfigurationError,
        match="'m' holds values stored " + ("with" if written_with_ttl else "without") + " TTL",
    ):
        restored.get_state(other if written_with_ttl else with_ttl(other))
    same: MapStateDescriptor[Any] = MapStateDescriptor("m")
    ok = restored.get_state(with_ttl(same) if written_with_ttl else same)
    restored.current_key = "k"
    assert ok.items() == [("x", 1)]


def test_m_t4_restoring_into_registered_state_with_another_ttl_setting_is_refused() -> None:
    b = heap()
    s = b.get_state(ValueStateDescriptor("v"))
    b.current_key = "k"
    s.update(1)
    snap = b.snapshot()
    data = snap.materialize()
    snap.release()
    target = heap()
    target.get_state(with_ttl(ValueStateDescriptor("v")))
    with pytest.raises(lg.ConfigurationError, match="stored without TTL"):
        target.restore([data], range(16))


# -- strip_ttl and drop_expired -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, stored, visible",
    [
        ("value", TtlValue({"a": 1}, 5), {"a": 1}),
        ("reducing", TtlValue(3, 5), 3),
        ("aggregating", TtlValue([1, 2], 5), [1, 2]),
        ("list", [TtlValue(1, 5), TtlValue(None, 6)], [1, None]),
        ("map", {"x": TtlValue(1, 5), ("t", 1): TtlValue([2], 6)}, {"x": 1, ("t", 1): [2]}),
        ("value", 7, 7),
        ("list", [1, 2], [1, 2]),
        ("map", {"x": 1}, {"x": 1}),
    ],
)
def test_strip_ttl_returns_the_user_visible_value(kind: str, stored: Any, visible: Any) -> None:
    assert strip_ttl(kind, stored) == visible


def test_strip_ttl_of_an_unknown_kind_is_an_error() -> None:
    with pytest.raises(lg.ConfigurationError, match="unknown state kind 'bag'"):
        strip_ttl("bag", 1)


def test_drop_expired_never_changes_its_input() -> None:
    config = StateTtlConfig(10)
    stored = [TtlValue(1, 0), TtlValue(2, 5)]
    assert drop_expired("list", stored, config, 12) == [TtlValue(2, 5)]
    assert stored == [TtlValue(1, 0), TtlValue(2, 5)]
    assert drop_expired("list", stored, config, 9) is stored
    assert drop_expired("list", stored, config, 15) is None
    entries = {"a": TtlValue(1, 0), "b": TtlValue(2, 5)}
    assert drop_expired("map", entries, config, 12) == {"b": TtlValue(2, 5)}
    assert len(entries) == 2
    assert drop_expired("value", TtlValue(1, 0), config, 10) is None
    assert drop_expired("value", TtlValue(1, 0), config, 9) == TtlValue(1, 0)
