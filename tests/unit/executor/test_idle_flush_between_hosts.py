"""The idle flush over network channels (Nagle's rule): sent at once between slots of one
host; between hosts only when the consumer has taken everything sent before (the
channel's credit came back), so a busy consumer on a slow link is sent fewer, larger
messages. A 256 kbit/s link between hosts stopped checkpoints when every pause of a
producer sent one small message."""

from __future__ import annotations

from conftest import wait_until
from lockgate.core.batch import RowBatch
from lockgate.executor.spark.slot_channels import same_host
from mux_slots import TwoSlots, collect


def test_an_endpoint_is_on_this_host_by_its_own_address_or_a_loopback_one() -> None:
    assert same_host("tcp://10.0.0.5:4100", "10.0.0.5")
    assert same_host("tcp://127.0.0.1:4100", "10.0.0.5")
    assert same_host("tcp://localhost:4100", None)
    assert same_host("tcp://[::1]:4100", "10.0.0.5")
    assert not same_host("tcp://10.0.0.6:4100", "10.0.0.5")
    assert not same_host("tcp://10.0.0.6:4100", None)


def test_a_channel_to_another_host_takes_an_idle_flush_once_its_data_was_taken() -> None:
    slots = TwoSlots()
    try:
        local, _ = slots.channel((1, 0, 1), same_host=True)
        remote, inp = slots.channel((2, 0, 1), same_host=False)
        assert local.takes_idle_flush() and remote.takes_idle_flush(), "nothing in flight"
        local.put(RowBatch([1]))
        remote.put(RowBatch([1]))
        assert local.takes_idle_flush(), "same host: the idle flush goes out at once"
        assert not remote.takes_idle_flush(), "a batch in flight: the buffer grows"
        collect(inp, lambda g: len(g) == 1)  # the consumer takes it: its credit comes back
        wait_until(remote.takes_idle_flush, "the credit returns and allows the idle flush")
    finally:
        slots.close()
