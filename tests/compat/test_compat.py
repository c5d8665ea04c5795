"""Savepoints of earlier releases restore on today's code (issue 40 part 2; M-S1, M-S2;
docs/savepoint_format.md). Every folder ``savepoints/<release>/<case>/`` holds a
savepoint (or an exported incremental RocksDB checkpoint) of one of the compatibility
jobs written mid-stream by ``make_savepoints.py`` (open windows and sessions, pending
timers, typed and untyped keyed state, interval and window join buffers, async requests
in flight, broadcast state, rolling aggregates, operator list state, sequence splits,
collected output) and the output its restore gave then
(``expected.json.gz``). Each is restored here, on every state backend that can, on both
executors, and must give that output again, read without unpickling anything. A release
adds its own folders and keeps the older ones; a change of a state layout without a
migration fails this suite."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import compat_job
import pytest
from compat_cases import BACKENDS, CASES, ROOT, Case, checked_in, read_expected
from compat_records import TREE_FILE, canonical, read_fields

import lockgate as lg
from lockgate.checkpoint import fs_storage
from lockgate.checkpoint.state_tree import decode_tree, has_pickles
from lockgate.core.state_records import RECORD_MODULES, spec_named
from lockgate.savepoint.errors import SavepointFormatError

CHECKED_IN = checked_in()
RECORD_FOLDERS = sorted(ROOT.glob("*/records"))
RESTORES = [
    (folder, case, backend) for folder, case in CHECKED_IN for backend in case.restore_backends
]


def case_id(folder: Path) -> str:
    return f"{folder.parent.name}-{folder.name}"


def test_this_release_has_its_savepoints() -> None:
    """A release adds its own savepoints (make_savepoints.py) and keeps the older ones."""
    mine = {folder.name for folder, _ in CHECKED_IN if folder.parent.name == lg.__version__}
    assert mine == set(CASES), (
        f"lockgate {lg.__version__} lacks the compatibility cases {sorted(set(CASES) - mine)} "
        "in tests/compat/savepoints: run tests/compat/make_savepoints.py and commit them"
    )


def test_this_release_has_one_of_every_state_record() -> None:
    """The records file of this release holds every record lockgate writes (the
    connectors' splits and transactions among them): a new record is added to
    compat_records.examples() and the file written again."""
    stored = read_fields(ROOT / lg.__version__ / "records")
    assert set(stored) == set(RECORD_MODULES), (
        f"lockgate {lg.__version__}'s records file lacks {sorted(set(RECORD_MODULES) - set(stored))}"
        " (or holds records it no longer has): add them to tests/compat/compat_records.py, run "
        "tests/compat/make_savepoints.py records and commit the result"
    )


@pytest.mark.parametrize("folder", RECORD_FOLDERS, ids=[f.parent.name for f in RECORD_FOLDERS])
def test_every_record_a_release_wrote_decodes_to_its_stored_fields(folder: Path) -> None:
    """Kafka, Redis, NATS, file, sequence and CDC splits; Kafka, PostgreSQL, Delta,
    Iceberg and file sink transactions; window accumulators, join buffers, row batches
    and state handles, as that release wrote them, decode on today's code without
    unpickling, each to its class with the fields it was written with (a record whose
    version was bumped since: through its upgrade). A renamed, removed or retyped field
    without a version bump and an upgrade fails here."""
    tree = decode_tree((folder / TREE_FILE).read_bytes(), unpickle=False, where=str(folder))
    assert not has_pickles(tree), "a record holds a pickled part"
    stored = read_fields(folder)
    assert stored and set(tree) == set(stored)
    for name, written in stored.items():
        spec = spec_named(name, str(folder))
        assert type(tree[name]) is spec.cls, f"{name} decoded to {type(tree[name]).__qualname__}"
        if written["version"] != spec.version:
            continue  # upgraded: the fields are today's, not the ones written
        fields = canonical(tree[name])["fields"]
        for field, value in written["fields"].items():
            assert fields.get(field) == value, (
                f"{name} ({folder.parent.name}): field {field!r} was written as {value!r}, "
                f"reads as {fields.get(field)!r}"
            )


def test_the_stored_expectations_are_the_oracle() -> None:
    oracle = compat_job.oracle()
    for folder, case in CHECKED_IN:
        if case.job is compat_job:
            assert read_expected(folder) == oracle, folder


@pytest.mark.parametrize(("folder", "case"), CHECKED_IN, ids=[case_id(f) for f, _ in CHECKED_IN])
def test_a_checked_in_savepoint_reads_without_unpickling_anything(folder: Path, case: Case) -> None:
    """Every state file decodes with pickles left unloaded, and none is there: splits,
    timers, windows, join buffers, requests, typed state and collected rows are all
    data (part 6)."""
    files = sorted(p for p in (folder / "savepoint").iterdir() if p.name.startswith("op-"))
    assert files
    for path in files:
        payload, _ = fs_storage.decode_file(path.read_bytes(), fs_storage.KIND_PICKLE, str(path))
        tree = decode_tree(payload, unpickle=False, where=str(path))
        assert not has_pickles(tree), f"{path.name} holds a pickled part"
    if case.native:  # the offline reader reads canonical state (savepoints) only
        with pytest.raises(SavepointFormatError, match="backend-native form"):
            lg.savepoint.read(folder / "savepoint")
        return
    savepoint = lg.savepoint.read(folder / "savepoint")  # allow_pickle=False
    assert "numbers" in savepoint.operators()
    if case.job is compat_job:
        totals = savepoint.state("counter", "total")
        assert len(totals) == compat_job.KEYS, "every key's typed total is in the savepoint"


@pytest.mark.parametrize(
    ("folder", "case", "backend"),
    RESTORES,
    ids=[f"{case_id(f)}-on-{b}" for f, _, b in RESTORES],
)
def test_a_checked_in_savepoint_restores_to_the_stored_output_locally(
    folder: Path, case: Case, backend: str, tmp_path: Path
) -> None:
    restore_and_compare(folder, case, backend, lg.LocalExecutor(), tmp_path)


@pytest.mark.spark
@pytest.mark.parametrize(("folder", "case"), CHECKED_IN, ids=[case_id(f) for f, _ in CHECKED_IN])
def test_a_checked_in_savepoint_restores_to_the_stored_output_on_spark(
    folder: Path, case: Case, tmp_path: Path, spark_executor: Any
) -> None:
    restore_and_compare(folder, case, case.backend, spark_executor, tmp_path)


def restore_and_compare(
    folder: Path, case: Case, backend: str, executor: Any, tmp_path: Path
) -> None:
    savepoint = tmp_path / "savepoint"
    shutil.copytree(folder / "savepoint", savepoint)  # a restore never writes the repository
    env = case.job.environment(executor)
    env.set_state_backend(BACKENDS[backend]())
    case.job.build(env, case.job.bounded_source())
    result = env.execute(case.name, restore_from=str(savepoint))
    assert result.records_out("numbers") < case.job.N, "the sources resumed from the savepoint"
    got = case.job.outputs(result)
    expected = read_expected(folder)
    for uid in expected:
        assert got[uid] == expected[uid], (
            f"{uid} after restoring {case_id(folder)} on {backend}: "
            f"{len(got[uid])} rows, expected {len(expected[uid])}"
        )
