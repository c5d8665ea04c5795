"""The cases of the compatibility suite: which job, state backend and kind of snapshot
each folder ``savepoints/<release>/<case>/`` holds (shared by ``make_savepoints.py``
and ``test_compat.py``)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import compat_job
import compat_joins
import compat_operators

import lockgate as lg

HERE = Path(__file__).resolve().parent
ROOT = HERE / "savepoints"

BACKENDS = {
    "heap": lambda: lg.HashMapStateBackend(),
    "rocksdb": lambda: lg.RocksDBStateBackend(),
    "rocksdb-incremental": lambda: lg.RocksDBStateBackend(incremental=True),
}


@dataclass(frozen=True)
class Case:
    """``name``: the folder's name; ``job``: the module with ``environment``, ``build``,
    ``bounded_source``, ``outputs``, ``N``; ``backend``: the backend that wrote it;
    ``native``: a retained incremental checkpoint (exported), which only RocksDB
    restores; ``pace``: records per source subtask per completed checkpoint while it
    is written."""

    name: str
    job: ModuleType
    backend: str
    native: bool = False
    pace: int = 1_500

    @property
    def restore_backends(self) -> list[str]:
        return ["rocksdb-incremental", "rocksdb"] if self.native else sorted(BACKENDS)

    def reference(self) -> dict[str, list[Any]]:
        """What a correct restore outputs: the oracle, or the job run straight through."""
        oracle = getattr(self.job, "oracle", None)
        return oracle() if oracle is not None else self.job.straight_run()


CASES = {
    c.name: c
    for c in [
        Case("heap", compat_job, "heap"),
        Case("rocksdb", compat_job, "rocksdb"),
        Case("rocksdb-incremental", compat_job, "rocksdb-incremental", native=True),
        Case("joins-heap", compat_joins, "heap", pace=400),
        Case("operators-heap", compat_operators, "heap", pace=300),
    ]
}


def read_expected(folder: Path) -> dict[str, list[Any]]:
    with gzip.open(folder / "expected.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def write_expected(folder: Path, expected: dict[str, list[Any]]) -> None:
    with gzip.open(folder / "expected.json.gz", "wt", encoding="utf-8") as f:
        json.dump(expected, f)


def checked_in() -> list[tuple[Path, Case]]:
    """Every checked-in case folder of every release, with its case."""
    out = []
    for folder in sorted(ROOT.glob("*/*/expected.json.gz")):
        out.append((folder.parent, CASES[folder.parent.name]))
    return out
