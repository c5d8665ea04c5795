"""End-to-end semantics of the stateless operators, partitionings, side outputs and the job
result, on the LocalExecutor and on Spark (local[2])."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lockgate as lg
from conftest import FileProbe, on_executors, wait_until
from lockgate.connectors import DiscardingSink, SequenceSource


class Point:
    """A record type Arrow cannot hold; it must flow untouched through row operators."""

    def __init__(self, x: int, label: str) -> None:
        self.x = x
        self.label = label

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (other.x, other.label) == (self.x, self.label)

    def __hash__(self) -> int:
        return hash((self.x, self.label))

    def __repr__(self) -> str:
        return f"Point({self.x}, {self.label!r})"


class SubtaskTagger(lg.ProcessFunction):
    """Emits (subtask index, value) for each value."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.subtask = ctx.subtask_index

    def process_element(self, value, ctx):
        yield (self.subtask, value)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2, 3), indirect=["executor"])
def test_map_applies_the_function_to_every_record(make_env, executor, parallelism) -> None:
    env = make_env(parallelism=parallelism)
    out = (
        env.from_source(SequenceSource(0, 1000))
        .map(lambda x: x * 2)
        .execute_and_collect(executor=executor)
    )
    assert sorted(out) == [2 * i for i in range(1000)]


def test_map_function_objects_are_opened_and_their_map_method_called(make_env, executor) -> None:
    class AddOffset(lg.MapFunction):
        def open(self, ctx):
            self.offset = 1000 * (ctx.subtask_index + 1)

        def map(self, value):
            return value + self.offset

    env = make_env(parallelism=1)
    out = env.from_collection([1, 2, 3]).map(AddOffset()).execute_and_collect(executor=executor)
    assert out == [1001, 1002, 1003]


def test_filter_keeps_exactly_the_records_whose_predicate_is_true(make_env, executor) -> None:
    env = make_env(parallelism=2)
    out = (
        env.from_source(SequenceSource(0, 500))
        .filter(lambda x: x % 7 == 0)
        .execute_and_collect(executor=executor)
    )
    assert sorted(out) == [i for i in range(500) if i % 7 == 0]


def test_filter_function_objects_use_their_filter_method(make_env, executor) -> None:
    class Odd(lg.FilterFunction):
        def filter(self, value):
            return value % 2 == 1

    env = make_env(parallelism=1)
    assert env.from_collection([1, 2, 3, 4]).filter(Odd()).execute_and_collect(
        executor=executor
    ) == [1, 3]


def test_an_expression_filter_runs_on_whole_batches_of_dict_records(make_env, executor) -> None:
    env = make_env(parallelism=2)
    records = [{"name": f"r{i}", "value": i} for i in range(20)]
    out = (
        env.from_collection(records)
        .filter(pc.field("value") > 5, name="gt5")
        .execute_and_collect(executor=executor)
    )
    assert sorted(out, key=lambda r: r["value"]) == records[6:]


def test_an_expression_filter_on_bare_values_uses_the_value_column(make_env, executor) -> None:
    env = make_env(parallelism=1)
    out = (
        env.from_source(SequenceSource(0, 20))
        .filter(pc.field("value") > 5)
        .execute_and_collect(executor=executor)
    )
    assert out == list(range(6, 20))


def test_an_expression_filter_is_stateless_in_snapshots_M_T4(make_env, executor, tmp_path) -> None:
    # an expression filter has no function and no operator state: a checkpoint or
    # savepoint must still snapshot it (it once failed with an AttributeError)
    probe = FileProbe(tmp_path / "probe")

    def seen(batch: pa.RecordBatch) -> pa.RecordBatch:
        probe.add(batch.num_rows)
        return batch

    env = make_env(parallelism=2)
    env.enable_checkpointing(600_000)
    env.checkpoint_config.storage = str(tmp_path / "chk")
    (
        env.from_source(SequenceSource(0, 100, bounded=False), name="n")
        .uid("n")
        .filter(pc.field("value") > 5, name="gt5")
        .uid("gt5")
        .map_batches(seen, name="seen")
        .uid("seen")
        .sink_to(DiscardingSink())
        .uid("sink")
    )
    client = env.execute_async("expression-filter-snapshot", executor=executor)
    try:
        wait_until(
            lambda: sum(probe.items) == 94, "every value above 5 passed the filter", timeout_s=60
        )
        location = client.trigger_savepoint(str(tmp_path / "sp"), timeout=60)
        assert client.running
    finally:
        client.cancel()
    assert client.wait(60).status is lg.JobStatus.CANCELED
    assert "gt5" not in lg.savepoint.read(location, allow_pickle=True).operators()


def test_flat_map_emits_zero_or_more_records_per_record_in_order(make_env, executor) -> None:
    env = make_env(parallelism=1)
    out = (
        env.from_collection(["a b", "", "c d e"])
        .flat_map(str.split)
        .execute_and_collect(executor=executor)
    )
    assert out == ["a", "b", "c", "d", "e"]


def test_flat_map_returning_none_emits_nothing(make_env, executor) -> None:
    env = make_env(parallelism=1)
    out = (
        env.from_collection([1, 2, 3])
        .flat_map(lambda x: [x] if x != 2 else None)
        .execute_and_collect(executor=executor)
    )
    assert out == [1, 3]


def test_map_batches_sees_whole_arrow_batches_and_keeps_bare_values_bare(
    make_env, executor
) -> None:
    env = make_env(parallelism=1)

    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        assert isinstance(batch, pa.RecordBatch)
        return pa.RecordBatch.from_arrays([pc.multiply(batch.column(0), 2)], names=["value"])

    out = (
        env.from_source(SequenceSource(0, 100))
        .map_batches(double)
        .execute_and_collect(executor=executor)
    )
    assert out == [2 * i for i in range(100)]


def test_map_batches_may_return_a_table_or_none(make_env, executor) -> None:
    env = make_env(parallelism=1)
    records = [{"k": i % 3, "v": i} for i in range(9)]

    def to_table(batch):
        return pa.Table.from_batches([batch]).filter(pc.field("k") == 0)

    out = env.from_collection(records).map_batches(to_table).execute_and_collect(executor=executor)
    assert out == [r for r in records if r["k"] == 0]
    env2 = make_env(parallelism=1)
    assert (
        env2.from_collection(records)
        .map_batches(lambda b: None)
        .execute_and_collect(executor=executor)
        == []
    )


def test_map_batches_returning_something_else_fails_the_job_naming_the_operator(
    make_env, executor
) -> None:
    env = make_env(parallelism=1)
    env.from_collection([1, 2]).map_batches(lambda b: [1], name="bad batches").sink_to(
        DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("bad map_batches", executor=executor)
    assert "bad batches" in str(err.value)
    assert "RecordBatch" in str(err.value)


def test_union_carries_every_record_of_every_input(make_env, executor) -> None:
    env = make_env(parallelism=2)
    a = env.from_collection([("a", i) for i in range(50)])
    b = env.from_source(SequenceSource(0, 30)).map(lambda x: ("b", x))
    c = env.from_collection([("c", 0)])
    out = a.union(b, c).execute_and_collect(executor=executor)
    assert Counter(out) == Counter(
        [("a", i) for i in range(50)] + [("b", i) for i in range(30)] + [("c", 0)]
    )


def test_union_keeps_the_order_of_each_input_channel(make_env, executor) -> None:
    env = make_env(parallelism=1)
    a = env.from_source(SequenceSource(0, 300, batch_size=7)).map(lambda x: ("a", x))
    b = env.from_source(SequenceSource(0, 300, batch_size=5)).map(lambda x: ("b", x))
    out = a.union(b).execute_and_collect(executor=executor)
    assert [x for tag, x in out if tag == "a"] == list(range(300))
    assert [x for tag, x in out if tag == "b"] == list(range(300))


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_rebalance_spreads_records_over_every_downstream_subtask(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    src = env.from_source(SequenceSource(0, 300, batch_size=10)).set_parallelism(1)
    out = src.rebalance().process(SubtaskTagger()).execute_and_collect(executor=executor)
    assert sorted(v for _, v in out) == list(range(300))
    per_subtask = Counter(s for s, _ in out)
    assert set(per_subtask) == set(range(parallelism)), per_subtask


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_broadcast_sends_every_record_to_every_downstream_subtask(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    src = env.from_collection(list(range(10))).set_parallelism(1)
    out = src.broadcast().process(SubtaskTagger()).execute_and_collect(executor=executor)
    for s in range(parallelism):
        assert sorted(v for sub, v in out if sub == s) == list(range(10))
    assert len(out) == 10 * parallelism


def test_forward_keeps_records_in_their_subtask(make_env, executor) -> None:
    env = make_env(parallelism=2)
    first = env.from_source(SequenceSource(0, 100)).process(SubtaskTagger())
    out = (
        first.forward()
        .map(lambda t: t)
        .disable_chaining()
        .process(_PairTagger())
        .execute_and_collect(executor=executor)
    )
    assert all(before == after for before, after, _ in out)
    assert len(out) == 100


class _PairTagger(lg.ProcessFunction):
    def open(self, ctx):
        self.subtask = ctx.subtask_index

    def process_element(self, value, ctx):
        yield (value[0], self.subtask, value[1])


def test_process_function_yields_outputs_and_emits_to_side_outputs(make_env, executor) -> None:
    small = lg.OutputTag("small")

    class Route(lg.ProcessFunction):
        def process_element(self, value, ctx):
            if value < 10:
                ctx.output(small, value)
            else:
                yield value
                yield -value

    env = make_env(parallelism=2)
    main = env.from_source(SequenceSource(0, 20)).process(Route(), name="route")
    side = main.get_side_output(small).map(lambda x: ("side", x))
    out = main.map(lambda x: ("main", x)).union(side).execute_and_collect(executor=executor)
    assert sorted(x for t, x in out if t == "side") == list(range(10))
    assert sorted(x for t, x in out if t == "main") == sorted(
        [v for i in range(10, 20) for v in (i, -i)]
    )


def test_a_plain_callable_works_as_a_process_function(make_env, executor) -> None:
    env = make_env(parallelism=1)
    out = (
        env.from_collection([1, 2])
        .process(lambda v, ctx: [v, v * 10])
        .execute_and_collect(executor=executor)
    )
    assert out == [1, 10, 2, 20]


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2), indirect=["executor"])
def test_arbitrary_python_objects_flow_through_map_filter_and_key_by(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    points = [Point(i, f"p{i}") for i in range(200)]

    class Tally(lg.KeyedProcessFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(lg.ValueStateDescriptor("seen", default=0))

        def process_element(self, value, ctx):
            n = self.seen.value() + 1
            self.seen.update(n)
            yield (ctx.current_key, n, value)

    out = (
        env.from_collection(points)
        .map(lambda p: Point(p.x, p.label.upper()))
        .filter(lambda p: p.x % 2 == 0)
        .key_by(lambda p: p.x % 5)
        .process(Tally())
        .execute_and_collect(executor=executor)
    )
    assert sorted((p for _, _, p in out), key=lambda p: p.x) == [
        Point(i, f"P{i}") for i in range(0, 200, 2)
    ]
    assert all(isinstance(p, Point) for _, _, p in out)
    assert all(key == p.x % 5 for key, _, p in out)
    final = Counter(key for key, _, _ in out)
    assert {k: max(n for kk, n, _ in out if kk == k) for k in final} == dict(final)


def test_objects_arrow_cannot_hold_fail_a_columnar_operator_with_its_name(
    make_env, executor
) -> None:
    env = make_env(parallelism=1)
    env.from_collection([Point(1, "a")]).map_batches(lambda b: b, name="vectorized").sink_to(
        DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("opaque to arrow", executor=executor)
    assert "vectorized" in str(err.value)
    assert "Point" in str(err.value)


def test_execute_returns_a_finished_result_with_record_counts_per_operator(
    make_env, executor
) -> None:
    env = make_env(parallelism=2)
    (
        env.from_source(SequenceSource(0, 1000), name="numbers")
        .filter(lambda x: x % 2 == 0, name="evens")
        .flat_map(lambda x: [x, x], name="twice")
        .sink_to(DiscardingSink(), name="sink")
    )
    result = env.execute("counted", executor=executor)
    assert result.status is lg.JobStatus.FINISHED
    assert result.job_name == "counted"
    assert result.duration_ms >= 0
    assert result.records_out("numbers") == 1000
    assert result.records_in("evens") == 1000 and result.records_out("evens") == 500
    assert result.records_in("twice") == 500 and result.records_out("twice") == 1000
    assert result.records_in("sink") == 1000
    assert result.record_counts["evens"] == {"records_in": 1000, "records_out": 500}
    assert set(result.record_counts) == {"numbers", "evens", "twice", "sink"}


def test_record_counts_of_operators_sharing_a_name_are_kept_apart_by_uid(
    make_env, executor
) -> None:
    env = make_env(parallelism=1)
    s = env.from_collection([1, 2, 3])
    s.map(lambda x: x).uid("first").sink_to(DiscardingSink()).uid("sink1")
    s.filter(lambda x: x > 1).uid("second").sink_to(DiscardingSink()).uid("sink2")
    result = env.execute("same names", executor=executor)
    assert result.records_out("first") == 3
    assert result.records_out("second") == 2
    with pytest.raises(KeyError, match="no operator named"):
        result.records_out("missing")


def test_records_emitted_to_a_side_output_are_not_counted_as_main_output(
    make_env, executor
) -> None:
    tag = lg.OutputTag("odd")

    def split(value, ctx):
        if value % 2:
            ctx.output(tag, value)
            return None
        return [value]

    env = make_env(parallelism=1)
    main = env.from_source(SequenceSource(0, 10)).process(split, name="split")
    main.sink_to(DiscardingSink(), name="even sink")
    main.get_side_output(tag).sink_to(DiscardingSink(), name="odd sink")
    result = env.execute("side counts", executor=executor)
    assert result.records_out("split") == 5
    assert result.operators["split"].side_out == {"odd": 5}
    assert result.records_in("odd sink") == 5 and result.records_in("even sink") == 5


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_the_runtime_context_in_open_describes_the_subtask(make_env, executor, parallelism) -> None:
    class Describe(lg.ProcessFunction):
        def open(self, ctx: lg.RuntimeContext) -> None:
            self.info = (
                ctx.subtask_index,
                ctx.parallelism,
                ctx.max_parallelism,
                ctx.attempt_number,
                ctx.task_name,
            )

        def process_element(self, value, ctx):
            yield self.info

    env = make_env(parallelism=parallelism, max_parallelism=64)
    out = (
        env.from_source(SequenceSource(0, 300), name="numbers")
        .process(Describe(), name="describe")
        .execute_and_collect(executor=executor)
    )
    infos = set(out)
    assert {i[0] for i in infos} == set(range(parallelism))
    for _subtask, p, max_parallelism, attempt, task_name in infos:
        assert (p, max_parallelism) == (parallelism, 64)
        assert attempt == 0, "the first attempt of every job is attempt 0"
        assert task_name == "numbers -> describe", "the task is named after its chain"


def test_every_subtask_gets_its_own_copy_of_a_function_object(make_env, executor) -> None:
    class Remember(lg.ProcessFunction):
        def __init__(self):
            self.seen = []

        def open(self, ctx):
            self.subtask = ctx.subtask_index

        def process_element(self, value, ctx):
            self.seen.append(value)
            yield (self.subtask, len(self.seen))

    env = make_env(parallelism=2)
    out = (
        env.from_source(SequenceSource(0, 100))
        .process(Remember())
        .execute_and_collect(executor=executor)
    )
    for s in (0, 1):
        lengths = [n for sub, n in out if sub == s]
        assert lengths == list(range(1, len(lengths) + 1)), "no state leaks between subtasks"


def test_close_is_called_on_function_objects_after_the_last_record(
    make_env, file_probe, executor
) -> None:
    probe = file_probe

    class Closing(lg.MapFunction):
        def __init__(self, probe):
            self.probe = probe

        def open(self, ctx):
            self.n = 0

        def map(self, value):
            self.n += 1
            return value

        def close(self):
            self.probe.add(("closed", self.n))

    env = make_env(parallelism=2)
    env.from_source(SequenceSource(0, 50)).map(Closing(probe)).sink_to(DiscardingSink())
    env.execute("closing", executor=executor)
    assert sorted(probe.items) == [("closed", 25), ("closed", 25)]


def test_execute_and_collect_limit_cuts_the_returned_records(make_env, executor) -> None:
    env = make_env(parallelism=1)
    assert env.from_source(SequenceSource(0, 100)).execute_and_collect(
        executor=executor, limit=5
    ) == [0, 1, 2, 3, 4]


def test_execute_and_collect_leaves_the_environment_reusable(make_env, executor) -> None:
    env = make_env(parallelism=1)
    s = env.from_collection([1, 2])
    assert s.execute_and_collect(executor=executor) == [1, 2]
    assert s.map(lambda x: x + 1).execute_and_collect(executor=executor) == [2, 3]


def test_print_prefixes_each_line_with_the_prefix_and_subtask_number(make_env, capsys) -> None:
    """Local only: on Spark the lines go to the Python workers' stdout."""
    env = make_env(parallelism=2)
    env.from_collection(["a", "b", "c", "d"]).print("out")
    env.execute("print", executor=lg.LocalExecutor())
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == ["out:1> a", "out:1> b", "out:2> c", "out:2> d"]


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_an_empty_source_finishes_the_job_with_no_records(make_env, executor, parallelism) -> None:
    env = make_env(parallelism=parallelism)
    assert (
        env.from_source(SequenceSource(5, 5))
        .map(lambda x: x)
        .execute_and_collect(executor=executor)
        == []
    )
    env2 = make_env(parallelism=parallelism)
    assert (
        env2.from_collection([])
        .key_by(lambda x: x)
        .process(lambda v, c: [v])
        .execute_and_collect(executor=executor)
        == []
    )


def test_a_union_of_a_stream_with_itself_delivers_every_record_twice(make_env, executor) -> None:
    env = make_env(parallelism=2)
    s = env.from_collection([1, 2, 3])
    assert sorted(s.union(s).execute_and_collect(executor=executor)) == [1, 1, 2, 2, 3, 3]


def test_the_executor_given_to_the_environment_runs_its_jobs(make_env) -> None:
    executor = lg.LocalExecutor()
    env = lg.StreamEnvironment(parallelism=2, executor=executor)
    env.from_source(SequenceSource(0, 10)).rebalance().sink_to(DiscardingSink())
    env.execute("own executor")
    assert len(executor.last_channels) == 4


@pytest.mark.spark
def test_a_spark_executor_given_to_the_environment_runs_its_jobs_in_other_processes(
    spark_executor,
) -> None:
    env = lg.StreamEnvironment(parallelism=2, executor=spark_executor)
    pids = env.from_source(SequenceSource(0, 10)).map(lambda x: os.getpid()).execute_and_collect()
    assert len(pids) == 10
    assert os.getpid() not in pids, "the records were made by Spark's Python workers"
    assert len(set(pids)) == 2, "one Python worker per slot"
