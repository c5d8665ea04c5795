"""Debezium from Kafka and changelogs to Kafka (issue 39, sections 2 and 3), against the
real broker on 127.0.0.1:9092 and the real registry on 127.0.0.1:8081, never mocked.

``KafkaSource(format="debezium-json" | "debezium-avro")``: a table's change history in
Debezium's documented envelope (tests/connectors/debezium_events.py: a snapshot,
inserts, updates, deletes with their tombstones, primary-key changes, multi-row
transactions; REPLICA IDENTITY FULL and DEFAULT), plain and wrapped by Kafka Connect's
JsonConverter, and as Avro through the registry, read as a changelog whose rows,
applied to a table, give the source table; schema changes carried by the rows;
malformed envelopes, truncates and messages failing with ``topic[partition]@offset``
or dead-lettered, never dropped. ``KafkaSink(format="upsert")``: keyed rows and
tombstones whose compacted view is the table; ``format="debezium-json"``: envelopes the
source reads back as the same changelog; exactly once through an injected failure
(M-X1, M-X2, M-R1). Local executor only here."""

from __future__ import annotations

import decimal
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from debezium_events import (
    Event,
    avro_envelope,
    compacted,
    connect_json,
    history,
    price_of,
    produce_events,
    read_records,
)

import lockgate as lg
from changelog_helpers import apply, by_key
from checkpoint_paced import CheckpointPacedSource
from kafka_fixtures import BOOTSTRAP
from lockgate.connectors.kafka.sink import KafkaSink
from lockgate.connectors.kafka.source import KafkaSource
from lockgate.connectors.schema_registry import SchemaRegistry
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.testing import FailAtRecord, inject_faults
from registry_schemas import REGISTRY_URL

LOCAL = lg.LocalExecutor()
INS, UB, UA, D = (
    lg.RowKind.INSERT,
    lg.RowKind.UPDATE_BEFORE,
    lg.RowKind.UPDATE_AFTER,
    lg.RowKind.DELETE,
)


# --------------------------------------------------------------------------------- helpers


def collect(source: Any, parallelism: int = 2, name: str = "debezium") -> list[lg.Change]:
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.from_source(source, name="cdc").sink_to(lg.connectors.CollectSink(changelog=True)).uid(
        "out"
    )
    result = env.execute(name, executor=LOCAL)
    return [c for part in result.sink_results["out"] for c in part]


def expected_changes(events: list[Event]) -> list[lg.Change]:
    """The changelog the envelopes stand for, stated independently of the converter:
    c/r -> +I after; u -> -U before (when given), +U after; d -> -D before;
    tombstones nothing."""
    out: list[lg.Change] = []
    for e in events:
        v = e.value
        if v is None:
            continue
        if v["op"] in ("c", "r"):
            out.append(lg.Change(INS, v["after"]))
        elif v["op"] == "u":
            if v["before"] is not None:
                out.append(lg.Change(UB, v["before"]))
            out.append(lg.Change(UA, v["after"]))
        elif v["op"] == "d":
            out.append(lg.Change(D, v["before"]))
    return out


def source(topic: str, **kwargs: Any) -> KafkaSource:
    return KafkaSource(BOOTSTRAP, topic, bounded=True, format="debezium-json", **kwargs)


# -------------------------------------------------------------------- debezium-json reading


@pytest.mark.hang_guard(120)
@pytest.mark.parametrize("full", [True, False], ids=["replica-full", "replica-default"])
@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_debezium_history_read_as_a_changelog_applies_to_the_source_table_M_X1(
    kafka_topic, full, fetch
) -> None:
    """Snapshot, inserts, updates, deletes with tombstones, primary-key changes and
    multi-row transactions: each key's changes are exactly what its envelopes say
    (``-U`` only where ``before`` is given), and applied in order they give the table;
    on both fetch paths."""
    topic = kafka_topic(2)
    h = history(full=full)
    produce_events(topic, h.events, 2)
    got = collect(source(topic, fetch=fetch))
    assert apply(got) == h.table
    assert by_key(got) == by_key(expected_changes(h.events))
    kinds = {c.kind for c in got}
    assert (UB in kinds) is full, "a -U exactly when the updates carry their before"
    assert D in kinds and UA in kinds and INS in kinds


@pytest.mark.hang_guard(120)
def test_the_json_converter_wrapper_decimals_and_metadata_columns(kafka_topic) -> None:
    """``{"schema", "payload"}`` envelopes: read as the plain ones, the Connect
    ``Decimal`` columns as ``decimal.Decimal`` by their schema's scale; the commit time
    (``source.ts_ms``) and LSN (``source.lsn``) as the metadata columns asked for."""
    topic = kafka_topic(1)
    h = history(full=True, changes=120)
    produce_events(topic, h.events, 1, encode=connect_json)
    got = collect(
        source(topic, debezium_metadata={"source.ts_ms": "_commit_ts", "source.lsn": "_lsn"}),
        parallelism=1,
    )
    expected = {rid: {**row, "price": price_of(row)} for rid, row in h.table.items()}
    table = apply(got)
    assert {rid: {k: v for k, v in r.items() if k[0] != "_"} for rid, r in table.items()} == (
        expected
    )
    assert all(isinstance(r["price"], decimal.Decimal) for r in table.values())
    envelopes = [e.value for e in h.events if e.value is not None]
    stamps = [(v["source"]["ts_ms"], v["source"]["lsn"]) for v in envelopes]
    # each envelope's rows carry its commit time and LSN (an update's two rows both)
    seen = sorted({(c.value["_commit_ts"], c.value["_lsn"]) for c in got})
    assert seen == sorted(set(stamps))


@pytest.mark.hang_guard(60)
def test_a_column_added_midway_shows_in_the_rows_after_it(kafka_topic) -> None:
    """A schema change in the envelopes (a column added): the rows of later events
    carry it, earlier ones do not; nothing fails or is lost."""
    topic = kafka_topic(1)
    h = history(snapshot_rows=3, changes=0)
    tail = [
        Event({"id": 1}, {"op": "u", "before": None, "after": {**h.table[1], "note": "x"}}),
        Event({"id": 9}, {"op": "c", "before": None, "after": {"id": 9, "note": None}}),
    ]
    produce_events(topic, h.events + tail, 1)
    got = collect(source(topic), parallelism=1)
    assert [sorted(c.value) for c in got] == [
        ["id", "qty", "status"],
        ["id", "qty", "status"],
        ["id", "qty", "status"],
        ["id", "note", "qty", "status"],
        ["id", "note"],
    ]
    assert got[3] == lg.Change(UA, {**h.table[1], "note": "x"})


BAD = [
    b'{"op": "c", "before": null, "after": {"id": 1}}',
    b"[1, 2]",
    b'{"op": "x", "after": {"id": 2}}',
    b'{"op": "c", "before": null, "after": null}',
    b'{"op": "t", "before": null, "after": null, "source": {"table": "orders"}}',
    b'{"op": "d", "before": null, "after": null}',
    b'{"before": null, "after": {"id": 3}}',
    b'{"op": "m", "message": {"prefix": "p", "content": "aGk="}}',
    b"not json",
    b'{"op": "c", "before": null, "after": {"id": 4}}',
]


@pytest.mark.hang_guard(60)
@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_a_malformed_envelope_fails_naming_topic_partition_and_offset(kafka_topic, fetch) -> None:
    topic = kafka_topic(1)
    produce_events_raw(topic, BAD)
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(source(topic, fetch=fetch), name="cdc").sink_to(
        lg.connectors.CollectSink(changelog=True)
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("debezium malformed", executor=LOCAL)
    cause = err.value.__cause__
    assert isinstance(cause, MalformedRecordError), cause
    assert cause.location == f"{topic}[0]@1"
    assert "not a Debezium change event" in str(cause)


@pytest.mark.hang_guard(60)
def test_truncate_fails_with_its_position_unless_skipped_knowingly(kafka_topic) -> None:
    topic = kafka_topic(1)
    produce_events_raw(topic, [BAD[0], BAD[4], BAD[9]])
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(source(topic), name="cdc").sink_to(lg.connectors.CollectSink(changelog=True))
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("debezium truncate", executor=LOCAL)
    cause = err.value.__cause__
    assert isinstance(cause, MalformedRecordError) and cause.location == f"{topic}[0]@1"
    assert "truncate" in str(cause) and "debezium_skip_ops" in str(cause)
    got = collect(source(topic, debezium_skip_ops=("t",)), parallelism=1)
    assert got == [lg.Change(INS, {"id": 1}), lg.Change(INS, {"id": 4})]


@pytest.mark.hang_guard(60)
def test_malformed_envelopes_go_to_the_dead_letter_output_with_their_offsets(
    kafka_topic,
) -> None:
    """With ``on_error="dead_letter"``: every malformed envelope (not an object, an
    unknown op, no after, no before, no op, bad JSON) and the truncate and message
    not skipped are letters with their offsets; the good events still come."""
    topic = kafka_topic(1)
    produce_events_raw(topic, BAD)
    env = lg.StreamEnvironment(parallelism=1)
    rows = env.from_source(source(topic, on_error="dead_letter"), name="cdc")
    rows.get_side_output(lg.DEAD_LETTER).sink_to(lg.connectors.CollectSink()).uid("dead")
    rows.sink_to(lg.connectors.CollectSink(changelog=True)).uid("out")
    result = env.execute("debezium dead letters", executor=LOCAL)
    got = [c for part in result.sink_results["out"] for c in part]
    letters = [d for part in result.sink_results["dead"] for d in part]
    assert got == [lg.Change(INS, {"id": 1}), lg.Change(INS, {"id": 4})]
    assert [d["offset"] for d in letters] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(d["topic"] == topic and d["partition"] == 0 for d in letters)
    assert letters[0]["location"] == f"{topic}[0]@1"
    assert [d["raw"] for d in letters] == [b.decode() for b in BAD[1:9]]
    assert "unknown op 'x'" in letters[1]["error"]
    assert "invalid JSON" in letters[7]["error"]


def produce_events_raw(topic: str, values: list[bytes | None]) -> None:
    from kafka_fixtures import produce

    produce(topic, values, partition=0, raw=True)


# -------------------------------------------------------------------- debezium-avro reading


@pytest.mark.hang_guard(120)
@pytest.mark.parametrize("fetch", ["auto", "librdkafka"])
def test_debezium_avro_through_the_registry_with_a_column_added_midway(kafka_topic, fetch) -> None:
    """Envelopes serialized by confluent-kafka's AvroSerializer (the schema Debezium's
    AvroConverter registers), the second half with a version 2 of the table (a column
    ``note`` added): the changelog applies to the table, and the rows of version 2
    events carry ``note``."""
    topic = kafka_topic(2)
    h = history(full=True, changes=200)
    client = SchemaRegistryClient({"url": REGISTRY_URL})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, json.dumps(avro_envelope()))
    v2 = AvroSerializer(client, json.dumps(avro_envelope(extra_column=True)))
    half = len(h.events) // 2
    events = list(h.events)
    for i in range(half, len(events)):
        v = events[i].value
        if v is not None:
            events[i] = Event(
                events[i].key,
                {
                    **v,
                    "before": None if v["before"] is None else {**v["before"], "note": "v2"},
                    "after": None if v["after"] is None else {**v["after"], "note": "v2"},
                },
            )
    produce_events(
        topic,
        events[:half],
        2,
        encode=lambda envelope: v1(envelope, ctx),
    )
    produce_events(topic, events[half:], 2, encode=lambda envelope: v2(envelope, ctx))
    got = collect(
        KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format="debezium-avro",
            schema_registry=SchemaRegistry(REGISTRY_URL),
            fetch=fetch,
        )
    )
    table = apply(got)
    assert {rid: {k: v for k, v in r.items() if k != "note"} for rid, r in table.items()} == (
        h.table
    )
    expected = by_key(expected_changes(events))
    assert by_key(got) == expected
    assert any("note" in r for r in table.values()) and any("note" not in r for r in table.values())


@pytest.mark.hang_guard(60)
def test_a_malformed_avro_envelope_is_a_dead_letter_with_its_schema_id(kafka_topic) -> None:
    """An Avro envelope that decodes but is no row change (op ``x``): a dead letter with
    its position, its bytes and its schema id; the events around it still come."""
    topic = kafka_topic(1)
    client = SchemaRegistryClient({"url": REGISTRY_URL})
    ctx = SerializationContext(topic, MessageField.VALUE)
    serialize = AvroSerializer(client, json.dumps(avro_envelope()))
    h = history(snapshot_rows=2, changes=0)
    bad = Event({"id": 1}, {**h.events[0].value, "op": "x"})  # type: ignore[dict-item]
    produce_events(topic, [h.events[0], bad, h.events[1]], 1, encode=lambda v: serialize(v, ctx))
    env = lg.StreamEnvironment(parallelism=1)
    rows = env.from_source(
        KafkaSource(
            BOOTSTRAP,
            topic,
            bounded=True,
            format="debezium-avro",
            schema_registry=SchemaRegistry(REGISTRY_URL),
            on_error="dead_letter",
        ),
        name="cdc",
    )
    rows.get_side_output(lg.DEAD_LETTER).sink_to(lg.connectors.CollectSink()).uid("dead")
    rows.sink_to(lg.connectors.CollectSink(changelog=True)).uid("out")
    result = env.execute("debezium avro dead letter", executor=LOCAL)
    got = [c for part in result.sink_results["out"] for c in part]
    (letter,) = [d for part in result.sink_results["dead"] for d in part]
    assert got == [lg.Change(INS, h.table[1]), lg.Change(INS, h.table[2])]
    assert (letter["offset"], letter["location"]) == (1, f"{topic}[0]@1")
    assert isinstance(letter["raw"], bytes) and letter["raw"][0] == 0
    assert letter["schema_id"] == int.from_bytes(letter["raw"][1:5], "big")
    assert "unknown op 'x'" in letter["error"]


# ------------------------------------------------------------------------------- the sink


OPS = [
    {"op": "+I", "id": 1, "v": 10},
    {"op": "+I", "id": 2, "v": 20},
    {"op": "-U", "id": 1, "v": 10},
    {"op": "+U", "id": 1, "v": 11},
    {"op": "-U", "id": 2, "v": 20},  # alone: a delete
    {"op": "+U", "id": 3, "v": 30},  # alone: an upsert
    {"op": "-D", "id": 1, "v": 11},
]


def write_ops(topic: str, fmt: str, key: Any = "id") -> list[tuple[int, Any, Any]]:
    env = lg.StreamEnvironment(parallelism=1)
    env.from_collection(OPS).kinds_from_field("op").sink_to(
        KafkaSink(BOOTSTRAP, topic, format=fmt, key=key), name="out"
    )
    env.execute(f"changelog to {fmt}", executor=LOCAL)
    return read_records(topic)


@pytest.mark.hang_guard(60)
def test_upsert_writes_rows_by_json_key_and_tombstones_for_deletes_and_lone_update_befores(
    kafka_topic,
) -> None:
    topic = kafka_topic(1)
    assert write_ops(topic, "upsert") == [
        (0, {"id": 1}, {"id": 1, "v": 10}),
        (0, {"id": 2}, {"id": 2, "v": 20}),
        (0, {"id": 1}, {"id": 1, "v": 11}),  # the -U before it dropped
        (0, {"id": 2}, None),
        (0, {"id": 3}, {"id": 3, "v": 30}),
        (0, {"id": 1}, None),
    ]


@pytest.mark.hang_guard(60)
def test_debezium_json_out_pairs_updates_and_follows_deletes_with_tombstones(kafka_topic) -> None:
    topic = kafka_topic(1)
    got = [
        (k, v and (v["op"], v["before"], v["after"]))
        for _, k, v in write_ops(topic, "debezium-json")
    ]
    assert got == [
        ({"id": 1}, ("c", None, {"id": 1, "v": 10})),
        ({"id": 2}, ("c", None, {"id": 2, "v": 20})),
        ({"id": 1}, ("u", {"id": 1, "v": 10}, {"id": 1, "v": 11})),
        ({"id": 2}, ("d", {"id": 2, "v": 20}, None)),
        ({"id": 2}, None),
        ({"id": 3}, ("u", None, {"id": 3, "v": 30})),
        ({"id": 1}, ("d", {"id": 1, "v": 11}, None)),
        ({"id": 1}, None),
    ]


@pytest.mark.hang_guard(120)
def test_debezium_to_upserts_into_a_compacted_topic_whose_view_is_the_table(kafka_topic) -> None:
    """Debezium events -> ``.to_upserts("id")`` -> ``KafkaSink(format="upsert")``: the
    last value per key (tombstones removing keys) is the source table."""
    topic = kafka_topic(2)
    out = kafka_topic(2, {"cleanup.policy": "compact"})
    h = history(full=False)
    produce_events(topic, h.events, 2)
    env = lg.StreamEnvironment(parallelism=2)
    env.from_source(source(topic), name="cdc").to_upserts("id").sink_to(
        KafkaSink(BOOTSTRAP, out, format="upsert", key=["id"]), name="upserts"
    )
    env.execute("debezium to upserts", executor=LOCAL)
    view = compacted(read_records(out))
    assert view == {json.dumps({"id": rid}): row for rid, row in h.table.items()}


@pytest.mark.hang_guard(120)
def test_debezium_json_round_trip_gives_the_same_changelog(kafka_topic) -> None:
    """Source -> ``KafkaSink(format="debezium-json", key="id")`` -> source again: each
    key's changes are the same, in the same order."""
    topic = kafka_topic(2)
    out = kafka_topic(2)
    h = history(full=True)
    produce_events(topic, h.events, 2)
    env = lg.StreamEnvironment(parallelism=2)
    env.from_source(source(topic), name="cdc").sink_to(
        KafkaSink(BOOTSTRAP, out, format="debezium-json", key="id"), name="dbz"
    )
    env.execute("debezium round trip", executor=LOCAL)
    again = collect(source(out))
    assert by_key(again) == by_key(expected_changes(h.events))
    assert apply(again) == h.table


PACE = 40


@pytest.mark.hang_guard(180)
def test_upserts_are_exactly_once_through_a_failure_M_X1_M_X2_M_R1(
    kafka_topic, caplog, executor
) -> None:
    """Debezium events -> ``KafkaSink(format="upsert")`` with checkpoints, paced by
    them; the sink fails after a completed checkpoint of attempt 0, the job restores it
    (the source rewinds to the checkpointed offsets, the open Kafka transaction is
    aborted): each key's committed records are exactly its changes, once each. On both
    executors (the changelog crosses the Spark slots' wire)."""
    topic = kafka_topic(2)
    out = kafka_topic(2)
    h = history(full=True, changes=400)
    produce_events(topic, h.events, 2)
    env = lg.StreamEnvironment(parallelism=2)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=4, delay=0))
    env.from_source(CheckpointPacedSource(source(topic), PACE, end_after=3), name="cdc").uid(
        "cdc"
    ).sink_to(KafkaSink(BOOTSTRAP, out, format="upsert", key="id"), name="upserts")
    inject_faults(env, FailAtRecord("upserts", record=60, attempt=0, after_checkpoints=1))
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        env.execute("debezium upserts exactly once", executor=executor)
    assert [r for r in caplog.records if " restores " in r.getMessage()], "a restore happened"
    expected: dict[Any, list[Any]] = {}
    for e in h.events:
        v = e.value
        if v is not None:
            after = v["after"] if v["op"] != "d" else None
            expected.setdefault(e.key["id"], []).append(after)
    written: dict[Any, list[Any]] = {}
    for _, key, value in read_records(out):
        written.setdefault(key["id"], []).append(value)
    assert written == expected
    assert compacted(read_records(out)) == {
        json.dumps({"id": rid}): row for rid, row in h.table.items()
    }


# -------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"format": "debezium-xml"}, "debezium-json"),
        ({"format": "debezium-json", "key_field": "k"}, "key_field"),
        ({"format": "debezium-json", "timestamp_field": "ts"}, "source.ts_ms"),
        ({"format": "debezium-json", "schema": __import__("pyarrow").schema([])}, "schema"),
        ({"format": "debezium-json", "debezium_metadata": {"lsn": "_l"}}, "source.lsn"),
        ({"format": "debezium-json", "debezium_metadata": ["source.ts_ms"]}, "dict"),
        ({"format": "debezium-json", "debezium_metadata": {"op": ""}}, "column name"),
        (
            {"format": "debezium-json", "debezium_metadata": {"op": "a", "ts_ms": "a"}},
            "two keys",
        ),
        ({"format": "debezium-json", "debezium_skip_ops": ("d",)}, "'t'"),
        ({"format": "json", "debezium_skip_ops": ("t",)}, "debezium_skip_ops"),
        ({"format": "debezium-avro"}, "schema_registry"),
    ],
)
def test_bad_source_arguments_say_what_to_pass(kwargs, named) -> None:
    with pytest.raises(ConfigurationError) as err:
        KafkaSource(BOOTSTRAP, "t", **kwargs)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"format": "upsert"}, "needs key="),
        ({"format": "upsert", "key": lambda r: r["id"]}, "field name"),
        ({"format": "upsert", "key": ["id", "id"]}, "distinct"),
        ({"format": "upsert", "key": []}, "field name"),
        ({"format": "debezium-json", "key": "id", "key_format": "avro"}, "key_format"),
        ({"format": "upserts", "key": "id"}, "'upsert'"),
    ],
)
def test_bad_sink_arguments_say_what_to_pass(kwargs, named) -> None:
    with pytest.raises(ConfigurationError) as err:
        KafkaSink(BOOTSTRAP, "t", **kwargs)
    assert named in str(err.value)


def test_only_the_changelog_formats_accept_changes() -> None:
    assert KafkaSink(BOOTSTRAP, "t", format="upsert", key="id").accepts_changes
    assert KafkaSink(BOOTSTRAP, "t", format="debezium-json").accepts_changes
    assert not KafkaSink(BOOTSTRAP, "t", format="json", key="id").accepts_changes
    assert KafkaSource(BOOTSTRAP, "t", format="debezium-json").format == "json"
