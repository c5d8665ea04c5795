"""A Spark slot whose subtask failed raises SlotFailed for Spark without chaining the
user's exception (issue 18 item 12): Spark logs that exception twice (executor, task set
manager) and ships it to the driver's log, while the driver's JobFailedError, built from
the slot's FAILED report, carries the user's traceback once."""

from __future__ import annotations

import threading
import traceback
from typing import Any

import pytest

from lockgate.errors import UserFunctionError
from lockgate.executor.spark.slot import SlotFailed, _run_tasks


class BoomError(Exception):
    pass


def users_own_function() -> None:
    raise BoomError("boom")


class FailingTask:
    """The part of a StreamTask that _run_tasks uses: it fails as a map would."""

    name = "Source: s -> explosive"
    subtask_index = 0
    key = (1, 0)

    def run(self) -> None:
        try:
            users_own_function()
        except BoomError as e:
            raise UserFunctionError("explosive", 0, 1, e) from e

    def cancel(self) -> None:
        pass


class RecordingControl:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, type_: str, payload: Any) -> None:
        self.sent.append((type_, payload))


def test_the_slot_exception_spark_logs_does_not_repeat_the_users_traceback() -> None:
    control = RecordingControl()
    cancelled = threading.Event()
    cancelled.set()  # the driver already cancelled: no wait
    with pytest.raises(SlotFailed) as err:
        _run_tasks([FailingTask()], control, cancelled)  # type: ignore[list-item]
    spark_logs = "".join(traceback.format_exception(err.value))
    assert "in users_own_function" not in spark_logs, spark_logs
    assert "explosive" in str(err.value) and "boom" in str(err.value), "it says what failed"
    [(_, report)] = control.sent
    assert "in users_own_function" in report["traceback"], "the driver's report carries it"
    assert report["traceback"].count("in users_own_function") == 1
