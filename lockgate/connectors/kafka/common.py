"""What :class:`~lockgate.connectors.kafka.source.KafkaSource` and
:class:`~lockgate.connectors.kafka.sink.KafkaSink` share: checking their common
arguments, and loading the client libraries with an error that says how to install them.

lockgate talks to Kafka through two clients (the ``kafka`` extra,
``pip install 'lockgate[kafka]'``):

* **confluent-kafka** (librdkafka, in C) moves the records: the source's consumers
  and the sink's producers, transactional ones included;
* **kafka-python** (pure Python) speaks the few admin requests librdkafka has no API
  for and that exactly-once output needs: describing and listing transactions (KIP-664)
  and ending a transaction of another process by its producer id and epoch (what
  Flink's sink calls resuming a transaction).
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ...errors import ConfigurationError
from ..schema_registry.format_names import REGISTRY_FORMATS
from .client_logging import librdkafka_config, quiet_kafka_python

#: record formats that need no schema registry: ``json`` (a JSON value per record),
#: ``text`` (UTF-8 text) and ``bytes`` (the value as it is)
FORMATS = ("json", "text", "bytes")
_INSTALL = "install the kafka extra: pip install 'lockgate[kafka]'"


def confluent_kafka() -> ModuleType:
    """The ``confluent_kafka`` module, or a :class:`ConfigurationError` saying how to
    install it."""
    try:
        import confluent_kafka as module
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise ConfigurationError(
            f"the Kafka connectors need confluent-kafka ({e}); {_INSTALL}"
        ) from e
    return module


def kafka_python() -> ModuleType:
    """The ``kafka`` (kafka-python) module, or a :class:`ConfigurationError` saying how
    to install it."""
    try:
        import kafka as module
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise ConfigurationError(
            f"Kafka's exactly-once mode needs kafka-python ({e}); {_INSTALL}"
        ) from e
    quiet_kafka_python()  # its per-connection INFO lines (.client_logging)
    return module


_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


def check_bootstrap_servers(owner: str, value: object) -> str:
    """``bootstrap_servers`` checked: ``"host:port"``, several separated by commas, or a
    list of them; returned as librdkafka's comma-separated text."""
    items: list[object]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = []
    if not items or not all(isinstance(i, str) and _HOST_PORT.match(i) for i in items):
        raise ConfigurationError(
            f"{owner} bootstrap_servers must be 'host:port' (several separated by commas, "
            f"or a list of them), e.g. '127.0.0.1:9092', got {value!r}"
        )
    return ",".join(str(i) for i in items)


def check_format(owner: str, value: object, arg: str = "format") -> str:
    """``format`` (or the argument ``arg``) checked: one of :data:`FORMATS` or
    :data:`REGISTRY_FORMATS`."""
    every = (*FORMATS, *REGISTRY_FORMATS)
    if value not in every:
        raise ConfigurationError(
            f"{owner} {arg} must be one of {', '.join(repr(f) for f in every)} ('json': "
            "a JSON value per record; 'text': UTF-8 text; 'bytes': the value as it is; "
            "'avro', 'protobuf', 'json_schema': framed by a Schema Registry serializer, "
            f"with schema_registry=), got {value!r}"
        )
    return str(value)


def check_schema_registry(owner: str, registry: object, formats: dict[str, str | None]) -> Any:
    """``schema_registry`` checked against the formats in use (``{argument: format}``,
    e.g. ``{"format": "avro", "key_format": None}``): a registry format needs a
    ``SchemaRegistry``; without one in use, passing a registry is refused."""
    used = [f"{arg}={fmt!r}" for arg, fmt in formats.items() if fmt in REGISTRY_FORMATS]
    if registry is None:
        if used:
            raise ConfigurationError(
                f"{owner} {' and '.join(used)} reads the writers' schemas from a Schema "
                "Registry: pass schema_registry=lg.connectors.SchemaRegistry(url) (e.g. "
                "'http://registry:8081')"
            )
        return None
    from ..schema_registry.client import SchemaRegistry

    if not isinstance(registry, SchemaRegistry):
        raise ConfigurationError(
            f"{owner} schema_registry must be a lg.connectors.SchemaRegistry(url), got "
            f"{registry!r:.200}"
        )
    if not used:
        given = ", ".join(f"{arg}={fmt!r}" for arg, fmt in formats.items() if fmt is not None)
        raise ConfigurationError(
            f"{owner} schema_registry is only used by the registry formats "
            f"({', '.join(repr(f) for f in REGISTRY_FORMATS)}), but {given} does not read "
            "from it: drop schema_registry, or pass format='avro' (or 'protobuf', "
            "'json_schema')"
        )
    return registry


def check_properties(
    owner: str, value: object, *, reserved: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """``properties`` checked: None or a dict of librdkafka settings (string names,
    values of str, int, float or bool). ``reserved`` maps the names the connector sets
    itself to the argument to use instead; setting one is refused."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(
            f"{owner} properties must be a dict of librdkafka settings with string names "
            f"(e.g. {{'security.protocol': 'SSL'}}), got {value!r}"
        )
    for name, setting in value.items():
        if not isinstance(setting, (str, int, float, bool)):
            raise ConfigurationError(
                f"{owner} properties[{name!r}] must be a str, int, float or bool, got {setting!r}"
            )
        if reserved and name in reserved:
            raise ConfigurationError(
                f"{owner} sets {name!r} itself: {reserved[name]} (remove it from properties)"
            )
    return dict(value)


def config_admin(bootstrap_servers: str, properties: dict[str, Any]) -> Any:
    """A librdkafka admin client for configuration lookups (no ``close``: its handle is
    destroyed when the last reference to it goes)."""
    confluent_kafka()
    from confluent_kafka.admin import AdminClient

    return AdminClient(librdkafka_config({**properties, "bootstrap.servers": bootstrap_servers}))


def topic_max_message_bytes(
    bootstrap_servers: str,
    properties: dict[str, Any],
    topic: str,
    timeout_s: float = 30.0,
    *,
    admin: Any = None,
) -> int | None:
    """The topic's ``max.message.bytes`` (the largest record batch its brokers take), or
    None when it cannot be read (the topic does not exist yet, or describing its
    configuration is not allowed): then only the broker's answer tells. ``admin``: a
    :func:`config_admin` client to ask through (one made for this lookup otherwise)."""
    ck = confluent_kafka()
    from confluent_kafka.admin import ConfigResource

    if admin is None:
        admin = config_admin(bootstrap_servers, properties)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource])[resource].result(timeout_s)
    except (ck.KafkaException, TimeoutError, concurrent.futures.TimeoutError):
        return None
    entry = entries.get("max.message.bytes")
    if entry is None or entry.value is None:
        return None
    try:
        return int(entry.value)
    except ValueError:
        return None
