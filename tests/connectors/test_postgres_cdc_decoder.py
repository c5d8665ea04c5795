"""The pgoutput decoder and the text-to-Arrow conversion of PostgresCdcSource, against
real messages of the wal_level=logical PostgreSQL on 127.0.0.1:5433 (read through
pg_logical_slot_peek_binary_changes, the same bytes the replication stream carries)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from cdc_fixtures import CDC_DSN, Cdc, open_cdc

from lockgate.connectors.postgres.cdc import change_columns as cc
from lockgate.connectors.postgres.cdc import pgoutput as po
from lockgate.connectors.postgres.cdc.snapshot import text_rows
from lockgate.connectors.postgres.cdc.types import (
    Column,
    ValueConversionError,
    arrow_type,
    batch_of,
    batch_of_text,
    numeric_precision,
    parse_array,
    text_to_arrow,
    to_arrow,
)
from lockgate.connectors.postgres.cdc.xids import XidSnapshot


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
    from lockgate.connectors.postgres.cdc.tables import describe_tables

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


# ---------------------------------------------------- the compiled pass (change_columns)


def frames_of(payloads: list[bytes]) -> list[bytes]:
    """XLogData frames around pgoutput messages, as the replication stream sends them."""
    return [b"w" + bytes(24) + p for p in payloads]


def scanned_tuple(scan: cc.FrameScan, base: int, width: int) -> list[object]:
    return [c[0].as_py() for c in cc.text_columns(scan, np.array([base]), width) or ()]


def same(a: pa.Array | pa.RecordBatch, b: pa.Array | pa.RecordBatch) -> bool:
    """Equal types and values (NaN equal to NaN, unlike Arrow's equals)."""
    kind = (a.schema, b.schema) if isinstance(a, pa.RecordBatch) else (a.type, b.type)
    return kind[0] == kind[1] and repr(a.to_pylist()) == repr(b.to_pylist())


def plain(values: tuple[po.Value, ...]) -> list[object]:
    return [None if v is po.UNCHANGED else v for v in values]


def test_the_compiled_pass_decodes_every_change_as_the_reference_decoder_does(cdc) -> None:
    """Real pgoutput messages of every type, NULLs, unchanged TOASTed values ('u'),
    FULL identity old rows, key-only old rows and deletes: each Insert/Update/Delete
    the compiled pass takes has exactly the reference decoder's values (as text columns
    and as rows taken one by one) (an update's
    unchanged values filled from the FULL old row, as the reader does); the one it
    cannot fill (no old row) is left to the reference path; the other messages are
    control frames. The rows then convert to the same typed columns (M-X1: the fast
    path emits what the reference path emits)."""
    if not cc.available():
        pytest.skip(f"numba unusable here: {cc._UNAVAILABLE}")
    big = "SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 400) g"
    full = cdc.table(TYPES + ", big text", identity="FULL")
    keyed = cdc.table("id int PRIMARY KEY, big text, n int")
    slot, pub = cdc.slot(), cdc.publication()
    cdc.sql(f"CREATE PUBLICATION {pub} FOR TABLE {full}, {keyed}")
    cdc.sql("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    cdc.transaction(
        f"INSERT INTO {full} VALUES ({VALUES}, ({big})), (2, {', '.join(['NULL'] * 22)})",
        f"INSERT INTO {keyed} VALUES (1, ({big}), 0), (2, 'small', 0)",
    )
    cdc.transaction(
        f"UPDATE {full} SET s = 4, t = NULL WHERE id = 1",  # big unchanged: 'u', old row whole
        f"UPDATE {full} SET id = 3 WHERE id = 2",
        f"UPDATE {keyed} SET n = 1 WHERE id = 1",  # big unchanged: 'u', no old row
        f"UPDATE {keyed} SET n = 2 WHERE id = 2",  # no old row (key unchanged)
        f"UPDATE {keyed} SET id = 5 WHERE id = 2",  # the old key only
    )
    cdc.sql(f"DELETE FROM {full} WHERE id = 1")  # the whole old row
    cdc.sql(f"DELETE FROM {keyed} WHERE id = 5")  # the key only
    payloads = [
        bytes(r[0])
        for r in cdc.sql(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
            (slot, pub),
        )
    ]
    keepalive = b"k" + (77).to_bytes(8, "big") + bytes(8) + b"\x00"
    frames = [keepalive, *frames_of(payloads)]
    scan = cc.scan(frames)
    assert scan.ftype[0] == cc.CONTROL
    one_by_one = {
        i: change
        for i in range(1, len(frames))
        if scan.ftype[i] in (cc.INSERT, cc.UPDATE, cc.DELETE)
        for change in cc.rows(scan, i, i + 1)
    }
    seen: dict[str, int] = {}
    for i, payload in enumerate(payloads, start=1):
        ref = po.decode(payload)
        kind = int(scan.ftype[i])
        name = type(ref).__name__
        if not isinstance(ref, (po.Insert, po.Update, po.Delete)):
            assert kind == cc.CONTROL, name
            continue
        width = len(ref.old if isinstance(ref, po.Delete) else ref.new)
        if isinstance(ref, po.Delete):
            assert kind == cc.DELETE
            assert scanned_tuple(scan, int(scan.old_base[i]), width) == plain(ref.old)
            assert one_by_one[i] == (kind, ref.relid, tuple(plain(ref.old)), None)
            name += "-key" if ref.old_is_key_only else "-full"
        elif isinstance(ref, po.Insert):
            assert kind == cc.INSERT and int(scan.old_base[i]) == -1
            assert scanned_tuple(scan, int(scan.new_base[i]), width) == list(ref.new)
            assert one_by_one[i] == (kind, ref.relid, None, ref.new)
        else:
            unsent = po.UNCHANGED in ref.new
            if unsent and (ref.old is None or ref.old_is_key_only):
                assert kind == cc.REFERENCE  # the reader's reference path fails it
                name += "-unfillable"
                seen[name] = seen.get(name, 0) + 1
                continue
            assert kind == cc.UPDATE
            new = list(ref.new)
            if ref.old is None:
                assert int(scan.old_base[i]) == -1
            else:
                assert scanned_tuple(scan, int(scan.old_base[i]), width) == plain(ref.old)
                new = [o if n is po.UNCHANGED else n for n, o in zip(ref.new, ref.old)]
                name += "-key" if ref.old_is_key_only else "-full"
            if unsent:
                name += "-filled"
            assert scanned_tuple(scan, int(scan.new_base[i]), width) == new
            old = None if ref.old is None else tuple(plain(ref.old))
            assert one_by_one[i] == (kind, ref.relid, old, tuple(new))
        seen[name] = seen.get(name, 0) + 1
    assert seen == {
        "Insert": 4,
        "Update-full-filled": 1,
        "Update-full": 1,
        "Update-unfillable": 1,
        "Update": 1,
        "Update-key": 1,
        "Delete-full": 1,
        "Delete-key": 1,
    }
    # the same text, hence the same typed columns, from both ways
    from lockgate.connectors.postgres.cdc.tables import describe_tables

    info = describe_tables(cdc.conn, [("public", full)])[0]
    inserts = [i for i, p in enumerate(payloads, start=1) if isinstance(po.decode(p), po.Insert)]
    rows = [po.decode(payloads[i - 1]).new for i in inserts[:2]]  # type: ignore[union-attr]
    texts = cc.text_columns(scan, scan.new_base[inserts[:2]], len(info.columns))
    assert texts is not None
    assert same(batch_of_text(info.columns, texts), batch_of(info.columns, rows))


def test_changes_the_compiled_pass_does_not_take_are_left_to_the_reference_decoder() -> None:
    """Cut-short messages, binary values, unknown value kinds, lengths past the message:
    REFERENCE (pgoutput.decode then raises its ProtocolError, as before)."""
    if not cc.available():
        pytest.skip(f"numba unusable here: {cc._UNAVAILABLE}")
    head = b"I" + (16384).to_bytes(4, "big") + b"N"
    bad = [
        head + b"\x00\x01b" + (1).to_bytes(4, "big") + b"x",  # binary
        head + b"\x00\x01z",  # unknown kind
        head + b"\x00\x01t" + (9).to_bytes(4, "big") + b"x",  # past the end
        head + b"\x00\x02t" + (1).to_bytes(4, "big") + b"x",  # one column short
        head[:3],  # cut short
        b"D" + (16384).to_bytes(4, "big") + b"N\x00\x00",  # a delete without an old row
    ]
    good = head + b"\x00\x02t" + (2).to_bytes(4, "big") + b"xyn"
    scan = cc.scan(frames_of([*bad, good]))
    assert scan.ftype.tolist() == [cc.REFERENCE] * len(bad) + [cc.INSERT]
    for payload in bad:
        with pytest.raises(po.ProtocolError):
            po.decode(payload)
    assert scanned_tuple(scan, int(scan.new_base[-1]), 2) == ["xy", None]
    assert po.decode(good).new == ("xy", None)  # type: ignore[union-attr]


def test_text_columns_convert_like_python_values() -> None:
    """types.text_to_arrow of a string array is types.to_arrow of its values: the same
    array, or the same error naming the column and value."""
    cases = [
        (Column("n", 23), ["1", None, "-7"]),
        (Column("f", 701), ["NaN", "-Infinity", "1.5", None]),
        (Column("d", 1700, ((12 << 16) | 2) + 4), ["12.34", None]),
        (Column("b", 16), ["t", "f", None]),
        (Column("tz", 1184), ["2024-02-29 12:34:56.5+02", None]),
        (Column("raw", 17), ["\\x00ff", None]),
        (Column("tod", 1083), ["23:59:59.25", None]),
        (Column("a", 1007, element_oid=23), ["{1,NULL}", None]),
    ]
    for column, values in cases:
        text = pa.array(values, pa.string())
        assert same(text_to_arrow(column, text), to_arrow(column, values)), column
    # timestamptz: PostgreSQL's "+00" (TimeZone=UTC) read as the offset it is
    stamps = [
        "2024-02-29 10:34:56.5+00",
        "0001-01-01 00:00:00+00",
        None,
        "9999-12-31 23:59:59.999999+00",
    ]
    utc = pa.timestamp("us", tz="UTC")
    for values in (stamps, [*stamps, "2024-02-29 16:04:56.5+05:30", "2024-02-29 07:34:56-03"]):
        text = pa.array(values, pa.string())
        offsets = pc.replace_substring_regex(text, r"([+-]\d\d)$", r"\1:00").cast(utc)
        assert text_to_arrow(Column("tz", 1184), text).equals(offsets)
    for column, values, match in [
        (Column("when", 1184), ["2024-01-01 00:00:00+00", "infinity"], "'when'.*infinity"),
        (Column("n", 23), ["12", "x"], "'n'.*'x'"),
    ]:
        with pytest.raises(ValueConversionError, match=match):
            text_to_arrow(column, pa.array(values, pa.string()))
