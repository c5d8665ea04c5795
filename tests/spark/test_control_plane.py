"""The driver's control endpoint drops what it must not trust (DESIGN §1 Control plane): a
message under a wrong secret, a malformed message and a message of another generation are
each rejected, counted in ``control.rejected``, never unpickled, and the running job carries
on to its correct result."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq

import lockgate as lg
from conftest import BackgroundJob, wait_until
from lockgate.connectors import SequenceSource
from lockgate.executor.spark.auth import MessageAuth, new_secret

pytestmark = pytest.mark.spark

N = 3000
RATE = 1000  # rows per second: the job runs about 3 s, time enough to send messages to it


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        t = self.total.value() + value
        self.total.update(t)
        yield (ctx.current_key, t)


def final_sums(out: list[tuple[int, int]]) -> dict[int, int]:
    last: dict[int, int] = {}
    for key, total in out:
        last[key] = max(last.get(key, 0), total)
    return last


EXPECTED = {k: sum(range(k, N, 7)) for k in range(7)}


class Tripwire:
    """Unpickling it creates ``path``: proof that a payload was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


def header(type_: str, gen: int, slot: int = 0) -> bytes:
    return json.dumps({"type": type_, "gen": gen, "slot": slot}).encode()


def send(endpoint: str, frames: list[bytes]) -> None:
    context: Any = zmq.Context.instance()
    sock = context.socket(zmq.DEALER)
    try:
        sock.connect(endpoint)
        sock.send_multipart(frames)
    finally:
        sock.close(linger=2000)  # deliver before closing


Messages = Callable[[Any, Path], list[list[bytes]]]


def wrong_secret(control: Any, tmp: Path) -> list[list[bytes]]:
    forger = MessageAuth(new_secret())
    trip = pickle.dumps(Tripwire(str(tmp / "unpickled")))
    failure = pickle.dumps(
        {
            "task": "forged",
            "subtask": 0,
            "error_type": "Forged",
            "message": "forged",
            "traceback": "",
            "operator": None,
        }
    )
    return [
        forger.seal(header("failed", control.generation), failure),
        forger.seal(header("heartbeat", control.generation), trip),
        # the right frame count but no valid MAC: authentication is checked first
        [b"garbage", b"garbage", b"0123456789abcdef"],
        [b"", b"", b""],
    ]


def malformed(control: Any, tmp: Path) -> list[list[bytes]]:
    auth = control.auth
    gen = control.generation
    return [
        [b"one frame"],
        [b""],
        [b"a", b"b", b"c", b"d", b"e"],
        auth.seal(b"not json {", pickle.dumps(None)),
        auth.seal(json.dumps(["a", "list"]).encode(), pickle.dumps(None)),
        auth.seal(
            json.dumps({"type": "heartbeat", "gen": str(gen), "slot": 0}).encode(),
            pickle.dumps(None),
        ),
        auth.seal(header("heartbeat", gen, slot=7), pickle.dumps(None)),  # no such slot
        auth.seal(header("heartbeat", gen), b"\x80\x05not a pickle"),
    ]


def stale(control: Any, tmp: Path) -> list[list[bytes]]:
    auth = control.auth
    gen = control.generation
    trip = pickle.dumps(Tripwire(str(tmp / "unpickled")))
    failure = pickle.dumps(
        {
            "task": "stale",
            "subtask": 0,
            "error_type": "Stale",
            "message": "from an old attempt",
            "traceback": "",
            "operator": None,
        }
    )
    return [
        auth.seal(header("failed", gen - 1), failure),
        auth.seal(header("heartbeat", gen - 1, slot=1), trip),
        auth.seal(header("failed", gen + 1), failure),
    ]


@pytest.mark.parametrize(
    ("make_messages", "counter"),
    [
        (wrong_secret, "unauthenticated"),
        (malformed, "malformed"),
        (stale, "stale"),
    ],
    ids=["wrong secret", "malformed", "stale generation"],
)
def test_a_rejected_control_message_is_counted_and_the_job_carries_on(
    make_env, spark_executor, tmp_path, make_messages: Messages, counter: str
) -> None:
    env = make_env(parallelism=2)
    stream = (
        env.from_source(SequenceSource(0, N, rows_per_second=RATE))
        .key_by(lambda x: x % 7)
        .process(RunningSum())
    )
    job = BackgroundJob(lambda: stream.execute_and_collect("target", executor=spark_executor))
    try:
        wait_until(
            lambda: spark_executor.running.is_set() or job.done.is_set(),
            "every slot registered",
            timeout_s=30,
        )
        control = spark_executor.control
        assert control is not None and not job.done.is_set(), job.error
        before = dict(control.rejected)
        messages = make_messages(control, tmp_path)
        for frames in messages:
            send(control.endpoint, frames)
        wait_until(
            lambda: control.rejected[counter] - before.get(counter, 0) == len(messages),
            f"the driver counts {len(messages)} rejected '{counter}' messages "
            f"(counted: {dict(control.rejected)})",
            timeout_s=5,
        )
        assert not job.done.is_set(), "the job was still running when the messages were rejected"
        others = {k: v - before.get(k, 0) for k, v in control.rejected.items() if k != counter}
        assert not any(others.values()), f"counted under another reason: {others}"
        rejected_at = max(control.last_heartbeat.values())
        wait_until(
            lambda: (
                len(control.last_heartbeat) == 2
                and min(control.last_heartbeat.values()) > rejected_at
            ),
            "both slots' heartbeats are still accepted after the rejected messages",
            timeout_s=5,
        )
    finally:
        ended = job.wait(30)
    assert ended, "the job did not finish"
    assert job.error is None, f"the job failed: {job.error!r}"
    assert final_sums(job.result) == EXPECTED
    assert len(job.result) == N
    assert not os.path.exists(tmp_path / "unpickled"), "a rejected payload was unpickled"
