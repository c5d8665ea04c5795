"""The failure-free output of the recovery tests' keyed running sum: key ``v // chunk``,
one record ``{k, v, sum}`` per value, with the running sum of its key up to ``v``."""

from __future__ import annotations


def expected_running_sums(n: int, chunk: int) -> list[dict[str, int]]:
    """The records the running sum over ``range(n)`` emits, ordered by value."""
    sums: dict[int, int] = {}
    out = []
    for v in range(n):
        k = v // chunk
        sums[k] = sums.get(k, 0) + v
        out.append({"k": k, "v": v, "sum": sums[k]})
    return out
