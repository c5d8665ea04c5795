"""PySpark's worker daemon, with lockgate's runtime imported before it forks workers.

Spark starts ``python -m <spark.python.daemon.module>`` once per executor; the daemon
forks one Python worker per task. With lockgate's runtime (pyarrow, numpy, pyzmq and
lockgate itself) imported in the daemon, every forked worker starts with those imports
done (shared copy-on-write), so a slot starts in milliseconds instead of the seconds
the imports take on a small machine, for every job, not only the first. Nothing here
creates threads, sockets or zmq contexts: importing only, so forking stays safe.

The SparkExecutor sets ``spark.python.daemon.module`` to this module on loopback
clusters (``local[N]``, a standalone cluster on 127.0.0.1), where the executors run
the driver's own interpreter and so can import it.
"""

from __future__ import annotations

import lockgate.executor.spark.slot  # noqa: F401
import lockgate.runtime.task_builder  # noqa: F401
from pyspark import daemon

if __name__ == "__main__":
    daemon.manager()
