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

``LOCKGATE_TEST_MOTO_PAIR_WRITES=<substring>`` makes the race certain for a test of this
module: a write to a key containing the substring waits (bounded) for a second such
write to have passed its precondition check too before storing. With the lock the second
writer cannot pass, the wait ends at its bound, and the second writer then gets 412;
without the lock (``LOCKGATE_TEST_MOTO_NO_LOCK=1``) both store and both get 200.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

#: how long a paired write waits for its partner (the bound, not a pace)
PAIR_WAIT_S = 2.0


def _patch() -> None:
    from moto.s3 import models, responses

    lock = threading.RLock()
    cls: Any = responses.S3Response
    if os.environ.get("LOCKGATE_TEST_MOTO_NO_LOCK") != "1":
        for name in ("_key_response_put", "_key_response_post"):
            original = getattr(cls, name)

            def locked(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                with lock:
                    return _original(*args, **kwargs)

            setattr(cls, name, functools.wraps(original)(locked))

    pair = os.environ.get("LOCKGATE_TEST_MOTO_PAIR_WRITES")
    if pair:
        barrier = threading.Barrier(2)
        backend_cls: Any = models.S3Backend
        put_object = backend_cls.put_object

        def paired(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
            if pair in key_name:
                try:
                    barrier.wait(PAIR_WAIT_S)
                except threading.BrokenBarrierError:
                    barrier.reset()
            return put_object(self, bucket_name, key_name, *args, **kwargs)

        backend_cls.put_object = functools.wraps(put_object)(paired)


def main() -> None:
    _patch()
    from moto.server import main as moto_main

    moto_main()


if __name__ == "__main__":
    main()
