"""The executor a benchmark runs on, by name (``--executor local|spark``): the local
executor, or a SparkExecutor on ``$LOCKGATE_SPARK_MASTER`` (default ``local[2]``, no UI)."""

from __future__ import annotations

import os

import lockgate as lg


def executor_for(name: str) -> object:
    if name == "local":
        return lg.LocalExecutor()
    from lockgate.executor.spark import SparkExecutor

    return SparkExecutor(
        master=os.environ.get("LOCKGATE_SPARK_MASTER", "local[2]"),
        conf={"spark.ui.enabled": "false"},
    )
