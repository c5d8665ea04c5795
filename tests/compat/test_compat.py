"""Savepoints of earlier releases restore on today's code (issue 40 part 2; M-S1, M-S2;
docs/savepoint_format.md). Every folder ``savepoints/<release>/<backend>/`` holds a
savepoint of ``compat_job`` written mid-stream by ``make_savepoints.py`` (open windows,
pending timers, typed and untyped keyed state, sequence splits, collected output) and
the output its restore gave then (``expected.json``). Each is restored here, on both
state backends and on both executors, and must give that output again, read without
unpickling anything. A release adds its own folder and keeps the older ones; a change
of a state layout without a migration fails this suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import compat_job
import pytest

import lockgate as lg
from lockgate.checkpoint import fs_storage
from lockgate.checkpoint.state_tree import decode_tree, has_pickles
from lockgate.savepoint.errors import SavepointFormatError

HERE = Path(__file__).resolve().parent
SAVEPOINTS = sorted(p.parent for p in (HERE / "savepoints").glob("*/*/expected.json"))
BACKENDS = {
    "heap": lg.HashMapStateBackend,
    "rocksdb": lg.RocksDBStateBackend,
    "rocksdb-incremental": lambda: lg.RocksDBStateBackend(incremental=True),
}
#: cases that are retained incremental checkpoints (exported): the backend's native
#: files, restored by that backend; savepoints restore on every backend
NATIVE = {"rocksdb-incremental": ["rocksdb-incremental", "rocksdb"]}
RESTORES = [
    (folder, backend)
    for folder in SAVEPOINTS
    for backend in NATIVE.get(folder.name, sorted(BACKENDS))
]


def case_id(folder: Path) -> str:
    return f"{folder.parent.name}-{folder.name}"


def test_this_release_has_its_savepoints() -> None:
    """A release adds its own savepoints (make_savepoints.py) and keeps the older ones."""
    releases = {p.parent.name for p in SAVEPOINTS}
    assert lg.__version__ in releases, (
        f"no savepoints of lockgate {lg.__version__} in tests/compat/savepoints: run "
        "tests/compat/make_savepoints.py and commit what it wrote"
    )
    assert {p.name for p in SAVEPOINTS if p.parent.name == lg.__version__} == set(BACKENDS)


def test_the_stored_expectations_are_the_oracle() -> None:
    for folder in SAVEPOINTS:
        assert json.loads((folder / "expected.json").read_text()) == compat_job.oracle(), folder


def state_files(savepoint: Path) -> list[Path]:
    return sorted(p for p in savepoint.iterdir() if p.name.startswith("op-"))


@pytest.mark.parametrize("folder", SAVEPOINTS, ids=case_id)
def test_a_checked_in_savepoint_reads_without_unpickling_anything(folder: Path) -> None:
    """Every state file decodes with pickles left unloaded, and none is there: the
    splits, timers, windows, typed state and collected rows are all data (part 6)."""
    files = state_files(folder / "savepoint")
    assert files
    for path in files:
        data = path.read_bytes()
        payload, _ = fs_storage.decode_file(data, fs_storage.KIND_PICKLE, str(path))
        tree = decode_tree(payload, unpickle=False, where=str(path))
        assert not has_pickles(tree), f"{path.name} holds a pickled part"
    if folder.name in NATIVE:  # the offline reader reads canonical state (savepoints) only
        with pytest.raises(SavepointFormatError, match="backend-native form"):
            lg.savepoint.read(folder / "savepoint")
        return
    savepoint = lg.savepoint.read(folder / "savepoint")  # allow_pickle=False
    assert set(savepoint.operators()) >= {"numbers", "counter", "per-window"}
    totals = savepoint.state("counter", "total")
    assert len(totals) == compat_job.KEYS, "every key's typed total is in the savepoint"


@pytest.mark.parametrize(
    ("folder", "backend"), RESTORES, ids=[f"{case_id(f)}-on-{b}" for f, b in RESTORES]
)
def test_a_checked_in_savepoint_restores_to_the_stored_output_locally(
    folder: Path, backend: str, tmp_path: Path
) -> None:
    restore_and_compare(folder, backend, lg.LocalExecutor(), tmp_path)


@pytest.mark.spark
@pytest.mark.parametrize("folder", SAVEPOINTS, ids=case_id)
def test_a_checked_in_savepoint_restores_to_the_stored_output_on_spark(
    folder: Path, tmp_path: Path, spark_executor: Any
) -> None:
    restore_and_compare(folder, folder.name, spark_executor, tmp_path)


def restore_and_compare(folder: Path, backend: str, executor: Any, tmp_path: Path) -> None:
    savepoint = tmp_path / "savepoint"
    shutil.copytree(folder / "savepoint", savepoint)  # a restore never writes the repository
    env = compat_job.environment(executor)
    env.set_state_backend(BACKENDS[backend]())
    compat_job.build(env, compat_job.bounded_source())
    result = env.execute("compat", restore_from=str(savepoint))
    assert result.records_out("numbers") < compat_job.N, "the sources resumed from the savepoint"
    got = compat_job.outputs(result)
    expected = json.loads((folder / "expected.json").read_text())
    for uid in expected:
        assert got[uid] == expected[uid], (
            f"{uid} after restoring {case_id(folder)} on {backend}: "
            f"{len(got[uid])} rows, expected {len(expected[uid])}"
        )
