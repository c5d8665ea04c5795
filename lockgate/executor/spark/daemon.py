"""PySpark's worker daemon, with lockgate's runtime imported before it forks workers.

Spark starts ``python -m <spark.python.daemon.module>`` once per executor; the daemon
forks one Python worker per task. With lockgate's runtime (pyarrow, numpy, pyzmq,
lockgate itself, and the Kafka clients when installed) imported in the daemon, every
forked worker starts with those imports done (shared copy-on-write), so a slot starts
in milliseconds instead of the seconds the imports take on a small machine, for every
job, not only the first. PySpark's own worker module (``pyspark.worker``) is imported
here too: a forked worker's first step otherwise.

The worker's path. Before importing pyspark, the daemon drops from ``sys.path`` the
archives Spark puts there that a worker imports nothing from (:func:`archives_to_drop`):
each forked worker's ``importlib.invalidate_caches()`` made their importers read them
again, about 0.3 s of every task's start.

Forking safety. Nothing here creates Python threads, sockets, zmq contexts or log
handlers, and nothing runs lockgate code but the compiling of the Kafka kernels
(single-threaded, on a few bytes). The imports do start two
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

import importlib
import os
import sys

from lockgate.executor.spark.worker_path import drop_archives

if "pyspark" not in sys.modules:  # nothing imported from Spark's archives yet
    drop_archives(sys.path, sys.path_importer_cache)

import pyspark.worker  # noqa: F401 - a forked worker's first import otherwise
from pyspark import daemon

import lockgate.executor.spark.slot
import lockgate.executor.task_builder  # noqa: F401
from lockgate.connectors.kafka.warm_up import warm_up

# The Kafka clients of the ``kafka`` extra, when installed: a Kafka sink's subtask would
# otherwise import kafka-python (0.3-0.4 s on a small machine) while its job runs.
# Importing them starts no thread (librdkafka starts its threads per client).
for _module in ("confluent_kafka", "confluent_kafka.admin", "kafka"):
    try:
        importlib.import_module(_module)
    except ImportError:
        pass

# The compiled Kafka decoding (numba, also of the ``kafka`` extra): loaded from numba's
# cache (compiled on the very first start) here rather than in each slot's first poll
# (about 1 s of a Kafka job's start on a small machine; the daemon's start takes 3-6 s
# longer). LOCKGATE_DAEMON_KERNELS=0 skips it: for clusters that never read Kafka.
# numba starts no thread unless a parallel function runs, and lockgate has none. A
# failure here is left to the slot that needs the kernels, which reports it.
if os.environ.get("LOCKGATE_DAEMON_KERNELS", "1") != "0":
    try:
        warm_up()
    except Exception:  # noqa: BLE001 - reported by the slot that decodes
        pass

if __name__ == "__main__":
    import signal

    from lockgate.executor.spark.worker_exits import install_reaper

    # the daemon reaps its workers itself and records how each one that did not end by
    # itself ended (the signal that killed it), for the driver's error (.worker_exits)
    daemon.signal = install_reaper(signal)
    daemon.manager()
