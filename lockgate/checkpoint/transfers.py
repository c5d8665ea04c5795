"""Moving several state files at once between a subtask and its checkpoint storage.

An object store serves one request at a time slowly (its latency, not its bandwidth,
bounds one stream), so uploads and restores of many files run a few at a time, as
Flink's ``state.backend.rocksdb.checkpoint.transfer.thread.num`` does.

Guarantees of :func:`transfer_all`: the results come in the order of the items; at
most ``threads`` items are in progress at once; once an item fails, no item that has
not started starts, the ones running finish, and the first failure (in time) is
raised; later failures are logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)


class _Stopped(Exception):
    """An item that did not start because another one had failed."""


def transfer_all(
    fn: Callable[[T], R], items: Sequence[T], threads: int, name: str = "lockgate-transfer"
) -> list[R]:
    """``[fn(item) for item in items]``, up to ``threads`` at once (see the module)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    failed = threading.Event()
    first: list[BaseException] = []
    lock = threading.Lock()

    def run(item: T) -> R:
        if failed.is_set():
            raise _Stopped()
        try:
            return fn(item)
        except BaseException as e:
            with lock:
                if not first:
                    first.append(e)
            failed.set()
            raise

    with ThreadPoolExecutor(min(threads, len(items)), name) as pool:
        futures = [pool.submit(run, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        if failed.is_set():
            for future in futures:
                future.cancel()
    if not first:
        return [f.result() for f in futures]
    for future in futures:
        if future.cancelled():
            continue
        error = future.exception()
        if error is not None and error is not first[0] and not isinstance(error, _Stopped):
            log.warning(
                "%s: another transfer failed too: %s: %s", name, type(error).__name__, error
            )
    raise first[0]
