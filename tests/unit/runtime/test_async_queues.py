"""The ordered and unordered element queues of async I/O (M-W7).

M-W7: ordered: results leave in input order; a watermark is an always-complete entry.
Unordered: a watermark splits the queue into segments; results leave in any order within a
segment; a segment leaves only when all segments before it have; a watermark gets a segment
of its own. A full queue makes the operator wait (backpressure). A watermark arrival tries
to emit completed entries at once.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.core.elements import Watermark
from lockgate.errors import ConfigurationError
from lockgate.runtime.async_queue import (
    Completion,
    ElementQueue,
    OrderedElementQueue,
    QueueFullError,
    RecordEntry,
    UnorderedElementQueue,
)

QUEUES = [
    pytest.param(OrderedElementQueue, id="ordered"),
    pytest.param(UnorderedElementQueue, id="unordered"),
]


class Out:
    """Records what leaves a queue: ("r", record, results) and ("w", timestamp)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def emit_results(self, record: Any, results: list[Any]) -> None:
        self.events.append(("r", record, list(results)))

    def emit_watermark(self, watermark: Watermark) -> None:
        self.events.append(("w", watermark.timestamp))

    def take(self) -> list[tuple[Any, ...]]:
        events, self.events = self.events, []
        return events


def r(record: Any, *results: Any) -> tuple[Any, ...]:
    return ("r", record, list(results))


def w(ts: int) -> tuple[Any, ...]:
    return ("w", ts)


# ----------------------------------------------------------------------------- ordered


def test_m_w7_an_ordered_queue_emits_results_in_input_order_when_later_records_complete_first() -> (
    None
):
    q, out = OrderedElementQueue(10), Out()
    a, b, c = q.add_record("a"), q.add_record("b"), q.add_record("c")
    c.complete(["C"])
    b.complete(["B1", "B2"])
    assert q.emit_completed(out) == 0 and out.take() == []
    assert not q.has_completed()
    a.complete([])
    assert q.has_completed()
    assert q.emit_completed(out) == 3
    assert out.take() == [r("a"), r("b", "B1", "B2"), r("c", "C")]
    assert q.is_empty()


def test_m_w7_an_ordered_queue_holds_a_watermark_until_every_record_before_it_has_left() -> None:
    q, out = OrderedElementQueue(10), Out()
    a = q.add_record("a")
    q.add_watermark(Watermark(5))
    b = q.add_record("b")
    b.complete(["B"])
    assert q.emit_completed(out) == 0
    a.complete(["A"])
    q.emit_completed(out)
    assert out.take() == [r("a", "A"), w(5), r("b", "B")]


def test_m_w7_an_ordered_queue_emits_a_completed_record_behind_a_watermark_with_it() -> None:
    q, out = OrderedElementQueue(10), Out()
    q.add_watermark(Watermark(1))
    a = q.add_record("a")
    q.add_watermark(Watermark(2))
    a.complete(["A"])
    q.emit_completed(out)
    assert out.take() == [w(1), r("a", "A"), w(2)]


# --------------------------------------------------------------------------- unordered


def test_m_w7_an_unordered_queue_emits_a_segments_records_in_completion_order() -> None:
    q, out = UnorderedElementQueue(10), Out()
    a, b, c = q.add_record("a"), q.add_record("b"), q.add_record("c")
    c.complete(["C"])
    assert q.has_completed()
    q.emit_completed(out)
    assert out.take() == [r("c", "C")]
    a.complete(["A"])
    b.complete(["B"])
    q.emit_completed(out)
    assert out.take() == [r("a", "A"), r("b", "B")]
    assert q.is_empty()


def test_m_w7_an_unordered_queue_holds_a_record_completed_behind_a_watermark_until_the_watermark_left() -> (
    None
):
    q, out = UnorderedElementQueue(10), Out()
    a = q.add_record("a")
    q.add_watermark(Watermark(7))
    b = q.add_record("b")
    b.complete(["B"])
    assert not q.has_completed()
    assert q.emit_completed(out) == 0 and out.take() == []
    a.complete(["A"])
    q.emit_completed(out)
    assert out.take() == [r("a", "A"), w(7), r("b", "B")]


def test_m_w7_an_unordered_queue_gives_each_of_two_watermarks_a_segment_of_its_own() -> None:
    q, out = UnorderedElementQueue(10), Out()
    a = q.add_record("a")
    q.add_watermark(Watermark(1))
    q.add_watermark(Watermark(2))
    b = q.add_record("b")
    q.add_watermark(Watermark(3))
    c = q.add_record("c")
    c.complete([])
    b.complete([])
    q.emit_completed(out)
    assert out.take() == []
    a.complete([])
    q.emit_completed(out)
    assert out.take() == [r("a"), w(1), w(2), r("b"), w(3), r("c")]


@pytest.mark.parametrize("queue_type", QUEUES)
def test_m_w7_a_watermark_with_nothing_in_front_of_it_leaves_at_the_next_emit(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(4), Out()
    q.add_watermark(Watermark(3))
    assert q.has_completed()
    assert q.emit_completed(out) == 1
    assert out.take() == [w(3)]
    assert q.is_empty()


@pytest.mark.parametrize("queue_type", QUEUES)
def test_m_w7_a_watermark_arrival_emits_records_completed_before_it_arrived(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(4), Out()
    q.add_record("a").complete(["A"])  # completed, but nothing emitted it yet
    q.add_watermark(Watermark(3))
    q.emit_completed(out)
    assert out.take() == [r("a", "A"), w(3)]


# ---------------------------------------------------------------------------- capacity


@pytest.mark.parametrize("queue_type", QUEUES)
def test_m_w7_a_full_queue_refuses_records_and_watermarks_until_an_entry_left(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(2), Out()
    a = q.add_record("a")
    q.add_watermark(Watermark(1))
    assert len(q) == 2 and not q.has_capacity()
    with pytest.raises(QueueFullError, match="full"):
        q.add_record("b")
    with pytest.raises(QueueFullError):
        q.add_watermark(Watermark(2))
    assert q.pending_inputs() == ["a", Watermark(1)]  # the refused entries left no trace
    a.complete([])
    assert not q.has_capacity()  # completed is not emitted: the entry still holds its place
    q.emit_completed(out)
    assert q.has_capacity() and len(q) == 0
    q.add_record("b")
    q.add_record("c")
    assert not q.has_capacity()


@pytest.mark.parametrize("queue_type", QUEUES)
@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "3", None])
def test_a_queue_rejects_a_capacity_that_is_not_a_positive_int(
    queue_type: type[ElementQueue], capacity: Any
) -> None:
    with pytest.raises(ConfigurationError, match="capacity"):
        queue_type(capacity)


@pytest.mark.parametrize("queue_type", QUEUES)
def test_a_queue_rejects_a_watermark_that_is_not_a_watermark(
    queue_type: type[ElementQueue],
) -> None:
    q = queue_type(2)
    with pytest.raises(ConfigurationError, match="Watermark"):
        q.add_watermark(5)  # type: ignore[arg-type]
    assert q.is_empty()


def test_completions_reject_what_is_not_an_exception_or_a_completion() -> None:
    with pytest.raises(ConfigurationError):
        Completion.failure("boom")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        RecordEntry("a").settle(["x"])  # type: ignore[arg-type]


# ------------------------------------------------------------------- completion/failure


@pytest.mark.parametrize("queue_type", QUEUES)
def test_the_first_completion_of_an_entry_wins_and_later_ones_are_ignored(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(2), Out()
    a = q.add_record("a")
    assert a.complete(["first"]) is True
    assert a.complete(["second"]) is False
    assert a.fail(ValueError("late")) is False
    q.emit_completed(out)
    assert out.take() == [r("a", "first")]


@pytest.mark.parametrize("queue_type", QUEUES)
def test_a_failed_record_raises_its_error_when_it_would_leave_and_stays_in_the_queue(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(4), Out()
    a, b = q.add_record("a"), q.add_record("b")
    a.complete(["A"])
    error = ValueError("lookup failed")
    b.fail(error)
    with pytest.raises(ValueError) as raised:
        q.emit_completed(out)
    assert raised.value is error
    assert out.take() == [r("a", "A")]
    assert q.pending_inputs() == ["b"]
    with pytest.raises(ValueError):
        q.emit_completed(out)


# ------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("queue_type", QUEUES)
def test_m_w7_pending_inputs_lists_unemitted_records_and_watermarks_in_input_order(
    queue_type: type[ElementQueue],
) -> None:
    q, out = queue_type(10), Out()
    a = q.add_record("a")
    q.add_watermark(Watermark(1))
    b = q.add_record("b")
    c = q.add_record("c")
    q.add_watermark(Watermark(2))
    d = q.add_record("d")
    c.complete(["C"])  # completed but not emitted: still in flight for a checkpoint
    assert q.pending_inputs() == ["a", Watermark(1), "b", "c", Watermark(2), "d"]
    a.complete([])
    b.complete([])
    d.complete([])
    q.emit_completed(out)
    assert q.pending_inputs() == []


def test_m_w7_an_unordered_queue_drops_emitted_records_from_pending_inputs_but_keeps_the_rest() -> (
    None
):
    q, out = UnorderedElementQueue(10), Out()
    q.add_record("a")
    q.add_record("b").complete([])
    q.add_record("c")
    q.emit_completed(out)
    assert q.pending_inputs() == ["a", "c"]


@pytest.mark.parametrize("queue_type", QUEUES)
def test_m_w7_a_queue_restored_from_pending_inputs_emits_what_the_original_would_have(
    queue_type: type[ElementQueue],
) -> None:
    def fill(q: ElementQueue, inputs: list[Any]) -> dict[Any, RecordEntry]:
        entries = {}
        for element in inputs:
            if isinstance(element, Watermark):
                q.add_watermark(element)
            else:
                entries[element] = q.add_record(element)
        return entries

    original, out = queue_type(10), Out()
    entries = fill(original, ["z", "a", Watermark(1), "b", "c"])
    entries["z"].complete(["Z"])
    entries["c"].complete(["C"])
    original.emit_completed(out)
    before_checkpoint = out.take()
    snapshot = original.pending_inputs()
    assert before_checkpoint == [r("z", "Z")]
    assert snapshot == ["a", Watermark(1), "b", "c"]

    restored = queue_type(10)
    reissued = fill(restored, snapshot)
    for record in ["c", "b", "a"]:  # the re-issued requests complete in any order
        if record in reissued:
            reissued[record].complete([record.upper()])
    restored.emit_completed(out)
    assert before_checkpoint + out.take() == [
        r("z", "Z"),
        r("a", "A"),
        w(1),
        *(
            [r("c", "C"), r("b", "B")]
            if queue_type is UnorderedElementQueue
            else [r("b", "B"), r("c", "C")]
        ),
    ]


# --------------------------------------------------------- property against a reference


class Reference:
    """M-W7 written as plainly as possible over a flat list of the unemitted inputs."""

    def __init__(self, ordered: bool, capacity: int) -> None:
        self.ordered = ordered
        self.capacity = capacity
        self.inputs: list[tuple[str, int]] = []  # ("r", id) / ("w", ts), input order
        self.completed_at: dict[int, int] = {}  # record id -> completion sequence number
        self.clock = 0

    def full(self) -> bool:
        return len(self.inputs) >= self.capacity

    def complete(self, rid: int) -> None:
        self.clock += 1
        self.completed_at[rid] = self.clock

    def emit(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        while self.inputs:
            kind, value = self.inputs[0]
            if kind == "w":
                out.append(w(value))
                self.inputs.pop(0)
                continue
            if self.ordered:
                if value not in self.completed_at:
                    break
                out.append(r(value, *results_of(value)))
                self.inputs.pop(0)
                continue
            segment = []
            for kind2, value2 in self.inputs:
                if kind2 == "w":
                    break
                segment.append(value2)
            ready = sorted(
                (rid for rid in segment if rid in self.completed_at),
                key=self.completed_at.__getitem__,
            )
            for rid in ready:
                out.append(r(rid, *results_of(rid)))
                self.inputs.remove(("r", rid))
            if len(ready) < len(segment):
                break
        return out

    def pending(self) -> list[Any]:
        return [Watermark(v) if k == "w" else v for k, v in self.inputs]


def results_of(rid: int) -> list[Any]:
    return [(rid, j) for j in range(rid % 3)]


def watermarks_in_front(sequence: list[tuple[Any, ...]]) -> dict[Any, int]:
    """For each record of ``sequence``: how many watermarks precede it."""
    seen, count = {}, 0
    for event in sequence:
        if event[0] == "w":
            count += 1
        else:
            seen[event[1]] = count
    return seen


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
@settings(max_examples=300, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 6))
def test_m_w7_random_completion_orders_and_watermarks_match_the_reference_model(
    ordered: bool, data: st.DataObject, capacity: int
) -> None:
    q: ElementQueue = OrderedElementQueue(capacity) if ordered else UnorderedElementQueue(capacity)
    ref = Reference(ordered, capacity)
    out = Out()
    entries: dict[int, RecordEntry] = {}
    inputs: list[tuple[Any, ...]] = []  # everything that entered, as events
    emitted: list[tuple[Any, ...]] = []
    next_id = ts = 0
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        pending = sorted(rid for rid, e in entries.items() if not e.done)
        ops = ["record", "watermark", "emit"] + (["complete"] * 3 if pending else [])
        op = data.draw(st.sampled_from(ops), label="op")
        assert q.has_capacity() == (not ref.full())
        if op in ("record", "watermark") and ref.full():
            with pytest.raises(QueueFullError):
                q.add_record(-1) if op == "record" else q.add_watermark(Watermark(ts + 1))
            op = "emit"  # the operator waits, processing completions and emitting
        if op == "record":
            next_id += 1
            entries[next_id] = q.add_record(next_id)
            ref.inputs.append(("r", next_id))
            inputs.append(("r", next_id))
        elif op == "watermark":
            ts += 1
            q.add_watermark(Watermark(ts))
            ref.inputs.append(("w", ts))
            inputs.append(w(ts))
            op = "emit"  # a watermark arrival tries to emit completed entries at once
        elif op == "complete":
            rid = data.draw(st.sampled_from(pending), label="complete")
            entries[rid].complete(results_of(rid))
            ref.complete(rid)
        if op == "emit":
            expected = ref.emit()
            assert q.has_completed() == bool(expected)
            assert q.emit_completed(out) == len(expected)
            got = out.take()
            assert got == expected
            emitted += got
        assert len(q) == len(ref.inputs)
        assert q.pending_inputs() == ref.pending()

    # complete everything left, in a random order, and drain
    rest = data.draw(
        st.permutations(sorted(rid for rid, e in entries.items() if not e.done)), label="rest"
    )
    for rid in rest:
        entries[rid].complete(results_of(rid))
        ref.complete(rid)
        expected = ref.emit()
        q.emit_completed(out)
        got = out.take()
        assert got == expected
        emitted += got
    q.emit_completed(out)
    emitted += out.take()
    assert q.is_empty() and q.pending_inputs() == []

    # every input left exactly once, and no record moved across a watermark
    assert sorted(e[1] for e in emitted if e[0] == "r") == sorted(entries)
    assert [e for e in emitted if e[0] == "w"] == [e for e in inputs if e[0] == "w"]
    assert watermarks_in_front(emitted) == watermarks_in_front(inputs)
    if ordered:
        assert [e[1] for e in emitted] == [e[1] for e in inputs]
