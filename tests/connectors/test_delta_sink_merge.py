"""DeltaSink(mode="merge", key=...) applies a changelog exactly once to a local Delta
table (issue 39 section 3; M-X1, M-X2, M-X3), checked with ``deltalake`` and the Delta log.

* A changelog (inserts, in-place and key-changing updates, deletes carrying only their
  key, bursts of changes to one key within a checkpoint, re-inserts) over many
  checkpoints leaves the table equal, row by row, to the oracle (the changelog applied
  to a dict); with failures injected (in the sink after checkpoints, in the source, and
  between pre-commit and commit) too. The log has one MERGE commit per (app id,
  version), versions rising per app id, and no staged changes file is left behind.
* Each subtask's interval is one Delta commit carrying its ``txn`` action; a commit
  repeated after a restore or by the driver is skipped; what a dead attempt staged after
  the restored checkpoint is deleted, what a live run staged is not (issue 37 item 1).
* A changelog into an append DeltaSink fails naming the sink; bad keys are refused.
"""

from __future__ import annotations

import glob
import json
import os
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from changelog_source import SCHEMA, ChangelogSource, make_changelog, oracle_rows, to_batch

import lockgate as lg
from checkpoint_paced import CheckpointPacedSource
from lockgate.connectors import DeltaSink
from lockgate.connectors.changelog_compaction import ChangeKeyError
from lockgate.connectors.two_phase_commit import FinalCommit, TwoPhaseCommitWriter, commit_final
from lockgate.core.batch import RowBatch
from lockgate.core.row_kind import RowKind
from lockgate.errors import ConfigurationError
from lockgate.runtime.context import RuntimeContext
from lockgate.testing import FailAtRecord, FailCommit, inject_faults

deltalake = pytest.importorskip("deltalake")


def rows_of(uri: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(uri).to_pyarrow_table()
    return sorted(zip(*(table[c].to_pylist() for c in ("id", "name", "amount", "seq"))))


def log_commits(uri: str) -> list[dict[str, Any]]:
    """Every commit of the table's log: its operation and txn actions."""
    commits = []
    for path in sorted(glob.glob(os.path.join(uri, "_delta_log", "*.json"))):
        txns, operation = [], None
        with open(path, encoding="utf-8") as f:
            for line in f:
                action = json.loads(line)
                if "txn" in action:
                    txns.append((action["txn"]["appId"], action["txn"]["version"]))
                if "commitInfo" in action:
                    operation = action["commitInfo"].get("operation")
        commits.append({"operation": operation, "txns": txns})
    return commits


def assert_merges_are_exactly_once(uri: str) -> list[tuple[str, int]]:
    """Every MERGE commit carries exactly one txn action; no (app id, version) twice;
    versions rise per app id. Returns the (app id, version) pairs."""
    merges = [c for c in log_commits(uri) if c["operation"] == "MERGE"]
    assert merges, "no MERGE commit in the log"
    pairs = []
    for c in merges:
        assert len(c["txns"]) == 1, f"a merge without exactly one txn action: {c}"
        pairs.extend(c["txns"])
    assert len(pairs) == len(set(pairs)), f"an (app id, version) merged twice: {pairs}"
    last: dict[str, int] = {}
    for app, version in pairs:
        assert version > last.get(app, -1), f"{app}: version {version} after {last[app]}"
        last[app] = version
    return pairs


def staged_files(uri: str) -> list[str]:
    """Files the sink wrote in the table folder (its staged changes; merges write their
    own ``part-`` files)."""
    return sorted(
        os.path.relpath(p, uri)
        for p in glob.glob(os.path.join(uri, "**", "lockgate-*.parquet"), recursive=True)
    )


def context(attempt: int = 0, run: str = "run1", subtask: int = 0) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="delta",
        operator_uid="delta",
        subtask_index=subtask,
        parallelism=1,
        max_parallelism=128,
        attempt_number=attempt,
        job_name="job",
        run_id=run,
    )


def writer(sink: DeltaSink, c: RuntimeContext, states=()) -> TwoPhaseCommitWriter:
    w = sink.create_writer(c)
    assert isinstance(w, TwoPhaseCommitWriter)
    w.initialize_state(list(states))
    return w


def change(kind: RowKind, key: int, name: str | None, seq: int) -> tuple[RowKind, dict]:
    return kind, {"id": key, "name": name, "amount": None if name is None else seq, "seq": seq}


# ------------------------------------------------------------------------------ writer level


def test_m_x2_an_interval_is_one_merge_commit_when_its_checkpoint_completes(tmp_path) -> None:
    """Repeated changes to one key in an interval: the last wins; a key-changing update
    moves the row; a delete carrying only the key removes it. Nothing is visible before
    the checkpoint completes; then one MERGE commit with the txn action, and the staged
    file is gone."""
    uri = str(tmp_path / "t")
    sink = DeltaSink(uri, mode="merge", key="id", schema=SCHEMA)
    w = writer(sink, context())
    try:
        w.write(
            to_batch(
                [
                    change(RowKind.INSERT, 1, "a", 0),
                    change(RowKind.INSERT, 2, "b", 1),
                    change(RowKind.INSERT, 3, "c", 2),
                ]
            )
        )
        w.snapshot_state(1)
        w.notify_checkpoint_complete(1)
        assert rows_of(uri) == [(1, "a", 0, 0), (2, "b", 1, 1), (3, "c", 2, 2)]
        w.write(
            to_batch(
                [
                    change(RowKind.UPDATE_BEFORE, 1, "a", 0),
                    change(RowKind.UPDATE_AFTER, 1, "a2", 3),
                    change(RowKind.UPDATE_BEFORE, 1, "a2", 3),
                    change(RowKind.UPDATE_AFTER, 1, "a3", 4),
                    change(RowKind.UPDATE_BEFORE, 2, "b", 1),
                    change(RowKind.UPDATE_AFTER, 20, "b moved", 5),
                ]
            )
        )
        w.write(
            to_batch(
                [
                    change(RowKind.DELETE, 3, None, 6),
                    change(RowKind.INSERT, 4, "d", 7),
                    change(RowKind.DELETE, 4, "d", 8),
                    change(RowKind.DELETE, 99, None, 9),  # absent: nothing to delete
                ]
            )
        )
        w.snapshot_state(2)
        assert len(staged_files(uri)) == 1, "pre-commit stages the changes in one file"
        assert rows_of(uri) == [(1, "a", 0, 0), (2, "b", 1, 1), (3, "c", 2, 2)]
        w.notify_checkpoint_complete(2)
        assert rows_of(uri) == [(1, "a3", 4, 4), (20, "b moved", 5, 5)]
        assert [c["txns"] for c in log_commits(uri) if c["operation"] == "MERGE"] == [
            [("lockgate:job:delta:0:run1", 1)],
            [("lockgate:job:delta:0:run1", 2)],
        ]
        assert staged_files(uri) == [], "a merged staged file is deleted"
    finally:
        w.close()


def test_m_x2_a_merge_repeated_after_a_restore_or_by_the_driver_is_skipped(tmp_path) -> None:
    uri = str(tmp_path / "t")
    w = writer(DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context())
    w.write(to_batch([change(RowKind.INSERT, 1, "a", 0), change(RowKind.INSERT, 2, "b", 1)]))
    at_1 = w.snapshot_state(1)
    (staged,) = staged_files(uri)
    with open(os.path.join(uri, staged), "rb") as f:
        content = f.read()
    w.notify_checkpoint_complete(1)
    w.write(to_batch([change(RowKind.DELETE, 1, None, 2)]))
    w.snapshot_state(2)
    w.notify_checkpoint_complete(2)
    w.close()
    # as if the process died between checkpoint 1's merge and the deletion of its file
    with open(os.path.join(uri, staged), "wb") as f:
        f.write(content)
    version = deltalake.DeltaTable(uri).version()
    (txn,) = [t for _, t in at_1["pending"]]
    # a restore of checkpoint 1 commits its pending merge again, then the driver: had it
    # been applied again, key 1 (deleted by the later merge) would be back
    again = writer(
        DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context(attempt=1), [at_1]
    )
    again.close()
    commit_final(DeltaSink(uri, mode="merge", key="id"), FinalCommit([txn]))
    assert deltalake.DeltaTable(uri).version() == version, "a repeated merge made a version"
    assert rows_of(uri) == [(2, "b", 1, 1)]
    assert staged_files(uri) == [], "the repeat deletes the merged staged file"


def test_m_r1_m_x2_a_restore_deletes_what_a_dead_attempt_staged_after_its_checkpoint(
    tmp_path,
) -> None:
    uri = str(tmp_path / "t")
    w0 = writer(DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context())
    w0.write(to_batch([change(RowKind.INSERT, 1, "a", 0)]))
    at_1 = w0.snapshot_state(1)
    w0.write(to_batch([change(RowKind.DELETE, 1, None, 1)]))
    w0.snapshot_state(2)  # staged; checkpoint 2 never completes
    w0.write(to_batch([change(RowKind.INSERT, 5, "open", 2)]))  # open, never staged
    w0.close()  # the crash
    assert len(staged_files(uri)) == 2
    w1 = writer(DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context(attempt=1), [at_1])
    try:
        assert rows_of(uri) == [(1, "a", 0, 0)], "checkpoint 1's merge is committed on restore"
        assert staged_files(uri) == [], "what attempt 0 staged for checkpoint 2 is deleted"
        w1.write(to_batch([change(RowKind.DELETE, 1, None, 1)]))  # the replay
        w1.snapshot_state(2)
        w1.notify_checkpoint_complete(2)
        assert rows_of(uri) == []
    finally:
        w1.close()


def test_m_x2_a_run_forked_from_a_savepoint_leaves_the_live_runs_staged_changes(
    tmp_path,
) -> None:
    """Issue 37 item 1 for merges: run A goes on after its checkpoint 1 while run B
    restores it; B must not delete the changes A staged for checkpoint 2 (A's writer is
    open: A is alive), which A then merges."""
    uri = str(tmp_path / "t")
    a = writer(DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context(run="runA"))
    try:
        a.write(to_batch([change(RowKind.INSERT, 1, "a", 0)]))
        at_1 = a.snapshot_state(1)
        a.notify_checkpoint_complete(1)
        a.write(to_batch([change(RowKind.UPDATE_AFTER, 1, "a2", 1)]))
        a.snapshot_state(2)  # staged, checkpoint 2 not complete yet
        staged = staged_files(uri)
        assert len(staged) == 1
        b = writer(
            DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), context(run="runB"), [at_1]
        )
        b.close()
        assert staged_files(uri) == staged, "a live run's staged changes were deleted"
        a.notify_checkpoint_complete(2)
        assert rows_of(uri) == [(1, "a2", 1, 1)]
    finally:
        a.close()


def test_m_x2_a_bounded_input_without_checkpoints_is_merged_by_the_driver_once(
    tmp_path,
) -> None:
    """Python records with kinds too; the table is created by the first merge (with the
    first records' schema and the partitioning given), rows move between partitions."""
    uri = str(tmp_path / "t")
    sink = DeltaSink(uri, mode="merge", key=["id"], partition_by="part")
    w = writer(sink, context())
    kinds = np.array(
        [RowKind.INSERT, RowKind.INSERT, RowKind.UPDATE_AFTER, RowKind.DELETE], np.int8
    )
    w.write(
        RowBatch(
            [
                {"id": 1, "part": "x", "v": 1.5},
                {"id": 2, "part": "x", "v": 2.5},
                {"id": 1, "part": "y", "v": 3.5},
                {"id": 2, "part": None, "v": None},
            ],
            kinds=kinds,
        )
    )
    w.finish()
    final = w.result()
    w.close()
    assert deltalake.DeltaTable is not None and not os.path.exists(os.path.join(uri, "_delta_log"))
    commit_final(sink, final)
    commit_final(sink, final)
    table = deltalake.DeltaTable(uri)
    assert table.metadata().partition_columns == ["part"]
    assert table.to_pyarrow_table().to_pylist() == [{"id": 1, "part": "y", "v": 3.5}]
    assert staged_files(uri) == []


# ---------------------------------------------------------------------------------- jobs


def changelog_job(
    uri: str, changes, *, faults=(), per_checkpoint: int = 400
) -> lg.StreamEnvironment:
    env = lg.StreamEnvironment(parallelism=2, executor=lg.LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=len(faults) + 2, delay=0))
    source = CheckpointPacedSource(ChangelogSource(changes, batch_size=50), per_checkpoint, 2)
    (
        env.from_source(source, name="changes")
        .uid("changes")
        .key_by("id")
        .sink_to(DeltaSink(uri, mode="merge", key="id", schema=SCHEMA), name="delta")
        .uid("delta")
    )
    if faults:
        inject_faults(env, *faults)
    return env


def test_m_x1_a_changelog_over_many_checkpoints_equals_the_oracle_row_by_row(tmp_path) -> None:
    uri = str(tmp_path / "table")
    changes = make_changelog(seed=39, n=6_000, keys=400)
    assert {k for k, _ in changes} == set(RowKind), "the changelog has every kind"
    result = changelog_job(uri, changes).execute("delta merge changelog")
    assert result.attempts == 1
    assert rows_of(uri) == oracle_rows(changes)
    pairs = assert_merges_are_exactly_once(uri)
    assert len(pairs) >= 10 and {app.split(":")[3] for app, _ in pairs} == {"0", "1"}, pairs
    assert staged_files(uri) == []


@pytest.mark.hang_guard(300)
def test_m_x2_m_x3_a_changelog_through_failures_is_merged_exactly_once(tmp_path) -> None:
    """Three failures: in the sink after two checkpoints, in the source after three, and
    between pre-commit and commit: the table is still the oracle's, every (app id,
    version) merged once, and no staged file is left."""
    uri = str(tmp_path / "table")
    changes = make_changelog(seed=7, n=6_000, keys=300)
    faults = [
        FailAtRecord("delta", 1_000, attempt=0, subtask=0, after_checkpoints=2),
        FailAtRecord("changes", 2_000, attempt=1, after_checkpoints=3),
        FailCommit("delta", checkpoint=2, attempt=2, subtask=1),
    ]
    result = changelog_job(uri, changes, faults=faults).execute("delta merge with failures")
    assert result.attempts == 4, "every fault fired once"
    assert rows_of(uri) == oracle_rows(changes)
    assert_merges_are_exactly_once(uri)
    assert staged_files(uri) == []


def test_a_changelog_into_an_append_delta_sink_fails_naming_the_sink(tmp_path) -> None:
    uri = str(tmp_path / "t")
    env = lg.StreamEnvironment(parallelism=1, executor=lg.LocalExecutor())
    env.enable_checkpointing(timedelta(milliseconds=50))
    env.from_source(ChangelogSource(make_changelog(seed=1, n=200, keys=20))).sink_to(
        DeltaSink(uri), name="delta out"
    )
    with pytest.raises(lg.JobFailedError) as failed:
        env.execute("changelog into append")
    text = str(failed.value)
    assert "sink 'delta out' (DeltaSink) writes append-only" in text, text
    assert "DeltaSink(mode='merge'" in text
    assert not os.path.exists(os.path.join(uri, "_delta_log"))


def test_accepts_changes_only_in_merge_mode(tmp_path) -> None:
    assert DeltaSink(str(tmp_path / "a"), mode="merge", key="id").accepts_changes
    assert not DeltaSink(str(tmp_path / "b")).accepts_changes


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mode": "upsert"}, "mode must be 'append' or 'merge'"),
        ({"mode": "merge"}, r"needs key=.*mode='merge', key='id'"),
        ({"key": "id"}, r"key='id' is for mode='merge'.*drop key="),
        ({"mode": "merge", "key": ["id", "id"]}, "names a column twice"),
        ({"mode": "merge", "key": [""]}, "key must be a column name"),
        ({"mode": "merge", "key": "nope", "schema": SCHEMA}, r"schema= given has no column"),
        (
            {"mode": "merge", "key": "x", "schema": pa.schema([("x", pa.float64())])},
            "key column 'x' has type double",
        ),
    ],
)
def test_bad_merge_arguments_are_refused_saying_how_to_fix(tmp_path, kwargs, needle) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        DeltaSink(str(tmp_path / "t"), **kwargs)


def test_a_key_the_existing_table_lacks_or_a_null_key_fails(tmp_path) -> None:
    uri = str(tmp_path / "t")
    deltalake.DeltaTable.create(uri, SCHEMA)
    with pytest.raises(ConfigurationError, match=r"the table at .* has no column\(s\) \['nope'\]"):
        writer(DeltaSink(uri, mode="merge", key="nope"), context())
    w = writer(DeltaSink(uri, mode="merge", key="id"), context(attempt=1))
    try:
        w.write(to_batch([change(RowKind.DELETE, None, None, 1)]))  # type: ignore[arg-type]
        with pytest.raises(ChangeKeyError, match="null key field 'id'"):
            w.snapshot_state(1)
    finally:
        w.close()
    assert deltalake.DeltaTable(uri).version() == 0
