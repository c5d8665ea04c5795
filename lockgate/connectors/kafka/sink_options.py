"""The KafkaSink's arguments checked (each failing with what is wrong and how to fix
it), and the Schema Registry writers they make."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from ...errors import ConfigurationError
from ..schema_registry.format_names import REGISTRY_FORMATS


def topic_name_ok(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]{1,249}", name)) and name not in (".", "..")


def ms(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def check_key_format(key_format: object, key: object, key_schema: object) -> str | None:
    """``key_format``: None (keys as UTF-8 text, bytes as they are) or a registry format,
    which needs a ``key`` and a ``key_schema``."""
    if key_format is None:
        if key_schema is not None:
            raise ConfigurationError(
                "KafkaSink key_schema is for a registry key_format "
                f"({', '.join(repr(f) for f in REGISTRY_FORMATS)}): remove it, or set key_format"
            )
        return None
    if key_format not in REGISTRY_FORMATS:
        raise ConfigurationError(
            "KafkaSink key_format must be None (keys as UTF-8 text, bytes as they are) or one "
            f"of {', '.join(repr(f) for f in REGISTRY_FORMATS)} (keys encoded against "
            f"key_schema), got {key_format!r}"
        )
    if key is None:
        raise ConfigurationError(
            f"KafkaSink key_format={key_format!r} encodes keys, but key is None: set key= (a "
            "field name or a function of the record giving the key)"
        )
    return str(key_format)


def registry_writer(
    fmt: str | None,
    registry: Any,
    schema: Any,
    subject_strategy: str,
    auto_register: bool,
    *,
    key: bool = False,
) -> Any:
    """The writer of a registry format (None for the others, which refuse a schema)."""
    arg = "key_schema" if key else "schema"
    if fmt not in REGISTRY_FORMATS:
        if schema is not None:
            raise ConfigurationError(
                f"KafkaSink {arg} is for the registry formats "
                f"({', '.join(repr(f) for f in REGISTRY_FORMATS)}), but format is "
                f"{fmt!r}: remove it, or choose one of those formats"
            )
        return None
    from ..schema_registry.writing import RegistryWriter

    try:
        return RegistryWriter(
            "KafkaSink", fmt, registry, schema, subject_strategy, auto_register, key=key
        )
    except ConfigurationError as e:
        raise ConfigurationError(f"{e} (for the keys: key_schema=)" if key else str(e)) from e
