"""Property: what a snapshot holds, for random interleavings of records and barriers (M-B4, M-B7,
M-B8, M-B9, M-B6, M-E1).

2 to 4 LocalChannels each carry barriers 1..k (k in 1..4) in order, between random RowBatches
whose records are unique ids; a channel may end early. Hypothesis decides which channel receives
its next element and when the consumer polls (and, for the alternating handler, when the
clock moves). The consumer "processes" a batch by adding its ids to a set; the snapshot of a
checkpoint is a copy of that set taken when ``trigger_snapshot`` is called.

* aligner: snapshot n == the ids in front of barrier n on every channel (all of a channel's
  ids when it ended before barrier n), and every checkpoint triggers.
* tracker: snapshot n ⊇ those ids (at-least-once), and every checkpoint triggers.
* alternating: for every checkpoint that completes, snapshot n plus the ids recorded in flight
  for n == exactly those ids, with no id in both.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.checkpoint.barriers.base import AlignmentInfo
from lockgate.checkpoint.barriers.factory import create_barrier_handler
from lockgate.checkpoint.config import CheckpointingMode
from lockgate.checkpoint.types import CheckpointFailureReason as Reason
from lockgate.core import elements as el
from lockgate.core.batch import RowBatch
from lockgate.core.clock import ManualClock
from lockgate.runtime.channels import LocalChannel
from lockgate.runtime.checkpointed_input import CheckpointedInputGate
from lockgate.runtime.input_gate import InputGate

TIMEOUT_MS = 30
TICK_MS = 20

SAVEPOINT = el.CheckpointOptions(el.CheckpointType.SAVEPOINT)
ALIGNED = el.CheckpointOptions(el.CheckpointType.CHECKPOINT, unaligned=False)
UNALIGNED = el.CheckpointOptions(el.CheckpointType.CHECKPOINT, unaligned=True)


@dataclass
class Scenario:
    channels: list[list[Any]]  # each channel's elements, END_OF_PARTITION last
    k: int

    @property
    def n(self) -> int:
        return len(self.channels)

    def in_front_of(self, cid: int) -> set[int]:
        """Ids in front of barrier ``cid`` on every channel (all ids of a channel that ends
        before it)."""
        ids: set[int] = set()
        for seq in self.channels:
            for e in seq:
                if isinstance(e, el.CheckpointBarrier) and e.checkpoint_id == cid:
                    break
                if isinstance(e, RowBatch):
                    ids.update(e.rows)
        return ids

    def delivered(self) -> list[int]:
        """Checkpoints whose barrier some channel carries."""
        return sorted(
            {
                e.checkpoint_id
                for seq in self.channels
                for e in seq
                if isinstance(e, el.CheckpointBarrier)
            }
        )


@st.composite
def scenarios(
    draw: st.DrawFn, alternating: bool = False, channels: tuple[int, int] = (2, 4)
) -> Scenario:
    n = draw(st.integers(*channels))
    k = draw(st.integers(1, 4))
    kinds = [
        draw(st.sampled_from(["savepoint", "aligned", "unaligned"])) if alternating else "aligned"
        for _ in range(k)
    ]
    next_id = 0
    channels: list[list[Any]] = []
    for _ in range(n):
        last_barrier = draw(st.integers(0, k)) if draw(st.booleans()) else k
        seq: list[Any] = []
        for cid in range(1, last_barrier + 2):
            for _ in range(draw(st.integers(0, 2))):
                size = draw(st.integers(1, 3))
                seq.append(RowBatch(list(range(next_id, next_id + size))))
                next_id += size
            if cid > last_barrier:
                break
            kind = kinds[cid - 1]
            if kind == "savepoint":
                options = SAVEPOINT
            elif kind == "unaligned":
                options = UNALIGNED
            else:  # aligned; under the alternating handler an upstream task may have switched
                switched = alternating and draw(st.integers(0, 3)) == 0
                options = UNALIGNED if switched else ALIGNED
            seq.append(el.CheckpointBarrier(cid, 0, options))
        seq.append(el.END_OF_PARTITION)
        channels.append(seq)
    return Scenario(channels, k)


@dataclass
class Run:
    processed: set[int] = field(default_factory=set)
    snapshots: dict[int, set[int]] = field(default_factory=dict)
    triggers: list[int] = field(default_factory=list)
    unaligned: set[int] = field(default_factory=set)
    aborts: list[tuple[int, Reason]] = field(default_factory=list)
    inflight: dict[int, list[int]] = field(default_factory=dict)
    complete: list[int] = field(default_factory=list)
    per_channel: dict[int, list[int]] = field(default_factory=dict)


class Actions:
    def __init__(self, run: Run) -> None:
        self.run = run

    def trigger_snapshot(self, barrier: el.CheckpointBarrier, info: AlignmentInfo) -> None:
        self.run.triggers.append(barrier.checkpoint_id)
        if info.unaligned:
            self.run.unaligned.add(barrier.checkpoint_id)
        self.run.snapshots[barrier.checkpoint_id] = set(self.run.processed)

    def abort_checkpoint(self, checkpoint_id: int, reason: Reason) -> None:
        self.run.aborts.append((checkpoint_id, reason))

    def record_inflight(self, checkpoint_id: int, channel: int, batch: Any) -> None:
        self.run.inflight.setdefault(checkpoint_id, []).extend(batch.rows)

    def channel_state_complete(self, checkpoint_id: int) -> None:
        self.run.complete.append(checkpoint_id)


def execute(sc: Scenario, mode: CheckpointingMode, unaligned: bool, data: st.DataObject) -> Run:  # noqa: C901 (one branch per step kind of the property test)
    """Feed and consume ``sc``; at each step ``data`` chooses: feed channel ``ch`` its next
    element, poll once, or (with unaligned checkpoints) advance the clock."""
    run = Run()
    actions = Actions(run)
    clock = ManualClock(0)
    channels = [LocalChannel(1 << 30, name=f"in{i}") for i in range(sc.n)]
    gate = InputGate(list(channels), [0] * sc.n, threading.Event())
    handler = create_barrier_handler(
        mode,
        unaligned=unaligned,
        aligned_timeout_ms=TIMEOUT_MS if unaligned else 0,
        num_channels=sc.n,
        actions=actions,
        clock=clock,
    )
    cgate = CheckpointedInputGate(gate, handler, actions)
    fed = [0] * sc.n

    def feed(ch: int) -> None:
        if fed[ch] < len(sc.channels[ch]):
            channels[ch].put(sc.channels[ch][fed[ch]])
            fed[ch] += 1

    def poll() -> bool:
        item = cgate.poll()
        if item is None:
            return False
        ch, e = item
        if isinstance(e, RowBatch):
            assert not run.processed.intersection(e.rows), "a record was processed twice"
            run.processed.update(e.rows)
            run.per_channel.setdefault(ch, []).extend(e.rows)
        return True

    def tick() -> None:
        clock.advance(TICK_MS)
        deadline = cgate.next_deadline_ms()
        if deadline is not None and clock.monotonic_ms() >= deadline:
            cgate.on_time()

    ticks = [sc.n + 1] if unaligned else []
    for _ in range(4 * sum(len(seq) for seq in sc.channels)):
        choices = [ch for ch in range(sc.n) if fed[ch] < len(sc.channels[ch])] + [sc.n] + ticks
        step = data.draw(st.sampled_from(choices))
        if step < sc.n:
            feed(step)
        elif step == sc.n:
            if not poll() and cgate.finished:
                break
        else:
            tick()
    for ch in range(sc.n):
        while fed[ch] < len(sc.channels[ch]):
            feed(ch)
    for _ in range(10_000):
        if not poll():
            if cgate.finished:
                break
            tick()  # only an alignment timeout could be pending
    assert cgate.finished, "the input did not drain: a channel stayed blocked"
    # M-E1: every channel's records were processed, in the order they were sent
    for ch, seq in enumerate(sc.channels):
        sent = [r for e in seq if isinstance(e, RowBatch) for r in e.rows]
        assert run.per_channel.get(ch, []) == sent
    return run


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_m_b4_an_aligned_snapshot_holds_exactly_the_records_in_front_of_its_barriers(
    sc: Scenario, data: st.DataObject
) -> None:
    run = execute(sc, CheckpointingMode.EXACTLY_ONCE, unaligned=False, data=data)
    assert run.triggers == sc.delivered()
    assert run.aborts == []
    for cid in run.triggers:
        assert run.snapshots[cid] == sc.in_front_of(cid), cid


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_m_b2_a_tracked_snapshot_holds_at_least_the_records_in_front_of_its_barriers(
    sc: Scenario, data: st.DataObject
) -> None:
    run = execute(sc, CheckpointingMode.AT_LEAST_ONCE, unaligned=False, data=data)
    assert run.triggers == sc.delivered()
    assert run.aborts == []
    for cid in run.triggers:
        assert run.snapshots[cid] >= sc.in_front_of(cid), cid


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(alternating=True), st.data())
def test_m_b7_an_unaligned_snapshot_plus_its_inflight_records_is_exactly_the_records_in_front_of_its_barriers(
    sc: Scenario, data: st.DataObject
) -> None:
    run = execute(sc, CheckpointingMode.EXACTLY_ONCE, unaligned=True, data=data)
    delivered = sc.delivered()
    assert run.triggers == delivered
    aborted = {cid for cid, _ in run.aborts}
    assert all(reason is Reason.SUBSUMED for _, reason in run.aborts)
    if delivered:
        assert delivered[-1] not in aborted  # nothing newer can subsume the last one
    assert aborted.isdisjoint(run.complete)
    for cid in run.triggers:
        if cid in aborted:
            continue
        assert (cid in run.complete) == (cid in run.unaligned), cid
        inflight = run.inflight.get(cid, [])
        assert len(inflight) == len(set(inflight))
        assert run.snapshots[cid].isdisjoint(inflight), cid
        assert run.snapshots[cid] | set(inflight) == sc.in_front_of(cid), cid


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(channels=(1, 1)), st.data())
def test_m_b9_with_one_input_channel_tracking_is_exactly_once_too(
    sc: Scenario, data: st.DataObject
) -> None:
    run = execute(sc, CheckpointingMode.AT_LEAST_ONCE, unaligned=False, data=data)
    assert run.triggers == sc.delivered()
    for cid in run.triggers:
        assert run.snapshots[cid] == sc.in_front_of(cid), cid
