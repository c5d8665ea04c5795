"""A changelog as Kafka records: ``KafkaSink(format="upsert" | "debezium-json")``.

**Keys.** The record key is the JSON object of the key fields, in the order ``key``
names them, written compactly (``{"id":7}``, ``{"tenant":"a","id":7}``): the form of
Debezium's keys (JsonConverter without schemas) and of Flink's ``upsert-kafka`` with
``key.format=json``. JSON keeps a key's type (``7`` and ``"7"`` are different keys) and
takes several fields without a separator that could occur in a value, and the same key
always gives the same bytes, so compaction and the producer's partitioner (a hash of the
key bytes) treat every change of a row alike: all go to one partition, in order. A key
field missing from a change, or null, fails the job naming the change.

**Upserts** (``format="upsert"``), Flink's upsert semantics: ``+I`` and ``+U`` write the
row (JSON) as the value; ``-D`` writes a tombstone (null value) with the key, so a
compacted topic forgets the row; a ``-U`` immediately followed, in the same batch, by
the ``+U`` of the same key is dropped (the ``+U`` replaces the row); any other ``-U`` is a
delete (a tombstone: a primary-key change arrives as ``-U`` of the old key and ``+U`` of
the new one). Reading the topic and keeping the last value per key (a tombstone removing
it) gives the table.

**Debezium-JSON** (``format="debezium-json"``): each change as a Debezium envelope
``{"before", "after", "source", "op", "ts_ms"}``: ``+I`` as ``op="c"``; a ``-U``
immediately followed by a ``+U`` (of the same key when ``key`` is given) as one ``"u"``
with both rows; a ``+U`` alone as ``"u"`` with ``before`` null; ``-D`` and a ``-U`` alone
as ``"d"`` with ``before``. ``ts_ms`` is when the sink wrote it; ``source`` is
``{"connector": "lockgate", "name": <the sink's operator name>}``. With ``key`` the
records are keyed as above and, as Debezium does by default, a delete is followed by a
tombstone. ``KafkaSource(format="debezium-json")`` reads it back as the same changelog.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ...core.batch import Batch, kinds_of, to_rows, user_view
from ...core.row_kind import RowKind
from ...errors import ConfigurationError
from ..formats.json_values import json_default

#: the KafkaSink formats that write a changelog
CHANGELOG_FORMATS = ("upsert", "debezium-json")

_INS = int(RowKind.INSERT)
_UB = int(RowKind.UPDATE_BEFORE)
_UA = int(RowKind.UPDATE_AFTER)
_DEL = int(RowKind.DELETE)

#: one Kafka record: (the change it comes from, value or None for a tombstone, key)
Message = tuple[Any, bytes | None, bytes | None]


def check_key(owner: str, fmt: str, key: object) -> tuple[str, ...] | None:
    """``key`` of a changelog format checked: a field name or a list of them (required
    for ``upsert``; optional for ``debezium-json``); returned as a tuple."""
    if key is None:
        if fmt == "upsert":
            raise ConfigurationError(
                f"{owner} format='upsert' needs key= (the field, or list of fields, that "
                "identifies a row: its record key, under which updates replace it and a "
                "tombstone deletes it), e.g. key=['id']"
            )
        return None
    fields = [key] if isinstance(key, str) else key
    if (
        not isinstance(fields, (list, tuple))
        or not fields
        or not all(isinstance(f, str) and f for f in fields)
        or len(set(fields)) != len(fields)
    ):
        raise ConfigurationError(
            f"{owner} format={fmt!r} key must be a field name or a list of distinct field "
            f"names of the changes' rows (written as the JSON record key), got {key!r}"
        )
    return tuple(fields)


class ChangelogEncoder:
    """The Kafka records of a changelog's batches (see the module docstring)."""

    def __init__(self, fmt: str, key: tuple[str, ...] | None, where: str) -> None:
        self.format = fmt
        self.key = key
        #: names the sink in errors
        self.where = where

    def messages(self, batch: Batch) -> list[Message]:
        """The records of ``batch``'s changes, in order."""
        kinds = kinds_of(batch)
        rows = to_rows(user_view(batch))
        n = len(rows)
        kind_list = [_INS] * n if kinds is None else [int(k) for k in kinds]
        keys = [self._key(r, kind_list[i]) for i, r in enumerate(rows)] if self.key else None
        if self.format == "upsert":
            return self._upserts(rows, kind_list, keys)
        return self._debezium(rows, kind_list, keys)

    def _upserts(
        self, rows: list[Any], kinds: list[int], keys: list[bytes] | None
    ) -> list[Message]:
        assert keys is not None
        out: list[Message] = []
        n = len(rows)
        for i in range(n):
            kind = kinds[i]
            if kind == _UB and i + 1 < n and kinds[i + 1] == _UA and keys[i + 1] == keys[i]:
                continue  # the +U that follows replaces the row
            if kind in (_INS, _UA):
                out.append((rows[i], self._json(rows[i], kind), keys[i]))
            else:
                out.append((rows[i], None, keys[i]))
        return out

    def _debezium(
        self, rows: list[Any], kinds: list[int], keys: list[bytes] | None
    ) -> list[Message]:
        out: list[Message] = []
        source = {"connector": "lockgate", "name": self.where}
        now = int(time.time() * 1000)
        n = len(rows)
        i = 0
        while i < n:
            kind, row = kinds[i], rows[i]
            key = None if keys is None else keys[i]
            envelope: dict[str, Any]
            if (
                kind == _UB
                and i + 1 < n
                and kinds[i + 1] == _UA
                and (keys is None or keys[i + 1] == key)
            ):
                envelope = {"before": row, "after": rows[i + 1], "op": "u"}
                i += 1
            elif kind == _INS:
                envelope = {"before": None, "after": row, "op": "c"}
            elif kind == _UA:
                envelope = {"before": None, "after": row, "op": "u"}
            else:
                envelope = {"before": row, "after": None, "op": "d"}
            envelope["source"] = source
            envelope["ts_ms"] = now
            out.append((row, self._json(envelope, kind), key))
            if envelope["op"] == "d" and key is not None:
                out.append((row, None, key))  # Debezium's tombstone after a delete
            i += 1
        return out

    def _json(self, value: Any, kind: int) -> bytes:
        try:
            return json.dumps(
                value, default=json_default, ensure_ascii=False, allow_nan=False
            ).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{self.where} cannot encode the change {RowKind(kind).short} "
                f"{value!r:.200} as JSON: {e}"
            ) from e

    def _key(self, row: Any, kind: int) -> bytes:
        """The JSON key of ``row``: its key fields, compact, in ``key``'s order."""
        assert self.key is not None
        if not isinstance(row, dict):
            raise ValueError(
                f"{self.where} takes changes as dicts with the key fields {list(self.key)}; "
                f"got {RowKind(kind).short} {type(row).__name__} {row!r:.200}: map the "
                "changes to dicts first"
            )
        values: dict[str, Any] = {}
        for field in self.key:
            if field not in row:
                raise ValueError(
                    f"{self.where}: the change {RowKind(kind).short} {row!r:.200} lacks the "
                    f"key field {field!r}; every change needs {list(self.key)}"
                )
            value = row[field]
            if value is None:
                raise ValueError(
                    f"{self.where}: the change {RowKind(kind).short} {row!r:.200} has a null "
                    f"key field {field!r}; the key {list(self.key)} identifies one row, so "
                    "none of its fields may be null"
                )
            values[field] = value
        try:
            return json.dumps(
                values, default=json_default, ensure_ascii=False, separators=(",", ":")
            ).encode()
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{self.where} cannot encode the key of {row!r:.200} as JSON: {e}"
            ) from e
