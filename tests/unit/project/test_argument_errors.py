"""Bad arguments to public entry points raise lg.ConfigurationError (also a ValueError) at the
call, with a message that says what was wrong and what to pass instead."""

from __future__ import annotations

import pytest

import lockgate as lg
from lockgate.connectors import (
    CollectionSource,
    DiscardingSink,
    FileSink,
    FileSource,
    SequenceSource,
)


def ident(x):
    return x


@pytest.fixture
def stream():
    return lg.StreamEnvironment(parallelism=1).from_collection([1, 2, 3])


def test_configuration_error_is_a_lockgate_error_and_a_value_error() -> None:
    assert issubclass(lg.ConfigurationError, lg.LockgateError)
    assert issubclass(lg.ConfigurationError, ValueError)


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_stream_environment_rejects_a_parallelism_that_is_not_a_positive_int(value) -> None:
    with pytest.raises(lg.ConfigurationError, match=r"parallelism must be an int >= 1"):
        lg.StreamEnvironment(parallelism=value)


@pytest.mark.parametrize("value", [0, 1 << 16, "128"])
def test_stream_environment_rejects_a_bad_max_parallelism(value) -> None:
    with pytest.raises(lg.ConfigurationError, match="max_parallelism"):
        lg.StreamEnvironment(parallelism=1, max_parallelism=value)


def test_sequence_source_with_start_above_end_names_both() -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        SequenceSource(5, 1)
    assert "start <= end" in str(err.value) and "5 > 1" in str(err.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"start": 0, "end": 10, "rows_per_second": 0}, "rows_per_second"),
        ({"start": 0, "end": 10, "batch_size": 0}, "batch_size"),
        ({"start": 0.5, "end": 10}, "start must be an int"),
    ],
)
def test_sequence_source_rejects_bad_settings(kwargs, needle) -> None:
    with pytest.raises(lg.ConfigurationError, match=needle):
        SequenceSource(**kwargs)


def test_file_source_on_a_missing_path_names_the_path(tmp_path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(lg.ConfigurationError) as err:
        FileSource(missing)
    assert str(missing) in str(err.value) and "does not exist" in str(err.value)


def test_file_source_rejects_an_unknown_format_and_on_error(tmp_path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text("{}\n")
    with pytest.raises(lg.ConfigurationError, match="jsonl, csv, parquet"):
        FileSource(f, format="xml")
    with pytest.raises(
        lg.ConfigurationError, match=r"on_error must be 'fail' \(.*\) or 'dead_letter'.*'ignore'"
    ):
        FileSource(f, on_error="ignore")


def test_file_sink_rejects_an_unknown_format_and_a_file_as_folder(tmp_path) -> None:
    with pytest.raises(lg.ConfigurationError, match="jsonl, csv, parquet"):
        FileSink(tmp_path, format="xls")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(lg.ConfigurationError, match="is a file; give a folder"):
        FileSink(f)


@pytest.mark.parametrize("key", [123, None, [], ["a", 1], ""])
def test_key_by_rejects_something_that_is_neither_a_column_nor_a_function(stream, key) -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        stream.key_by(key)
    assert "column name" in str(err.value) and "function" in str(err.value)


@pytest.mark.parametrize("sink", ["x", print, object()])
def test_sink_to_rejects_what_is_not_a_lockgate_sink(stream, sink) -> None:
    with pytest.raises(lg.ConfigurationError) as err:
        stream.sink_to(sink)
    assert "lg.connectors.FileSink" in str(err.value)


def test_from_source_rejects_what_is_not_a_lockgate_source() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match="SequenceSource"):
        env.from_source([1, 2, 3])


@pytest.mark.parametrize("name", ["", None, 5])
def test_output_tag_needs_a_non_empty_string_name(name) -> None:
    with pytest.raises(lg.ConfigurationError, match="non-empty string name"):
        lg.OutputTag(name)


def test_get_side_output_needs_a_tag(stream) -> None:
    with pytest.raises(lg.ConfigurationError, match="OutputTag"):
        stream.map(ident).get_side_output("")


def test_union_rejects_what_is_not_a_stream(stream) -> None:
    with pytest.raises(lg.ConfigurationError, match="union takes DataStreams"):
        stream.union([1, 2])


def test_union_rejects_a_stream_of_another_environment(stream) -> None:
    other = lg.StreamEnvironment(parallelism=1).from_collection([1])
    with pytest.raises(lg.ConfigurationError, match="same StreamEnvironment"):
        stream.union(other)


@pytest.mark.parametrize(
    "method,arg", [("uid", ""), ("name", ""), ("set_parallelism", 0), ("set_max_parallelism", 0)]
)
def test_operator_settings_reject_bad_values(stream, method, arg) -> None:
    with pytest.raises(lg.ConfigurationError):
        getattr(stream.map(ident), method)(arg)


def test_settings_on_a_partitioned_stream_point_to_the_operator_before_it(stream) -> None:
    keyed = stream.map(ident, name="m").key_by(ident)
    with pytest.raises(lg.ConfigurationError) as err:
        keyed.uid("x")
    assert "before key_by/rebalance/broadcast/union" in str(err.value)


def test_execute_needs_a_job_name(stream) -> None:
    stream.sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError, match="job_name"):
        stream._env.execute("")


def test_a_negative_buffer_timeout_is_rejected() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    with pytest.raises(lg.ConfigurationError, match="buffer timeout"):
        env.set_buffer_timeout(-1)
    with pytest.raises(lg.ConfigurationError, match="timedelta"):
        env.set_buffer_timeout(1.5)


def test_an_output_buffer_larger_than_a_channel_is_rejected_when_the_job_is_built() -> None:
    env = lg.StreamEnvironment(parallelism=1)
    env.config.buffer_max_bytes = 2048
    env.config.channel_capacity_bytes = 1024
    env.from_collection([1]).sink_to(DiscardingSink())
    with pytest.raises(lg.ConfigurationError) as err:
        env.execute("too big buffers")
    assert "buffer_max_bytes (2048) exceeds channel_capacity_bytes (1024)" in str(err.value)


@pytest.mark.parametrize("items", ["abc", b"abc", {"a": 1}, 5])
def test_a_collection_source_needs_a_list_of_records(items) -> None:
    with pytest.raises(lg.ConfigurationError, match="CollectionSource"):
        CollectionSource(items)


def test_the_buffer_timeout_takes_a_timedelta_or_milliseconds() -> None:
    from datetime import timedelta

    env = lg.StreamEnvironment(parallelism=1)
    assert env.set_buffer_timeout(timedelta(milliseconds=250)).config.buffer_timeout_ms == 250
    assert env.set_buffer_timeout(0).config.buffer_timeout_ms == 0


def test_the_default_parallelism_is_the_cpu_count_capped_by_max_parallelism() -> None:
    import os

    assert lg.StreamEnvironment().parallelism == min(os.cpu_count() or 1, 128)
    assert lg.StreamEnvironment(max_parallelism=1).parallelism == 1
