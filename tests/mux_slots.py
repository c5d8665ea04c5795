"""Two slots' multiplexed data planes on 127.0.0.1, for the data-plane tests: slot 0
produces, slot 1 consumes, each with its real receiver (ROUTER + I/O thread) and its
link to the other (DEALER)."""

from __future__ import annotations

from typing import Any

import zmq

from conftest import wait_until
from lockgate.core.execution_config import MiB
from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.mux import (
    MuxInputChannel,
    MuxOutputChannel,
    PeerLink,
    SlotReceiver,
)

BUFFER = 64 * 1024


class TwoSlots:
    """Slot 0's and slot 1's data planes; :meth:`channel` adds a channel 0 -> 1."""

    def __init__(
        self,
        auth: MessageAuth | None = None,
        generation: int = 1,
        max_message_bytes: int = 16 * MiB,
    ) -> None:
        self.auth = auth or MessageAuth(new_secret())
        self.generation = generation
        self.max_message_bytes = max_message_bytes
        context: Any = zmq.Context.instance()
        self.receivers = [
            SlotReceiver(
                context,
                "127.0.0.1",
                self.auth,
                generation,
                max_message_bytes,
                BUFFER,
                name=f"slot {i}",
            )
            for i in range(2)
        ]
        for r in self.receivers:
            r.start()
        #: slot 0 -> slot 1 (data), slot 1 -> slot 0 (credits)
        self.forward = PeerLink(context, self.receivers[1].endpoint, BUFFER)
        self.backward = PeerLink(context, self.receivers[0].endpoint, BUFFER)

    def channel(
        self, key: tuple[int, int, int] = (1, 0, 1), capacity: int = 4 * MiB, **kwargs: Any
    ) -> tuple[MuxOutputChannel, MuxInputChannel]:
        out = MuxOutputChannel(
            key,
            self.forward,
            self.auth,
            self.generation,
            capacity,
            kwargs.pop("max_message_bytes", self.max_message_bytes),
            **kwargs,
        )
        self.receivers[0].outputs[key] = out
        inp = MuxInputChannel(key, self.auth, self.generation, capacity)
        self.receivers[1].inputs[key] = inp
        inp.connect(self.backward)
        return out, inp

    def close(self) -> None:
        for link in (self.forward, self.backward):
            link.close(0)
        for r in self.receivers:
            r.stop()


def collect(inp: MuxInputChannel, until: Any, timeout_s: float = 5.0) -> list[Any]:
    """Poll ``inp`` (bounded) until ``until(elements)`` holds."""
    got: list[Any] = []

    def done() -> bool:
        if until(got):
            return True
        element = inp.poll()
        if element is not None:
            got.append(element)
        return bool(until(got))

    wait_until(done, lambda: f"the channel delivered only {got}", timeout_s)
    return got
