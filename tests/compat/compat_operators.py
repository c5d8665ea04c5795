"""The third job of the compatibility suite: broadcast state, rolling aggregates and
operator list state (their contents in the savepoint). One source subtask feeds
everything through FIFO channels, so every output is the same on every run; the
expected output is the job run straight through (``straight_run``). Uids, state and
types never change (see ``compat_job``).

* ``numbering`` (parallelism 1): numbers each record, its counter in operator list state;
* ``rolling``: per key, the running sum and maximum of ``v`` (``key_by("k").sum("v")``,
  then ``.max("n")``);
* ``rules``: every 250th value is a rule, broadcast to a keyed broadcast function that
  keeps the rules in broadcast state and, per rule, emits the rules it knew already
  (those before the savepoint come from the restored state), and counts each key's
  records in typed keyed state."""

from __future__ import annotations

from typing import Any

import compat_job

import lockgate as lg
from lockgate.api.functions import KeyedBroadcastProcessFunction
from lockgate.connectors import CollectSink, SequenceSource

N = 6_000
KEYS = 5
RULE_EVERY = 250
OUTPUTS = ("numbered-out", "rolling-out", "rules-out")
RULES = lg.MapStateDescriptor("rules", key_type=int, type=int)
SEEN = lg.ValueStateDescriptor("seen", default=0, type=int)


def shape(v: int) -> dict[str, int]:
    return {"v": v, "k": v % KEYS}


class Numbering(lg.MapFunction):
    """Each record with ``n``: how many came before it (operator list state)."""

    def open(self, ctx: lg.RuntimeContext) -> None:
        self.count = ctx.get_operator_list_state(lg.ListStateDescriptor("count"))
        items = self.count.get()
        self.n = int(items[0]) if items else 0

    def map(self, r: dict[str, int]) -> dict[str, int]:
        out = {**r, "n": self.n}
        self.n += 1
        self.count.update([self.n])
        return out


class Rules(KeyedBroadcastProcessFunction):
    def open(self, ctx: lg.RuntimeContext) -> None:
        self.seen = ctx.get_state(SEEN)

    def process_element(self, r: dict[str, int], ctx: Any) -> Any:
        self.seen.update(self.seen.value() + 1)
        if r["v"] % 1_000 == 1:  # now and then, what this key has seen so far
            yield {"k": r["k"], "v": r["v"], "seen": self.seen.value()}

    def process_broadcast_element(self, rule: dict[str, int], ctx: Any) -> Any:
        rules = ctx.get_broadcast_state(RULES)
        known = sorted(k for k, _ in rules.items())
        rules.put(rule["v"], rule["v"] // RULE_EVERY)
        yield {"rule": rule["v"], "known": known}


def build(env: lg.StreamEnvironment, source: lg.connectors.Source) -> None:
    numbers = env.from_source(source, name="numbers").uid("numbers").set_parallelism(1)
    rows = numbers.map(shape).uid("shape").set_parallelism(1)
    numbered = rows.map(Numbering()).uid("numbering").set_parallelism(1)
    numbered.sink_to(CollectSink()).uid("numbered-out").set_parallelism(1)
    (
        numbered.key_by("k")
        .sum("v")
        .uid("rolling-sum")
        .key_by("k")
        .max("n")
        .uid("rolling-max")
        .sink_to(CollectSink())
        .uid("rolling-out")
    )
    rules = (
        rows.filter(lambda r: r["v"] % RULE_EVERY == 0)
        .uid("rule?")
        .set_parallelism(1)
        .broadcast(RULES)
    )
    data = rows.filter(lambda r: r["v"] % RULE_EVERY != 0).uid("data?").set_parallelism(1)
    data.key_by("k").connect(rules).process(Rules()).uid("rules").sink_to(CollectSink()).uid(
        "rules-out"
    )


environment = compat_job.environment


def bounded_source() -> SequenceSource:
    return SequenceSource(0, N, batch_size=100)


def outputs(result: lg.JobExecutionResult) -> dict[str, list[Any]]:
    return compat_job.collected(result, OUTPUTS)


def straight_run(executor: Any = None) -> dict[str, list[Any]]:
    """The job's output from start to end, without a savepoint."""
    env = environment(executor or lg.LocalExecutor())
    build(env, bounded_source())
    return outputs(env.execute("compat operators"))
