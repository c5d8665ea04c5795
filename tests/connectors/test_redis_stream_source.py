"""RedisStreamSource against the real Redis on 127.0.0.1:6379 (never mocked): entries in id
order, positions that a new reader resumes from exactly (M-X1, M-R1), bounded and unbounded
reading, malformed entries failing with stream and id or going to the dead-letter output,
argument checks, and jobs on the local executor and on Spark (local[2])."""

from __future__ import annotations

import logging
import pickle
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from recording_output import RecordingOutput

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors.base import InputStatus, SourceReader
from lockgate.connectors.redis.stream import RedisStreamSource, RedisStreamSplit
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, inject_faults

REDIS_URL = "redis://127.0.0.1:6379/0"


# --------------------------------------------------------------------------------- helpers


class Streams:
    """Unique Redis stream names for one test (deleted at teardown) and a client to write."""

    def __init__(self) -> None:
        self.client = redis.Redis.from_url(REDIS_URL)
        self.made: list[str] = []

    def new(self) -> str:
        name = f"lockgate-test:{uuid.uuid4().hex}"
        self.made.append(name)
        return name

    def add(self, stream: str, *entries: dict[Any, Any]) -> list[str]:
        """XADD each entry; their ids as str."""
        return [self.client.xadd(stream, e).decode() for e in entries]  # type: ignore[union-attr]

    def close(self) -> None:
        if self.made:
            self.client.delete(*self.made)
        self.client.close()


@pytest.fixture
def streams() -> Iterator[Streams]:
    s = Streams()
    yield s
    s.close()


@pytest.fixture
def open_reader() -> Iterator[Callable[..., SourceReader]]:
    """``open_reader(source, splits, subtask=0, parallelism=1)``: a reader given ``splits``;
    every reader is closed at teardown."""
    readers: list[SourceReader] = []

    def open_(
        source: RedisStreamSource, splits: list[Any], subtask: int = 0, parallelism: int = 1
    ) -> SourceReader:
        ctx = RuntimeContext(
            task_name="t",
            operator_name="redis",
            operator_uid="redis",
            subtask_index=subtask,
            parallelism=parallelism,
            max_parallelism=128,
        )
        reader = source.create_reader(ctx)
        readers.append(reader)
        reader.add_splits(splits)
        return reader

    yield open_
    for reader in readers:
        reader.close()


def read_to_end(reader: SourceReader, out: RecordingOutput, max_polls: int = 1000) -> None:
    for _ in range(max_polls):
        if reader.poll(out) is InputStatus.END_OF_INPUT:
            return
    pytest.fail(f"the reader did not end within {max_polls} polls")


def numbered(n: int, start: int = 0) -> list[dict[str, str]]:
    return [{"n": str(i)} for i in range(start, start + n)]


# --------------------------------------------------------------------------------- reading


def test_a_bounded_source_reads_every_entry_in_id_order_then_ends_M_X1(
    streams, open_reader
) -> None:
    """M-X1: the split records the last id emitted; the whole stream arrives once, in order."""
    name = streams.new()
    streams.add(name, *numbered(25))
    source = RedisStreamSource(REDIS_URL, name, bounded=True, batch_size=10)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    read_to_end(reader, out)
    assert out.records == numbered(25)
    assert [len(rows) for _, rows in out.batches] == [10, 10, 5]
    assert {split for split, _ in out.batches} == {name}
    assert out.finished == [name]
    assert reader.snapshot_positions() == []


def test_a_bounded_split_ends_at_the_last_entry_that_existed_when_it_was_created(
    streams, open_reader
) -> None:
    name = streams.new()
    ids = streams.add(name, *numbered(5))
    source = RedisStreamSource(REDIS_URL, name, bounded=True, batch_size=2)
    splits = source.create_splits(1)
    assert splits == [RedisStreamSplit(name, name, "0-0", ids[-1])]
    streams.add(name, *numbered(3, start=5))  # after the split was made: not read

    first = open_reader(source, splits)
    out = RecordingOutput()
    first.poll(out)
    snapshot = first.snapshot_positions()
    assert snapshot[0].end == ids[-1], "the end id travels with the split"
    restored = open_reader(source, snapshot)
    read_to_end(restored, out)
    assert out.records == numbered(5)


def context() -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="redis",
        operator_uid="redis",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
    )


def test_a_bounded_source_restoring_an_unbounded_runs_split_ends_at_the_restores_end_M_R3(
    streams, open_reader
) -> None:
    """Issue 37 item 10: a split restored from an unbounded run's state has no end; a
    bounded source gives it the stream's last entry id of the restore (as at a fresh
    start), so entries added later are not read; a split with an end keeps it."""
    name = streams.new()
    ids = streams.add(name, *numbered(8))
    restored = [RedisStreamSplit(name, name, ids[2], None)]  # an unbounded run read 3
    source = RedisStreamSource(REDIS_URL, name, bounded=True, batch_size=2)
    splits = source.restore_splits(restored, context())
    assert splits == [RedisStreamSplit(name, name, ids[2], ids[-1])]
    assert restored[0].end is None, "the restored splits are not changed in place"
    streams.add(name, *numbered(2, start=8))  # after the restore: not read
    out = RecordingOutput()
    read_to_end(open_reader(source, splits), out)
    assert out.records == numbered(5, start=3)
    ended = [RedisStreamSplit(name, name, ids[2], ids[4])]
    assert source.restore_splits(ended, context()) == ended


def test_a_new_reader_resumes_right_after_the_last_emitted_entry_M_R1(streams, open_reader) -> None:
    """M-R1: a reader given the snapshotted splits rewinds to their positions: no entry is
    lost and none is read twice."""
    name = streams.new()
    ids = streams.add(name, *numbered(10))
    source = RedisStreamSource(REDIS_URL, name, batch_size=4, bounded=True)
    first = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert first.poll(out) is InputStatus.MORE_AVAILABLE
    assert first.poll(out) is InputStatus.MORE_AVAILABLE
    snapshot = first.snapshot_positions()
    assert snapshot == [RedisStreamSplit(name, name, ids[7], ids[-1])]
    first.poll(out)  # the old reader goes on; the snapshot is a copy and does not move
    assert snapshot[0].position == ids[7]
    first.close()

    after = RecordingOutput()
    read_to_end(open_reader(source, snapshot), after)
    assert out.records[:8] + after.records == numbered(10)


def test_an_unbounded_reader_picks_up_entries_added_after_it_started(streams, open_reader) -> None:
    name = streams.new()  # does not exist yet: Redis creates it on the first XADD
    source = RedisStreamSource(REDIS_URL, name, poll_interval_ms=20)
    assert source.bounded is False
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    assert reader.wait_hint_ms() == 20
    streams.add(name, *numbered(3))
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    streams.add(name, *numbered(2, start=3))
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    assert out.records == numbered(5)
    assert out.finished == []


def test_an_unbounded_reader_reads_every_stream_it_owns_round_robin(streams, open_reader) -> None:
    a, b = streams.new(), streams.new()
    streams.add(a, *numbered(6))
    streams.add(b, *numbered(6, start=100))
    source = RedisStreamSource(REDIS_URL, [a, b], batch_size=2)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    for _ in range(4):
        assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    assert [split for split, _ in out.batches] == [a, b, a, b], "no stream starves another"


def test_start_id_reads_the_entries_after_it(streams, open_reader) -> None:
    name = streams.new()
    ids = streams.add(name, *numbered(4))
    source = RedisStreamSource(REDIS_URL, name, start_id=ids[1], bounded=True)
    out = RecordingOutput()
    read_to_end(open_reader(source, source.create_splits(1)), out)
    assert out.records == numbered(2, start=2)


def test_an_empty_or_missing_stream_gives_an_already_finished_bounded_split(
    streams, open_reader
) -> None:
    name = streams.new()
    source = RedisStreamSource(REDIS_URL, name, bounded=True)
    splits = source.create_splits(1)
    assert splits[0].finished
    reader = open_reader(source, splits)
    assert reader.poll(RecordingOutput()) is InputStatus.END_OF_INPUT


def test_subtasks_beyond_the_number_of_streams_get_no_split_and_do_not_fail(
    streams, open_reader
) -> None:
    a, b = streams.new(), streams.new()
    bounded = RedisStreamSource(REDIS_URL, [a, b], bounded=True)
    assert bounded.max_parallelism() is None
    splits = bounded.create_splits(3)
    idle = open_reader(bounded, lg.connectors.base.assign_splits(splits, 2, 3), 2, 3)
    assert idle.poll(RecordingOutput()) is InputStatus.END_OF_INPUT
    unbounded = RedisStreamSource(REDIS_URL, [a, b])
    idle = open_reader(unbounded, [], 2, 3)
    assert idle.poll(RecordingOutput()) is InputStatus.NOTHING_AVAILABLE


def test_fields_format_gives_the_fields_as_text_with_the_entry_id(streams, open_reader) -> None:
    name = streams.new()
    ids = streams.add(name, {"name": "név", b"count": b"3"}, {"empty": ""})
    source = RedisStreamSource(REDIS_URL, name, bounded=True, id_field="_id")
    out = RecordingOutput()
    read_to_end(open_reader(source, source.create_splits(1)), out)
    assert out.records == [
        {"name": "név", "count": "3", "_id": ids[0]},
        {"empty": "", "_id": ids[1]},
    ]


def test_json_format_parses_the_field_and_adds_the_id_to_dicts_only(streams, open_reader) -> None:
    name = streams.new()
    ids = streams.add(
        name,
        {"payload": '{"a": [1, 2]}', "other": "x"},
        {"payload": "[1, 2]"},
        {"payload": "7"},
        {"payload": "null"},
    )
    source = RedisStreamSource(
        REDIS_URL, name, format="json", field="payload", bounded=True, id_field="id"
    )
    out = RecordingOutput()
    read_to_end(open_reader(source, source.create_splits(1)), out)
    assert out.records == [{"a": [1, 2], "id": ids[0]}, [1, 2], 7, None]


# --------------------------------------------------------------------------------- malformed


BAD_ENTRIES = [
    pytest.param("json", {"data": "{not json"}, "not valid JSON", id="invalid-json"),
    pytest.param("json", {"other": "1"}, "no field 'data'", id="missing-field"),
    pytest.param("json", {"data": b"\xff\xfe"}, "not valid UTF-8", id="json-not-utf8"),
    pytest.param("fields", {"k": b"\xff"}, "not valid UTF-8", id="fields-not-utf8"),
]


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD_ENTRIES)
def test_a_malformed_entry_fails_with_its_stream_and_id(
    streams, open_reader, fmt, bad, error
) -> None:
    name = streams.new()
    ids = streams.add(name, {"data": "1"}, bad, {"data": "3"})
    source = RedisStreamSource(REDIS_URL, name, format=fmt, bounded=True)
    reader = open_reader(source, source.create_splits(1))
    with pytest.raises(MalformedRecordError) as err:
        read_to_end(reader, RecordingOutput())
    assert err.value.location == f"redis stream {name!r} id {ids[1]}"
    assert error in str(err.value)
    assert "on_error='dead_letter'" in str(err.value)


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD_ENTRIES)
def test_with_dead_letter_a_malformed_entry_goes_to_the_side_output_and_the_rest_flows(
    streams, open_reader, fmt, bad, error
) -> None:
    name = streams.new()
    ids = streams.add(name, {"data": "1"}, bad, {"data": "3"}, bad)
    source = RedisStreamSource(REDIS_URL, name, format=fmt, on_error="dead_letter")
    assert source.side_outputs == ("dead-letter",)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    good = [1, 3] if fmt == "json" else [{"data": "1"}, {"data": "3"}]
    assert out.records == good
    assert [(d["stream"], d["id"]) for d in out.dead] == [(name, ids[1]), (name, ids[3])]
    for d, entry_id in zip(out.dead, (ids[1], ids[3])):
        assert d["location"] == f"redis stream {name!r} id {entry_id}"
        assert error in d["error"] and d["raw"]
    assert reader.snapshot_positions()[0].position == ids[3], "the position moves past it"
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE, "nothing is read twice"


# --------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"url": "http://127.0.0.1:6379"}, "url"),
        ({"url": "127.0.0.1:6379"}, "url"),
        ({"stream": ""}, "stream"),
        ({"stream": []}, "stream"),
        ({"stream": ["a", ""]}, "stream"),
        ({"stream": ["a", "a"]}, "stream"),
        ({"format": "csv"}, "format"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"on_error": "skip"}, "on_error"),
        ({"start_id": "$"}, "start_id"),
        ({"start_id": "12-x"}, "start_id"),
        ({"start_id": "-1"}, "start_id"),
        ({"bounded": "yes"}, "bounded"),
        ({"id_field": ""}, "id_field"),
        ({"field": ""}, "field"),
        ({"poll_interval_ms": 0}, "poll_interval_ms"),
    ],
)
def test_bad_arguments_raise_a_configuration_error_naming_the_argument(kwargs, named) -> None:
    args: dict[str, Any] = {"url": REDIS_URL, "stream": "s", **kwargs}
    with pytest.raises(ConfigurationError) as err:
        RedisStreamSource(args.pop("url"), args.pop("stream"), **args)
    assert named in str(err.value)


def test_good_arguments_of_every_kind_are_accepted() -> None:
    for url in ("redis://localhost", "rediss://h:1/2", "unix:///tmp/redis.sock"):
        RedisStreamSource(url, ("a", "b"), start_id="0")
    assert RedisStreamSource(REDIS_URL, "s", start_id="0").start_id == "0-0"
    assert (
        RedisStreamSource(REDIS_URL, "s", start_id="1700000000000-3").start_id == "1700000000000-3"
    )


def test_an_unreachable_redis_fails_when_the_reader_opens_naming_the_url() -> None:
    source = RedisStreamSource("redis://127.0.0.1:1/0", "s")
    with pytest.raises(ConfigurationError) as err:
        source.create_reader(
            RuntimeContext(
                task_name="t",
                operator_name="r",
                operator_uid="r",
                subtask_index=0,
                parallelism=1,
                max_parallelism=128,
            )
        )
    assert "redis://127.0.0.1:1/0" in str(err.value) and "start Redis" in str(err.value)
    assert err.value.__cause__ is not None


def test_a_key_that_is_not_a_stream_is_a_configuration_error(streams) -> None:
    name = streams.new()
    streams.client.set(name, "a string")
    with pytest.raises(ConfigurationError) as err:
        RedisStreamSource(REDIS_URL, name, bounded=True).create_splits(1)
    assert repr(name) in str(err.value) and "not a stream" in str(err.value)


def test_the_source_pickles_without_a_client_and_declares_its_shape(open_reader) -> None:
    source = RedisStreamSource(REDIS_URL, ["a", "b"], bounded=True)
    open_reader(source, [])  # a reader's client stays with the reader
    copy = pickle.loads(pickle.dumps(source))
    assert (copy.url, copy.streams, copy.bounded) == (REDIS_URL, ("a", "b"), True)
    assert copy.side_outputs == ()
    assert RedisStreamSource(REDIS_URL, "a").bounded is False


# --------------------------------------------------------------------------------- jobs


def test_a_job_reads_two_streams_with_two_subtasks(streams, executor) -> None:
    a, b = streams.new(), streams.new()
    ids_a = streams.add(a, *numbered(30))
    ids_b = streams.add(b, *numbered(20, start=100))
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    source = RedisStreamSource(REDIS_URL, [a, b], bounded=True, batch_size=7, id_field="id")
    out = env.from_source(source, name="redis").execute_and_collect(executor=executor)
    expected = [{**r, "id": i} for r, i in zip(numbered(30), ids_a)] + [
        {**r, "id": i} for r, i in zip(numbered(20, start=100), ids_b)
    ]

    def order(r: dict[str, str]) -> int:
        return int(r["n"])  # unique over both streams (entry ids may coincide across streams)

    assert sorted(out, key=order) == expected
    assert [r for r in out if order(r) < 100] == expected[:30], "a stream arrives in id order"


def test_a_job_sends_malformed_entries_to_the_dead_letter_output(streams, executor) -> None:
    name = streams.new()
    ids = streams.add(name, {"data": '{"v": 1}'}, {"data": "nope"}, {"data": '{"v": 3}'})
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    records = env.from_source(
        RedisStreamSource(REDIS_URL, name, format="json", bounded=True, on_error="dead_letter"),
        name="redis",
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect(executor=executor)
    assert [r for tag, r in out if tag == "good"] == [{"v": 1}, {"v": 3}]
    letters = [d for tag, d in out if tag == "dead"]
    assert [(d["stream"], d["id"], d["raw"]) for d in letters] == [(name, ids[1], "nope")]
    assert letters[0]["location"] == f"redis stream {name!r} id {ids[1]}"


def test_a_job_with_a_malformed_entry_fails_naming_stream_and_id(streams, executor) -> None:
    name = streams.new()
    ids = streams.add(name, {"data": "1"}, {"data": "{"})
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.from_source(
        RedisStreamSource(REDIS_URL, name, format="json", bounded=True), name="redis"
    ).sink_to(lg.connectors.DiscardingSink())
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("malformed redis", executor=executor)
    assert isinstance(err.value.__cause__, MalformedRecordError)
    assert err.value.__cause__.location == f"redis stream {name!r} id {ids[1]}"
    assert err.value.reason is lg.FailureReason.MALFORMED_INPUT


def test_a_failed_job_restores_the_stream_positions_of_its_checkpoint_exactly_once_M_R1(
    streams, executor, caplog
) -> None:
    """M-R1, M-X1: attempt 0 fails after checkpoints recorded the last id read per stream;
    attempt 1 rewinds every stream to them, so each entry reaches the exactly-once
    collecting sink once."""
    a, b = streams.new(), streams.new()
    streams.add(a, *numbered(3000))
    streams.add(b, *numbered(3000, start=10_000))
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    source = RedisStreamSource(REDIS_URL, [a, b], bounded=True, batch_size=50)
    out = (
        # paced by completed checkpoints, not time: nothing before the attempt's first
        # completed checkpoint, then 500 records a subtask per completion, so a checkpoint
        # has completed before the fault on a machine of any speed
        env.from_source(CheckpointPacedSource(source, 500), name="redis")
        .uid("redis")
        .map_batches(lambda b: b, name="slow")
    )
    inject_faults(env, FailAtRecord("slow", record=1500, attempt=0, subtask=0, after_checkpoints=1))
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        records = out.execute_and_collect("redis restore", executor=executor)
    assert any(" restores " in r.getMessage() for r in caplog.records), (
        "attempt 1 restored a checkpoint"
    )
    assert sorted(records, key=lambda r: int(r["n"])) == numbered(3000) + numbered(
        3000, start=10_000
    )


def test_the_reader_tells_its_lag_only_once_caught_up(streams, open_reader) -> None:
    """The source lag metric (issue 21): XRANGE does not count what is left, so the lag
    is unknown (None) while full batches come back, and 0 once a read came back short."""
    name = streams.new()
    streams.add(name, *numbered(25))
    source = RedisStreamSource(REDIS_URL, name, batch_size=10)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert reader.pending_records is None
    reader.poll(out)
    assert len(out.records) == 10 and reader.pending_records is None
    reader.poll(out)
    reader.poll(out)
    assert len(out.records) == 25 and reader.pending_records == 0
    streams.add(name, *numbered(12, start=25))
    reader.poll(out)
    assert len(out.records) == 35 and reader.pending_records is None
