"""FileSource watching a folder (``monitor_interval``): an unbounded, replayable source.

Reader level, on a :class:`lockgate.ManualClock` (no sleeping): new files are picked up
at the next listing and not before, each file is read once, hidden files never; the
subtasks share the files by a hash of their names; a checkpoint holds the unfinished
files with their positions and the finished names, and a restore, also at another
parallelism, reads every remaining record exactly once (M-X1, M-R1).

Job level, on the local executor and on Spark (local[2]): files written into the folder
while the job runs reach an exactly-once FileSink exactly once, also across a savepoint
and a restore at another parallelism.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from conftest import is_spark, wait_until
from lockgate.connectors import FileSink, FileSource
from lockgate.connectors.base import InputStatus, ReaderOutput, SourceReader, assign_splits
from lockgate.connectors.files.source import DoneFiles, FileSplit, file_owner
from lockgate.core.batch import Batch, to_rows
from lockgate.runtime.context import RuntimeContext

INTERVAL_S = 1.0
INTERVAL_MS = 1000.0


# --------------------------------------------------------------------------- helpers


def put(folder: Path, name: str, ids: range, fmt: str = "jsonl") -> None:
    """Create ``folder/name`` holding records ``{"id": i}`` atomically, as the source
    expects of writers: write a hidden file, then rename it into place."""
    tmp = folder / f".{name}.tmp"
    records = [{"id": i} for i in ids]
    if fmt == "jsonl":
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    elif fmt == "csv":
        tmp.write_text("id\n" + "".join(f"{r['id']}\n" for r in records), encoding="utf-8")
    else:
        pq.write_table(pa.Table.from_pylist(records), tmp)
    os.rename(tmp, folder / name)


class Collect(ReaderOutput):
    """Everything a reader emits: records, the splits they came from, finished splits,
    dead letters."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.splits: list[Any] = []
        self.finished: list[Any] = []
        self.dead: list[dict[str, Any]] = []

    def emit(self, batch: Batch) -> None:
        self.records.extend(to_rows(batch))

    def emit_from_split(self, split_id: Any, batch: Batch) -> None:
        self.splits.append(split_id)
        self.emit(batch)

    def split_finished(self, split_id: Any) -> None:
        self.finished.append(split_id)

    def emit_dead_letter(self, record: dict[str, Any]) -> None:
        self.dead.append(record)

    def ids(self) -> list[int]:
        return [r["id"] for r in self.records]


def new_reader(
    source: FileSource,
    clock: lg.ManualClock,
    index: int,
    parallelism: int,
    restored: list[list[Any]] | None = None,
) -> SourceReader:
    """A reader of subtask ``index`` of ``parallelism``, given its splits the way the
    source operator gives them: fresh, or restored from the snapshots of the old
    subtasks (``restored[j]``: old subtask j's), every one of them when the reader
    ``restores_every_split``."""
    ctx = RuntimeContext(
        task_name="files",
        operator_name="files",
        operator_uid="files",
        subtask_index=index,
        parallelism=parallelism,
        max_parallelism=128,
        clock=clock,
    )
    reader = source.create_reader(ctx)
    if restored is None:
        reader.add_splits(assign_splits(source.create_splits(parallelism), index, parallelism))
    else:
        assert reader.restores_every_split, "a watching reader takes every old subtask's splits"
        reader.add_splits([item for state in restored for item in state])
    return reader


def drain(reader: SourceReader, out: Collect, max_polls: int = 10_000) -> None:
    """Poll until the reader has nothing available now (the clock does not move)."""
    for _ in range(max_polls):
        status = reader.poll(out)
        assert status is not InputStatus.END_OF_INPUT, "a watching source never ends"
        if status is InputStatus.NOTHING_AVAILABLE:
            return
    pytest.fail(f"the reader still had data after {max_polls} polls")


def owned(names: list[str], index: int, parallelism: int) -> list[str]:
    return sorted(n for n in names if file_owner(n, parallelism) == index)


def pickled(value: Any) -> Any:
    """``value`` after a round trip through pickle (checkpoints and Spark ship it so)."""
    return pickle.loads(pickle.dumps(value))


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "interval",
    [
        0,
        -1,
        0.0,
        -0.5,
        datetime.timedelta(0),
        datetime.timedelta(seconds=-1),
        "1s",
        True,
        float("nan"),
        float("inf"),
    ],
    ids=repr,
)
def test_a_bad_monitor_interval_is_rejected_naming_the_argument_and_value(
    tmp_path: Path, interval: Any
) -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        FileSource(tmp_path, monitor_interval=interval)
    assert "monitor_interval" in str(err.value)
    assert repr(interval) in str(err.value)


def test_watching_a_path_that_is_a_file_is_rejected_asking_for_a_folder(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text('{"id": 1}\n')
    with pytest.raises(lg.ConfigurationError, match="give a folder") as err:
        FileSource(f, monitor_interval=1)
    assert str(f) in str(err.value)


def test_monitor_interval_takes_seconds_or_a_timedelta_and_makes_the_source_unbounded(
    tmp_path: Path,
) -> None:
    assert FileSource(
        tmp_path, monitor_interval=datetime.timedelta(milliseconds=50)
    ).monitor_interval == pytest.approx(0.05)
    watching = FileSource(tmp_path, monitor_interval=2)
    assert watching.monitor_interval == 2.0 and watching.bounded is False
    copy = pickled(watching)
    assert copy.monitor_interval == 2.0 and copy.bounded is False
    assert FileSource.bounded is True, "the class attribute stays: other sources unchanged"


def test_without_monitor_interval_the_source_stays_bounded_and_unchanged(tmp_path: Path) -> None:
    put(tmp_path, "a.jsonl", range(3))
    put(tmp_path, "b.jsonl", range(3, 5))
    source = FileSource(tmp_path)
    assert source.bounded is True and source.monitor_interval is None
    assert [s.split_id for s in source.create_splits(1)] == ["file-0", "file-1"]
    reader = new_reader(source, lg.ManualClock(), 0, 1)
    # a restore hands it every old subtask's state; the source keeps its share
    # (FileSource.restore_splits: a watching run's state needs all of its DoneFiles)
    assert reader.restores_every_split is True
    out = Collect()
    statuses = [reader.poll(out) for _ in range(3)]
    assert statuses[-1] is InputStatus.END_OF_INPUT
    assert out.ids() == [0, 1, 2, 3, 4]
    # the finished files by name, from a bounded run (a restore never reads them again)
    assert reader.snapshot_positions() == [
        DoneFiles(frozenset({"a.jsonl", "b.jsonl"}), bounded=True)
    ]


# --------------------------------------------------------------------------- reading


def test_files_added_after_the_start_are_read_at_the_next_listing_not_before(
    tmp_path: Path,
) -> None:
    put(tmp_path, "a.jsonl", range(3))
    (tmp_path / ".hidden.jsonl").write_text('{"id": -1}\n')
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "sub").mkdir()
    clock = lg.ManualClock()
    reader = new_reader(FileSource(tmp_path, monitor_interval=INTERVAL_S), clock, 0, 1)
    assert reader.restores_every_split is True
    out = Collect()
    drain(reader, out)
    assert out.ids() == [0, 1, 2]
    assert out.finished == ["file:a.jsonl"], "split ids come from the file name"

    put(tmp_path, "b.jsonl", range(3, 5))
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    assert reader.wait_hint_ms() == INTERVAL_MS, "the hint is the time to the next listing"
    clock.advance(INTERVAL_MS - 1)
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    assert reader.wait_hint_ms() == 1
    assert out.ids() == [0, 1, 2], "not listed before the interval has passed"

    clock.advance(1)
    drain(reader, out)
    assert out.ids() == [0, 1, 2, 3, 4]
    assert out.finished == ["file:a.jsonl", "file:b.jsonl"]
    assert set(out.splits) == {"file:a.jsonl", "file:b.jsonl"}

    # nothing new: later listings read nothing again, hidden and '_' files never
    for _ in range(3):
        clock.advance(INTERVAL_MS)
        drain(reader, out)
    assert out.ids() == [0, 1, 2, 3, 4]


def test_files_are_read_in_name_order_and_a_rewritten_file_is_never_read_again(
    tmp_path: Path,
) -> None:
    put(tmp_path, "c.jsonl", range(20, 22))
    put(tmp_path, "a.jsonl", range(2))
    put(tmp_path, "b.jsonl", range(10, 12))
    clock = lg.ManualClock()
    reader = new_reader(FileSource(tmp_path, monitor_interval=INTERVAL_S), clock, 0, 1)
    out = Collect()
    drain(reader, out)
    assert out.ids() == [0, 1, 10, 11, 20, 21]

    put(tmp_path, "a.jsonl", range(100, 105))  # rewritten under a name already read
    os.remove(tmp_path / "b.jsonl")
    put(tmp_path, "b.jsonl", range(200, 202))  # deleted and created again
    clock.advance(INTERVAL_MS)
    drain(reader, out)
    assert out.ids() == [0, 1, 10, 11, 20, 21]
    snapshot = reader.snapshot_positions()
    assert snapshot == [DoneFiles(frozenset({"a.jsonl", "b.jsonl", "c.jsonl"}))]


def test_two_subtasks_together_read_every_file_exactly_once(tmp_path: Path) -> None:
    names = [f"part-{n:02d}.jsonl" for n in range(20)]
    for n, name in enumerate(names[:10]):
        put(tmp_path, name, range(10 * n, 10 * n + 10))
    clock = lg.ManualClock()
    source = FileSource(tmp_path, monitor_interval=INTERVAL_S, batch_size=4)
    readers = [new_reader(source, clock, i, 2) for i in range(2)]
    outs = [Collect(), Collect()]
    for reader, out in zip(readers, outs):
        drain(reader, out)
    for n, name in enumerate(names[10:], start=10):
        put(tmp_path, name, range(10 * n, 10 * n + 10))
    clock.advance(INTERVAL_MS)
    for reader, out in zip(readers, outs):
        drain(reader, out)

    assert sorted(outs[0].ids() + outs[1].ids()) == list(range(200))
    for i, out in enumerate(outs):
        mine = owned(names, i, 2)
        assert mine, "the hash gives both subtasks files (20 names)"
        assert sorted(out.finished) == [f"file:{n}" for n in mine]
        assert sorted({r["id"] // 10 for r in out.records}) == [names.index(n) for n in mine]


def test_a_malformed_line_fails_with_file_and_line_or_goes_to_the_dead_letters(
    tmp_path: Path,
) -> None:
    clock = lg.ManualClock()
    failing = new_reader(FileSource(tmp_path, monitor_interval=INTERVAL_S), clock, 0, 1)
    dead = new_reader(
        FileSource(tmp_path, monitor_interval=INTERVAL_S, on_error="dead_letter"), clock, 0, 1
    )
    drain(failing, Collect())
    tmp = tmp_path / ".bad.tmp"
    tmp.write_text('{"id": 1}\n{"id": \n{"id": 3}\n')
    os.rename(tmp, tmp_path / "bad.jsonl")
    clock.advance(INTERVAL_MS)
    with pytest.raises(lg.MalformedRecordError) as err:
        drain(failing, Collect())
    assert err.value.location == f"{tmp_path / 'bad.jsonl'}:2"
    out = Collect()
    drain(dead, out)
    assert out.ids() == [1, 3]
    assert [d["location"] for d in out.dead] == [f"{tmp_path / 'bad.jsonl'}:2"]


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    ("fmt", "new_parallelism"),
    [
        ("jsonl", 2),
        ("jsonl", 3),
        ("jsonl", 1),
        ("csv", 3),
        ("parquet", 1),
    ],
)
def test_m_x1_m_r1_a_restore_reads_every_remaining_record_once_also_at_another_parallelism(
    tmp_path: Path, fmt: str, new_parallelism: int
) -> None:
    """M-X1: the watching source is replayable: its snapshot holds each unfinished file
    with its read position and the names of the finished ones. M-R1: new readers, at 2,
    3 or 1 subtasks, rewind to exactly those positions; with what the old readers
    emitted before the snapshot, every record arrives once and no finished file is
    read again."""
    names = [f"part-{n:02d}.{fmt}" for n in range(12)]
    for n, name in enumerate(names):
        put(tmp_path, name, range(100 * n, 100 * n + 10), fmt)
    clock = lg.ManualClock()
    source = FileSource(tmp_path, format=fmt, monitor_interval=INTERVAL_S, batch_size=3)
    old = [new_reader(source, clock, i, 2) for i in range(2)]
    before = [Collect(), Collect()]
    for reader, out in zip(old, before):
        for _ in range(9):  # two or three files read, one part way
            reader.poll(out)
    snapshots = [pickled(reader.snapshot_positions()) for reader in old]
    for reader in old:
        reader.close()

    splits = [s for snap in snapshots for s in snap if isinstance(s, FileSplit)]
    done = [d for snap in snapshots for d in snap if isinstance(d, DoneFiles)]
    assert len(done) == 2 and all(d.names for d in done), "each old subtask finished files"
    assert any(s.position > 0 for s in splits), "a file was snapshotted part way"
    finished_before = {f"file:{n}" for d in done for n in d.names}
    assert finished_before == {s for out in before for s in out.finished}

    # files that appear after the snapshot are found by the new readers
    late = [f"late-{n}.{fmt}" for n in range(4)]
    for n, name in enumerate(late):
        put(tmp_path, name, range(10_000 + 100 * n, 10_000 + 100 * n + 10), fmt)

    new = [
        new_reader(source, clock, i, new_parallelism, restored=snapshots)
        for i in range(new_parallelism)
    ]
    after = [Collect() for _ in new]
    for reader, out in zip(new, after):
        drain(reader, out)

    got = sorted(i for out in before + after for i in out.ids())
    expected = sorted(
        [i for n in range(12) for i in range(100 * n, 100 * n + 10)]
        + [i for n in range(4) for i in range(10_000 + 100 * n, 10_000 + 100 * n + 10)]
    )
    assert got == expected, "every record exactly once"
    read_after = [s for out in after for s in out.finished]
    assert len(read_after) == len(set(read_after))
    assert not finished_before & set(read_after), "no finished file is read again"
    for i, out in enumerate(after):
        assert {s.removeprefix("file:") for s in out.finished} <= set(
            owned(names + late, i, new_parallelism)
        ), "each new subtask reads its own share"
    # the new readers' snapshots again cover every file exactly once
    final = [pickled(reader.snapshot_positions()) for reader in new]
    names_done = [n for snap in final for d in snap if isinstance(d, DoneFiles) for n in d.names]
    assert sorted(names_done) == sorted(names + late)
    assert not [s for snap in final for s in snap if isinstance(s, FileSplit)]


def test_restored_state_of_another_source_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(lg.ConfigurationError, match="cannot restore"):
        new_reader(
            FileSource(tmp_path, monitor_interval=INTERVAL_S),
            lg.ManualClock(),
            0,
            1,
            restored=[["not a file split"]],
        )


# --------------------------------------------------------------------------- jobs


def published(folder: Path) -> list[int]:
    """The ids in the sink's published part files (hidden in-progress files excluded)."""
    ids: list[int] = []
    for path in sorted(glob.glob(os.path.join(folder, "part-*"))):
        with open(path, encoding="utf-8") as f:
            ids.extend(json.loads(line)["id"] for line in f if line.strip())
    return ids


def completed(client: lg.JobClient) -> int:
    return sum(1 for c in client.checkpoints() if c.status == "completed")


def watching_job(executor: Any, tmp_path: Path, parallelism: int) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=parallelism, executor=executor)
    env.enable_checkpointing(100)
    env.checkpoint_config.storage = str(tmp_path / "checkpoints")
    (
        env.from_source(FileSource(tmp_path / "in", monitor_interval=0.05), name="watched")
        .uid("watched")
        .sink_to(FileSink(str(tmp_path / "out"), format="jsonl"), name="files")
        .uid("files")
    )
    return env


def write_batch(folder: Path, first: int, files: int, per_file: int = 25) -> list[int]:
    ids: list[int] = []
    for n in range(first, first + files):
        put(folder, f"f-{n:03d}.jsonl", range(per_file * n, per_file * n + per_file))
        ids.extend(range(per_file * n, per_file * n + per_file))
    return ids


def wait_published(client: lg.JobClient, out: Path, expected: list[int], what: str) -> None:
    """Wait (bounded) until ``expected`` is published, then two more checkpoints, so a
    duplicate would have been published too; fails early if the job ended."""
    wait_until(
        lambda: (
            client.done()
            or sorted(published(out)) == sorted(expected)
            or len(published(out)) > len(expected)
        ),
        what,
        timeout_s=60,
    )
    assert not client.done(), "the watching job runs until it is cancelled"
    seen = completed(client)
    wait_until(
        lambda: client.done() or completed(client) >= seen + 2,
        "two more checkpoints completed",
        timeout_s=30,
    )


@pytest.mark.hang_guard(120)
def test_m_x1_a_watching_job_reads_files_written_while_it_runs_exactly_once(
    executor: Any, tmp_path: Path
) -> None:
    """M-X1: watching source (replayable, positions in checkpoints) -> exactly-once
    FileSink, parallelism 2: files that appear while the job runs are published once."""
    (tmp_path / "in").mkdir()
    expected = write_batch(tmp_path / "in", 0, 3)
    client = watching_job(executor, tmp_path, 2).execute_async("watch a folder")
    try:
        wait_until(
            lambda: client.done() or len(published(tmp_path / "out")) >= len(expected),
            "the files there at the start were published",
            timeout_s=60,
        )
        for first in (3, 8, 13):
            expected += write_batch(tmp_path / "in", first, 5)
            (tmp_path / "in" / ".half-written.jsonl").write_text('{"id": -1}\n')
        wait_published(client, tmp_path / "out", expected, "every file was published")
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    assert sorted(published(tmp_path / "out")) == sorted(expected), "every record exactly once"


@pytest.mark.hang_guard(180)
def test_m_r1_a_savepoint_restored_at_another_parallelism_reads_the_new_files_once(
    executor: Any, tmp_path: Path
) -> None:
    """M-R1: a job stopped with a savepoint and restored at another parallelism (3
    locally, 1 on Spark's two slots) reads the files that appeared meanwhile and none it
    had read: the published output holds every record exactly once."""
    (tmp_path / "in").mkdir()
    expected = write_batch(tmp_path / "in", 0, 6)
    client = watching_job(executor, tmp_path, 2).execute_async("watch, stage one")
    try:
        wait_published(client, tmp_path / "out", expected, "stage one's files were published")
        location = client.stop_with_savepoint(str(tmp_path / "savepoint"), timeout=60)
    except BaseException:
        client.cancel()
        raise
    assert client.wait(60).status is lg.JobStatus.FINISHED

    expected += write_batch(tmp_path / "in", 6, 6)
    env = watching_job(executor, tmp_path, 1 if is_spark(executor) else 3)
    client = env.execute_async("watch, stage two", restore_from=location)
    try:
        wait_published(client, tmp_path / "out", expected, "stage two's files were published")
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    assert sorted(published(tmp_path / "out")) == sorted(expected), "every record exactly once"
