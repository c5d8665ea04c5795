"""Where the Kafka clients' own log lines go, and at which level.

librdkafka (confluent-kafka) logs through a callback lockgate gives every client it
makes (:func:`librdkafka_config`): its lines go to the logger
``lockgate.connectors.librdkafka``, never to standard error, with warnings and errors
kept at their level and informational lines (``notice``, ``info``: e.g. ``BGQUEUE ...
Purging 1 unserved events`` when a client closes) at DEBUG. A ``logger`` or
``log_level`` in a connector's ``properties`` is the user's and wins.

kafka-python (the exactly-once sink's transaction requests) logs every connection at
INFO; :func:`quiet_kafka_python` sets its ``kafka`` logger to WARNING unless the
application gave it a level of its own (``logging.getLogger("kafka").setLevel(...)``),
and its event loop's slow-task warnings (a loaded machine's, not a fault) at DEBUG.
"""

from __future__ import annotations

import logging
from typing import Any

_LIBRDKAFKA = logging.getLogger("lockgate.connectors.librdkafka")


def librdkafka_level(level: int) -> int:
    """The Python level of a librdkafka line confluent-kafka logs at ``level`` (it maps
    syslog's notice and info to INFO): DEBUG below WARNING, else unchanged."""
    return level if level >= logging.WARNING else logging.DEBUG


class _LibrdkafkaLog:
    """The log callback of librdkafka clients (confluent-kafka calls ``log(level, msg,
    *args)`` on it)."""

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        _LIBRDKAFKA.log(librdkafka_level(int(level)), msg, *args, **kwargs)


#: the ``logger`` of every librdkafka client lockgate makes
LIBRDKAFKA_LOG = _LibrdkafkaLog()


def librdkafka_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with lockgate's log callback, unless it sets a ``logger`` of its own."""
    if "logger" in config:
        return config
    return {**config, "logger": LIBRDKAFKA_LOG}


class _SlowTaskAtDebug(logging.Filter):
    """kafka-python's event loop warns of a task that ran longer than 0.1 s (``Task ...
    ran for 0.898s (>0.100s threshold). It is blocking the event loop ...``): on a busy
    machine that is the machine's load, not a fault of the job, so the line goes out at
    DEBUG (when that logger is enabled for DEBUG), like librdkafka's informational
    lines. Every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if record.levelno == logging.WARNING and text.startswith("Task ") and "threshold" in text:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


_SLOW_TASK = _SlowTaskAtDebug()


def quiet_kafka_python() -> None:
    """kafka-python's connection lines at DEBUG-worthy WARNING, unless the application
    set the ``kafka`` logger's level itself; its event loop's slow-task warnings at
    DEBUG (:class:`_SlowTaskAtDebug`)."""
    logger = logging.getLogger("kafka")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    selector = logging.getLogger("kafka.net.selector")
    if _SLOW_TASK not in selector.filters:
        selector.addFilter(_SLOW_TASK)
