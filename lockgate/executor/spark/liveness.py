"""Whether an attempt's slots are alive: a pure decision over what the driver observed.

The driver's watch loop (:func:`~.watch.watch_attempt`) calls :func:`check_liveness`
every few tens of milliseconds with the facts it holds (when the attempt was submitted, which
slots registered, each slot's latest heartbeat, which finished) and the current time of its
clock; this module reads no clock and does no I/O, so a manual clock drives it in tests.

Two timeouts, checked in this order, because they measure different things:

1. ``start_timeout_s``, from submission until every slot registered. Starting covers what
   Spark must do first: free the task slots a lost executor still held (Spark frees them only
   when it declares that executor lost, after ``spark.network.timeout``), launch executors,
   fork Python workers and import lockgate. A slot that never starts never heartbeats, so
   without this bound a barrier stage Spark cannot schedule would wait forever.
2. ``heartbeat_timeout_s``, from a registered, unfinished slot's latest heartbeat (its
   registration counts as one). A slot whose host was cut off the network, whose executor
   hangs or whose interpreter froze falls silent; past this it is lost.

Guarantees: a verdict names the first slot found in violation (lowest slot number), with how
long it was silent or how many slots started; a finished slot is never declared silent; no
verdict before the respective timeout has fully elapsed (``>``, not ``>=``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SlotsNotStarted:
    """Fewer than every slot registered within ``start_timeout_s`` of the submission."""

    started: int
    num_slots: int
    waited_s: float


@dataclass(frozen=True)
class SlotSilent:
    """Registered slot ``slot`` sent nothing for ``silent_s`` (> ``heartbeat_timeout_s``)."""

    slot: int
    silent_s: float


Verdict = SlotsNotStarted | SlotSilent | None


def check_liveness(
    *,
    now: float,
    submitted: float,
    num_slots: int,
    registered: Collection[int],
    last_heartbeat: Mapping[int, float],
    finished: Collection[int],
    start_timeout_s: float,
    heartbeat_timeout_s: float,
) -> Verdict:
    """``None`` while the attempt's slots are alive as far as the driver can tell; else why
    not (see the module docstring for the order of the checks). Times are seconds of one
    monotonic clock."""
    if len(registered) < num_slots and now - submitted > start_timeout_s:
        return SlotsNotStarted(len(registered), num_slots, now - submitted)
    for slot in sorted(last_heartbeat):
        if slot not in finished and now - last_heartbeat[slot] > heartbeat_timeout_s:
            return SlotSilent(slot, now - last_heartbeat[slot])
    return None


def start_timeout(
    start_timeout_s: float | None, heartbeat_timeout_s: float, slot_wait_timeout_s: float
) -> float:
    """The start timeout a :class:`~.executor.SparkExecutor` uses: the one it was given,
    else the longer of its heartbeat and slot-wait timeouts (a short heartbeat timeout,
    chosen to detect a lost host early, must not fail attempts whose executors are still
    being launched)."""
    if start_timeout_s is not None:
        return start_timeout_s
    return max(heartbeat_timeout_s, slot_wait_timeout_s)
