"""transfer_all (lockgate/checkpoint/transfers.py): state files moved a few at a time;
once one fails, nothing new starts, and the first failure in time is the one raised."""

from __future__ import annotations

import logging
import threading

import pytest

from lockgate.checkpoint.transfers import transfer_all


def test_results_come_in_the_order_of_the_items() -> None:
    assert transfer_all(lambda x: x * 2, list(range(50)), threads=4) == [x * 2 for x in range(50)]
    assert transfer_all(lambda x: x * 2, [3], threads=4) == [6]
    assert transfer_all(lambda x: x * 2, list(range(5)), threads=1) == [0, 2, 4, 6, 8]


def test_once_an_item_fails_no_other_item_starts_and_the_first_failure_in_time_is_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started: list[int] = []
    lock = threading.Lock()
    second_failed = threading.Event()

    def fn(i: int) -> int:
        with lock:
            started.append(i)
        if i == 1:
            second_failed.set()
            raise OSError("item 1 failed first")
        if i == 0:  # fails later than item 1, though it comes first
            assert second_failed.wait(10), "item 1 ran"
            raise OSError("item 0 failed second")
        return i

    with (
        caplog.at_level(logging.WARNING, logger="lockgate.checkpoint.transfers"),
        pytest.raises(OSError, match="item 1 failed first"),
    ):
        transfer_all(fn, list(range(20)), threads=2)
    assert sorted(started) == [0, 1], f"items started after the failure: {started}"
    assert any("item 0 failed second" in r.getMessage() for r in caplog.records)
