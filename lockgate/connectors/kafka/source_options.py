"""The KafkaSource's arguments checked, each failing with what is wrong and how to fix
it, and the names and settings the source reserves for itself."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import pyarrow as pa

from ...core.batch import TS_COLUMN
from ...errors import ConfigurationError
from ..schema_registry.format_names import REGISTRY_FORMATS
from ..schema_registry.formats import RegistryFormat, check_registry_format

OWNER = "KafkaSource"
START_MODES = ("earliest", "latest", "committed")
ISOLATION = ("read_committed", "read_uncommitted")
FETCH_MODES = ("auto", "librdkafka")
#: librdkafka settings the source changes from librdkafka's defaults (``properties``
#: may set them): when its prefetch queue is full (``queued.min.messages``, 100,000
#: records), librdkafka waits ``fetch.queue.backoff.ms`` (1 s by default) before
#: fetching again, so a reader that drains the queue quickly sat idle most of the time
#: (a bare consumer read 170k small records/s; 900k/s with 10 ms)
FETCH_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 10}
#: what the source sets itself, and the argument to use instead
RESERVED = {
    "bootstrap.servers": "pass bootstrap_servers",
    "group.id": "pass group_id",
    "isolation.level": "pass isolation",
    "enable.auto.commit": "offsets are committed when checkpoints complete",
    "enable.auto.offset.store": "offsets are committed when checkpoints complete",
    "auto.offset.reset": "pass start",
    "enable.partition.eof": "the source tracks partition ends itself",
}

TopicsArg = str | Sequence[str] | re.Pattern[str]
StartArg = str | int | Mapping[Any, int]


def check_topics(topics: object) -> tuple[tuple[str, ...], re.Pattern[str] | None]:
    if isinstance(topics, re.Pattern):
        if not isinstance(topics.pattern, str):
            raise ConfigurationError(
                f"{OWNER} topics pattern must be a str pattern (re.compile('orders-.*')), "
                f"got {topics!r}"
            )
        return (), topics
    names = (topics,) if isinstance(topics, str) else topics
    if not isinstance(names, Sequence) or isinstance(names, (bytes, bytearray)):
        raise ConfigurationError(
            f"{OWNER} topics must be a topic name, a list of names, or a compiled regular "
            f"expression (re.compile(...)) matching topic names, got {topics!r}"
        )
    valid = re.compile(r"[A-Za-z0-9._-]{1,249}")
    if not names or not all(isinstance(n, str) and valid.fullmatch(n) for n in names):
        raise ConfigurationError(
            f"{OWNER} topics must be non-empty names of letters, digits, '.', '_' and "
            f"'-' (at most 249; at least one name), got {topics!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(f"{OWNER} topic names must be distinct, got {list(names)!r}")
    return tuple(names), None


def check_start(
    start: object, topics: tuple[str, ...], pattern: re.Pattern[str] | None, group_id: str | None
) -> StartArg:
    how = (
        "'earliest', 'latest', 'committed', an int of epoch milliseconds, or a dict of "
        "offsets {partition: offset} (one topic) or {(topic, partition): offset}"
    )
    if isinstance(start, str):
        if start not in START_MODES:
            raise ConfigurationError(f"{OWNER} start must be {how}, got {start!r}")
        if start == "committed" and group_id is None:
            raise ConfigurationError(
                f"{OWNER} start='committed' reads the offsets committed by a consumer group: "
                "pass group_id"
            )
        return start
    if isinstance(start, bool) or not isinstance(start, (int, Mapping)):
        raise ConfigurationError(f"{OWNER} start must be {how}, got {start!r}")
    if isinstance(start, int):
        if start < 0:
            raise ConfigurationError(
                f"{OWNER} start as a timestamp must be epoch milliseconds >= 0, got {start!r}"
            )
        return start
    offsets: dict[tuple[str, int], int] = {}
    for key, offset in start.items():
        if isinstance(key, int) and not isinstance(key, bool):
            if pattern is not None or len(topics) != 1:
                raise ConfigurationError(
                    f"{OWNER} start {{partition: offset}} needs exactly one named topic; with "
                    f"several topics or a pattern key the offsets by (topic, partition), got {key!r}"
                )
            topic, partition = topics[0], key
        elif (
            isinstance(key, tuple)
            and len(key) == 2
            and isinstance(key[0], str)
            and isinstance(key[1], int)
            and not isinstance(key[1], bool)
        ):
            topic, partition = key
        else:
            raise ConfigurationError(
                f"{OWNER} start offsets must be keyed by partition (an int) or (topic, "
                f"partition), got key {key!r}"
            )
        if partition < 0 or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigurationError(
                f"{OWNER} start offsets need a partition >= 0 and an int offset >= 0 (the "
                f"first offset to read), got {key!r}: {offset!r}"
            )
        offsets[(topic, partition)] = offset
    if not offsets:
        raise ConfigurationError(f"{OWNER} start offsets must not be empty; use 'earliest'")
    return offsets


def check_field(arg: str, value: object, meaning: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(
            f"{OWNER} {arg} must be None or a non-empty str (the record field that receives "
            f"{meaning}), got {value!r}"
        )
    return value


def check_key_format(key_format: object, key_field: str | None) -> str | None:
    if key_format is None:
        return None
    if key_format not in REGISTRY_FORMATS:
        raise ConfigurationError(
            f"{OWNER} key_format must be None (keys as UTF-8 text) or a registry format "
            f"({', '.join(repr(f) for f in REGISTRY_FORMATS)}: keys written by a Schema "
            f"Registry serializer), got {key_format!r}"
        )
    if key_field is None:
        raise ConfigurationError(
            f"{OWNER} key_format={key_format!r} decodes each record's key into key_field: "
            "pass key_field='<the field that receives the key>'"
        )
    return str(key_format)


def check_reader(fmt: str | None, arg: str, reader_schema: object) -> RegistryFormat | None:
    """The registry format ``fmt`` with its reader schema (argument ``arg``) checked;
    None for a plain format (which takes no reader schema)."""
    if fmt in REGISTRY_FORMATS:
        assert fmt is not None
        return check_registry_format(OWNER, arg, fmt, reader_schema)
    if reader_schema is not None:
        side = "key_format" if arg.startswith("key") else "format"
        raise ConfigurationError(
            f"{OWNER} {arg} resolves records of a registry format ({side}='avro', "
            f"'protobuf' or 'json_schema'), but {side} is {fmt!r}: drop {arg}, or pass "
            f"{side}='avro' (or 'protobuf', 'json_schema') with schema_registry="
        )
    return None


def check_schema(
    schema: object,
    fmt: str,
    key_field: str | None,
    timestamp_field: str | None,
    key_format: str | None = None,
) -> pa.Schema | None:
    if schema is None:
        return None
    if not isinstance(schema, pa.Schema):
        raise ConfigurationError(
            f"{OWNER} schema must be None or a pyarrow.Schema (pa.schema([('key', "
            f"pa.int64()), ...]): the columns JSON values decode into), got {schema!r}"
        )
    if fmt != "json" and fmt not in REGISTRY_FORMATS:
        raise ConfigurationError(
            f"{OWNER} schema decodes JSON or registry-encoded values into Arrow columns, so "
            f"it needs format='json', 'avro', 'protobuf' or 'json_schema', got format={fmt!r}; "
            "drop schema or pass one of those formats"
        )
    if key_format is not None:
        raise ConfigurationError(
            f"{OWNER} schema with key_format={key_format!r} is not supported (the key column "
            "of an Arrow batch is the key's UTF-8 text): drop schema to get dicts with the "
            "decoded key, or drop key_format"
        )
    names = schema.names
    if not names or len(set(names)) != len(names) or not all(names):
        raise ConfigurationError(
            f"{OWNER} schema needs at least one field and distinct, non-empty field names, "
            f"got {names!r}"
        )
    for arg, field in (("key_field", key_field), ("timestamp_field", timestamp_field)):
        if field is not None and field in names:
            raise ConfigurationError(
                f"{OWNER} {arg}={field!r} is also a schema field; the source adds it as a "
                "column of its own: rename one of them"
            )
    if TS_COLUMN in names:
        raise ConfigurationError(f"{OWNER} schema must not use the reserved name {TS_COLUMN!r}")
    if fmt != "json":
        return schema  # decoded records become its columns through pa.RecordBatch.from_pylist
    import pyarrow.json as pj

    try:
        pj.read_json(
            io.BytesIO(b"{}"),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowException, ValueError) as e:
        raise ConfigurationError(
            f"{OWNER} schema {schema} cannot be read from JSON by pyarrow ({e}); use types "
            "the JSON reader supports (integers, floats, bool, string, timestamp, list, "
            "struct)"
        ) from e
    return schema


def check_interval(value: object) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise ConfigurationError(
            f"{OWNER} partition_discovery_interval must be None (no discovery) or a positive "
            f"number of seconds or timedelta (how often to look for new partitions), got {value!r}"
        )
    return float(seconds)
