"""The pgoutput decoder and the text-to-Arrow conversion of PostgresCdcSource, against
real messages of the wal_level=logical PostgreSQL on 127.0.0.1:5433 (read through
pg_logical_slot_peek_binary_changes, the same bytes the replication stream carries)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pyarrow as pa
import pytest
from cdc_fixtures import CDC_DSN, Cdc, open_cdc

from lockgate.connectors.postgres_cdc import pgoutput as po
from lockgate.connectors.postgres_cdc.snapshot import text_rows
from lockgate.connectors.postgres_cdc.types import (
    Column,
    ValueConversionError,
    arrow_type,
    batch_of,
    numeric_precision,
    parse_array,
    to_arrow,
)
from lockgate.connectors.postgres_cdc.xids import XidSnapshot


@pytest.fixture
def cdc() -> Iterator[Cdc]:
    yield from open_cdc()


def messages(cdc: Cdc, slot: str, publication: str) -> list[po.PgOutputMessage]:
    rows = cdc.sql(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
        "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
        (slot, publication),
    )
    return [po.decode(r[0]) for r in rows]


def slot_on(cdc: Cdc, table: str) -> tuple[str, str]:
    slot, pub = cdc.slot(), cdc.publication()
    cdc.sql(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    cdc.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    return slot, pub


def test_a_transaction_decodes_to_begin_relation_changes_commit_with_full_old_rows(cdc) -> None:
    table = cdc.table("id int PRIMARY KEY, v text", identity="FULL")
    slot, pub = slot_on(cdc, table)
    with cdc.conn.transaction():
        xid = cdc.sql("SELECT txid_current()")[0][0]
        cdc.conn.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, NULL)")
        cdc.conn.execute(f"UPDATE {table} SET v = 'b' WHERE id = 1")
        cdc.conn.execute(f"DELETE FROM {table} WHERE id = 2")
    got = messages(cdc, slot, pub)
    kinds = [type(m).__name__ for m in got]
    assert kinds == ["Begin", "Relation", "Insert", "Insert", "Update", "Delete", "Commit"]
    begin, rel, i1, i2, upd, dele, commit = got
    assert begin.xid == xid % 2**32
    assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
    assert begin.commit_time_us == commit.commit_time_us
    assert abs(commit.commit_time_us / 1e6 - dt.datetime.now().timestamp()) < 60
    assert rel.qualified == f"public.{table}" and rel.replica_identity == "f"
    assert [(c.name, c.type_oid) for c in rel.columns] == [("id", 23), ("v", 25)]
    assert i1.new == ("1", "a") and i2.new == ("2", None)
    assert upd.old == ("1", "a") and not upd.old_is_key_only and upd.new == ("1", "b")
    assert dele.old == ("2", None) and not dele.old_is_key_only


def test_default_identity_sends_no_old_row_unless_the_key_changes_and_deletes_keys_only(
    cdc,
) -> None:
    table = cdc.table("id int PRIMARY KEY, v text")
    cdc.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    slot, pub = slot_on(cdc, table)
    cdc.sql(f"UPDATE {table} SET v = 'c' WHERE id = 1")
    cdc.sql(f"UPDATE {table} SET id = 3 WHERE id = 2")
    cdc.sql(f"DELETE FROM {table} WHERE id = 1")
    changes = [m for m in messages(cdc, slot, pub) if isinstance(m, (po.Update, po.Delete))]
    same_key, new_key, delete = changes
    assert same_key.old is None and same_key.new == ("1", "c")
    assert new_key.old == ("2", None) and new_key.old_is_key_only and new_key.new == ("3", "b")
    assert delete.old == ("1", None) and delete.old_is_key_only


def test_an_unchanged_toasted_value_is_marked_unchanged(cdc) -> None:
    table = cdc.table("id int PRIMARY KEY, big text, n int")
    cdc.sql(
        f"INSERT INTO {table} SELECT 1, string_agg(md5(g::text || random()::text), ''), 0 "
        "FROM generate_series(1, 400) g"
    )
    slot, pub = slot_on(cdc, table)
    cdc.sql(f"UPDATE {table} SET n = 1")
    (update,) = [m for m in messages(cdc, slot, pub) if isinstance(m, po.Update)]
    assert update.new == ("1", po.UNCHANGED, "1")


def test_logical_messages_and_truncates_decode(cdc) -> None:
    table = cdc.table("id int PRIMARY KEY")
    slot, pub = slot_on(cdc, table)
    cdc.sql("SELECT pg_logical_emit_message(false, 'lockgate-test', 'hello')")
    cdc.sql(f"TRUNCATE {table}")
    got = messages(cdc, slot, pub)
    message = next(m for m in got if isinstance(m, po.Message))
    assert (message.prefix, message.content, message.transactional) == (
        "lockgate-test",
        b"hello",
        False,
    )
    truncate = next(m for m in got if isinstance(m, po.Truncate))
    relation = next(m for m in got if isinstance(m, po.Relation))
    assert truncate.relids == (relation.relid,) and not truncate.cascade


def test_unknown_or_cut_messages_are_protocol_errors() -> None:
    with pytest.raises(po.ProtocolError, match="unknown pgoutput message"):
        po.decode(b"Zxyz")
    with pytest.raises(po.ProtocolError, match="cut short"):
        po.decode(b"B\x00\x00")


def test_replication_frames_and_status_updates_round_trip() -> None:
    status = po.status_update(0x1_0000_00FF, 946_684_800_000_000 + 5, reply=True)
    assert status[:1] == b"r" and len(status) == 34
    assert int.from_bytes(status[1:9], "big") == 0x1_0000_00FF  # written
    assert int.from_bytes(status[9:17], "big") == 0x1_0000_00FF  # flushed: the slot moves
    keepalive = po.decode_frame(b"k" + (77).to_bytes(8, "big") + bytes(8) + b"\x01")
    assert keepalive == po.Keepalive(77, True)
    assert po.format_lsn(po.parse_lsn("16/B374D848")) == "16/B374D848"


# ------------------------------------------------------------------------ typed columns

TYPES = (
    "id int PRIMARY KEY, s smallint, b bigint, r real, d double precision, "
    "n numeric(12,3), nn numeric, flag boolean, t text, vc varchar(10), c char(3), "
    "ts timestamp, tz timestamptz, day date, tod time, j json, jb jsonb, u uuid, "
    "raw bytea, ints int[], texts text[], iv interval"
)
VALUES = (
    "1, -3, 9007199254740993, 1.5, 'NaN', 12.345, 123456789012345678901234567890.5, true, "
    "'é\"x', 'abc', 'ab', '2024-02-29 12:34:56.789', '2024-02-29 12:34:56.5+02', "
    "'2024-02-29', '23:59:59.25', '{\"a\": [1, 2]}', '{\"b\": null}', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff', '{1,NULL,3}', "
    '\'{"a,b","c\\"d",NULL}\', \'1 day 02:00:00\''
)


def test_every_type_converts_the_same_from_the_wal_and_from_a_select(cdc) -> None:
    """The snapshot (SELECT column::text) and the stream (pgoutput's text) give the same
    text, hence the same typed Arrow values."""
    table = cdc.table(TYPES)
    slot, pub = slot_on(cdc, table)
    cdc.sql(f"INSERT INTO {table} VALUES ({VALUES}), (2, {', '.join(['NULL'] * 21)})")
    from lockgate.connectors.postgres_cdc.tables import describe_tables

    info = describe_tables(cdc.conn, [("public", table)])[0]
    inserts = [m.new for m in messages(cdc, slot, pub) if isinstance(m, po.Insert)]
    columns = ", ".join(c.name for c in info.columns)
    with psycopg.connect(CDC_DSN, options="-c TimeZone=UTC -c DateStyle=ISO,MDY") as conn:
        selected = text_rows(conn, f"SELECT {columns} FROM {table} ORDER BY id")
    assert inserts == selected
    rows = batch_of(info.columns, selected).to_pylist()
    assert rows[0] == {
        "id": 1,
        "s": -3,
        "b": 9007199254740993,
        "r": 1.5,
        "d": pytest.approx(float("nan"), nan_ok=True),
        "n": Decimal("12.345"),
        "nn": "123456789012345678901234567890.5",
        "flag": True,
        "t": 'é"x',
        "vc": "abc",
        "c": "ab ",
        "ts": dt.datetime(2024, 2, 29, 12, 34, 56, 789000),
        "tz": dt.datetime(2024, 2, 29, 10, 34, 56, 500000, tzinfo=dt.timezone.utc),
        "day": dt.date(2024, 2, 29),
        "tod": dt.time(23, 59, 59, 250000),
        "j": '{"a": [1, 2]}',
        "jb": '{"b": null}',
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "raw": b"\x00\xff",
        "ints": [1, None, 3],
        "texts": ["a,b", 'c"d', None],
        "iv": "1 day 02:00:00",
    }
    assert all(v is None for k, v in rows[1].items() if k != "id")
    types = {c.name: arrow_type(c) for c in info.columns}
    assert types["n"] == pa.decimal128(12, 3) and types["nn"] == pa.string()
    assert types["tz"] == pa.timestamp("us", tz="UTC") and types["ints"] == pa.list_(pa.int32())


def test_values_arrow_cannot_hold_fail_naming_the_column() -> None:
    with pytest.raises(ValueConversionError, match="'when'.*infinity"):
        to_arrow(Column("when", 1184), ["infinity"])
    with pytest.raises(ValueConversionError, match="'n'"):
        to_arrow(Column("n", 23), ["12", "x"])


def test_array_text_parsing_and_numeric_modifiers() -> None:
    assert parse_array("{}") == []
    assert parse_array('{"a b","c\\"d",NULL,e}') == ["a b", 'c"d', None, "e"]
    assert parse_array("{{1,2},{3,4}}") == [["1", "2"], ["3", "4"]]
    assert parse_array("[0:1]={7,8}") == ["7", "8"]
    assert numeric_precision(-1) is None
    assert numeric_precision(((12 << 16) | 3) + 4) == (12, 3)


def test_xid_snapshots_see_what_committed_before_them() -> None:
    """M-X1 at the switch: a change is skipped exactly when its chunk's snapshot shows it."""
    snap = XidSnapshot.parse("100:105:101,103")
    assert str(snap) == "100:105:101,103"
    assert [x for x in range(98, 107) if snap.sees(x)] == [98, 99, 100, 102, 104]
    wrapped = XidSnapshot.parse(f"{2**32 + 10}:{2**32 + 20}:")
    assert wrapped.sees(5) and not wrapped.sees(25)  # 32-bit ids of the same epoch
    assert wrapped.sees(2**32 - 5)  # the previous epoch's last ids
