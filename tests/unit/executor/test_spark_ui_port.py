"""Spark's UI gets a free port when 4040 is taken (issue 37 item 17): a healthy start
does not log Spark's "SparkUI could not bind on port 4040" warning."""

from __future__ import annotations

import socket

from lockgate.executor.spark.session import SPARK_UI_PORT, ui_port


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def test_a_taken_4040_gives_spark_a_free_ui_port() -> None:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            holder.bind(("127.0.0.1", SPARK_UI_PORT))
            holder.listen(1)
        except OSError:
            pass  # another Spark application of this machine holds it already
        port = ui_port({})
        assert port is not None and port != SPARK_UI_PORT and bindable(port)
    finally:
        holder.close()


def test_the_ui_port_is_left_to_spark_when_set_or_off() -> None:
    assert ui_port({"spark.ui.enabled": "false"}) is None
    assert ui_port({"spark.ui.port": "4999"}) is None
