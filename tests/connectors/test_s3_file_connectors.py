"""FileSink and FileSource on S3 (a moto server, ``tests/s3_server.py``), at the level of
one sink subtask and one reader: the two-phase commit publishes a part file by a
server-side copy and a delete that a restore finishes (or finds done) exactly once;
readers that skip hidden keys see only committed files; a missing bucket, a vanished
temporary key and an unknown URL scheme fail naming the URL. Whole jobs on both
executors: ``tests/integration/test_s3_files.py``."""

from __future__ import annotations

import io
import pickle
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from test_file_source_monitor import Collect, drain, new_reader

import lockgate as lg
from lockgate.connectors import FileSink, FileSource
from lockgate.connectors.base import InputStatus
from lockgate.connectors.files.sink import FileTransaction
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter, commit_final
from lockgate.core.batch import Batch, RowBatch
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext

if TYPE_CHECKING:
    from s3_server import MotoServer

pytest_plugins = ["s3_server"]

FORMATS = ["jsonl", "csv", "parquet"]
RECORDS = [{"id": i, "name": f"név-{i}", "score": i / 4} for i in range(30)]
A, B, C = RECORDS[:10], RECORDS[10:20], RECORDS[20:]


def context(subtask: int = 0) -> RuntimeContext:
    return RuntimeContext(
        task_name="sink task",
        operator_name="files",
        operator_uid="files",
        subtask_index=subtask,
        parallelism=1,
        max_parallelism=128,
    )


def batch(fmt: str, records: list[dict[str, Any]]) -> Batch:
    return RowBatch(list(records)) if fmt == "jsonl" else pa.RecordBatch.from_pylist(records)


def copy_of(sink: FileSink) -> FileSink:
    copy = pickle.loads(pickle.dumps(sink))
    assert isinstance(copy, FileSink)
    return copy


def writer_of(sink: FileSink, states: list[Any] | None = None) -> TwoPhaseCommitWriter[Any]:
    writer = copy_of(sink).create_writer(context())
    assert isinstance(writer, TwoPhaseCommitWriter)
    writer.initialize_state(states or [])
    return writer


def root(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}{parts.path.rstrip('/')}"


def keys(server: MotoServer, url: str) -> list[str]:
    infos = server.filesystem().get_file_info(
        pafs.FileSelector(root(url), recursive=True, allow_not_found=True)
    )
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def parts(server: MotoServer, url: str) -> list[str]:
    return [k for k in keys(server, url) if k.startswith("part-")]


def temps(server: MotoServer, url: str) -> list[str]:
    return [k for k in keys(server, url) if k.endswith(".inprogress")]


def visible(server: MotoServer, url: str, fmt: str) -> list[dict[str, Any]]:
    """What ``pyarrow.dataset`` sees under the prefix (it skips hidden keys)."""
    if not parts(server, url):
        return []
    dataset = ds.dataset(
        root(url), filesystem=server.filesystem(), format="json" if fmt == "jsonl" else fmt
    )
    return sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"])


def end_job(sink: FileSink, writer: TwoPhaseCommitWriter[Any]) -> None:
    writer.finish()
    final = pickle.loads(pickle.dumps(writer.result()))
    writer.close()
    commit_final(copy_of(sink), final)


@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_on_s3_nothing_is_visible_until_the_commit_copies_the_hidden_key(
    moto_server: MotoServer, s3_url: str, fmt: str
) -> None:
    writer = writer_of(FileSink(s3_url, format=fmt))
    writer.write(batch(fmt, A))
    writer.snapshot_state(1)
    writer.write(batch(fmt, B))
    assert parts(moto_server, s3_url) == [] and visible(moto_server, s3_url, fmt) == []
    assert len(temps(moto_server, s3_url)) == 1, "the pre-committed upload is complete"
    writer.notify_checkpoint_complete(1)
    assert parts(moto_server, s3_url) == [f"part-0-0.{fmt}"]
    assert visible(moto_server, s3_url, fmt) == A
    assert temps(moto_server, s3_url) == [], "the temporary key was deleted after the copy"
    writer.close()


@pytest.mark.parametrize("cp1_committed", [True, False], ids=["cp1-notified", "cp1-not-notified"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_on_s3_a_failure_and_restore_publish_every_record_once(
    moto_server: MotoServer, s3_url: str, fmt: str, cp1_committed: bool
) -> None:
    sink = FileSink(s3_url, format=fmt)
    writer = writer_of(sink)
    writer.write(batch(fmt, A))
    cp1 = pickle.loads(pickle.dumps(writer.snapshot_state(1)))
    if cp1_committed:
        writer.notify_checkpoint_complete(1)
    writer.write(batch(fmt, B))
    writer.snapshot_state(2)  # never completes
    writer.write(batch(fmt, C[:4]))
    writer.close()  # the task fails

    writer = writer_of(sink, states=[cp1])  # restore from checkpoint 1; B and C replay
    assert visible(moto_server, s3_url, fmt) == A
    assert temps(moto_server, s3_url) == [], "transactions begun after checkpoint 1 are gone"
    writer.write(batch(fmt, B))
    writer.snapshot_state(2)
    writer.notify_checkpoint_complete(2)
    writer.write(batch(fmt, C))
    end_job(sink, writer)
    assert visible(moto_server, s3_url, fmt) == RECORDS
    assert parts(moto_server, s3_url) == [f"part-0-{n}.{fmt}" for n in range(3)]
    assert temps(moto_server, s3_url) == []


def _pre_committed(url: str) -> tuple[FileSink, FileTransaction]:
    sink = FileSink(url)
    writer = writer_of(sink)
    writer.write(batch("jsonl", A))
    writer.finish()
    (transaction,) = writer.result().transactions
    writer.close()
    assert transaction.final_path.startswith("s3://") and "?" not in transaction.final_path
    assert transaction.size is not None and transaction.size > 0
    return sink, transaction


def test_m_x2_a_commit_interrupted_between_copy_and_delete_is_finished_by_a_restore(
    moto_server: MotoServer, s3_url: str
) -> None:
    sink, transaction = _pre_committed(s3_url)
    fs = moto_server.filesystem()
    # the crash: copied, the temporary key not yet deleted
    fs.copy_file(transaction.temp_path[5:], transaction.final_path[5:])
    assert len(temps(moto_server, s3_url)) == 1
    assert visible(moto_server, s3_url, "jsonl") == A, "readers already see it, once"
    driver = copy_of(sink)
    driver.recover_and_commit(transaction)
    driver.recover_and_commit(transaction)  # and again: nothing more
    assert parts(moto_server, s3_url) == ["part-0-0.jsonl"] and temps(moto_server, s3_url) == []
    assert visible(moto_server, s3_url, "jsonl") == A


def test_m_x3_on_s3_a_commit_whose_temporary_key_is_gone_fails_naming_it(
    moto_server: MotoServer, s3_url: str
) -> None:
    sink, transaction = _pre_committed(s3_url)
    moto_server.filesystem().delete_file(transaction.temp_path[5:])
    with pytest.raises(FileNotFoundError, match="is gone") as err:
        copy_of(sink).commit(transaction)
    assert transaction.final_path in str(err.value) and transaction.temp_path in str(err.value)
    # a final key of another size is not taken for this commit
    with moto_server.filesystem().open_output_stream(transaction.final_path[5:]) as f:
        f.write(b"{}\n")
    with pytest.raises(FileNotFoundError, match="not the .* pre-committed"):
        copy_of(sink).commit(transaction)


def test_at_least_once_on_s3_writes_part_files_in_place_after_existing_ones(
    moto_server: MotoServer, s3_url: str
) -> None:
    for records in (A, B):
        writer = copy_of(FileSink(s3_url, exactly_once=False)).create_writer(context())
        writer.write(batch("jsonl", records))
        writer.finish()
        writer.close()
    assert parts(moto_server, s3_url) == ["part-0-0.jsonl", "part-0-1.jsonl"]
    assert visible(moto_server, s3_url, "jsonl") == A + B


def test_a_missing_bucket_is_refused_naming_the_url_and_the_fix(moto_server: MotoServer) -> None:
    url = moto_server.url(bucket="no-such-bucket", path="out")
    with pytest.raises(ConfigurationError, match="bucket 'no-such-bucket' does not exist") as err:
        FileSink(url)
    assert "s3://no-such-bucket/out" in str(err.value) and "aws s3 mb" in str(err.value)
    with pytest.raises(ConfigurationError, match="bucket 'no-such-bucket' does not exist"):
        FileSource(url, monitor_interval=1)


def test_a_password_in_the_url_never_reaches_a_message(moto_server: MotoServer) -> None:
    url = moto_server.url(bucket="no-such-bucket", path="out", with_credentials=True)
    with pytest.raises(ConfigurationError) as err:
        FileSink(url)
    assert "testing:***@" in str(err.value)
    assert "testing:testing" not in str(err.value)


def _put(server: MotoServer, url: str, name: str, data: bytes) -> None:
    with server.filesystem().open_output_stream(f"{root(url)}/{name}") as f:
        f.write(data)


def read_all(source: FileSource) -> list[Any]:
    """Every record a bounded source's single reader emits (on an unpickled copy)."""
    reader = copy_of_source(source).create_reader(context())
    reader.add_splits(source.create_splits(1))
    out = Collect()
    for _ in range(1000):
        if reader.poll(out) is InputStatus.END_OF_INPUT:
            reader.close()
            return out.records
    pytest.fail("the bounded source did not end")


def copy_of_source(source: FileSource) -> FileSource:
    copy = pickle.loads(pickle.dumps(source))
    assert isinstance(copy, FileSource)
    return copy


def test_file_source_on_s3_lists_visible_keys_in_name_order_and_reads_every_format(
    moto_server: MotoServer, s3_url: str
) -> None:
    _put(moto_server, s3_url, "b.jsonl", b'{"id": 2}\n\n{"id": 3}\n')
    _put(moto_server, s3_url, "a.jsonl", b'{"id": 1}\n')
    _put(moto_server, s3_url, ".a.jsonl.inprogress", b'{"id": -1}\n')
    _put(moto_server, s3_url, "_SUCCESS", b"")
    _put(moto_server, s3_url, "sub/c.jsonl", b'{"id": -2}\n')
    source = FileSource(s3_url)
    splits = source.create_splits(1)
    assert [s.path.rsplit("/", 1)[1] for s in splits] == ["a.jsonl", "b.jsonl"]
    assert all(s.path.startswith("s3://") and "?" not in s.path for s in splits)
    assert read_all(source) == [{"id": 1}, {"id": 2}, {"id": 3}]

    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [7, 8]}), buf)
    _put(moto_server, s3_url, "p/x.parquet", buf.getvalue())
    _put(moto_server, s3_url, "c/x.csv", b"id,name\n1,a\n2,\n")
    assert read_all(FileSource(s3_url.replace("?", "/p?"), format="parquet")) == [
        {"id": 7},
        {"id": 8},
    ]
    csv_file = s3_url.replace("?", "/c/x.csv?")
    assert read_all(FileSource(csv_file, format="csv")) == [
        {"id": 1, "name": "a"},
        {"id": 2, "name": None},
    ]
    with pytest.raises(ConfigurationError, match="does not exist"):
        FileSource(s3_url.replace("?", "/missing?"))
    with pytest.raises(ConfigurationError, match="is not one: give a folder"):
        FileSource(csv_file, monitor_interval=1)


def test_file_sink_output_on_s3_is_read_by_file_source_only_once_committed(
    s3_url: str,
) -> None:
    sink = FileSink(s3_url)
    writer = writer_of(sink)
    writer.write(batch("jsonl", A))
    writer.snapshot_state(1)
    writer.write(batch("jsonl", B))
    assert read_all(FileSource(s3_url)) == [], "pre-committed and open files are hidden"
    writer.notify_checkpoint_complete(1)
    assert read_all(FileSource(s3_url)) == A
    writer.close()


def test_m_x1_m_r1_watching_an_s3_prefix_reads_new_keys_and_restores_exactly_once(
    moto_server: MotoServer, s3_url: str
) -> None:
    """An empty prefix may be watched; keys put later are claimed at the next listing;
    a restore from a checkpoint taken mid-file reads every remaining record once."""
    source = FileSource(s3_url, monitor_interval=1)
    clock = lg.ManualClock()
    reader = new_reader(source, clock, 0, 1)
    out = Collect()
    drain(reader, out)
    assert out.records == []
    lines = b"".join(b'{"id": %d}\n' % i for i in range(20))
    _put(moto_server, s3_url, "f-0.jsonl", lines)
    _put(moto_server, s3_url, ".f-1.jsonl.tmp", lines)  # half-written: hidden
    drain(reader, out)
    assert out.records == [], "not before the next listing"
    clock.advance(1000)
    source.batch_size = 5
    reader = new_reader(copy_of_source(source), clock, 0, 1)
    first = Collect()
    reader.poll(first)  # five records of f-0, then a checkpoint
    state = pickle.loads(pickle.dumps(reader.snapshot_positions()))
    assert first.ids() == list(range(5))
    reader.close()

    _put(moto_server, s3_url, "f-2.jsonl", b'{"id": 100}\n')
    restored = new_reader(copy_of_source(source), clock, 0, 1, restored=[state])
    rest = Collect()
    drain(restored, rest)
    clock.advance(1000)
    drain(restored, rest)
    restored.close()
    assert first.ids() + rest.ids() == [*range(20), 100], "every record once, in name order"
