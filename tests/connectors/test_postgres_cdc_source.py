"""PostgresCdcSource's reader against the wal_level=logical PostgreSQL on 127.0.0.1:5433
(never mocked): change kinds, whole transactions, positions that a restore resumes from
exactly (M-X1, M-R1), the slot confirmed only by completed checkpoints, the snapshot's
switch to the stream, schema changes, lost slots and argument checks."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cdc_fixtures import CDC_DSN, Cdc, open_cdc
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from tcp_delay import DelayProxy

import lockgate as lg
from conftest import wait_until
from lockgate.connectors.base import InputStatus, ReaderOutput, SourceReader
from lockgate.connectors.postgres.cdc.connection import ReplicationStream
from lockgate.connectors.postgres.cdc.pgoutput import parse_lsn
from lockgate.connectors.postgres.cdc.reader import LostSlotError, SchemaChangedError
from lockgate.connectors.postgres.cdc.source import PostgresCdcSource, StreamSplit
from lockgate.core.batch import kinds_of, user_view
from lockgate.core.row_kind import RowKind
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext


@pytest.fixture
def cdc() -> Iterator[Cdc]:
    yield from open_cdc()


class Changes(ReaderOutput):
    """Records what a reader emits: (kind short string, row without metadata, metadata)."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, dict[str, Any]]] = []
        self.meta: list[dict[str, Any]] = []
        self.batches = 0

    def emit(self, batch: Any) -> None:
        self.emit_from_split(None, batch)

    def emit_from_split(self, split_id: Any, batch: Any) -> None:
        self.batches += 1
        kinds = kinds_of(batch)
        rows = user_view(batch).to_pylist()
        for i, row in enumerate(rows):
            kind = RowKind(int(kinds[i])) if kinds is not None else RowKind.INSERT
            meta = {k: row.pop(k) for k in ("_table", "_lsn", "_commit_time")}
            self.changes.append((kind.short, row))
            self.meta.append(meta)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        raise AssertionError(f"no dead letters expected: {record}")


def context(subtask: int = 0, parallelism: int = 1, attempt: int = 0) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="cdc",
        operator_uid="cdc",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
        attempt_number=attempt,
        run_id="run-test",
    )


@pytest.fixture
def open_reader() -> Iterator[Callable[..., SourceReader]]:
    readers: list[SourceReader] = []

    def open_(source: PostgresCdcSource, splits: list[Any], **kw: Any) -> SourceReader:
        reader = source.create_reader(context(**kw))
        readers.append(reader)
        reader.add_splits(splits)
        return reader

    yield open_
    for r in readers:
        r.close()


def read_until(reader: SourceReader, out: Changes, done: Callable[[], bool], what: str) -> None:
    wait_until(lambda: (reader.poll(out), done())[1], what, timeout_s=20, every_s=0.01)


def source_for(cdc: Cdc, table: str, **kw: Any) -> PostgresCdcSource:
    kw.setdefault("snapshot", "never")
    return PostgresCdcSource(CDC_DSN, table, slot=cdc.slot(), publication=cdc.publication(), **kw)


# ---------------------------------------------------------------------------- streaming


def test_changes_arrive_with_their_kinds_full_identity(cdc, open_reader) -> None:
    """+I for inserts, -U/+U for updates (old row known: REPLICA IDENTITY FULL), -D with
    the whole old row; the commit's LSN and time as metadata."""
    table = cdc.table("id int PRIMARY KEY, v text", identity="FULL")
    source = source_for(cdc, table)
    reader = open_reader(source, source.create_splits(1))
    cdc.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    cdc.sql(f"UPDATE {table} SET v = 'b' WHERE id = 1")
    cdc.sql(f"DELETE FROM {table} WHERE id = 1")
    out = Changes()
    read_until(reader, out, lambda: len(out.changes) == 4, "4 changes")
    assert out.changes == [
        ("+I", {"id": 1, "v": "a"}),
        ("-U", {"id": 1, "v": "a"}),
        ("+U", {"id": 1, "v": "b"}),
        ("-D", {"id": 1, "v": "b"}),
    ]
    assert {m["_table"] for m in out.meta} == {f"public.{table}"}
    lsns = [m["_lsn"] for m in out.meta]
    assert lsns[0] < lsns[1] == lsns[2] < lsns[3]


def test_default_identity_gives_a_lone_update_after_and_key_only_deletes(cdc, open_reader) -> None:
    """Without the old row an update is a +U alone (an upsert by key); a key change is
    -U (old key only) then +U; a delete is -D with the key columns, others null."""
    table = cdc.table("id int PRIMARY KEY, v text")
    cdc.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    source = source_for(cdc, table)
    reader = open_reader(source, source.create_splits(1))
    cdc.sql(f"UPDATE {table} SET v = 'c' WHERE id = 1")
    cdc.sql(f"UPDATE {table} SET id = 3 WHERE id = 2")
    cdc.sql(f"DELETE FROM {table} WHERE id = 1")
    out = Changes()
    read_until(reader, out, lambda: len(out.changes) == 4, "4 changes")
    assert out.changes == [
        ("+U", {"id": 1, "v": "c"}),
        ("-U", {"id": 2, "v": None}),
        ("+U", {"id": 3, "v": "b"}),
        ("-D", {"id": 1, "v": None}),
    ]


def test_a_transaction_is_emitted_whole_in_one_poll_and_the_position_is_its_commit_M_X1(
    cdc, open_reader
) -> None:
    """A transaction's changes (two tables, several statements) come out in one poll, so
    no checkpoint falls inside it; the split's position is then the end of its commit."""
    a = cdc.table("id int PRIMARY KEY, v text", identity="FULL")
    b = cdc.table("id int PRIMARY KEY, w int", identity="FULL")
    source = PostgresCdcSource(
        CDC_DSN, [a, b], slot=cdc.slot(), publication=cdc.publication(), snapshot="never"
    )
    reader = open_reader(source, source.create_splits(1))
    cdc.transaction(
        f"INSERT INTO {a} SELECT g, 'x' FROM generate_series(1, 50) g",
        f"INSERT INTO {b} VALUES (1, 1)",
        f"UPDATE {a} SET v = 'y' WHERE id <= 10",
    )
    out = Changes()
    wait_until(
        lambda: reader.poll(out) is InputStatus.MORE_AVAILABLE or bool(out.changes),
        "the transaction",
        timeout_s=20,
        every_s=0.01,
    )
    assert len(out.changes) == 50 + 1 + 20, "all of it in the first poll that emitted"
    assert [m["_table"] for m in out.meta][49:52] == [f"public.{a}", f"public.{b}", f"public.{a}"]
    (split,) = reader.snapshot_positions()
    # past the commit; a keepalive may carry it further (other jobs write WAL on this
    # server too), but never past what the server has written
    assert out.meta[0]["_lsn"] < split.position <= cdc.lsn()


def test_a_new_reader_resumes_after_the_checkpointed_position_exactly_M_X1_M_R1(
    cdc, open_reader
) -> None:
    """Changes at or before the checkpointed LSN are skipped, every later one comes: the
    slot is confirmed only up to the completed checkpoint, so the server still has them."""
    table = cdc.table("id int PRIMARY KEY, v int", identity="FULL")
    source = source_for(cdc, table)
    first = open_reader(source, source.create_splits(1))
    for i in range(5):
        cdc.sql(f"INSERT INTO {table} VALUES ({i}, {i})")
    out = Changes()
    read_until(first, out, lambda: len(out.changes) == 5, "5 inserts")
    checkpoint = first.snapshot_positions()
    for i in range(5, 8):
        cdc.sql(f"INSERT INTO {table} VALUES ({i}, {i})")
    read_until(first, out, lambda: len(out.changes) == 8, "8 inserts")
    first.close()  # a failure: the 3 later inserts were emitted but not checkpointed
    cdc.sql(f"INSERT INTO {table} VALUES (8, 8)")
    again = Changes()
    restored = open_reader(source, source.restore_splits(checkpoint, context()))
    read_until(restored, again, lambda: len(again.changes) == 4, "the 4 inserts after it")
    assert [r["id"] for _, r in again.changes] == [5, 6, 7, 8]


def test_the_slot_is_confirmed_only_when_a_checkpoint_completes_M_X1(cdc, open_reader) -> None:
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    source = source_for(cdc, table)
    reader = open_reader(source, source.create_splits(1))
    start = cdc.confirmed(source.slot)
    cdc.sql(f"INSERT INTO {table} SELECT generate_series(1, 10)")
    out = Changes()
    read_until(reader, out, lambda: len(out.changes) == 10, "10 inserts")
    positions = reader.snapshot_positions()
    cdc.sql(f"INSERT INTO {table} VALUES (11)")
    read_until(reader, out, lambda: len(out.changes) == 11, "the 11th")
    reader.poll(out)
    assert cdc.confirmed(source.slot) == start, "nothing confirmed before a checkpoint completes"
    reader.notify_checkpoint_complete(1, positions)
    wait_until(
        lambda: cdc.confirmed(source.slot) == positions[0].position,
        "the slot confirmed at the checkpoint's position (not further)",
    )
    assert positions[0].position > start


def slot_of_a_new_table(cdc: Cdc) -> tuple[str, str, str, int]:
    """A new table, a publication of it and a pgoutput slot: (table, slot, publication,
    the slot's consistent LSN)."""
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    slot, pub = cdc.slot(), cdc.publication()
    cdc.sql(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    row = cdc.sql(
        "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,)
    )
    return table, slot, pub, parse_lsn(row[0][0])


def slow_link() -> tuple[DelayProxy, str]:
    """A 300 ms link to the CDC server (:class:`tcp_delay.DelayProxy`), and the DSN
    through it."""
    proxy = DelayProxy(("127.0.0.1", int(conninfo_to_dict(CDC_DSN).get("port") or 5432)), 0.3)
    return proxy, make_conninfo(CDC_DSN, host="127.0.0.1", port=str(proxy.port))


def test_closing_the_stream_applies_its_last_confirm_even_over_a_slow_link_M_X1(cdc) -> None:
    """The last confirm before a close (the final checkpoint's) is applied by the server
    when close returns: the stream ends with CopyDone and waits for the server's, so a
    socket closed at once cannot drop the status update still on its way (a 300 ms link
    that resets on the client's close drops it otherwise)."""
    table, slot, pub, start = slot_of_a_new_table(cdc)
    cdc.sql(f"INSERT INTO {table} SELECT generate_series(1, 10)")
    target = cdc.lsn()
    proxy, dsn = slow_link()
    try:
        stream = ReplicationStream(dsn, slot, pub, start, start, timeout_s=10)
        seen: list[int] = []
        wait_until(
            lambda: (
                seen.extend(f.wal_end for f in stream.read(100)),
                max(seen, default=0) >= target,
            )[1],
            "the stream reached the inserts' LSN",
            timeout_s=20,
            every_s=0.01,
        )
        stream.confirm(target)
        stream.close()
        assert cdc.confirmed(slot) == target, "the slot holds the last confirm at once"
    finally:
        proxy.close()


def test_closing_the_stream_is_bounded_when_the_server_answers_late(cdc) -> None:
    """Ending the stream waits for the server at most its timeout: over a 2 s link a 0.1 s
    close gives up and closes the connection anyway (the slot may then lag, never run
    ahead)."""
    _, slot, pub, start = slot_of_a_new_table(cdc)
    proxy, dsn = slow_link()
    try:
        stream = ReplicationStream(dsn, slot, pub, start, start, timeout_s=10)
        proxy.delay_s = 2.0  # the server's answer to the end comes 2 s later at best
        began = time.monotonic()
        stream.close(timeout_s=0.1)
        took = time.monotonic() - began
        stream.close()  # a second close does nothing
    finally:
        proxy.close()
    assert took < 1.0, f"close waited {took:.2f} s for a server 2 s away"
    assert stream.conn is None


def test_a_replication_connection_tries_the_next_host_when_one_never_answers(cdc) -> None:
    """The connect timeout applies to each host of a multi-host DSN, as libpq's does: a
    first host that accepts the connection and never answers is given up after it, and
    the second host serves the stream."""
    _, slot, pub, start = slot_of_a_new_table(cdc)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (backlog), never answers
    port = int(conninfo_to_dict(CDC_DSN).get("port") or 5432)
    dsn = make_conninfo(
        CDC_DSN, host="127.0.0.1,127.0.0.1", port=f"{silent.getsockname()[1]},{port}"
    )
    try:
        began = time.monotonic()
        stream = ReplicationStream(dsn, slot, pub, start, start, timeout_s=1)
        took = time.monotonic() - began
        stream.close()
    finally:
        silent.close()
    assert 1.0 <= took < 10, f"the silent host was given up after its 1 s ({took:.2f} s)"


def test_a_replication_connection_works_past_descriptor_1024(cdc) -> None:
    """A task holding many files (RocksDB keeps its SST files open) gets socket numbers
    past select()'s limit of 1024: the handshake and the end still wait on them."""
    _, slot, pub, start = slot_of_a_new_table(cdc)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        stream = ReplicationStream(CDC_DSN, slot, pub, start, start, timeout_s=10)
        assert stream.conn.socket > 1024
        stream.confirm(start)
        stream.close()
    finally:
        for fd in held:
            os.close(fd)


def test_opening_the_stream_over_a_slow_link_lets_the_other_threads_run(cdc) -> None:
    """The replication handshake waits in select, not in libpq holding the GIL: a task's
    other threads (checkpoints, heartbeats) go on while a slow server answers (the
    handshake takes several round trips of 300 ms here; a blocking connect let the
    counter below move once)."""
    _, slot, pub, start = slot_of_a_new_table(cdc)
    ticks = [0]
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.005):
            ticks[0] += 1

    proxy, dsn = slow_link()
    ticker = threading.Thread(target=tick, daemon=True)
    try:
        ticker.start()
        began = time.monotonic()
        stream = ReplicationStream(dsn, slot, pub, start, start, timeout_s=10)
        took = time.monotonic() - began
        stream.close()
    finally:
        stop.set()
        ticker.join()
        proxy.close()
    assert took >= 0.6, f"the handshake crossed the slow link ({took:.2f} s)"
    assert ticks[0] >= 20, f"another thread ran {ticks[0]} times during a {took:.2f} s connect"


def test_a_bounded_source_ends_at_the_wal_position_of_its_start(cdc, open_reader) -> None:
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    slot, pub = cdc.slot(), cdc.publication()
    PostgresCdcSource(CDC_DSN, table, slot=slot, publication=pub, snapshot="never").prepare_run()
    cdc.sql(f"INSERT INTO {table} SELECT generate_series(1, 3)")
    source = PostgresCdcSource(
        CDC_DSN, table, slot=slot, publication=pub, snapshot="never", bounded=True
    )
    reader = open_reader(source, source.create_splits(1))
    cdc.sql(f"INSERT INTO {table} VALUES (4)")  # after the end: not read
    out = Changes()
    wait_until(lambda: reader.poll(out) is InputStatus.END_OF_INPUT, "the end", timeout_s=20)
    assert [r["id"] for _, r in out.changes] == [1, 2, 3]


# ----------------------------------------------------------------------- initial snapshot


def apply(changes: list[tuple[str, dict[str, Any]]], key: str = "id") -> dict[Any, dict]:
    """Apply a changelog strictly: an insert of a present key, or a -U/-D of an absent
    row or of another row than the one present, is an error (a duplicate or a loss)."""
    table: dict[Any, dict] = {}
    for kind, row in changes:
        k = row[key]
        if kind == "+I":
            assert k not in table, f"+I of present key {k}: a duplicate"
            table[k] = row
        elif kind == "+U":
            table[k] = row
        else:
            assert table.get(k) == row, f"{kind} of {row}, but the table has {table.get(k)}"
            del table[k]
    return table


def test_the_snapshot_then_the_stream_give_every_change_once_M_X1(cdc, open_reader) -> None:
    """Chunks read at different moments while rows change in between: each change is
    either in its key's chunk or emitted by the stream, never both, never neither."""
    table = cdc.table("id int PRIMARY KEY, v int", identity="FULL")
    cdc.sql(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, 100) g")
    source = source_for(cdc, table, snapshot="initial", chunk_size=25)
    splits = source.create_splits(1)
    assert len(splits) == 1 + 4
    reader = open_reader(source, splits)
    out = Changes()
    for step in range(4):  # one chunk per poll; changes to every chunk between them
        cdc.transaction(
            *(f"UPDATE {table} SET v = v + 1 WHERE id = {c * 25 + step + 1}" for c in range(4)),
            f"DELETE FROM {table} WHERE id = {step * 25 + 10}",
            f"INSERT INTO {table} VALUES ({1000 + step}, {step})",
        )
        assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    snapshot_rows = len(out.changes)
    assert {k for k, _ in out.changes} == {"+I"}
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE, "the stream waits for markers"
    reader.notify_checkpoint_complete(1, reader.snapshot_positions())  # markers written
    cdc.sql(f"UPDATE {table} SET v = 100 WHERE id = 2")
    read_until(reader, out, lambda: ("+U", {"id": 2, "v": 100}) in out.changes, "the later update")
    assert len(out.changes) > snapshot_rows
    assert apply(out.changes) == cdc.rows(table)


def test_a_restored_run_reads_unfinished_chunks_again_and_never_the_finished_ones(
    cdc, open_reader
) -> None:
    """M-R1: a chunk read in the checkpoint is not read again; one read after it is (the
    first reader's emission after the checkpoint is dropped with the failure)."""
    table = cdc.table("id int PRIMARY KEY, v int", identity="FULL")
    cdc.sql(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, 40) g")
    source = source_for(cdc, table, snapshot="initial", chunk_size=20)
    first = open_reader(source, source.create_splits(1))
    kept = Changes()
    first.poll(kept)  # chunk 0, checkpointed
    checkpoint = first.snapshot_positions()
    first.poll(Changes())  # chunk 1, lost with the failure
    first.close()
    cdc.sql(f"UPDATE {table} SET v = 5 WHERE id IN (3, 33)")
    restored = open_reader(source, source.restore_splits(checkpoint, context(attempt=1)))
    again = Changes()
    restored.poll(again)
    assert sorted(r["id"] for _, r in again.changes) == list(range(21, 41))
    restored.notify_checkpoint_complete(2, restored.snapshot_positions())
    read_until(restored, again, lambda: len(again.changes) >= 22, "the update of id 3")
    assert apply(kept.changes + again.changes) == cdc.rows(table)


# ------------------------------------------------------------- schema changes, lost slots


def test_a_schema_change_fails_the_job_clearly(cdc, open_reader) -> None:
    table = cdc.table("id int PRIMARY KEY, v int", identity="FULL")
    source = source_for(cdc, table)
    reader = open_reader(source, source.create_splits(1))
    cdc.sql(f"ALTER TABLE {table} ADD COLUMN extra text")
    cdc.sql(f"INSERT INTO {table} VALUES (1, 1, 'x')")
    out = Changes()
    with pytest.raises(SchemaChangedError, match=f"columns of public.{table} changed.*extra"):
        wait_until(lambda: reader.poll(out) and False, "the schema change", timeout_s=20)
    assert out.changes == []


def test_a_lost_slot_fails_the_restore_naming_what_is_lost(cdc, open_reader) -> None:
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    source = source_for(cdc, table)
    reader = open_reader(source, source.create_splits(1))
    checkpoint = reader.snapshot_positions()
    reader.close()
    cdc.sql("SELECT pg_drop_replication_slot(%s)", (source.slot,))
    with pytest.raises(LostSlotError, match="does not exist.*lost"):
        open_reader(source, source.restore_splits(checkpoint, context(attempt=1)))
    source.prepare_run()  # a new run creates it again, further on: still refused
    with pytest.raises(LostSlotError, match="past the checkpoint's position"):
        open_reader(source, source.restore_splits(checkpoint, context(attempt=1)))


# ------------------------------------------------------------------------ configuration


def test_a_server_without_logical_wal_level_is_refused_saying_how_to_fix_it(cdc) -> None:
    source = PostgresCdcSource(
        "host=127.0.0.1 port=5432 user=postgres dbname=test",
        "anything",
        slot="lg_never_created",
        publication="p",
    )
    with pytest.raises(ConfigurationError, match="wal_level = logical.*restart"):
        source.check_before_run()


def test_a_table_without_replica_identity_is_refused(cdc) -> None:
    table = cdc.table("id int, v int")  # no primary key
    source = source_for(cdc, table)
    with pytest.raises(ConfigurationError, match="REPLICA IDENTITY FULL"):
        source.check_before_run()


def test_a_missing_publication_is_created_and_an_incomplete_one_refused(cdc) -> None:
    a = cdc.table("id int PRIMARY KEY")
    b = cdc.table("id int PRIMARY KEY")
    source = source_for(cdc, a)
    source.prepare_run()
    assert cdc.sql(
        "SELECT tablename FROM pg_publication_tables WHERE pubname = %s", (source.publication,)
    ) == [(a,)]
    both = PostgresCdcSource(
        CDC_DSN, [a, b], slot=cdc.slot(), publication=source.publication, snapshot="never"
    )
    with pytest.raises(ConfigurationError, match=f"ALTER PUBLICATION .* ADD TABLE .*{b}"):
        both.prepare_run()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tables": []}, "at least one"),
        ({"tables": ["a", "a"]}, "distinct"),
        ({"tables": "a.b.c"}, "table names"),
        ({"slot": "Bad-Name"}, "slot"),
        ({"publication": ""}, "publication"),
        ({"snapshot": "always"}, "snapshot"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"bounded": "yes"}, "bounded"),
        ({"dsn": ""}, "dsn"),
    ],
)
def test_bad_arguments_raise_a_configuration_error_naming_them(kwargs, named) -> None:
    args = {"dsn": CDC_DSN, "tables": "t", "slot": "s", "publication": "p", **kwargs}
    dsn, tables = args.pop("dsn"), args.pop("tables")
    with pytest.raises(ConfigurationError, match=named):
        PostgresCdcSource(dsn, tables, **args)


def test_the_stream_split_goes_to_subtask_0_and_chunks_round_robin_on_restore(cdc) -> None:
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    cdc.sql(f"INSERT INTO {table} SELECT generate_series(1, 50)")
    source = source_for(cdc, table, snapshot="initial", chunk_size=10)
    splits = source.create_splits(2)
    splits[1].snapshot = "1:1:"
    shares = [source.restore_splits(splits, context(i, 2)) for i in range(2)]
    assert isinstance(shares[0][0], StreamSplit) and shares[0][0].known == {0: "1:1:"}
    assert sorted(s.index for s in shares[0][1:]) == [1, 3]
    assert sorted(s.index for s in shares[1]) == [0, 2, 4]


def test_a_small_batch_size_drops_nothing_between_polls_M_X1(cdc, open_reader) -> None:
    """Polls stop after batch_size changes; the frames already read wait for the next."""
    table = cdc.table("id int PRIMARY KEY", identity="FULL")
    source = source_for(cdc, table, batch_size=3)
    reader = open_reader(source, source.create_splits(1))
    for i in range(300):
        cdc.sql(f"INSERT INTO {table} VALUES ({i})")
    out = Changes()
    read_until(reader, out, lambda: len(out.changes) >= 300, "300 inserts")
    assert [r["id"] for _, r in out.changes] == list(range(300))


def test_an_initial_snapshot_without_checkpointing_is_refused_when_the_job_is_built(cdc) -> None:
    """The stream starts once a checkpoint holding every chunk completed: without
    checkpointing the job would read the snapshot and then wait for ever."""
    table = cdc.table("id int PRIMARY KEY, v int")
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.from_source(
        PostgresCdcSource(CDC_DSN, table, slot=cdc.slot(), publication=cdc.publication())
    ).sink_to(lg.connectors.CollectSink(changelog=True))
    with pytest.raises(
        lg.InvalidGraphError, match=r"needs checkpointing: after its initial snapshot"
    ):
        env.execute("no checkpoints")
