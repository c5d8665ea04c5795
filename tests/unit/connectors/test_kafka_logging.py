"""kafka-python's log lines as lockgate sets them (``connectors.kafka.client_logging``)."""

from __future__ import annotations

import logging

from lockgate.connectors.kafka.client_logging import quiet_kafka_python

SLOW = (
    "Task %s ran for %.3fs (>%.3fs threshold). It is blocking the event loop -- likely a "
    "tight sync loop inside a coroutine. Other pollers will time out."
)


def test_the_event_loops_slow_task_warning_goes_out_at_debug(caplog) -> None:
    """A loaded machine made kafka-python warn of a 0.9 s task in a healthy run (the
    quiet-run test failed beside a CPU burner): the line is the machine's load, kept at
    DEBUG; any other warning of that logger stays a warning."""
    quiet_kafka_python()
    quiet_kafka_python()  # idempotent: one filter
    selector = logging.getLogger("kafka.net.selector")
    assert len(selector.filters) == 1
    with caplog.at_level(logging.INFO, logger="kafka"):
        selector.warning(SLOW, "<task>", 0.898, 0.1)
        selector.warning("Error connecting to node 1")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "Error connecting to node 1")
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kafka"):
        selector.warning(SLOW, "<task>", 0.898, 0.1)
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "ran for 0.898s" in caplog.records[0].getMessage()
