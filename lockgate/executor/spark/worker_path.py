"""The Python path of lockgate's Spark worker daemon: the archives Spark puts on it
that a worker imports nothing from, dropped before the daemon imports pyspark
(:mod:`.daemon`)."""

from __future__ import annotations

import importlib.machinery
import os
import zipfile
from typing import Any


def archives_to_drop(path: list[str]) -> list[str]:
    """The archives on ``path`` (a ``sys.path``) that a Python worker imports nothing
    from.

    Spark puts ``<pyspark>/python/lib/pyspark.zip`` (1,500 entries) and the
    ``spark-core`` jar (6,000 entries, no Python in it) on its Python workers' path.
    Every task's worker calls ``importlib.invalidate_caches()`` when it adds the job's
    files to ``sys.path``, and on Python 3.10 and 3.11 that makes each zip importer read
    its archive's directory again, in pure Python: about 0.3 s of every task's start on
    a small machine (measured with py-spy). Modules imported from the zip are also
    compiled afresh by every daemon (no ``.pyc`` in it). Dropped:

    - ``pyspark.zip`` when it lies inside an installed ``pyspark`` package whose parent
      folder is on ``path`` too (that package is the same release), and ``import
      pyspark`` finds that package once the zip is gone (no other pyspark before it);
    - a ``.jar`` holding no Python file.

    Anything else (the py4j archive, the job's own files, a zip that is not inside an
    installed pyspark) stays.
    """
    drop = []
    bundled: dict[str, str] = {}  # a dropped pyspark.zip -> the package holding it
    for entry in path:
        name = os.path.basename(entry)
        if name == "pyspark.zip":
            package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(entry))))
            if os.path.basename(package) == "pyspark":
                drop.append(entry)
                bundled[entry] = package
        elif name.endswith(".jar") and os.path.isfile(entry):
            try:
                with zipfile.ZipFile(entry) as jar:
                    has_python = any(n.endswith((".py", ".pyc")) for n in jar.namelist())
            except (OSError, zipfile.BadZipFile):
                continue
            if not has_python:
                drop.append(entry)
    if bundled:
        # the zip goes only if, without it, "import pyspark" finds the installed package
        # holding it (so that package's folder is on the path), not another pyspark
        # further up the path
        left = [p for p in path if p not in drop]
        spec = importlib.machinery.PathFinder.find_spec("pyspark", left)
        found = spec.origin if spec is not None and spec.origin else ""
        for entry, package in bundled.items():
            if os.path.dirname(os.path.realpath(found)) != package:
                drop.remove(entry)
    return drop


def drop_archives(path: list[str], importer_cache: dict[str, Any]) -> list[str]:
    """Remove :func:`archives_to_drop` from ``path`` and their importers from
    ``importer_cache`` (``sys.path_importer_cache``, where a zip's importer stays, and
    is invalidated, even once its archive is off the path); return what was removed."""
    drop = archives_to_drop(path)
    for entry in drop:
        path.remove(entry)
        inside = entry + os.sep
        for key in [k for k in importer_cache if k == entry or k.startswith(inside)]:
            del importer_cache[key]
    return drop
