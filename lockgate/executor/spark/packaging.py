"""What the Spark executor ships to its workers: the lockgate package and the functions
its Spark jobs run there.

* :func:`ship_lockgate` zips the lockgate package the driver imports
  (:func:`package_zip`) and hands it to ``SparkContext.addPyFile``, so executors on
  other machines import the driver's own lockgate. The archive's folder stays until
  the driver process ends (executors that start later fetch it too), and goes then.
* :func:`slot_function` is the partition function of an attempt's barrier job: it runs
  one slot (:func:`~.slot.run_slot`) in the Spark task of its partition.
* :func:`warm_worker` is the partition function of ``SparkExecutor.warm_up``: it
  imports in a Python worker what a slot needs and returns the worker's pid.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .slot import SlotJob


def package_root() -> str:
    """The folder holding the lockgate package this process imported (this file is
    ``lockgate/executor/spark/packaging.py`` in it)."""
    return os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )


def ship_lockgate(sc: Any) -> str:
    """Zip the lockgate package into a new temporary folder (``lockgate-ship-*``) and
    add it to ``sc`` with ``addPyFile``; returns the archive's path. The folder is
    removed when this process ends, never before: Spark's executors fetch the archive
    from it later (new workers too)."""
    folder = tempfile.mkdtemp(prefix="lockgate-ship-")
    atexit.register(shutil.rmtree, folder, True)
    archive = package_zip(package_root(), os.path.join(folder, "lockgate.zip"))
    sc.addPyFile(archive)
    return archive


def package_zip(root: str, archive: str) -> str:
    """``root/lockgate`` zipped to ``archive``, without its ``__pycache__`` folders:
    what is written there while jobs run (bytecode, numba's compiled kernels) would
    change the archive, and Spark refuses a second ``addPyFile`` of a changed one.
    Folders and files are added in sorted order, so an unchanged tree gives an
    identical archive."""
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for folder, dirs, files in os.walk(os.path.join(root, "lockgate")):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                path = os.path.join(folder, name)
                out.write(path, os.path.relpath(path, root))
    return archive


def warm_worker(iterator: Any) -> Any:
    """Import what a slot needs, in a Spark Python worker (see
    ``SparkExecutor.warm_up``): the same imports the worker daemon makes before it
    forks. Yields the worker's pid."""
    import lockgate.executor.spark.daemon  # noqa: F401

    yield os.getpid()


def slot_function(job: SlotJob) -> Any:
    """The partition function of an attempt's barrier-mode job: partition ``i`` runs
    slot ``i`` of ``job`` and yields its report (counters and sink results)."""

    def run_partition(iterator: Any) -> Any:
        from pyspark import BarrierTaskContext

        from lockgate.executor.spark.slot import run_slot

        slot = BarrierTaskContext.get().partitionId()
        yield run_slot(slot, job)

    return run_partition
