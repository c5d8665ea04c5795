"""The recovery tests' keyed running sums: :class:`RunningTotal` (records ``{k, v}`` in,
``{k, v, total}`` out, keyed by :func:`key_of`), :class:`ToRecord` (a value ``v`` to the
record ``{k: v // chunk, v}``), and the failure-free output of a running sum with key
``v // chunk``: one record ``{k, v, sum}`` per value, with the running sum of its key up
to ``v`` (:func:`expected_running_sums`; as ``(k, v, total)`` tuples,
:func:`expected_totals`)."""

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


class ToRecord:
    """A value ``v`` (a sequence number) to the record ``{"k": v // chunk, "v": v}``."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk

    def __call__(self, v):
        v = int(v)
        return {"k": v // self.chunk, "v": v}


def expected_running_sums(n: int, chunk: int) -> list[dict[str, int]]:
    """The records the running sum over ``range(n)`` emits, ordered by value."""
    sums: dict[int, int] = {}
    out = []
    for v in range(n):
        k = v // chunk
        sums[k] = sums.get(k, 0) + v
        out.append({"k": k, "v": v, "sum": sums[k]})
    return out


def expected_totals(n: int, chunk: int) -> list[tuple[int, int, int]]:
    """:func:`expected_running_sums` as ``(k, v, total)`` tuples, ordered by value."""
    return [(r["k"], r["v"], r["sum"]) for r in expected_running_sums(n, chunk)]
