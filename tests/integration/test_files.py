"""FileSource and FileSink: JSON lines, CSV and Parquet; malformed input fails with file and
line, or goes to the dead-letter side output while the good records still arrive. On the
local executor and on Spark (local[2]: its Python workers share this machine's files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lockgate as lg
from conftest import on_executors
from lockgate.connectors import CollectionSource, FileSink, FileSource

RECORDS = [{"id": i, "name": f"név-{i}", "score": i / 4} for i in range(50)]


def read_back(path: Path, fmt: str, executor, parallelism: int = 1) -> list[dict]:
    env = lg.StreamEnvironment(parallelism=parallelism)
    return env.from_source(FileSource(path, format=fmt)).execute_and_collect(executor=executor)


def by_id(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["id"])


# --------------------------------------------------------------------------------- sources


def test_file_source_reads_json_lines_in_order_skipping_blank_lines(tmp_path, executor) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in RECORDS[:10]) + "\n\n",
        encoding="utf-8",
    )
    assert read_back(f, "jsonl", executor) == RECORDS[:10]


def test_file_source_reads_csv_with_a_header_converting_numbers_and_empty_fields(
    tmp_path, executor
) -> None:
    f = tmp_path / "in.csv"
    f.write_text('id,name,score\n1,a,0.5\n2,,1.5\n3,"c, with comma",\n', encoding="utf-8")
    assert read_back(f, "csv", executor) == [
        {"id": 1, "name": "a", "score": 0.5},
        {"id": 2, "name": None, "score": 1.5},
        {"id": 3, "name": "c, with comma", "score": None},
    ]


def test_csv_types_override_the_automatic_conversion(tmp_path, executor) -> None:
    f = tmp_path / "zip.csv"
    f.write_text("zip,n\n00501,1\n", encoding="utf-8")
    env = lg.StreamEnvironment(parallelism=1)
    out = env.from_source(FileSource(f, format="csv", csv_types={"zip": str})).execute_and_collect(
        executor=executor
    )
    assert out == [{"zip": "00501", "n": 1}]


def test_csv_types_naming_an_unknown_column_fail_the_job_with_the_header(
    tmp_path, executor
) -> None:
    f = tmp_path / "a.csv"
    f.write_text("a,b\n1,2\n", encoding="utf-8")
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(FileSource(f, format="csv", csv_types={"c": int})).sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("bad csv_types", executor=executor)
    assert "['c']" in str(err.value) and "['a', 'b']" in str(err.value)


def test_file_source_reads_parquet_as_arrow_batches(tmp_path, executor) -> None:
    f = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), f)
    env = lg.StreamEnvironment(parallelism=1)

    def must_be_arrow(batch):
        assert isinstance(batch, pa.RecordBatch)
        return batch

    out = (
        env.from_source(FileSource(f, format="parquet", batch_size=7))
        .map_batches(must_be_arrow)
        .execute_and_collect(executor=executor)
    )
    assert out == RECORDS


def test_parquet_columns_are_read_alone_and_in_the_order_given(tmp_path, executor) -> None:
    f = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), f)
    names = list(RECORDS[0])
    wanted = [names[-1], names[0]]
    env = lg.StreamEnvironment(parallelism=1)
    seen = []

    def columns_of(batch):
        seen.append(batch.schema.names)
        return batch

    out = (
        env.from_source(FileSource(f, format="parquet", batch_size=7, columns=wanted))
        .map_batches(columns_of)
        .execute_and_collect(executor=executor)
    )
    assert out == [{c: r[c] for c in wanted} for r in RECORDS]
    assert [list(r) for r in out] == [wanted] * len(RECORDS)


def test_parquet_columns_missing_from_a_file_fail_the_job_naming_file_and_column(
    tmp_path, executor
) -> None:
    f = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), f)
    error = _failing_job(FileSource(f, format="parquet", columns=["nope"]), executor)
    assert str(f) in str(error) and "['nope']" in str(error)
    assert isinstance(error.__cause__, lg.MalformedRecordError)


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ("a", "non-empty list of column names"),
        ([], "non-empty list"),
        (["a", ""], "non-empty"),
        (["a", 1], "non-empty"),
        (["a", "a"], "name a column twice"),
    ],
)
def test_file_source_columns_must_be_a_list_of_distinct_names(tmp_path, columns, match) -> None:
    f = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), f)
    with pytest.raises(lg.ConfigurationError, match=match):
        FileSource(f, format="parquet", columns=columns)


def test_file_source_columns_are_refused_for_row_formats(tmp_path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text('{"a": 1}\n')
    with pytest.raises(lg.ConfigurationError, match="selects Parquet columns"):
        FileSource(f, format="jsonl", columns=["a"])


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2, 3), indirect=["executor"])
def test_a_folder_is_read_file_by_file_spread_over_subtasks(
    tmp_path, executor, parallelism
) -> None:
    for n in range(4):
        (tmp_path / f"part-{n}.jsonl").write_text(
            "".join(json.dumps({"id": 10 * n + i}) + "\n" for i in range(10))
        )
    (tmp_path / ".hidden.jsonl").write_text('{"id": -1}\n')
    (tmp_path / "_SUCCESS").write_text("")
    out = read_back(tmp_path, "jsonl", executor, parallelism)
    assert sorted(r["id"] for r in out) == list(range(40))


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 4), indirect=["executor"])
def test_file_source_never_uses_more_subtasks_than_there_is_work_without_failing(
    tmp_path, executor, parallelism
) -> None:
    f = tmp_path / "one.jsonl"
    f.write_text('{"id": 1}\n')
    assert read_back(f, "jsonl", executor, parallelism) == [{"id": 1}]


# --------------------------------------------------------------------------------- malformed input


def _failing_job(source: FileSource, executor) -> lg.JobFailedError:
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(source, name="files").sink_to(lg.connectors.DiscardingSink())
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("malformed", executor=executor)
    return err.value


def test_a_malformed_json_line_fails_the_job_with_file_and_line(tmp_path, executor) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": 1}\n{"id": 2}\n{"id": \n{"id": 4}\n', encoding="utf-8")
    error = _failing_job(FileSource(f), executor)
    assert f"{f}:3" in str(error)
    assert isinstance(error.__cause__, lg.MalformedRecordError)
    assert error.__cause__.location == f"{f}:3"
    assert error.__cause__.raw == '{"id": '
    assert error.reason is lg.FailureReason.MALFORMED_INPUT
    assert "files" in str(error), "the failing source is named"
    assert "on_error='dead_letter'" in str(error), "the message names the way out"


def test_blank_lines_count_towards_the_reported_line_number(tmp_path, executor) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": 1}\n\n\nnot json\n', encoding="utf-8")
    error = _failing_job(FileSource(f), executor)
    assert error.__cause__.location == f"{f}:4"


def test_a_csv_row_with_the_wrong_number_of_fields_fails_with_file_and_line(
    tmp_path, executor
) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("id,name\n1,a\n2,b,extra\n3,c\n", encoding="utf-8")
    error = _failing_job(FileSource(f, format="csv"), executor)
    assert f"{f}:3" in str(error)
    assert isinstance(error.__cause__, lg.MalformedRecordError)
    assert error.__cause__.location == f"{f}:3"
    assert "expected 2 fields" in str(error)


def test_a_csv_field_the_converter_rejects_fails_with_file_and_line(tmp_path, executor) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("id,name\n1,a\nx,b\n", encoding="utf-8")
    error = _failing_job(FileSource(f, format="csv", csv_types={"id": int}), executor)
    assert error.__cause__.location == f"{f}:3"


def test_a_file_that_is_not_parquet_fails_naming_the_file(tmp_path, executor) -> None:
    f = tmp_path / "fake.parquet"
    f.write_text("this is not parquet")
    error = _failing_job(FileSource(f, format="parquet"), executor)
    assert str(f) in str(error)
    assert isinstance(error.__cause__, lg.MalformedRecordError)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_with_dead_letter_malformed_lines_reach_the_side_output_and_good_records_the_main(
    tmp_path, fmt, executor
) -> None:
    if fmt == "jsonl":
        f = tmp_path / "mixed.jsonl"
        f.write_text('{"id": 1}\n{broken\n{"id": 3}\n[1,\n{"id": 5}\n', encoding="utf-8")
        bad_lines = [2, 4]
    else:
        f = tmp_path / "mixed.csv"
        f.write_text("id\n1\n2,2\n3\n4,4\n5\n", encoding="utf-8")
        bad_lines = [3, 5]
    env = lg.StreamEnvironment(parallelism=1)
    records = env.from_source(FileSource(f, format=fmt, on_error="dead_letter"), name="files")
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect(executor=executor)

    good = [r for tag, r in out if tag == "good"]
    letters = sorted((d for tag, d in out if tag == "dead"), key=lambda d: d["line"])
    assert [r["id"] for r in good] == [1, 3, 5]
    assert [d["line"] for d in letters] == bad_lines
    for d, line in zip(letters, bad_lines):
        assert d["location"] == f"{f}:{line}"
        assert d["file"] == str(f)
        assert d["raw"] and d["error"]


def test_dead_letters_are_counted_as_a_side_output_of_the_source(tmp_path, executor) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text('{"id": 1}\nnope\n', encoding="utf-8")
    env = lg.StreamEnvironment(parallelism=1)
    s = env.from_source(FileSource(f, on_error="dead_letter"), name="files")
    s.sink_to(lg.connectors.DiscardingSink(), name="good")
    s.get_side_output(lg.DEAD_LETTER).sink_to(lg.connectors.DiscardingSink(), name="dead")
    result = env.execute("dead letters", executor=executor)
    assert result.records_out("files") == 1
    assert result.operators["files"].side_out == {"dead-letter": 1}
    assert result.records_in("dead") == 1 and result.records_in("good") == 1


# --------------------------------------------------------------------------------- sinks


def _write(
    tmp_path: Path, fmt: str, records: list, executor, parallelism: int = 2, batch_size: int = 8
) -> Path:
    out = tmp_path / f"out-{fmt}"
    env = lg.StreamEnvironment(parallelism=parallelism)
    env.from_source(CollectionSource(records, batch_size=batch_size)).sink_to(
        FileSink(out, format=fmt), name="files"
    )
    result = env.execute(f"write {fmt}", executor=executor)
    assert result.records_in("files") == len(records)
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_file_sink_output_reads_back_through_file_source_unchanged(tmp_path, fmt, executor) -> None:
    out = _write(tmp_path, fmt, RECORDS, executor)
    parts = sorted(os.listdir(out))
    assert parts == [f"part-0-0.{fmt}", f"part-1-0.{fmt}"], "one part file per subtask"
    assert by_id(read_back(out, fmt, executor)) == RECORDS


def test_jsonl_sink_writes_one_json_value_per_line_keeping_unicode(tmp_path, executor) -> None:
    out = _write(tmp_path, "jsonl", RECORDS[:3], executor, parallelism=1)
    lines = (out / "part-0-0.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == RECORDS[:3]
    assert "név-0" in lines[0]


def test_parquet_sink_writes_a_file_pyarrow_reads_with_the_record_schema(
    tmp_path, executor
) -> None:
    out = _write(tmp_path, "parquet", RECORDS, executor, parallelism=1)
    table = pq.read_table(out / "part-0-0.parquet")
    assert table.schema.names == ["id", "name", "score"]
    assert table.to_pylist() == RECORDS


def test_a_second_run_never_overwrites_earlier_part_files(tmp_path, executor) -> None:
    _write(tmp_path, "jsonl", RECORDS[:5], executor, parallelism=1)
    out = _write(tmp_path, "jsonl", RECORDS[5:10], executor, parallelism=1)
    assert sorted(os.listdir(out)) == ["part-0-0.jsonl", "part-0-1.jsonl"]
    assert by_id(read_back(out, "jsonl", executor)) == RECORDS[:10]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_field_that_is_none_in_the_first_batch_and_set_later_is_written(
    tmp_path, fmt, executor
) -> None:
    records = [{"id": 0, "note": None}, {"id": 1, "note": None}, {"id": 2, "note": "later"}]
    out = _write(tmp_path, fmt, records, executor, parallelism=1, batch_size=2)
    assert by_id(read_back(out, fmt, executor)) == records


def test_jsonl_sink_writes_bare_values_and_nested_records(tmp_path, executor) -> None:
    records = [1, "two", {"nested": {"list": [1, 2]}}, None]
    out = _write(tmp_path, "jsonl", records, executor, parallelism=1)
    lines = (out / "part-0-0.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == records


@pytest.mark.parametrize(
    "fmt,content,bad_line",
    [
        ("jsonl", b'{"a": 1}\n{"a": "\xff"}\n{"a": 3}\n', 2),
        ("csv", b"a\n1\n\xff\n3\n", 3),
    ],
    ids=["jsonl", "csv"],
)
def test_a_line_that_is_not_utf8_fails_with_file_and_line(
    tmp_path, fmt, content, bad_line, executor
) -> None:
    f = tmp_path / f"latin.{fmt}"
    f.write_bytes(content)
    error = _failing_job(FileSource(f, format=fmt), executor)
    assert isinstance(error.__cause__, lg.MalformedRecordError), repr(error.__cause__)
    assert error.__cause__.location == f"{f}:{bad_line}"


@pytest.mark.parametrize(
    "fmt,content,bad_line",
    [
        ("jsonl", b'{"a": 1}\n{"a": "\xff"}\n{"a": 3}\n', 2),
        ("csv", b"a\n1\n\xff\n3\n", 3),
    ],
    ids=["jsonl", "csv"],
)
def test_a_line_that_is_not_utf8_goes_to_the_dead_letter_output(
    tmp_path, fmt, content, bad_line, executor
) -> None:
    f = tmp_path / f"latin.{fmt}"
    f.write_bytes(content)
    env = lg.StreamEnvironment(parallelism=1)
    records = env.from_source(FileSource(f, format=fmt, on_error="dead_letter"))
    out = (
        records.map(lambda r: ("good", r))
        .union(records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d)))
        .execute_and_collect(executor=executor)
    )
    assert [r for tag, r in out if tag == "good"] == [{"a": 1}, {"a": 3}]
    assert [d["location"] for tag, d in out if tag == "dead"] == [f"{f}:{bad_line}"]


def test_a_dead_letter_source_whose_side_output_nobody_reads_is_an_invalid_graph(tmp_path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text('{"id": 1}\n')
    env = lg.StreamEnvironment(parallelism=1)
    env.from_source(FileSource(f, on_error="dead_letter"), name="files").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.InvalidGraphError) as err:
        env.get_job_graph()
    assert "'files'" in str(err.value)
    assert "dead-letter" in str(err.value) and "get_side_output" in str(err.value)
