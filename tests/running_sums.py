"""The recovery tests' keyed running sums: :class:`RunningTotal` (records ``{k, v}`` in,
``{k, v, total}`` out, keyed by :func:`key_of`), and the failure-free output of a running
sum with key ``v // chunk``: one record ``{k, v, sum}`` per value, with the running sum of
its key up to ``v``."""

from __future__ import annotations

import lockgate as lg


class RunningTotal(lg.KeyedProcessFunction):
    """Emits each record with the running total of its key's ``v`` values."""

    def open(self, ctx):
        self.total = ctx.get_state(lg.ValueStateDescriptor("total", default=0))

    def process_element(self, value, ctx):
        total = self.total.value() + value["v"]
        self.total.update(total)
        yield {"k": value["k"], "v": value["v"], "total": total}


def key_of(record):
    return record["k"]


def expected_running_sums(n: int, chunk: int) -> list[dict[str, int]]:
    """The records the running sum over ``range(n)`` emits, ordered by value."""
    sums: dict[int, int] = {}
    out = []
    for v in range(n):
        k = v // chunk
        sums[k] = sums.get(k, 0) + v
        out.append({"k": k, "v": v, "sum": sums[k]})
    return out
