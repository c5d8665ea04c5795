"""moto's S3 server with conditional writes that hold under concurrency.

moto 5's ``PUT`` with ``If-None-Match: *`` (what delta-rs commits a Delta log entry with,
and what AWS S3, MinIO and R2 make atomic) checks that the key is absent, then stores the
object, with nothing holding the two together in its threaded server: two writers of
the same key at the same moment may both pass the check and both get 200, the later
silently replacing the earlier. Two DeltaSink subtasks committing one checkpoint are
exactly two such writers, and a test lost one subtask's whole commit that way.

Run as ``python -m tests.moto_atomic_server -H HOST -p PORT`` (moto.server's arguments):
every write of an object (``PUT``, including copies and parts, and ``POST``, which
completes a multipart upload) runs under one lock, so a conditional write's check and
store are one step, as on a real object store.

``LOCKGATE_TEST_MOTO_PAIR_WRITES=<substring>`` makes the collision certain for the tests
of this module: the first two writes of keys containing the substring are a pair, and
neither stores its object before both have come as far as they can: with the lock, until
the partner has arrived (it then waits at the lock, checks after the first stored, and
gets 412); without it (``LOCKGATE_TEST_MOTO_NO_LOCK=1``), until the partner has passed its
precondition check too (both store, both get 200). Nothing depends on timing; the wait
is bounded (:data:`PAIR_WAIT_S`) only so that a broken test fails instead of hanging.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

#: the bound of a paired write's wait for its partner (a safety net, never reached)
PAIR_WAIT_S = 60.0


class _Pair:
    """The first two writes of keys containing ``substring``."""

    def __init__(self, substring: str) -> None:
        self.substring = substring
        self.cond = threading.Condition()
        self.arrived: list[int] = []  # thread ids of the two members, in arrival order
        self.at_store = 0

    def arrived_all_known(self) -> bool:
        return len(self.arrived) >= 2

    def arrive(self, key_name: str) -> None:
        if self.substring in key_name:
            with self.cond:
                if len(self.arrived) < 2:
                    self.arrived.append(threading.get_ident())
                    self.cond.notify_all()

    def store(self, key_name: str, locked: bool) -> None:
        if self.substring not in key_name:
            return
        with self.cond:
            if threading.get_ident() not in self.arrived:
                return  # not one of the pair
            self.at_store += 1
            self.cond.notify_all()
            ready = (lambda: len(self.arrived) == 2) if locked else (lambda: self.at_store >= 2)
            if not self.cond.wait_for(ready, PAIR_WAIT_S):
                raise RuntimeError(f"paired write of {key_name}: no partner in {PAIR_WAIT_S} s")


def _patch() -> None:
    from moto.s3 import models, responses

    locked = os.environ.get("LOCKGATE_TEST_MOTO_NO_LOCK") != "1"
    substring = os.environ.get("LOCKGATE_TEST_MOTO_PAIR_WRITES")
    pair = _Pair(substring) if substring else None
    lock = threading.RLock()
    cls: Any = responses.S3Response
    for name in ("_key_response_put", "_key_response_post"):
        original = getattr(cls, name)

        def write(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if pair is not None and not pair.arrived_all_known():
                pair.arrive(str(self.parse_key_name()))
            if not locked:
                return _original(self, *args, **kwargs)
            with lock:
                return _original(self, *args, **kwargs)

        setattr(cls, name, functools.wraps(original)(write))

    if pair is not None:
        backend_cls: Any = models.S3Backend
        put_object = backend_cls.put_object

        def paired(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
            pair.store(key_name, locked)
            return put_object(self, bucket_name, key_name, *args, **kwargs)

        backend_cls.put_object = functools.wraps(put_object)(paired)


def main() -> None:
    _patch()
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
