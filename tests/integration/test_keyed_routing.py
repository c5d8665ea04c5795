"""key_by routes every key to exactly one subtask, the one the key-group formula predicts
(DESIGN §3), whether keys come from a function or a column, from rows or Arrow batches; and
keyed state then counts words exactly. On the local executor and on Spark (local[2])."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

import pyarrow as pa
import pytest

import lockgate as lg
from conftest import on_executors
from lockgate.connectors import SequenceSource


class WhereIsMyKey(lg.KeyedProcessFunction):
    """Emits (key, subtask index, parallelism, max parallelism) for each record."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.where = (ctx.subtask_index, ctx.parallelism, ctx.max_parallelism)

    def process_element(self, value, ctx):
        yield (ctx.current_key, *self.where)


class WordCount(lg.KeyedProcessFunction):
    """Emits (word, running count) per record, with the count in ValueState."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_state(lg.ValueStateDescriptor("count", default=0))

    def process_element(self, value, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        yield (ctx.current_key, n)


def assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, max_parallelism) -> None:
    where: dict[object, set[int]] = defaultdict(set)
    for key, subtask, p, mp in out:
        assert (p, mp) == (parallelism, max_parallelism)
        where[key].add(subtask)
    for key, subtasks in where.items():
        assert len(subtasks) == 1, f"key {key!r} reached subtasks {sorted(subtasks)}"
        [subtask] = subtasks
        predicted = lg.subtask_for_key_group(
            lg.key_group_for(key, max_parallelism), parallelism, max_parallelism
        )
        assert subtask == predicted, f"key {key!r} at subtask {subtask}, formula says {predicted}"
    used = {next(iter(s)) for s in where.values()}
    assert used == set(range(parallelism)), "enough keys to reach every subtask"


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 4), indirect=["executor"])
def test_every_string_key_of_a_key_selector_function_reaches_exactly_one_subtask(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism, max_parallelism=128)
    words = [f"user-{i % 97}" for i in range(3000)]
    out = (
        env.from_collection(words)
        .key_by(lambda w: w)
        .process(WhereIsMyKey())
        .execute_and_collect(executor=executor)
    )
    assert len(out) == 3000
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 128)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 4), indirect=["executor"])
def test_every_int_key_reaches_exactly_one_subtask_at_a_small_max_parallelism(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism, max_parallelism=8)
    out = (
        env.from_source(SequenceSource(0, 5000))
        .key_by(lambda x: x % 50)
        .process(WhereIsMyKey())
        .execute_and_collect(executor=executor)
    )
    assert len(out) == 5000
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 8)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 4), indirect=["executor"])
def test_a_column_key_on_dict_records_routes_like_the_formula(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    records = [{"k": f"k{i % 61}", "v": i} for i in range(2000)]
    out = (
        env.from_collection(records)
        .key_by("k")
        .process(WhereIsMyKey())
        .execute_and_collect(executor=executor)
    )
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 128)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 4), indirect=["executor"])
def test_a_column_key_on_arrow_batches_routes_like_the_formula(
    make_env, executor, parallelism
) -> None:
    def to_columns(batch: pa.RecordBatch) -> pa.RecordBatch:
        values = batch.column(0).to_pylist()
        return pa.RecordBatch.from_pydict({"k": [f"k{v % 61}" for v in values], "v": values})

    env = make_env(parallelism=parallelism)
    out = (
        env.from_source(SequenceSource(0, 4000))
        .map_batches(to_columns)
        .key_by("k")
        .process(WhereIsMyKey())
        .execute_and_collect(executor=executor)
    )
    assert len(out) == 4000
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 128)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_a_composite_column_key_is_a_tuple_and_routes_like_the_formula(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    records = [{"a": i % 4, "b": f"x{i % 3}", "v": i} for i in range(600)]
    out = (
        env.from_collection(records)
        .key_by(["a", "b"])
        .process(WhereIsMyKey())
        .execute_and_collect(executor=executor)
    )
    assert {k for k, *_ in out} == {(a, f"x{b}") for a in range(4) for b in range(3)}
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 128)


def test_a_key_column_missing_from_the_records_fails_the_job_naming_the_column(
    make_env, executor
) -> None:
    env = make_env(parallelism=2)
    env.from_collection([{"a": 1}, {"a": 2}]).key_by("nope").process(WhereIsMyKey()).sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("missing key column", executor=executor)
    assert "nope" in str(err.value)


def _words(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(1500)] + ["", "straße", "日本", "naïve", "🦀"]
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]  # Zipf-like: some keys are hot
    return rng.choices(vocabulary, weights=weights, k=n)


WORDS = _words(100_000)
EXPECTED = Counter(WORDS)


def _final_counts(out) -> dict[str, int]:
    final: dict[str, int] = {}
    seen: dict[str, list[int]] = defaultdict(list)
    for word, n in out:
        seen[word].append(n)
        final[word] = max(final.get(word, 0), n)
    for word, counts in seen.items():
        assert counts == list(range(1, len(counts) + 1)), f"counts of {word!r} out of order"
    return final


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(1, 2, 4), indirect=["executor"])
@pytest.mark.parametrize("key", ["lambda", "column", "column on arrow batches"])
def test_a_word_count_over_100000_words_equals_collections_counter(
    make_env, executor, parallelism, key
) -> None:
    env = make_env(parallelism=parallelism)
    stream = env.from_collection([{"word": w} for w in WORDS])
    if key == "lambda":
        keyed = stream.key_by(lambda r: r["word"])
    elif key == "column":
        keyed = stream.key_by("word")
    else:
        keyed = stream.map_batches(lambda b: b).key_by("word")
    out = keyed.process(WordCount(), name="count").execute_and_collect(executor=executor)
    assert len(out) == len(WORDS)
    assert _final_counts(out) == dict(EXPECTED)


def test_keyed_state_with_a_mutable_default_is_not_shared_between_keys_in_a_job(
    make_env, executor
) -> None:
    class Collect(lg.KeyedProcessFunction):
        def open(self, ctx):
            self.items = ctx.get_state(lg.ValueStateDescriptor("items", default=[]))

        def process_element(self, value, ctx):
            items = self.items.value()
            items.append(value["v"])
            self.items.update(items)
            yield (ctx.current_key, list(items))

    env = make_env(parallelism=2)
    records = [{"k": k, "v": i} for i in range(5) for k in ("a", "b", "c")]
    out = (
        env.from_collection(records)
        .key_by("k")
        .process(Collect())
        .execute_and_collect(executor=executor)
    )
    last = {}
    for k, items in out:
        last[k] = items
    # two source subtasks feed each key, so the order within a key's list is theirs to choose
    assert {k: sorted(items) for k, items in last.items()} == {
        "a": [0, 1, 2, 3, 4],
        "b": [0, 1, 2, 3, 4],
        "c": [0, 1, 2, 3, 4],
    }


def test_current_key_is_the_key_of_the_record_being_processed(make_env, executor) -> None:
    env = make_env(parallelism=2)
    out = (
        env.from_source(SequenceSource(0, 300))
        .key_by(lambda x: x % 10)
        .process(lambda v, ctx: [(ctx.current_key, v)])
        .execute_and_collect(executor=executor)
    )
    assert all(k == v % 10 for k, v in out) and len(out) == 300


def test_a_key_selector_returning_an_unhashable_key_fails_the_job_with_the_fix(
    make_env, executor
) -> None:
    class Custom:
        pass

    env = make_env(parallelism=2)
    env.from_collection([1, 2]).key_by(lambda x: Custom()).process(lambda v, c: [v]).sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("unhashable keys", executor=executor)
    assert "cannot hash stably" in str(err.value)
    assert "/None)" not in str(err.value), "the subtask is named without a placeholder"
    assert isinstance(err.value.__cause__, lg.UnsupportedKeyError), repr(err.value.__cause__)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_an_unhashable_key_fails_the_job_at_every_parallelism(make_env, parallelism) -> None:
    """Keyed state lives in key groups whatever the parallelism (DESIGN §3: restoring at another
    parallelism reassigns key groups), so a key without a stable hash is refused at
    parallelism 1 too, not only once the job is scaled out."""

    class Custom:
        pass

    env = make_env(parallelism=parallelism)
    env.from_collection([1, 2]).key_by(lambda x: Custom()).process(lambda v, c: [v]).sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("unhashable keys", executor=lg.LocalExecutor())
    assert "cannot hash stably" in str(err.value)


def test_timers_outside_a_keyed_stream_are_refused_with_how_to_key_it(make_env, executor) -> None:
    class WantsTimer(lg.ProcessFunction):
        def process_element(self, value, ctx):
            ctx.timer_service()
            yield value

    env = make_env(parallelism=1)
    env.from_collection([1]).process(WantsTimer(), name="timed").sink_to(
        lg.connectors.DiscardingSink()
    )
    with pytest.raises(lg.JobFailedError) as err:
        env.execute("timers", executor=executor)
    assert "timed" in str(err.value) and "key_by" in str(err.value)


@pytest.mark.parametrize(
    ("executor", "parallelism", "keyed_parallelism"),
    [
        pytest.param("local", 4, 3, id="local-p4-to-p3"),
        pytest.param("local", 1, 2, id="local-p1-to-p2"),
        pytest.param("spark", 1, 2, id="spark-p1-to-p2", marks=pytest.mark.spark),
        pytest.param("spark", 2, 1, id="spark-p2-to-p1", marks=pytest.mark.spark),
    ],
    indirect=["executor"],
)
def test_keys_route_by_the_formula_when_the_keyed_operator_has_another_parallelism(
    make_env, executor, parallelism, keyed_parallelism
) -> None:
    env = make_env(parallelism=parallelism)
    out = (
        env.from_source(SequenceSource(0, 3000))
        .key_by(lambda x: f"k{x % 71}")
        .process(WhereIsMyKey())
        .set_parallelism(keyed_parallelism)
        .execute_and_collect(executor=executor)
    )
    assert len(out) == 3000
    assert_one_subtask_per_key_as_the_formula_predicts(out, keyed_parallelism, 128)


@pytest.mark.parametrize(("executor", "parallelism"), on_executors(2, 3), indirect=["executor"])
def test_keys_route_by_the_keyed_operators_own_max_parallelism(
    make_env, executor, parallelism
) -> None:
    env = make_env(parallelism=parallelism, max_parallelism=128)
    out = (
        env.from_source(SequenceSource(0, 3000))
        .key_by(lambda x: x % 40)
        .process(WhereIsMyKey())
        .set_max_parallelism(5)
        .execute_and_collect(executor=executor)
    )
    assert_one_subtask_per_key_as_the_formula_predicts(out, parallelism, 5)
