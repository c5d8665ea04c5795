"""Debezium change events read as a changelog: ``KafkaSource(format="debezium-json" |
"debezium-avro")``.

Debezium (and connectors that follow its envelope) writes one Kafka record per row
change, whose value is an *envelope*: ``op`` (``c`` create, ``r`` read during a
snapshot, ``u`` update, ``d`` delete, ``t`` truncate, ``m`` logical-decoding message),
``before`` and ``after`` (the row's columns before and after the change, or null),
``source`` (where the change comes from: ``ts_ms`` the commit time, ``lsn`` the WAL
position for PostgreSQL, ``db``, ``schema``, ``table``, ``txId``, ...) and ``ts_ms``
(when Debezium handled it). After a delete Debezium writes a *tombstone* (same key, null
value) so that a compacted topic can forget the key.

The source decodes each value with the underlying format (``json``: plain or wrapped by
Kafka Connect's JsonConverter as ``{"schema": ..., "payload": <envelope>}``; ``avro``:
framed by a Schema Registry serializer, decoded with the writer's schema), then
:class:`DebeziumConverter` turns the envelopes of one partition's poll into changelog rows
with the table's columns (a ``RowBatch`` of dicts with their row kinds):

=========  ===============================================================
``op``     rows
=========  ===============================================================
``c``/``r``  ``+I`` of ``after``
``u``      ``-U`` of ``before`` when the event has it (PostgreSQL with
           ``REPLICA IDENTITY FULL``; MySQL), then ``+U`` of ``after``; a
           ``+U`` alone when ``before`` is null (upsert semantics: the
           ``+U`` replaces the key's row)
``d``      ``-D`` of ``before`` (with PostgreSQL's default replica identity
           only the key columns are set, the others null)
tombstone  nothing (skipped: it only serves compaction)
``t``/``m``  malformed (fail, or dead letter), unless ``debezium_skip_ops``
           names them; see below
=========  ===============================================================

Why truncates fail by default: a truncate removes every row, which a changelog of rows
cannot say without knowing them, so a job that skipped it would leave its target with
rows the source table no longer has. A logical-decoding message (``m``) changes no row;
it is refused too, so that nothing on the topic is dropped without the user saying so
(``debezium_skip_ops=("m",)``; Debezium writes them to a topic of their own by default).

Malformed (failing the job with ``topic[partition]@offset``, or with
``on_error="dead_letter"`` sent to ``lg.DEAD_LETTER`` with that position): a value that
is not an envelope (not an object, no ``op`` or an unknown one), a ``c``/``r``/``u``
without an ``after`` object, a ``d`` without a ``before`` object, a ``t``/``m`` not
skipped. Never dropped silently.

Schema changes: every envelope is converted with the columns it holds (JSON: the
object's fields; Avro: decoded with the writer's schema of its own schema id), so rows
after a column was added carry it and rows before it do not; downstream operators see
dicts with the columns of their event.

Metadata columns (``debezium_metadata={key: column}``), added to every row of an event:
``"source.ts_ms"`` (commit time in the source database, epoch ms), ``"source.lsn"``
(PostgreSQL's WAL position), any other ``"source.<field>"`` (``txId``, ``db``,
``schema``, ``table``, MySQL's ``file``/``pos``, ...), ``"source"`` (the whole source
block), ``"ts_ms"`` (when Debezium handled the change) and ``"op"`` (the op code). A
missing field gives None. A metadata column replaces a table column of the same name:
choose names the table does not use (e.g. ``"_commit_ts"``).
"""

from __future__ import annotations

import base64
import decimal
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...core.batch import RowBatch
from ...core.row_kind import RowKind
from ...errors import ConfigurationError

#: the KafkaSource formats of Debezium envelopes, and the format each value is decoded with
DEBEZIUM_FORMATS: dict[str, str] = {"debezium-json": "json", "debezium-avro": "avro"}
#: the op codes of row changes, and those ``debezium_skip_ops`` may name
ROW_OPS = ("c", "r", "u", "d")
SKIPPABLE_OPS = ("t", "m")
_META_KEYS = ("ts_ms", "op", "source")
_SOURCE_FIELD = re.compile(r"^source\.([A-Za-z_][A-Za-z0-9_]*)$")
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"

_INS = int(RowKind.INSERT)
_UB = int(RowKind.UPDATE_BEFORE)
_UA = int(RowKind.UPDATE_AFTER)
_DEL = int(RowKind.DELETE)

#: ``report(message, raw, error)``: a malformed record (fails, or dead-letters it)
Report = Callable[[Any, Any, str], None]


class DebeziumConverter:
    """Turns decoded Debezium envelopes into changelog rows (see the module docstring).

    ``metadata``: metadata key -> column name; ``skip_ops``: the op codes (``t``, ``m``)
    to skip instead of reporting as malformed. Picklable, no per-run state."""

    def __init__(self, fmt: str, metadata: Mapping[str, str], skip_ops: frozenset[str]) -> None:
        self.format = fmt
        self.metadata = dict(metadata)
        self.skip_ops = skip_ops
        #: (column, getter) of every metadata column
        self._getters = [(column, _getter(key)) for key, column in self.metadata.items()]

    def convert(
        self, envelopes: Sequence[Any], message_at: Callable[[int], Any], report: Report
    ) -> RowBatch | None:
        """The changelog rows of ``envelopes`` (one partition's decoded values in offset
        order, None for a tombstone), as one RowBatch with their kinds, or None when
        they hold no row change. ``message_at(i)`` gives the Kafka message of
        ``envelopes[i]``, to report a malformed one by its position (``report``: with
        ``on_error="fail"`` it raises)."""
        rows: list[Any] = []
        kinds: list[int] = []
        for i, envelope in enumerate(envelopes):
            if envelope is not None:  # a tombstone: it only lets compaction forget the key
                self.add(envelope, i, message_at, report, rows, kinds)
        return batch_of(rows, kinds)

    def add(
        self,
        envelope: Any,
        i: int,
        message_at: Callable[[int], Any],
        report: Report,
        rows: list[Any],
        kinds: list[int],
    ) -> None:
        """Append the rows of ``envelope`` (``message_at(i)``'s) and their kinds to
        ``rows`` and ``kinds``, or report it malformed."""
        if envelope is None:
            return
        payload = envelope
        schema: Any = None
        if type(payload) is dict and "op" not in payload and "payload" in payload:
            schema = payload.get("schema")
            payload = payload["payload"]  # Kafka Connect's JsonConverter wrapper
            if payload is None:
                return  # a tombstone written through the wrapper
        error = _check(payload, self.skip_ops)
        if error is not None:
            if error:
                report(message_at(i), envelope, error)
            return
        op = payload["op"]
        before = payload.get("before")
        after = payload.get("after")
        if schema is not None:
            before, after = _connect_values(schema, before, after)
        if self._getters:
            extra = {column: get(payload) for column, get in self._getters}
            before = None if before is None else {**before, **extra}
            after = None if after is None else {**after, **extra}
        if op == "u":
            if before is not None:
                rows.append(before)
                kinds.append(_UB)
            rows.append(after)
            kinds.append(_UA)
        elif op == "d":
            rows.append(before)
            kinds.append(_DEL)
        else:
            rows.append(after)
            kinds.append(_INS)


def batch_of(rows: list[Any], kinds: list[int]) -> RowBatch | None:
    """``rows`` with their ``kinds`` as one RowBatch, None when there are none."""
    if not rows:
        return None
    return RowBatch(rows, kinds=np.asarray(kinds, dtype=np.int8))


def _check(payload: Any, skip_ops: frozenset[str]) -> str | None:
    """None when ``payload`` is a row change to convert; ``""`` when it is to be skipped
    (an op in ``skip_ops``); else what is wrong with it."""
    if type(payload) is not dict:
        return (
            f"not a Debezium change event: a {type(payload).__name__}, not an object with "
            "op, before and after"
        )
    op = payload.get("op")
    if op in ("c", "r"):
        if type(payload.get("after")) is not dict:
            return f"Debezium event op={op!r} without an 'after' object (the new row)"
        return None
    if op == "u":
        if type(payload.get("after")) is not dict:
            return "Debezium event op='u' without an 'after' object (the updated row)"
        before = payload.get("before")
        if before is not None and type(before) is not dict:
            return "Debezium event op='u' whose 'before' is neither an object nor null"
        return None
    if op == "d":
        if type(payload.get("before")) is not dict:
            return (
                "Debezium event op='d' without a 'before' object (the deleted row's key at "
                "least; a table with REPLICA IDENTITY NOTHING gives none: set DEFAULT or FULL)"
            )
        return None
    if op in skip_ops:
        return ""
    if op == "t":
        return (
            "Debezium truncate event (op='t'): a changelog of rows cannot express removing "
            "every row, so the job's output would keep rows the table no longer has; "
            "pass debezium_skip_ops=('t',) to skip truncates knowingly, or exclude them in "
            "Debezium (skipped.operations=t)"
        )
    if op == "m":
        return (
            "Debezium logical-decoding message (op='m'): it changes no row; pass "
            "debezium_skip_ops=('m',) to skip such messages"
        )
    if op is None and "op" not in payload:
        fields = ", ".join(sorted(map(str, payload))[:10])
        return f"not a Debezium change event: no 'op' field (fields: {fields})"
    return f"Debezium event with unknown op {op!r} (known: c, r, u, d, t, m)"


def _getter(key: str) -> Callable[[dict[str, Any]], Any]:
    if key in ("ts_ms", "op"):
        return lambda p: p.get(key)
    if key == "source":
        return lambda p: p.get("source")
    name = key[len("source.") :]

    def get(p: dict[str, Any]) -> Any:
        source = p.get("source")
        return source.get(name) if type(source) is dict else None

    return get


# ------------------------------------------------------------------- JsonConverter types


def _connect_values(schema: Any, before: Any, after: Any) -> tuple[Any, Any]:
    """``before`` and ``after`` with the Kafka Connect decimals their JsonConverter
    ``schema`` declares (``org.apache.kafka.connect.data.Decimal``: base64 of the
    unscaled big-endian two's-complement integer, Debezium's default
    ``decimal.handling.mode=precise``) as ``decimal.Decimal``; other values as written."""
    if type(schema) is not dict:
        return before, after
    scales = _decimal_scales(schema)
    if not scales:
        return before, after
    return _decimals(before, scales.get("before")), _decimals(after, scales.get("after"))


def _decimal_scales(schema: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for part in schema.get("fields") or ():
        if type(part) is not dict or part.get("field") not in ("before", "after"):
            continue
        found: dict[str, int] = {}
        for column in part.get("fields") or ():
            if type(column) is dict and column.get("name") == _CONNECT_DECIMAL:
                try:
                    found[column["field"]] = int((column.get("parameters") or {})["scale"])
                except (KeyError, TypeError, ValueError):
                    continue
        if found:
            out[part["field"]] = found
    return out


def _decimals(row: Any, scales: dict[str, int] | None) -> Any:
    if not scales or type(row) is not dict:
        return row
    row = dict(row)
    for name, scale in scales.items():
        value = row.get(name)
        if isinstance(value, str):
            try:
                unscaled = int.from_bytes(
                    base64.b64decode(value, validate=True), "big", signed=True
                )
            except ValueError:
                continue  # not base64: left as written
            row[name] = decimal.Decimal(unscaled).scaleb(-scale)
    return row


# ------------------------------------------------------------------------- arguments


def check_debezium(
    owner: str,
    fmt: str,
    metadata: object,
    skip_ops: object,
    *,
    key_field: str | None,
    timestamp_field: str | None,
    schema: object,
) -> DebeziumConverter:
    """The converter of a Debezium ``fmt``, its arguments checked (a ConfigurationError
    saying what to pass otherwise)."""
    if key_field is not None or timestamp_field is not None:
        raise ConfigurationError(
            f"{owner} format={fmt!r} gives rows with the table's columns; key_field and "
            "timestamp_field are not supported with it: for the commit time pass "
            "debezium_metadata={'source.ts_ms': '<column>'}"
        )
    if schema is not None:
        raise ConfigurationError(
            f"{owner} format={fmt!r} gives rows as dicts with the columns of each event (a "
            "schema change shows in the rows); schema= is not supported with it: drop it "
            "(convert to Arrow downstream if needed)"
        )
    return DebeziumConverter(
        fmt, _check_metadata(owner, metadata), _check_skip_ops(owner, skip_ops)
    )


def check_not_debezium(owner: str, fmt: str, metadata: object, skip_ops: object) -> None:
    """The Debezium arguments are refused with another format."""
    given = [n for n, v in (("debezium_metadata", metadata), ("debezium_skip_ops", skip_ops)) if v]
    if given:
        raise ConfigurationError(
            f"{owner} {' and '.join(given)} are for format='debezium-json' or "
            f"'debezium-avro', but format is {fmt!r}: remove them, or choose one of those"
        )


def _check_metadata(owner: str, metadata: object) -> dict[str, str]:
    if metadata is None:
        return {}
    keys = "'source.ts_ms', 'source.lsn', 'source.<field>', 'source', 'ts_ms' or 'op'"
    if not isinstance(metadata, Mapping):
        raise ConfigurationError(
            f"{owner} debezium_metadata must be a dict {{metadata key: column name}} with "
            f"keys {keys}, e.g. {{'source.ts_ms': '_commit_ts'}}, got {metadata!r}"
        )
    out: dict[str, str] = {}
    for key, column in metadata.items():
        if not (isinstance(key, str) and (key in _META_KEYS or _SOURCE_FIELD.match(key))):
            raise ConfigurationError(
                f"{owner} debezium_metadata key {key!r} is not a Debezium metadata key: use {keys}"
            )
        if not isinstance(column, str) or not column:
            raise ConfigurationError(
                f"{owner} debezium_metadata[{key!r}] must be a non-empty column name, got "
                f"{column!r}"
            )
        out[key] = column
    if len(set(out.values())) != len(out):
        raise ConfigurationError(
            f"{owner} debezium_metadata puts two keys into one column: {out!r}; give each "
            "its own column"
        )
    return out


def _check_skip_ops(owner: str, skip_ops: object) -> frozenset[str]:
    if skip_ops is None:
        return frozenset()
    ops = [skip_ops] if isinstance(skip_ops, str) else skip_ops
    if not isinstance(ops, (list, tuple, set, frozenset)) or not all(
        o in SKIPPABLE_OPS for o in ops
    ):
        raise ConfigurationError(
            f"{owner} debezium_skip_ops must name Debezium ops to skip among 't' (truncate: "
            "the output then keeps the truncated rows) and 'm' (logical-decoding messages), "
            f"e.g. ('m',), got {skip_ops!r}"
        )
    return frozenset(ops)
