"""The idle flush over network channels: sent at once between slots of one host, left
to the buffer timeout between hosts (Nagle's rule cannot be followed there: nothing
tells a producer when its peer took a message). A 256 kbit/s link between hosts
stopped checkpoints when every pause of a producer sent one small message."""

from __future__ import annotations

import zmq

from lockgate.executor.spark.auth import MessageAuth, new_secret
from lockgate.executor.spark.data_plane import ZmqOutputChannel, bind_pull, connect_push
from lockgate.executor.spark.slot_channels import same_host


def test_an_endpoint_is_on_this_host_by_its_own_address_or_a_loopback_one() -> None:
    assert same_host("tcp://10.0.0.5:4100", "10.0.0.5")
    assert same_host("tcp://127.0.0.1:4100", "10.0.0.5")
    assert same_host("tcp://localhost:4100", None)
    assert same_host("tcp://[::1]:4100", "10.0.0.5")
    assert not same_host("tcp://10.0.0.6:4100", "10.0.0.5")
    assert not same_host("tcp://10.0.0.6:4100", None)


def test_a_network_channel_takes_idle_flushes_only_from_a_peer_on_this_host() -> None:
    context = zmq.Context.instance()
    pull, endpoint = bind_pull(context, "127.0.0.1")
    auth = MessageAuth(new_secret())
    channels = [
        ZmqOutputChannel(connect_push(context, endpoint), auth, 1, "e", same_host=flag)
        for flag in (True, False)
    ]
    try:
        assert [c.takes_idle_flush() for c in channels] == [True, False]
        default = ZmqOutputChannel(connect_push(context, endpoint), auth, 1, "e")
        channels.append(default)
        assert not default.takes_idle_flush(), "unknown: the buffer timeout rules"
    finally:
        for c in channels:
            c.close(delivered=False)
        pull.close(linger=0)
