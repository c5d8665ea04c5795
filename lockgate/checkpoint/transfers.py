"""Moving several state files at once between a subtask and its checkpoint storage.

An object store serves one request at a time slowly (its latency, not its bandwidth,
bounds one stream), so uploads and restores of many files run a few at a time, as
Flink's ``state.backend.rocksdb.checkpoint.transfer.thread.num`` does.

Guarantees of :func:`transfer_all`: the results come in the order of the items; at
most ``threads`` items are in progress at once; on the first failure no item that has
not started starts, the ones running finish, and that first failure is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def transfer_all(
    fn: Callable[[T], R], items: Sequence[T], threads: int, name: str = "lockgate-transfer"
) -> list[R]:
    """``[fn(item) for item in items]``, up to ``threads`` at once (see the module)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items)), name) as pool:
        futures = [pool.submit(fn, item) for item in items]
        for future in futures:
            if future.exception() is not None:
                for other in futures:
                    other.cancel()
                break
    for future in futures:
        if not future.cancelled():
            error = future.exception()
            if error is not None:
                raise error
    return [f.result() for f in futures]
