"""The same job gives the same result on the LocalExecutor and on Spark (DESIGN §1: everything
above the executor is identical): outputs, record counts, files written, and how a failure is
reported (error type, reason, operator, subtask, the user's exception as ``__cause__``)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lockgate as lg
from lockgate.connectors import CollectionSource, DiscardingSink, FileSink, SequenceSource

pytestmark = pytest.mark.spark

Build = Callable[[lg.StreamEnvironment, Path], Any]


class RunningSum(lg.KeyedProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        t = self.total.value() + value["v"]
        self.total.update(t)
        yield {"k": ctx.current_key, "total": t}


def running_sums(env: lg.StreamEnvironment, tmp: Path) -> Any:
    return (
        env.from_source(SequenceSource(0, 20_000), name="numbers")
        .map(lambda x: {"k": x % 13, "v": x}, name="to rows")
        .key_by("k")
        .process(RunningSum(), name="sums")
    )


def stateless_mix(env: lg.StreamEnvironment, tmp: Path) -> Any:
    odd = lg.OutputTag("odd")

    def route(value, ctx):
        if value % 2:
            ctx.output(odd, value)
            return None
        return [value, -value]

    main = env.from_source(SequenceSource(0, 3000, batch_size=97)).process(route, name="route")
    side = main.get_side_output(odd).filter(lambda x: x % 3 == 0).map(lambda x: ("odd", x))
    words = env.from_collection(["a b", "c", "", "d e f"] * 50).flat_map(str.split)
    return main.map(lambda x: ("even", x)).union(side, words.map(lambda w: ("word", w)))


def arrow_batches(env: lg.StreamEnvironment, tmp: Path) -> Any:
    def to_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = batch.column(0).to_pylist()
        return pa.RecordBatch.from_pydict({"k": [f"k{v % 17}" for v in values], "v": values})

    return (
        env.from_source(SequenceSource(0, 10_000))
        .map_batches(to_columns)
        .key_by("k")
        .process(lambda r, ctx: [(ctx.current_key, r["v"])])
    )


PIPELINES = {
    "running sums": running_sums,
    "stateless mix": stateless_mix,
    "arrow batches": arrow_batches,
}


def _canonical(name: str, records: list[Any]) -> Any:
    if name == "running sums":
        # the intermediate totals depend on how two source subtasks interleave; the number
        # of records and the final total of each key do not
        finals: dict[int, int] = {}
        for r in records:
            finals[r["k"]] = max(finals.get(r["k"], 0), r["total"])
        return len(records), finals
    return Counter(
        json.dumps(r, sort_keys=True) if isinstance(r, dict) else repr(r) for r in records
    )


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("name", list(PIPELINES))
def test_a_pipeline_gives_the_same_records_and_counts_on_both_executors(
    spark_executor, tmp_path, name, parallelism
) -> None:
    outcomes = {}
    for label, executor in (("local", lg.LocalExecutor()), ("spark", spark_executor)):
        env = lg.StreamEnvironment(parallelism=parallelism)
        stream = PIPELINES[name](env, tmp_path)
        stream.sink_to(DiscardingSink(), name="counted")
        result = env.execute(f"{name} ({label})", executor=executor)
        env2 = lg.StreamEnvironment(parallelism=parallelism)
        records = PIPELINES[name](env2, tmp_path).execute_and_collect(executor=executor)
        outcomes[label] = (result.record_counts, _canonical(name, records), len(records))
    local, spark = outcomes["local"], outcomes["spark"]
    assert spark[0] == local[0], "record counts per operator differ"
    assert spark[1] == local[1], "the records differ"
    assert local[2] > 0


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_file_sink_writes_the_same_part_files_on_both_executors(
    spark_executor, tmp_path, fmt
) -> None:
    records = [{"id": i, "name": f"név-{i}", "score": i / 4} for i in range(200)]
    contents = {}
    for label, executor in (("local", lg.LocalExecutor()), ("spark", spark_executor)):
        out = tmp_path / label
        env = lg.StreamEnvironment(parallelism=2)
        env.from_source(CollectionSource(records, batch_size=16)).sink_to(FileSink(out, format=fmt))
        env.execute(f"files ({label})", executor=executor)
        contents[label] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert list(contents["local"]) == ["part-0-0." + fmt, "part-1-0." + fmt]
    if fmt == "parquet":  # the writer's metadata may differ; compare the tables
        import pyarrow.parquet as pq

        for name in contents["local"]:
            assert (
                pq.read_table(tmp_path / "spark" / name).to_pylist()
                == pq.read_table(tmp_path / "local" / name).to_pylist()
            )
    else:
        assert contents["spark"] == contents["local"]


class BoomError(Exception):
    pass


def fail_in_map(env: lg.StreamEnvironment, tmp: Path) -> None:
    def explode(x):
        if x == 500:
            raise BoomError("boom at 500")
        return x

    env.from_source(SequenceSource(0, 10**12)).map(explode, name="explosive").sink_to(
        DiscardingSink()
    )


def unhashable_key(env: lg.StreamEnvironment, tmp: Path) -> None:
    class Custom:
        pass

    env.from_collection([1]).key_by(lambda x: Custom()).process(
        lambda v, c: [v], name="keyed"
    ).sink_to(DiscardingSink())


def malformed_file(env: lg.StreamEnvironment, tmp: Path) -> None:
    f = tmp / "bad.jsonl"
    f.write_text('{"id": 1}\n{"id": \n')
    env.from_source(lg.connectors.FileSource(f), name="files").sink_to(DiscardingSink())


def bad_key_column(env: lg.StreamEnvironment, tmp: Path) -> None:
    env.from_collection([{"a": 1}, {"a": 2}]).key_by("nope").process(
        lambda v, c: [v], name="keyed"
    ).sink_to(DiscardingSink())


#: name -> (parallelism, job); each job fails in exactly one subtask, so which one is reported
#: does not depend on timing
FAILURES = {
    "user code": (2, fail_in_map),
    "unhashable key": (2, unhashable_key),
    "malformed input": (1, malformed_file),
    "missing key column": (1, bad_key_column),
}


def _headline(error: BaseException) -> str:
    """The first line of the message, without the pid Spark adds to the traceback heading."""
    return _without_reprs(re.sub(r" \(pid \d+\)", "", str(error).splitlines()[0]))


def _without_reprs(text: str) -> str:
    """Object reprs name a memory address (and, for a class pickled by value, another
    qualified name): compare messages without them."""
    return re.sub(r"<\S* object at 0x[0-9a-f]+>", "<object>", text)


@pytest.mark.parametrize("name", list(FAILURES))
def test_a_failure_is_reported_the_same_way_on_both_executors(
    spark_executor, tmp_path, name
) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for label, executor in (("local", lg.LocalExecutor()), ("spark", spark_executor)):
        parallelism, build = FAILURES[name]
        env = lg.StreamEnvironment(parallelism=parallelism)
        build(env, tmp_path)
        with pytest.raises(lg.JobFailedError) as err:
            env.execute("failing", executor=executor)
        e = err.value
        seen[label] = {
            "headline": _headline(e),
            "reason": e.reason,
            "operator": e.operator,
            "subtask": e.subtask,
            "cause": type(e.__cause__).__name__,
            "cause text": _without_reprs(str(e.__cause__)),
        }
    assert seen["spark"] == seen["local"]
