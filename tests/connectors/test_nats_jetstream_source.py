"""NatsJetStreamSource against the real NATS JetStream on 127.0.0.1:4222 (never mocked):
messages in sequence order, positions that a new reader resumes from exactly (M-X1, M-R1),
bounded and unbounded reading, malformed messages failing with stream, sequence and subject
or going to the dead-letter output, argument checks, the reader's event-loop thread, and
jobs on the local executor and on Spark (local[2])."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import nats
import pytest
from recording_output import RecordingOutput

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from conftest import lockgate_threads
from lockgate.connectors.base import InputStatus, SourceReader, assign_splits
from lockgate.connectors.nats.jetstream import NatsJetStreamSource, NatsJetStreamSplit
from lockgate.errors import ConfigurationError, MalformedRecordError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, inject_faults

NATS_URL = "nats://127.0.0.1:4222"


# --------------------------------------------------------------------------------- helpers


class JetStream:
    """JetStream streams for one test, each named uniquely with the subjects ``<name>.>``,
    deleted at teardown."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def new(self) -> str:
        name = f"LGTEST{uuid.uuid4().hex}"
        self.made.append(name)

        async def add(js: Any) -> None:
            await js.add_stream(name=name, subjects=[f"{name}.>"])

        _run(add)
        return name

    def publish(self, messages: list[tuple[str, bytes]]) -> list[int]:
        """Publish ``(subject, data)`` pairs in order; their stream sequences."""

        async def publish(js: Any) -> list[int]:
            return [(await js.publish(subject, data)).seq for subject, data in messages]

        return _run(publish)

    def close(self) -> None:
        async def delete(js: Any) -> None:
            for name in self.made:
                await js.delete_stream(name)

        if self.made:
            _run(delete)


def _run(action: Callable[[Any], Any]) -> Any:
    async def main() -> Any:
        nc = await nats.connect(NATS_URL)
        try:
            return await action(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(main())


@pytest.fixture
def jetstream() -> Iterator[JetStream]:
    js = JetStream()
    yield js
    js.close()


@pytest.fixture
def open_reader() -> Iterator[Callable[..., SourceReader]]:
    """``open_reader(source, splits, subtask=0, parallelism=1)``: a reader given ``splits``;
    every reader is closed at teardown (which must stop its event-loop thread)."""
    readers: list[SourceReader] = []

    def open_(
        source: NatsJetStreamSource, splits: list[Any], subtask: int = 0, parallelism: int = 1
    ) -> SourceReader:
        reader = source.create_reader(context(subtask, parallelism))
        readers.append(reader)
        reader.add_splits(splits)
        return reader

    yield open_
    for reader in readers:
        reader.close()


def context(subtask: int = 0, parallelism: int = 1) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="nats",
        operator_uid="nats",
        subtask_index=subtask,
        parallelism=parallelism,
        max_parallelism=128,
    )


def read_to_end(reader: SourceReader, out: RecordingOutput, max_polls: int = 1000) -> None:
    for _ in range(max_polls):
        if reader.poll(out) is InputStatus.END_OF_INPUT:
            return
    pytest.fail(f"the reader did not end within {max_polls} polls")


def json_messages(subject: str, values: range | list[int]) -> list[tuple[str, bytes]]:
    return [(subject, json.dumps({"v": v}).encode()) for v in values]


def vs(records: list[Any]) -> list[int]:
    return [r["v"] for r in records]


# --------------------------------------------------------------------------------- reading


def test_a_bounded_source_reads_every_message_in_sequence_order_then_ends_M_X1(
    jetstream, open_reader
) -> None:
    """M-X1: the split records the last sequence emitted; the whole stream arrives once, in
    order."""
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(25)))
    source = NatsJetStreamSource(NATS_URL, name, bounded=True, batch_size=10)
    splits = source.create_splits(1)
    assert splits == [NatsJetStreamSplit(">", None, 0, 25)]
    reader = open_reader(source, splits)
    out = RecordingOutput()
    read_to_end(reader, out)
    assert vs(out.records) == list(range(25))
    assert [len(rows) for _, rows in out.batches] == [10, 10, 5]
    assert out.finished == [">"]
    assert reader.snapshot_positions() == []


def test_a_bounded_split_ends_at_the_last_sequence_when_it_was_created(
    jetstream, open_reader
) -> None:
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(5)))
    source = NatsJetStreamSource(NATS_URL, name, bounded=True, batch_size=2)
    splits = source.create_splits(1)
    jetstream.publish(json_messages(f"{name}.a", range(5, 9)))  # after the split: not read

    first = open_reader(source, splits)
    out = RecordingOutput()
    first.poll(out)
    snapshot = first.snapshot_positions()
    assert snapshot == [NatsJetStreamSplit(">", None, 2, 5)], "the end travels with the split"
    read_to_end(open_reader(source, snapshot), out)
    assert vs(out.records) == list(range(5))


def test_a_bounded_source_restoring_an_unbounded_runs_split_ends_at_the_restores_end_M_R3(
    jetstream, open_reader
) -> None:
    """Issue 37 item 10: a split restored from an unbounded run's state has no end; a
    bounded source gives it the stream's last sequence of the restore (as at a fresh
    start), so the reader ends (it never did); a split with an end keeps it."""
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(8)))
    restored = [NatsJetStreamSplit(">", None, 3, None)]  # an unbounded run read 3
    source = NatsJetStreamSource(NATS_URL, name, bounded=True, batch_size=10)
    splits = source.restore_splits(restored, context())
    assert splits == [NatsJetStreamSplit(">", None, 3, 8)]
    assert restored[0].end is None, "the restored splits are not changed in place"
    jetstream.publish(json_messages(f"{name}.a", range(8, 10)))  # after it: not read
    out = RecordingOutput()
    read_to_end(open_reader(source, splits), out)
    assert vs(out.records) == list(range(3, 8))
    ended = [NatsJetStreamSplit(">", None, 3, 5)]
    assert source.restore_splits(ended, context()) == ended


def test_a_new_reader_resumes_at_the_sequence_after_the_last_emitted_M_R1(
    jetstream, open_reader
) -> None:
    """M-R1: a reader given the snapshotted splits rewinds to their positions: no message
    is lost and none is read twice."""
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(10)))
    source = NatsJetStreamSource(NATS_URL, name, batch_size=4)
    first = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert first.poll(out) is InputStatus.MORE_AVAILABLE
    assert first.poll(out) is InputStatus.MORE_AVAILABLE
    snapshot = first.snapshot_positions()
    assert snapshot == [NatsJetStreamSplit(">", None, 8, None)]
    first.poll(out)  # the old reader goes on; the snapshot is a copy and does not move
    assert snapshot[0].position == 8
    first.close()

    after = RecordingOutput()
    second = open_reader(source, snapshot)
    while second.poll(after) is InputStatus.MORE_AVAILABLE:
        pass
    assert vs(out.records[:8] + after.records) == list(range(10))


def test_re_adding_a_split_rewinds_the_same_reader_to_its_position_M_R1(
    jetstream, open_reader
) -> None:
    """M-R1: a split added again (e.g. on restore) gets a new consumer at its position."""
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(6)))
    source = NatsJetStreamSource(NATS_URL, name, batch_size=4)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    reader.poll(out)
    reader.add_splits([NatsJetStreamSplit(">", None, 1, None)])
    assert reader.snapshot_positions() == [NatsJetStreamSplit(">", None, 1, None)]
    again = RecordingOutput()
    while reader.poll(again) is InputStatus.MORE_AVAILABLE:
        pass
    assert vs(again.records) == [1, 2, 3, 4, 5]


def test_an_unbounded_reader_picks_up_messages_published_after_it_started(
    jetstream, open_reader
) -> None:
    name = jetstream.new()
    source = NatsJetStreamSource(NATS_URL, name, f"{name}.a", poll_timeout_ms=20)
    assert source.bounded is False
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    started = time.monotonic()
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    assert time.monotonic() - started < 2.0, "an empty poll does not block"
    assert reader.wait_hint_ms() == 20
    jetstream.publish(json_messages(f"{name}.a", range(3)) + json_messages(f"{name}.b", [99]))
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE
    jetstream.publish(json_messages(f"{name}.a", [3, 4]))
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    assert vs(out.records) == [0, 1, 2, 3, 4], "only the split's subject"
    assert out.finished == []


def test_each_subject_is_a_split_read_round_robin(jetstream, open_reader) -> None:
    name = jetstream.new()
    a, b = f"{name}.a", f"{name}.b"
    jetstream.publish(
        [
            m
            for pair in zip(json_messages(a, range(6)), json_messages(b, range(100, 106)))
            for m in pair
        ]
    )
    source = NatsJetStreamSource(NATS_URL, name, [a, b], batch_size=2, bounded=True)
    splits = source.create_splits(2)
    assert [s.subject for s in splits] == [a, b]
    reader = open_reader(source, splits)
    out = RecordingOutput()
    read_to_end(reader, out)
    assert [split for split, _ in out.batches] == [a, b, a, b, a, b], "no split starves"
    assert vs([r for split, rows in out.batches if split == a for r in rows]) == list(range(6))
    assert vs([r for split, rows in out.batches if split == b for r in rows]) == list(
        range(100, 106)
    )
    assert sorted(out.finished) == [a, b]


def test_start_sequence_is_the_first_sequence_read(jetstream, open_reader) -> None:
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(5)))
    source = NatsJetStreamSource(NATS_URL, name, start_sequence=4, bounded=True)
    out = RecordingOutput()
    read_to_end(open_reader(source, source.create_splits(1)), out)
    assert vs(out.records) == [3, 4]


def test_an_empty_stream_or_subject_ends_a_bounded_read(jetstream, open_reader) -> None:
    empty = jetstream.new()
    source = NatsJetStreamSource(NATS_URL, empty, bounded=True)
    assert source.create_splits(1)[0].finished
    assert (
        open_reader(source, source.create_splits(1)).poll(RecordingOutput())
        is InputStatus.END_OF_INPUT
    )

    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(3)))
    source = NatsJetStreamSource(NATS_URL, name, [f"{name}.nothing", f"{name}.a"], bounded=True)
    out = RecordingOutput()
    read_to_end(open_reader(source, source.create_splits(1)), out)
    assert vs(out.records) == [0, 1, 2]
    assert sorted(out.finished) == [f"{name}.a", f"{name}.nothing"]


def test_subtasks_beyond_the_number_of_subjects_get_no_split_and_do_not_fail(
    jetstream, open_reader
) -> None:
    name = jetstream.new()
    bounded = NatsJetStreamSource(NATS_URL, name, [f"{name}.a", f"{name}.b"], bounded=True)
    assert bounded.max_parallelism() is None
    splits = bounded.create_splits(3)
    idle = open_reader(bounded, assign_splits(splits, 2, 3), 2, 3)
    assert idle.poll(RecordingOutput()) is InputStatus.END_OF_INPUT
    unbounded = NatsJetStreamSource(NATS_URL, name)
    idle = open_reader(unbounded, [], 2, 3)
    assert idle.poll(RecordingOutput()) is InputStatus.NOTHING_AVAILABLE


def test_text_and_bytes_formats_give_subject_sequence_and_data(jetstream, open_reader) -> None:
    name = jetstream.new()
    seqs = jetstream.publish([(f"{name}.x", "név".encode()), (f"{name}.y", b"")])
    for fmt, data in (("text", ["név", ""]), ("bytes", ["név".encode(), b""])):
        source = NatsJetStreamSource(NATS_URL, name, format=fmt, bounded=True)
        out = RecordingOutput()
        read_to_end(open_reader(source, source.create_splits(1)), out)
        assert out.records == [
            {"subject": f"{name}.x", "sequence": seqs[0], "data": data[0]},
            {"subject": f"{name}.y", "sequence": seqs[1], "data": data[1]},
        ]


def test_closing_the_reader_stops_its_event_loop_thread(jetstream) -> None:
    name = jetstream.new()
    before = set(lockgate_threads())
    reader = NatsJetStreamSource(NATS_URL, name).create_reader(context())
    started = [t for t in lockgate_threads() if t not in before]
    assert [t.name for t in started] == [f"lockgate nats {name}"]
    assert started[0].daemon
    reader.close()
    assert not started[0].is_alive()
    reader.close()  # twice is harmless


# --------------------------------------------------------------------------------- malformed


BAD_MESSAGES = [
    pytest.param("json", b"{not json", "invalid JSON", id="invalid-json"),
    pytest.param("json", b"\xff\xfe", "not valid UTF-8", id="json-not-utf8"),
    pytest.param("text", b"\xff", "not valid UTF-8", id="text-not-utf8"),
]


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD_MESSAGES)
def test_a_malformed_message_fails_with_its_stream_sequence_and_subject(
    jetstream, open_reader, fmt, bad, error
) -> None:
    name = jetstream.new()
    seqs = jetstream.publish([(f"{name}.a", b"1"), (f"{name}.bad", bad), (f"{name}.a", b"3")])
    source = NatsJetStreamSource(NATS_URL, name, format=fmt, bounded=True)
    reader = open_reader(source, source.create_splits(1))
    with pytest.raises(MalformedRecordError) as err:
        read_to_end(reader, RecordingOutput())
    assert err.value.location == f"nats stream {name!r} sequence {seqs[1]} (subject {name}.bad)"
    assert error in str(err.value)
    assert "on_error='dead_letter'" in str(err.value)


@pytest.mark.parametrize(("fmt", "bad", "error"), BAD_MESSAGES)
def test_with_dead_letter_a_malformed_message_goes_to_the_side_output_and_the_rest_flows(
    jetstream, open_reader, fmt, bad, error
) -> None:
    name = jetstream.new()
    seqs = jetstream.publish(
        [(f"{name}.a", b"1"), (f"{name}.bad", bad), (f"{name}.a", b"3"), (f"{name}.bad", bad)]
    )
    source = NatsJetStreamSource(NATS_URL, name, format=fmt, on_error="dead_letter")
    assert source.side_outputs == ("dead-letter",)
    reader = open_reader(source, source.create_splits(1))
    out = RecordingOutput()
    assert reader.poll(out) is InputStatus.MORE_AVAILABLE
    good = [1, 3] if fmt == "json" else ["1", "3"]
    assert [r if fmt == "json" else r["data"] for r in out.records] == good
    assert [(d["stream"], d["sequence"], d["subject"]) for d in out.dead] == [
        (name, seqs[1], f"{name}.bad"),
        (name, seqs[3], f"{name}.bad"),
    ]
    for d, seq in zip(out.dead, (seqs[1], seqs[3])):
        assert d["location"] == f"nats stream {name!r} sequence {seq} (subject {name}.bad)"
        assert error in d["error"] and d["raw"]
    assert reader.snapshot_positions()[0].position == seqs[3], "the position moves past it"
    assert reader.poll(out) is InputStatus.NOTHING_AVAILABLE, "nothing is read twice"


# --------------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"url": "redis://127.0.0.1:4222"}, "url"),
        ({"url": "127.0.0.1:4222"}, "url"),
        ({"stream": ""}, "stream"),
        ({"stream": "a.b"}, "stream"),
        ({"stream": "a b"}, "stream"),
        ({"subject": ""}, "subject"),
        ({"subject": []}, "subject"),
        ({"subject": ["a", "a"]}, "subject"),
        ({"subject": 5}, "subject"),
        ({"format": "fields"}, "format"),
        ({"start_sequence": 0}, "start_sequence"),
        ({"start_sequence": 1.0}, "start_sequence"),
        ({"start_sequence": True}, "start_sequence"),
        ({"batch_size": 0}, "batch_size"),
        ({"on_error": "skip"}, "on_error"),
        ({"bounded": 1}, "bounded"),
        ({"poll_timeout_ms": -1}, "poll_timeout_ms"),
    ],
)
def test_bad_arguments_raise_a_configuration_error_naming_the_argument(kwargs, named) -> None:
    args: dict[str, Any] = {"url": NATS_URL, "stream": "S", **kwargs}
    with pytest.raises(ConfigurationError) as err:
        NatsJetStreamSource(args.pop("url"), args.pop("stream"), **args)
    assert named in str(err.value)


def test_a_missing_stream_fails_naming_it_and_how_to_create_it() -> None:
    name = f"LGTEST_MISSING_{uuid.uuid4().hex}"
    with pytest.raises(ConfigurationError) as err:
        NatsJetStreamSource(NATS_URL, name, bounded=True).create_splits(1)
    assert repr(name) in str(err.value) and "nats stream add" in str(err.value)


def test_a_subject_outside_the_stream_fails_naming_it(jetstream, open_reader) -> None:
    name = jetstream.new()
    source = NatsJetStreamSource(NATS_URL, name, "elsewhere.x")
    reader = open_reader(source, source.create_splits(1))
    with pytest.raises(ConfigurationError) as err:
        reader.poll(RecordingOutput())
    assert "'elsewhere.x'" in str(err.value) and repr(name) in str(err.value)


def test_an_unreachable_server_fails_when_the_reader_opens_naming_the_url() -> None:
    source = NatsJetStreamSource("nats://127.0.0.1:1", "S")
    with pytest.raises(ConfigurationError) as err:
        source.create_reader(context())
    assert "nats://127.0.0.1:1" in str(err.value) and "start" in str(err.value)
    assert err.value.__cause__ is not None


def test_the_source_pickles_without_a_connection_and_declares_its_shape(
    jetstream, open_reader
) -> None:
    name = jetstream.new()
    source = NatsJetStreamSource(NATS_URL, name, ["a", "b"], bounded=True)
    open_reader(source, [])  # the connection and its thread stay with the reader
    copy = pickle.loads(pickle.dumps(source))
    assert (copy.url, copy.stream, copy.subjects, copy.bounded) == (
        NATS_URL,
        name,
        ("a", "b"),
        True,
    )
    assert copy.side_outputs == ()
    assert NatsJetStreamSource(NATS_URL, name).subjects == (None,)


# --------------------------------------------------------------------------------- jobs


def test_a_job_reads_two_subjects_with_two_subtasks(jetstream, executor) -> None:
    name = jetstream.new()
    a, b = f"{name}.a", f"{name}.b"
    jetstream.publish(
        [
            m
            for pair in zip(json_messages(a, range(30)), json_messages(b, range(100, 130)))
            for m in pair
        ]
    )
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    source = NatsJetStreamSource(NATS_URL, name, [a, b], bounded=True, batch_size=7)
    out = env.from_source(source, name="nats").execute_and_collect(executor=executor)
    assert sorted(vs(out)) == list(range(30)) + list(range(100, 130))
    assert [v for v in vs(out) if v < 100] == list(range(30)), "a split arrives in order"


def test_a_job_sends_malformed_messages_to_the_dead_letter_output(jetstream, executor) -> None:
    name = jetstream.new()
    seqs = jetstream.publish(
        [(f"{name}.a", b'{"v": 1}'), (f"{name}.a", b"nope"), (f"{name}.a", b'{"v": 3}')]
    )
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    records = env.from_source(
        NatsJetStreamSource(NATS_URL, name, bounded=True, on_error="dead_letter"), name="nats"
    )
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d))
    out = records.map(lambda r: ("good", r)).union(dead).execute_and_collect(executor=executor)
    assert [r for tag, r in out if tag == "good"] == [{"v": 1}, {"v": 3}]
    letters = [d for tag, d in out if tag == "dead"]
    assert [(d["sequence"], d["subject"], d["raw"]) for d in letters] == [
        (seqs[1], f"{name}.a", "nope")
    ]
    assert letters[0]["location"] == f"nats stream {name!r} sequence {seqs[1]} (subject {name}.a)"


def test_a_job_with_a_malformed_message_fails_naming_stream_and_sequence(
    jetstream, executor
) -> None:
    name = jetstream.new()
    seqs = jetstream.publish([(f"{name}.a", b"1"), (f"{name}.a", b"{")])
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.from_source(NatsJetStreamSource(NATS_URL, name, bounded=True), name="nats").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("malformed nats", executor=executor)
    assert isinstance(err.value.__cause__, MalformedRecordError)
    assert (
        err.value.__cause__.location
        == f"nats stream {name!r} sequence {seqs[1]} (subject {name}.a)"
    )
    assert err.value.reason is lg.FailureReason.MALFORMED_INPUT


def test_a_failed_job_restores_the_sequences_of_its_checkpoint_exactly_once_M_R1(
    jetstream, executor, caplog
) -> None:
    """M-R1, M-X1: attempt 0 fails after checkpoints recorded the last sequence read per
    subject; attempt 1 rewinds every split to them (new consumers from the next sequence),
    so each message reaches the exactly-once collecting sink once."""
    name = jetstream.new()
    a, b = f"{name}.a", f"{name}.b"
    jetstream.publish(json_messages(a, range(3000)) + json_messages(b, range(10_000, 13_000)))
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=1, delay=0))
    source = NatsJetStreamSource(NATS_URL, name, [a, b], bounded=True, batch_size=50)
    out = (
        # paced by completed checkpoints, not time: nothing before the attempt's first
        # completed checkpoint, then 500 records a subtask per completion, so a checkpoint
        # has completed before the fault on a machine of any speed
        env.from_source(CheckpointPacedSource(source, 500), name="nats")
        .uid("nats")
        .map_batches(lambda b: b, name="slow")
    )
    inject_faults(env, FailAtRecord("slow", record=1500, attempt=0, subtask=0, after_checkpoints=1))
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        records = out.execute_and_collect("nats restore", executor=executor)
    assert any(" restores " in r.getMessage() for r in caplog.records), (
        "attempt 1 restored a checkpoint"
    )
    assert sorted(vs(records)) == list(range(3000)) + list(range(10_000, 13_000))


def test_a_job_on_a_missing_stream_fails_naming_it_and_leaves_no_thread(executor) -> None:
    name = f"LGTEST_MISSING_{uuid.uuid4().hex}"
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.from_source(NatsJetStreamSource(NATS_URL, name, bounded=True), name="nats").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("missing stream", executor=executor)
    assert repr(name) in str(err.value) and "nats stream add" in str(err.value)


def test_the_reader_tells_its_lag_from_the_messages_pending(jetstream, open_reader) -> None:
    """The source lag metric (issue 21): the messages of the split after the last one
    delivered (JetStream's num_pending); 0 once it read everything."""
    name = jetstream.new()
    jetstream.publish(json_messages(f"{name}.a", range(25)))
    source = NatsJetStreamSource(NATS_URL, name, batch_size=10)
    reader = open_reader(source, source.create_splits(1))
    assert reader.pending_records is None
    out = RecordingOutput()
    lags = []
    for _ in range(50):
        reader.poll(out)
        lags.append((len(out.records), reader.pending_records))
        if len(out.records) == 25 and reader.pending_records == 0:
            break
    assert (10, 15) in lags and (20, 5) in lags, lags
    assert lags[-1] == (25, 0), lags
