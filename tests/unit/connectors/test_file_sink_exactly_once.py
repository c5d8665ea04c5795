"""FileSink on TwoPhaseCommitSink (M-X2, M-X3, M-S3): nothing visible before a commit, a
failure and restore publishes exactly the records of a failure-free run, commits are
idempotent, reruns never overwrite; ``exactly_once=False`` keeps writing in place."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pytest

import lockgate as lg
from lockgate.connectors import FileSink, FinalCommit
from lockgate.connectors.files.sink import FileTransaction
from lockgate.connectors.two_phase_commit import TwoPhaseCommitWriter, commit_final
from lockgate.core.batch import Batch, RowBatch
from lockgate.runtime.context import RuntimeContext

FORMATS = ["jsonl", "csv", "parquet"]
RECORDS = [{"id": i, "name": f"név-{i}", "score": i / 4} for i in range(30)]
A, B, C = RECORDS[:10], RECORDS[10:20], RECORDS[20:]


def context(subtask: int = 0, parallelism: int = 1) -> RuntimeContext:
    return RuntimeContext(
        task_name="sink task",
        operator_name="files",
        operator_uid="files",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )


def batch(fmt: str, records: list[dict[str, Any]]) -> Batch:
    """Row batches for JSON lines, Arrow batches for the columnar formats."""
    return RowBatch(list(records)) if fmt == "jsonl" else pa.RecordBatch.from_pylist(records)


def subtask_copy(sink: FileSink) -> FileSink:
    """What a subtask (or the driver) holds: an unpickled copy of the sink."""
    copy = pickle.loads(pickle.dumps(sink))
    assert isinstance(copy, FileSink)
    return copy


def writer_of(
    sink: FileSink, subtask: int = 0, parallelism: int = 1, states: list[Any] | None = None
) -> TwoPhaseCommitWriter[FileTransaction]:
    writer = subtask_copy(sink).create_writer(context(subtask, parallelism))
    assert isinstance(writer, TwoPhaseCommitWriter)
    writer.initialize_state(states or [])
    return writer


def visible(folder: Path, fmt: str) -> list[dict[str, Any]]:
    """What a dataset reader sees in ``folder`` (hidden files skipped), sorted by id."""
    dataset = ds.dataset(folder, format="json" if fmt == "jsonl" else fmt)
    return sorted(dataset.to_table().to_pylist(), key=lambda r: r["id"])


def parts(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("part-"))


def temps(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".inprogress"))


def end_job(sink: FileSink, writer: TwoPhaseCommitWriter[FileTransaction]) -> None:
    """End of a bounded input, then the driver's final commit (on its own copy)."""
    writer.finish()
    final = pickle.loads(pickle.dumps(writer.result()))
    writer.close()
    commit_final(subtask_copy(sink), final)


def failure_free_run(folder: Path, fmt: str) -> None:
    sink = FileSink(folder, format=fmt)
    writer = writer_of(sink)
    writer.write(batch(fmt, A))
    writer.snapshot_state(1)
    writer.notify_checkpoint_complete(1)
    writer.write(batch(fmt, B))
    writer.snapshot_state(2)
    writer.notify_checkpoint_complete(2)
    writer.write(batch(fmt, C))
    end_job(sink, writer)


@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_nothing_is_visible_until_the_checkpoint_completes(tmp_path, fmt) -> None:
    out = tmp_path / "out"
    writer = writer_of(FileSink(out, format=fmt))
    writer.write(batch(fmt, A[:5]))
    writer.write(batch(fmt, A[5:]))
    writer.snapshot_state(1)
    writer.write(batch(fmt, B))
    assert parts(out) == [] and visible(out, fmt) == []
    assert temps(out) == [f".part-0-0.{fmt}.inprogress", f".part-0-1.{fmt}.inprogress"]

    writer.notify_checkpoint_complete(1)
    assert parts(out) == [f"part-0-0.{fmt}"]
    assert visible(out, fmt) == A
    assert temps(out) == [f".part-0-1.{fmt}.inprogress"], "the open transaction stays hidden"
    writer.close()  # closes the open transaction's file (an unclosed file warns, and warnings fail)


@pytest.mark.parametrize("cp1_committed", [True, False], ids=["cp1-notified", "cp1-not-notified"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_a_failure_and_restore_publish_exactly_the_records_of_a_failure_free_run(
    tmp_path, fmt, cp1_committed
) -> None:
    reference = tmp_path / "reference"
    failure_free_run(reference, fmt)

    out = tmp_path / "out"
    sink = FileSink(out, format=fmt)
    writer = writer_of(sink)
    writer.write(batch(fmt, A))
    cp1 = pickle.loads(pickle.dumps(writer.snapshot_state(1)))
    if cp1_committed:
        writer.notify_checkpoint_complete(1)
    writer.write(batch(fmt, B))
    writer.snapshot_state(2)  # checkpoint 2 never completes
    writer.write(batch(fmt, C[:4]))
    writer.close()  # the task fails
    assert len(temps(out)) >= 2

    # The job restarts from checkpoint 1; the source replays B and C.
    writer = writer_of(sink, states=[cp1])
    assert visible(out, fmt) == A, "recover-and-commit published checkpoint 1's transaction"
    assert temps(out) == [], "the transactions begun after checkpoint 1 are gone"
    writer.write(batch(fmt, B))
    writer.snapshot_state(2)
    writer.notify_checkpoint_complete(2)
    writer.write(batch(fmt, C))
    end_job(sink, writer)

    assert visible(out, fmt) == visible(reference, fmt) == RECORDS
    assert parts(out) == parts(reference) == [f"part-0-{n}.{fmt}" for n in range(3)]
    assert temps(out) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_commit_is_idempotent_and_works_on_a_copy_that_was_never_opened(tmp_path, fmt) -> None:
    out = tmp_path / "out"
    sink = FileSink(out, format=fmt)
    writer = writer_of(sink)
    writer.write(batch(fmt, A))
    writer.finish()
    (transaction,) = writer.result().transactions
    assert transaction.records == len(A)
    assert os.path.isabs(transaction.temp_path) and os.path.isabs(transaction.final_path)
    driver = subtask_copy(sink)
    driver.commit(transaction)
    driver.commit(transaction)
    driver.recover_and_commit(transaction)
    assert parts(out) == [f"part-0-0.{fmt}"] and temps(out) == []
    assert visible(out, fmt) == A


def test_m_x3_a_commit_whose_data_file_is_gone_fails_naming_it(tmp_path) -> None:
    out = tmp_path / "out"
    sink = FileSink(out)
    writer = writer_of(sink)
    writer.write(batch("jsonl", A))
    writer.finish()
    (transaction,) = writer.result().transactions
    os.remove(transaction.temp_path)
    with pytest.raises(FileNotFoundError, match="is gone") as err:
        subtask_copy(sink).commit(transaction)
    assert transaction.final_path in str(err.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_m_x2_the_driver_publishes_the_last_transaction_after_the_end_of_input(
    tmp_path, fmt
) -> None:
    out = tmp_path / "out"
    sink = FileSink(out, format=fmt)
    writer = writer_of(sink)
    writer.write(batch(fmt, A))
    writer.finish()
    final = writer.result()
    writer.close()
    assert isinstance(final, FinalCommit) and len(final.transactions) == 1
    assert parts(out) == [], "the end of input alone publishes nothing"
    commit_final(subtask_copy(sink), pickle.loads(pickle.dumps(final)))
    assert parts(out) == [f"part-0-0.{fmt}"] and visible(out, fmt) == A


@pytest.mark.parametrize("fmt", FORMATS)
def test_m_s3_a_rerun_into_the_same_folder_never_overwrites(tmp_path, fmt) -> None:
    out = tmp_path / "out"
    for records in (A, B):
        sink = FileSink(out, format=fmt)
        writer = writer_of(sink)
        writer.write(batch(fmt, records))
        end_job(sink, writer)
    assert parts(out) == [f"part-0-0.{fmt}", f"part-0-1.{fmt}"]
    assert visible(out, fmt) == A + B


def test_m_s3_a_fresh_start_skips_and_keeps_pending_files_of_another_run(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-0-0.jsonl").write_text("")
    retained = out / ".part-0-1.jsonl.inprogress"  # pending in another run's retained checkpoint
    retained.write_text('{"id": 99}\n')
    other_subtask = out / ".part-1-7.jsonl.inprogress"
    other_subtask.write_text("")
    sink = FileSink(out)
    writer = writer_of(sink)
    writer.write(batch("jsonl", A))
    end_job(sink, writer)
    assert parts(out) == ["part-0-0.jsonl", "part-0-2.jsonl"]
    assert retained.exists() and other_subtask.exists()


def test_m_x2_a_restore_deletes_only_this_subtasks_files_begun_after_the_checkpoint(
    tmp_path,
) -> None:
    out = tmp_path / "out"
    sink = FileSink(out)
    writer = writer_of(sink)
    writer.write(batch("jsonl", A))
    cp1 = writer.snapshot_state(1)
    writer.write(batch("jsonl", B))
    writer.snapshot_state(2)
    writer.write(batch("jsonl", C))
    writer.close()
    older = out / ".part-0-0.csv.inprogress"  # numbered before the restored state
    other = out / ".part-1-5.jsonl.inprogress"  # another subtask's
    older.write_text("")
    other.write_text("")
    writer_of(sink, states=[cp1])
    assert temps(out) == sorted([older.name, other.name])
    assert parts(out) == ["part-0-0.jsonl"]


def test_m_x2_an_empty_transaction_publishes_nothing_and_uses_no_number(tmp_path) -> None:
    out = tmp_path / "out"
    sink = FileSink(out)
    writer = writer_of(sink)
    writer.write(RowBatch([]))
    writer.snapshot_state(1)
    writer.notify_checkpoint_complete(1)
    assert os.listdir(out) == []
    writer.write(batch("jsonl", A))
    writer.snapshot_state(2)
    writer.notify_checkpoint_complete(2)
    writer.snapshot_state(3)
    end_job(sink, writer)
    assert parts(out) == ["part-0-0.jsonl"] and temps(out) == []


def test_m_x2_each_subtask_writes_its_own_part_files(tmp_path) -> None:
    out = tmp_path / "out"
    sink = FileSink(out, format="parquet")
    for subtask, records in enumerate((A, B)):
        writer = writer_of(sink, subtask, 2)
        writer.write(batch("parquet", records))
        end_job(sink, writer)
    assert parts(out) == ["part-0-0.parquet", "part-1-0.parquet"]
    assert visible(out, "parquet") == A + B


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_m_x2_a_column_that_is_none_at_first_is_typed_by_a_later_batch(tmp_path, fmt) -> None:
    records = [{"id": 0, "note": None}, {"id": 1, "note": None}, {"id": 2, "note": "later"}]
    out = tmp_path / "out"
    sink = FileSink(out, format=fmt)
    writer = writer_of(sink)
    writer.write(RowBatch(records[:2]))
    writer.snapshot_state(1)  # checkpoint 1's file keeps a null column
    writer.notify_checkpoint_complete(1)
    writer.write(RowBatch(records[:2]))
    writer.write(RowBatch(records[2:]))
    end_job(sink, writer)
    assert parts(out) == [f"part-0-0.{fmt}", f"part-0-1.{fmt}"]
    file_format: Any = fmt
    if fmt == "csv":  # an empty CSV field is None, as FileSource reads it
        file_format = ds.CsvFileFormat(
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True)
        )
    second = ds.dataset(out / f"part-0-1.{fmt}", format=file_format).to_table().to_pylist()
    assert second == records


@pytest.mark.parametrize("fmt", FORMATS)
def test_at_least_once_writes_the_part_file_in_place(tmp_path, fmt) -> None:
    out = tmp_path / "out"
    sink = FileSink(out, format=fmt, exactly_once=False)
    writer = subtask_copy(sink).create_writer(context())
    assert not isinstance(writer, TwoPhaseCommitWriter)
    writer.write(batch(fmt, A))
    assert parts(out) == [f"part-0-0.{fmt}"], "written in place, visible at once"
    writer.finish()
    writer.close()
    assert visible(out, fmt) == A and temps(out) == []
    if fmt == "jsonl":
        lines = (out / "part-0-0.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line) for line in lines] == A and "név-0" in lines[0]


def test_file_sink_validates_exactly_once_and_keeps_its_messages(tmp_path) -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        FileSink(tmp_path, exactly_once="yes")  # type: ignore[arg-type]
    assert "exactly_once" in str(err.value) and "'yes'" in str(err.value)
    assert "True or False" in str(err.value)
    with pytest.raises(lg.ConfigurationError, match="jsonl, csv, parquet"):
        FileSink(tmp_path, format="xls")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(lg.ConfigurationError, match="is a file; give a folder"):
        FileSink(f)
    assert FileSink(tmp_path).exactly_once is True


def test_the_folder_is_created_and_exports_are_public(tmp_path) -> None:
    out = tmp_path / "a" / "b"
    writer_of(FileSink(out))
    assert out.is_dir()
    assert {"FileSink", "TwoPhaseCommitSink", "FinalCommit"} <= set(lg.connectors.__all__)
