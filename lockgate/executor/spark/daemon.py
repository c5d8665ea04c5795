"""PySpark's worker daemon, with lockgate's runtime imported before it forks workers.

Spark starts ``python -m <spark.python.daemon.module>`` once per executor; the daemon
forks one Python worker per task. With lockgate's runtime (pyarrow, numpy, pyzmq,
lockgate itself, and what connectors ask for in their pre-fork hooks) imported in the daemon, every
forked worker starts with those imports done (shared copy-on-write), so a slot starts
in milliseconds instead of the seconds the imports take on a small machine, for every
job, not only the first. PySpark's own worker module (``pyspark.worker``) is imported
here too: a forked worker's first step otherwise.

The worker's path. Before importing pyspark, the daemon drops from ``sys.path`` the
archives Spark puts there that a worker imports nothing from (:func:`archives_to_drop`):
each forked worker's ``importlib.invalidate_caches()`` made their importers read them
again, about 0.3 s of every task's start.

Forking safety. Nothing here creates Python threads, sockets, zmq contexts or log
handlers, and nothing runs lockgate code but the connectors' pre-fork hooks
(:mod:`lockgate.connectors.prefork`: imports, and compiling decoding kernels,
single-threaded, on a few bytes). The imports do start two
native threads in the daemon (measured with pyarrow 26 and numpy 2: jemalloc's
background purging thread, linked into libarrow, and OpenBLAS's worker pool), which
PySpark's own daemon avoids by importing after the fork. Both libraries register
``pthread_atfork`` handlers that quiesce those threads around ``fork``, so a forked
worker never inherits one of their locks held; a slot creates its zmq context, sockets
and threads only after the fork (``zmq.Context.instance()`` is per process). A slot's
watchdog (:mod:`.watchdog`) would show a worker that froze nonetheless (its stacks
reach the driver through faulthandler, which needs no lock).

Workers' exits. PySpark's daemon ignores ``SIGCHLD`` (the kernel reaps its workers and
their exit status is lost); this one reaps them and records the signal that killed a
worker (:mod:`.worker_exits`), so a slot's lost worker is named with it.

The SparkExecutor sets ``spark.python.daemon.module`` to this module on loopback
clusters (``local[N]``, a standalone cluster on 127.0.0.1), where the executors run
the driver's own interpreter and so can import it.
"""

from __future__ import annotations

import os
import sys

from lockgate.executor.spark.worker_path import drop_archives

if "pyspark" not in sys.modules:  # nothing imported from Spark's archives yet
    drop_archives(sys.path, sys.path_importer_cache)

import pyspark.worker  # noqa: F401 - a forked worker's first import otherwise
from pyspark import daemon

import lockgate.connectors
import lockgate.executor.spark.slot
import lockgate.executor.task_builder  # noqa: F401
from lockgate.connectors.prefork import run_prefork_hooks

# Every connector's pre-fork work (lockgate.connectors.prefork; importing
# lockgate.connectors registers the built-in connectors' hooks): their client libraries
# imported and their compiled decoding loaded from numba's cache (compiled on the very
# first start; the daemon's start then takes 3-6 s longer). LOCKGATE_DAEMON_KERNELS=0
# skips the compiling hooks: for clusters whose jobs never decode with them. A hook's
# failure is left to the slot that needs its work, which reports it.
run_prefork_hooks(compile_kernels=os.environ.get("LOCKGATE_DAEMON_KERNELS", "1") != "0")

if __name__ == "__main__":
    import signal

    from lockgate.executor.spark.worker_exits import install_reaper

    # the daemon reaps its workers itself and records how each one that did not end by
    # itself ended (the signal that killed it), for the driver's error (.worker_exits)
    daemon.signal = install_reaper(signal)
    daemon.manager()
