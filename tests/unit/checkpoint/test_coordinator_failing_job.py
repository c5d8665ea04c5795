"""A coordinator that failed its job triggers nothing more (issue 18 item 10, M-C4, M-C6).

Before, a job failed by too many checkpoint failures kept being triggered while its
tasks stopped: every later checkpoint expired too and the job was failed (and "failing
job" logged) again and again."""

from __future__ import annotations

import logging

import pytest
from test_coordinator_harness import make_harness

from lockgate.checkpoint.types import CheckpointFailureReason as R


def test_m_c4_m_c6_a_failed_job_is_failed_once_and_never_triggered_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = make_harness(interval=100, timeout=150, tolerable_failures=0)
    h.coordinator.start()
    caplog.set_level(logging.ERROR, logger="lockgate.checkpoint.coordinator.coordinator")
    h.advance(100)
    assert len({b.checkpoint_id for b in h.gateway.barriers()}) == 1
    first = h.gateway.barriers()[0].checkpoint_id
    h.advance(150)  # checkpoint 1 expires: over the tolerable failures, the job fails
    assert h.gateway.calls.count("fail_job") == 1
    h.advance(5000)  # 50 intervals: nothing more is triggered, the job is not failed again
    assert {b.checkpoint_id for b in h.gateway.barriers()} == {first}, (
        "the coordinator kept triggering after failing the job"
    )
    assert h.gateway.calls.count("fail_job") == 1
    failing = [r for r in caplog.records if r.getMessage().startswith("failing job")]
    assert len(failing) == 1, [r.getMessage() for r in failing]
    assert h.coordinator.next_periodic_trigger_ms() is None
    # a savepoint (forced) is refused too, and start() does not resume triggering
    assert h.coordinator.trigger_checkpoint(savepoint=True) is R.COORDINATOR_SHUTDOWN
    h.coordinator.start()
    h.advance(1000)
    assert {b.checkpoint_id for b in h.gateway.barriers()} == {first}
