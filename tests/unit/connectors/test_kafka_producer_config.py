"""The exactly-once KafkaSink's producers: their librdkafka settings and the delivery
failures of each (M-X2)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.connectors.kafka.transactions import producer_config


def test_transactional_producer_connects_to_every_broker_by_default() -> None:
    """Sparse connections delay a transactional producer's InitProducerId to librdkafka's
    500 ms coordinator query timer; the sink initializes one per checkpoint (M-X2)."""
    config = producer_config("b:9092", {}, "job-0-1", 60_000)
    assert config["enable.sparse.connections"] is False
    assert config["transactional.id"] == "job-0-1"
    assert config["enable.idempotence"] is True and config["acks"] == "all"


def test_users_properties_decide_sparse_connections() -> None:
    config = producer_config("b:9092", {"enable.sparse.connections": True}, "t-0-0", 1)
    assert config["enable.sparse.connections"] is True


def test_users_properties_cannot_weaken_what_transactions_need() -> None:
    config = producer_config("b:9092", {"acks": "1", "transactional.id": "x"}, "t-0-0", 1)
    assert config["acks"] == "all" and config["transactional.id"] == "t-0-0"


class _Refused:
    def code(self) -> int:
        return 10  # MSG_SIZE_TOO_LARGE

    def str(self) -> str:
        return "Broker: Message size too large"


class _Message:
    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v" * 10

    def topic(self) -> str:
        return "out"

    def partition(self) -> int:
        return 0


def _encoder() -> Any:
    from lockgate.connectors.kafka.record_encoder import RecordEncoder
    from lockgate.runtime.context import RuntimeContext

    sink = SimpleNamespace(format="bytes", changelog_key=None, properties={})
    ctx = RuntimeContext(
        task_name="t", operator_name="sink", operator_uid="sink", subtask_index=0,
        parallelism=1, max_parallelism=128,
    )  # fmt: skip
    return RecordEncoder(sink, ctx)  # type: ignore[arg-type]


def test_m_x2_a_refusal_is_raised_by_its_own_transactions_flush_only() -> None:
    """The exactly-once sink flushes one transaction's producer on the checkpoint's thread
    while the task writes the next: a record refused in the next transaction must fail
    that one's check, not be taken (and lost) by the other's."""
    encoder = _encoder()
    encoder.delivered(_Refused(), _Message(), tid="job-0-1")
    encoder.check("job-0-0")  # nothing of job-0-0 was refused
    with pytest.raises(ValueError, match="refused a record for topic 'out'"):
        encoder.check("job-0-1")
    encoder.check("job-0-1")  # raised once


def test_a_non_transactional_check_takes_every_refusal() -> None:
    encoder = _encoder()
    encoder.delivered(_Refused(), _Message())
    with pytest.raises(ValueError, match="Message size too large"):
        encoder.check()


def _direct_sink(delivery: str, properties: dict[str, Any] | None = None) -> Any:
    from lockgate.connectors import KafkaSink

    return KafkaSink("b:9092", "out", format="bytes", delivery=delivery, properties=properties)


@pytest.mark.parametrize("delivery", ["at_least_once", "none"])
def test_sink_without_transactions_sends_at_once_with_one_request_in_flight(
    delivery: str,
) -> None:
    """Nagle's rule for the sinks without transactions (issue 42): no linger, one request
    in flight per connection, so what queues while a request is out goes in the next one
    and the broker is not flooded with a request per ``produce`` call."""
    from lockgate.connectors.kafka.sink import direct_producer_config

    config = direct_producer_config(_direct_sink(delivery), on_delivery=print)
    assert config["linger.ms"] == 0
    assert config["max.in.flight.requests.per.connection"] == 1
    assert config["bootstrap.servers"] == "b:9092"
    assert config["delivery.report.only.error"] is True
    assert ("enable.idempotence" in config) == (delivery == "at_least_once")


def test_at_least_once_sink_keeps_idempotence_over_users_properties() -> None:
    """M-X1: a user's ``properties`` choose the batching, never weaker delivery."""
    from lockgate.connectors.kafka.sink import direct_producer_config

    sink = _direct_sink(
        "at_least_once",
        {"linger.ms": 5, "max.in.flight.requests.per.connection": 5, "acks": "1"},
    )
    config = direct_producer_config(sink, on_delivery=print)
    assert config["linger.ms"] == 5 and config["max.in.flight.requests.per.connection"] == 5
    assert config["acks"] == "all" and config["enable.idempotence"] is True
