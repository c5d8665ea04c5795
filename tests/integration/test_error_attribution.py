"""Errors point at the right place (issue 18 items 11 and 12): the operator whose code
produced the bad value is named, the offending record is quoted (truncated), the user's
traceback is printed once; NaN keys are one key; a non-iterable flat_map/process result
names the operator and what it returned. On the local executor and on Spark (local[2])."""

from __future__ import annotations

import logging
import math
import struct

import pytest

import lockgate as lg
from lockgate.connectors import DiscardingSink, SequenceSource
from lockgate.core.partitioners import KeyExtractionError

LONG = "x" * 1000  # a record far longer than an error message quotes


def none_for_seven(x):
    return None if x == 7 else {"k": x % 3, "v": x}


def long_string_for_seven(x):
    return LONG if x == 7 else {"k": x % 3, "v": x}


def without_k_for_seven(x):
    return {"v": x} if x == 7 else {"k": x % 3, "v": x}


def pick_k(record):
    return record["k"]


def failing_job(env: lg.StreamEnvironment, executor) -> lg.JobFailedError:
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("attribution", executor=executor)
    return err.value


def assert_traceback_once(error: lg.JobFailedError, caplog, frame: str) -> None:
    """The user's traceback (its frame ``frame``) is in the error text once, and the
    log does not repeat it."""
    text = str(error)
    assert text.count(f"in {frame}") <= 1, text
    assert f"in {frame}" not in caplog.text, caplog.text


def test_a_map_returning_none_fails_at_the_map_naming_it_and_the_input_record(
    make_env, executor, caplog
) -> None:
    """source -> map (None for 7) -> key_by('k') -> sink: the map is named (not the
    source, not a KeyError of key_by on a valid record), with the input record."""
    caplog.set_level(logging.DEBUG)
    env = make_env(parallelism=1)
    (
        env.from_source(SequenceSource(0, 20))
        .map(none_for_seven, name="nullable map")
        .key_by("k")
        .process(lambda v, ctx: [v])
        .sink_to(DiscardingSink())
    )
    error = failing_job(env, executor)
    text = str(error)
    assert error.operator == "nullable map", text
    assert error.reason is lg.FailureReason.USER_CODE
    assert "map() returned None for the input record 7" in text, text
    assert "filter()" in text, "the error says how to drop records"
    assert "KeyError" not in text and "Source" not in text.split("\n")[0], text
    assert isinstance(error.__cause__, TypeError)
    assert text.count("Traceback (most recent call last)") <= 1, text
    assert_traceback_once(error, caplog, "none_for_seven")


def test_a_record_key_by_cannot_key_names_the_producer_and_the_key_by_quoting_it_truncated(
    make_env, executor, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, 20))
        .map(long_string_for_seven, name="stringly map")
        .key_by("k")
        .process(lambda v, ctx: [v])
        .sink_to(DiscardingSink())
    )
    error = failing_job(env, executor)
    text = str(error)
    assert error.operator == "stringly map", text
    assert error.reason is lg.FailureReason.USER_CODE
    assert "key_by('k')" in text and "str record 'xxx" in text, text
    assert "(1002 characters in all)" in text, "the record is quoted truncated"
    assert LONG not in text
    assert "{'k': 0, 'v': 0}" not in text, "a valid record is not blamed"
    assert isinstance(error.__cause__, KeyExtractionError)
    assert error.__cause__.error is None
    assert text.count("Traceback (most recent call last)") == 1, text


def test_a_key_selector_that_raises_names_the_producer_the_key_by_and_the_record(
    make_env, executor, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, 20))
        .map(without_k_for_seven, name="partial map")
        .key_by(pick_k)
        .process(lambda v, ctx: [v])
        .sink_to(DiscardingSink())
    )
    error = failing_job(env, executor)
    text = str(error)
    assert error.operator == "partial map", text
    assert "key_by(pick_k): the key selector raised KeyError: 'k' for the record {'v': 7}" in text
    assert "Source" not in text.split("\n")[0], text
    assert "in pick_k" in text, "the user's traceback is shown"
    assert isinstance(error.__cause__, KeyError) and error.__cause__.args == ("k",), (
        "the cause is the user's own exception"
    )
    assert_traceback_once(error, caplog, "pick_k")


class BoomError(Exception):
    pass


def explode_at_seven(x):
    if x == 7:
        raise BoomError("boom at 7")
    return x


def test_the_users_traceback_is_printed_once_in_the_error_and_not_again_in_the_log(
    make_env, executor, caplog
) -> None:
    """On Spark the slot's own exception (which Spark logs, and which reaches the driver's
    log through py4j) no longer chains the user's: the JobFailedError carries it, once."""
    caplog.set_level(logging.DEBUG)
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, 20))
        .map(explode_at_seven, name="explosive")
        .key_by(lambda x: x % 2)
        .process(lambda v, ctx: [v])
        .sink_to(DiscardingSink())
    )
    error = failing_job(env, executor)
    text = str(error)
    assert error.operator == "explosive"
    assert text.count("in explode_at_seven") == 1, text
    assert text.count("BoomError: boom at 7") == 2, "the headline and the traceback's last line"
    assert_traceback_once(error, caplog, "explode_at_seven")


# ------------------------------------------------------------------ NaN keys (item 11)


def _nans() -> list[float]:
    """Distinct NaN objects, with different bits: quiet, negative, with a payload."""
    negative = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
    payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000123))[0]
    return [float("nan"), negative, payload, math.nan, float("nan") * 0]


class KeyedCount(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        yield ("nan" if value["k"] != value["k"] else value["k"], n)


@pytest.mark.parametrize("key", ["k", "function"])
def test_every_nan_key_shares_one_state_entry(make_env, executor, key) -> None:
    nans = _nans()
    assert len({struct.pack("<d", n) for n in nans}) >= 3, "NaNs with different bits"
    records = [{"k": n, "i": i} for i, n in enumerate(nans)] + [{"k": 1.5, "i": 99}]
    env = make_env(parallelism=2)
    stream = env.from_collection(records)
    keyed = stream.key_by("k" if key == "k" else (lambda r: r["k"]))
    out = keyed.process(KeyedCount()).execute_and_collect(executor=executor)
    nan_counts = sorted(n for k, n in out if k == "nan")
    assert nan_counts == list(range(1, len(nans) + 1)), (
        f"every NaN record must count in one state entry, got counts {nan_counts}"
    )
    assert ("nan", len(nans)) in out and (1.5, 1) in out


# ------------------------------------------------- non-iterable results (item 11)


def five(*_):
    return 5


class FiveProcess(lg.ProcessFunction):
    def process_element(self, value, ctx):
        return 5


class FiveKeyed(lg.KeyedProcessFunction):
    def process_element(self, value, ctx):
        return 5


@pytest.mark.parametrize("kind", ["flat_map", "process", "keyed process"])
def test_a_non_iterable_result_names_the_operator_and_what_it_returned(
    make_env, executor, kind
) -> None:
    env = make_env(parallelism=1)
    stream = env.from_source(SequenceSource(0, 20))
    if kind == "flat_map":
        out = stream.flat_map(five, name="five op")
    elif kind == "process":
        out = stream.process(FiveProcess(), name="five op")
    else:
        out = stream.key_by(lambda x: x % 2).process(FiveKeyed(), name="five op")
    out.sink_to(DiscardingSink())
    error = failing_job(env, executor)
    text = str(error)
    method = "flat_map" if kind == "flat_map" else "process_element"
    assert error.operator == "five op", text
    assert f"{method}() must return an iterable of records" in text, text
    assert "returned int 5 for the input record 0" in text, text
    assert "'int' object is not iterable" not in text
