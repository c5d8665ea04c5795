"""Poison records never escape the dead-letter output (issue 18 item 8, the "Bad input"
rule): whatever decoding a record raises (an integer of more than 4,300 digits, nesting
deeper than the recursion limit, bad JSON or UTF-8, a corrupt Parquet file) and a record
over ``max_record_bytes`` go to ``lg.DEAD_LETTER`` with their position, or, with
``on_error="fail"``, fail the job naming it. Every source that decodes (FileSource,
RedisStreamSource, NatsJetStreamSource) against real files, Redis and NATS; the file job
on the local executor and on Spark (local[2])."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import redis
from recording_output import RecordingOutput

import lockgate as lg
from lockgate.connectors import FileSource, NatsJetStreamSource, RedisStreamSource
from lockgate.connectors.base import (
    OVERSIZED_PREFIX_BYTES,
    InputStatus,
    SourceReader,
)
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext

REDIS_URL = "redis://127.0.0.1:6379/0"
NATS_URL = "nats://127.0.0.1:4222"
#: the limit the oversized records of these tests exceed (1 MiB)
LIMIT = 1 << 20

BIG_INT = '{"v": ' + "7" * 5000 + "}"  # int() refuses more than 4,300 digits: ValueError
DEEP = "[" * 200_000 + "]" * 200_000  # deeper than the recursion limit: RecursionError
HUGE = json.dumps({"pad": "x" * (2 * LIMIT)})  # valid JSON, but over LIMIT
#: each poison record, and what its dead letter's error says
POISON = {
    "big int": (BIG_INT, "4300 digits"),
    "deep": (DEEP, "RecursionError"),
    "huge": (HUGE, "over max_record_bytes"),
}


def context() -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="src",
        operator_uid="src",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )


def read_all(source: Any, out: RecordingOutput, max_polls: int = 10_000) -> None:
    """Create a reader of every split of ``source`` and poll it to its end."""
    reader: SourceReader = source.create_reader(context())
    try:
        reader.add_splits(source.create_splits(1))
        for _ in range(max_polls):
            if reader.poll(out) is InputStatus.END_OF_INPUT:
                return
        pytest.fail(f"the reader did not end within {max_polls} polls")
    finally:
        reader.close()


def check_oversized(letter: dict[str, Any], size: int) -> None:
    """The dead letter of an oversized record keeps a bounded prefix and says why."""
    assert len(letter["raw"]) == OVERSIZED_PREFIX_BYTES
    assert letter["raw"].startswith('{"pad": "xxx')
    assert f"record of {size} bytes is over max_record_bytes={LIMIT}" in letter["error"]


def poison_file(folder: Path) -> tuple[Path, dict[int, str]]:
    """A JSON-lines file of good records {"v": i} with the poison lines between them; the
    line number of each poison record."""
    lines = []
    where = {}
    for i in range(30):
        lines.append(json.dumps({"v": i}))
        if i % 10 == 5:
            name = list(POISON)[i // 10]
            lines.append(POISON[name][0])
            where[len(lines)] = name
    f = folder / "poison.jsonl"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f, where


# --------------------------------------------------------------------------------- FileSource


def test_poison_json_lines_reach_the_dead_letters_with_file_and_line(tmp_path: Path) -> None:
    f, where = poison_file(tmp_path)
    out = RecordingOutput()
    read_all(FileSource(f, on_error="dead_letter", max_record_bytes=LIMIT, batch_size=4), out)
    assert [r["v"] for r in out.records] == list(range(30))
    assert {d["line"]: d for d in out.dead}.keys() == where.keys()
    for d in out.dead:
        name = where[d["line"]]
        assert d["location"] == f"{f}:{d['line']}" and d["file"] == str(f)
        assert POISON[name][1] in d["error"], (name, d["error"])
        if name == "huge":
            check_oversized(d, len(HUGE))
        else:
            assert d["raw"] == POISON[name][0]


@pytest.mark.parametrize("name", list(POISON))
def test_with_on_error_fail_a_poison_line_fails_naming_file_and_line(
    tmp_path: Path, name: str
) -> None:
    f = tmp_path / "one.jsonl"
    f.write_text('{"v": 1}\n' + POISON[name][0] + "\n", encoding="utf-8")
    with pytest.raises(MalformedRecordError) as err:
        read_all(FileSource(f, max_record_bytes=LIMIT), RecordingOutput())
    assert err.value.location == f"{f}:2"
    assert POISON[name][1] in str(err.value) and "on_error='dead_letter'" in str(err.value)


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_an_oversized_line_is_skipped_in_pieces_and_the_next_line_is_read(
    tmp_path: Path, line_end: bytes
) -> None:
    """A line of 3.5 MiB (limit 1 MiB): the reader keeps a 1 KiB prefix, skips the rest
    in pieces, and reads on; a reader restored after it skips it the same way. A line of
    exactly the limit is decoded."""
    f = tmp_path / "big.jsonl"
    size = 3 * LIMIT + LIMIT // 2
    exact = json.dumps({"pad": "e" * (LIMIT - 11)}).encode()
    assert len(exact) == LIMIT
    f.write_bytes(
        b'{"v": 0}'
        + line_end
        + b'"'
        + b"y" * (size - 2)
        + b'"'
        + line_end
        + exact
        + line_end
        + b'{"v": 3}'
        + line_end
    )
    source = FileSource(f, on_error="dead_letter", max_record_bytes=LIMIT)
    out = RecordingOutput()
    read_all(source, out)
    assert [r.get("v", "exact") for r in out.records] == [0, "exact", 3]
    (letter,) = out.dead
    assert letter["line"] == 2 and len(letter["raw"]) == OVERSIZED_PREFIX_BYTES
    assert f"record of {size} bytes is over max_record_bytes={LIMIT}" in letter["error"]

    restored = RecordingOutput()
    reader = source.create_reader(context())
    try:
        (split,) = source.create_splits(1)
        split.position = 2  # the oversized line was consumed
        reader.add_splits([split])
        while reader.poll(restored) is not InputStatus.END_OF_INPUT:
            pass
    finally:
        reader.close()
    assert [r.get("v", "exact") for r in restored.records] == ["exact", 3]
    assert not restored.dead


def test_csv_poison_rows_reach_the_dead_letters(tmp_path: Path) -> None:
    """An integer field of 5,000 digits was silently read as the float inf before."""
    f = tmp_path / "poison.csv"
    f.write_text(
        "v,w\n1,a\n" + "9" * 5000 + ",b\n3," + "z" * (2 * LIMIT) + "\n4,d\n", encoding="utf-8"
    )
    out = RecordingOutput()
    read_all(FileSource(f, format="csv", on_error="dead_letter", max_record_bytes=LIMIT), out)
    assert [r["v"] for r in out.records] == [1, 4]
    assert [d["line"] for d in out.dead] == [3, 4]
    assert "4300 digits" in out.dead[0]["error"]
    assert "over max_record_bytes" in out.dead[1]["error"]
    assert len(out.dead[1]["raw"]) <= OVERSIZED_PREFIX_BYTES


def test_a_corrupt_parquet_file_reaches_the_dead_letters_and_the_next_file_is_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.parquet").write_bytes(b"PAR1 this is not parquet at all PAR1")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"v": [1, 2]}), tmp_path / "b.parquet")
    letters: list[dict[str, Any]] = []
    rows: list[Any] = []

    class Out(RecordingOutput):
        def emit_from_split(self, split_id: Any, batch: Any) -> None:
            rows.extend(batch.to_pylist())

        def emit_dead_letter(self, record: dict[str, Any]) -> None:
            letters.append(record)

    read_all(FileSource(tmp_path, format="parquet", on_error="dead_letter"), Out())
    assert rows == [{"v": 1}, {"v": 2}]
    (letter,) = letters
    assert letter["file"] == str(tmp_path / "a.parquet")
    assert letter["location"] == f"{tmp_path / 'a.parquet'}@row0"
    assert "not a readable Parquet file" in letter["error"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1mb", None])
def test_a_bad_max_record_bytes_is_refused_naming_it(tmp_path: Path, bad: Any) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text("{}\n")
    for make in (
        lambda: FileSource(f, max_record_bytes=bad),
        lambda: RedisStreamSource(REDIS_URL, "s", max_record_bytes=bad),
        lambda: NatsJetStreamSource(NATS_URL, "S", max_record_bytes=bad),
    ):
        with pytest.raises(ConfigurationError, match="max_record_bytes must be an int >= 1"):
            make()


def test_m_x1_a_job_routes_poison_lines_to_the_dead_letter_output(
    tmp_path: Path, executor: Any
) -> None:
    """On both executors: every good record out, each poison line in the dead-letter
    output with its position (read through a file:// URL, issue 18 item 11)."""
    f, where = poison_file(tmp_path)
    env = lg.StreamEnvironment(parallelism=1)
    records = env.from_source(
        FileSource(f.as_uri(), on_error="dead_letter", max_record_bytes=LIMIT, batch_size=7),
        name="files",
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(
        lambda d: ("dead", {k: d[k] for k in ("location", "file", "line", "error")})
    )
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect(executor=executor)
    assert sorted(r["v"] for tag, r in out if tag == "good") == list(range(30))
    letters = sorted((d for tag, d in out if tag == "dead"), key=lambda d: d["line"])
    assert [d["line"] for d in letters] == sorted(where)
    for d in letters:
        assert d["location"] == f"{f}:{d['line']}" and d["file"] == str(f)
        assert POISON[where[d["line"]]][1] in d["error"]


# --------------------------------------------------------------------------------- Redis


@pytest.fixture
def stream() -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url(REDIS_URL)
    name = f"lockgate-test:{uuid.uuid4().hex}"
    yield client, name
    client.delete(name)
    client.close()


@pytest.mark.parametrize("fmt", ["json", "fields"])
def test_poison_redis_entries_reach_the_dead_letters_with_stream_and_id(
    stream: tuple[redis.Redis, str], fmt: str
) -> None:
    client, name = stream
    values = [json.dumps({"v": 0}), BIG_INT, DEEP, HUGE, json.dumps({"v": 4})]
    ids = [client.xadd(name, {"data": v}).decode() for v in values]  # type: ignore[union-attr]
    source = RedisStreamSource(
        REDIS_URL, name, format=fmt, bounded=True, on_error="dead_letter", max_record_bytes=LIMIT
    )
    out = RecordingOutput()
    read_all(source, out)
    letters = {d["id"]: d for d in out.dead}
    for d in out.dead:
        assert d["stream"] == name and d["location"] == f"redis stream {name!r} id {d['id']}"
    if fmt == "fields":  # no JSON decoding: only the oversized entry is poison
        assert [r["data"] for r in out.records] == [values[0], BIG_INT, DEEP, values[4]]
        assert list(letters) == [ids[3]]
        assert "over max_record_bytes" in letters[ids[3]]["error"]
        return
    assert out.records == [{"v": 0}, {"v": 4}]
    assert list(letters) == ids[1:4]
    assert "4300 digits" in letters[ids[1]]["error"]
    assert "RecursionError" in letters[ids[2]]["error"]
    check_oversized(letters[ids[3]], len(HUGE))


def test_a_poison_redis_entry_with_on_error_fail_names_stream_and_id(
    stream: tuple[redis.Redis, str],
) -> None:
    client, name = stream
    entry = client.xadd(name, {"data": DEEP}).decode()  # type: ignore[union-attr]
    with pytest.raises(MalformedRecordError) as err:
        read_all(RedisStreamSource(REDIS_URL, name, format="json", bounded=True), RecordingOutput())
    assert err.value.location == f"redis stream {name!r} id {entry}"


# --------------------------------------------------------------------------------- NATS


def _js(action: Any) -> Any:
    async def main() -> Any:
        nc = await nats.connect(NATS_URL)
        try:
            return await action(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(main())


@pytest.fixture
def nats_stream() -> Iterator[str]:
    name = f"LGTEST{uuid.uuid4().hex}"

    async def add(js: Any) -> None:
        await js.add_stream(name=name, subjects=[f"{name}.>"])

    _js(add)
    yield name

    async def delete(js: Any) -> None:
        await js.delete_stream(name)

    _js(delete)


def test_poison_nats_messages_reach_the_dead_letters_with_stream_and_sequence(
    nats_stream: str,
) -> None:
    name = nats_stream
    limit = 300_000  # under NATS's default max_payload of 1 MiB, which DEEP (400 kB) is not
    deep = "[" * 100_000 + "]" * 100_000  # 200 kB, still deeper than the recursion limit
    big = json.dumps({"pad": "x" * (limit + 1)})
    values = [json.dumps({"v": 0}), BIG_INT, deep, big, json.dumps({"v": 4})]

    async def publish(js: Any) -> list[int]:
        return [(await js.publish(f"{name}.a", v.encode())).seq for v in values]

    seqs = _js(publish)
    source = NatsJetStreamSource(
        NATS_URL, name, bounded=True, on_error="dead_letter", max_record_bytes=limit
    )
    out = RecordingOutput()
    read_all(source, out)
    assert out.records == [{"v": 0}, {"v": 4}]
    letters = {d["sequence"]: d for d in out.dead}
    assert list(letters) == seqs[1:4]
    for d in out.dead:
        assert d["stream"] == name and d["subject"] == f"{name}.a"
        assert d["location"] == f"nats stream {name!r} sequence {d['sequence']} (subject {name}.a)"
    assert "4300 digits" in letters[seqs[1]]["error"]
    assert "RecursionError" in letters[seqs[2]]["error"]
    assert len(letters[seqs[3]]["raw"]) == OVERSIZED_PREFIX_BYTES
    assert (
        f"record of {len(big)} bytes is over max_record_bytes={limit}" in letters[seqs[3]]["error"]
    )


@pytest.mark.parametrize(
    "bad",
    [
        b"2," + b"z" * 200_000 + b"\n",
        b"\xff\xfe,q\n",
        b"9" * 20 + b"," + b"z" * (LIMIT + 1) + b"\n",
    ],
)
def test_m_r1_a_csv_reader_restored_after_a_poison_row_reads_on_without_reporting_it_again(
    tmp_path: Path, bad: bytes
) -> None:
    """The poison row (a field over the csv module's field limit, bad UTF-8, a line over
    max_record_bytes) was reported before the checkpoint; the restored reader skips it
    and neither fails on it nor reports the next good row in its place."""
    f = tmp_path / "restore.csv"
    f.write_bytes(b"v,w\n1,a\n" + bad + b"3,c\n4,d\n")
    source = FileSource(f, format="csv", on_error="dead_letter", max_record_bytes=LIMIT)
    first = RecordingOutput()
    read_all(source, first)
    assert [r["v"] for r in first.records] == [1, 3, 4] and len(first.dead) == 1

    restored = RecordingOutput()
    reader = source.create_reader(context())
    try:
        (split,) = source.create_splits(1)
        split.position = 2  # rows 1 and the poison one were consumed
        reader.add_splits([split])
        while reader.poll(restored) is not InputStatus.END_OF_INPUT:
            pass
    finally:
        reader.close()
    assert [r["v"] for r in restored.records] == [3, 4]
    assert restored.dead == []
