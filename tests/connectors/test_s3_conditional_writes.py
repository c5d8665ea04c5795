"""The test S3 (moto) keeps a conditional write's promise under concurrency, and two
DeltaSink subtasks committing one checkpoint at the same moment both land (M-X2).

``test_m_x1_an_s3_table_is_exactly_once_through_a_failure[spark]`` once lost every row
of one sink subtask: moto's ``PUT`` with ``If-None-Match: *`` checks and stores in two
unlocked steps, so two subtasks writing the same Delta log version both got 200 and the
later replaced the earlier commit. A real object store (AWS S3, MinIO, R2) refuses the
second write with 412, and delta-rs then commits on the next version; the tests' moto
now does the same (``tests/moto_atomic_server.py``). These tests make the collision
certain (the first two writes of a key are paired: neither stores before its partner has
come as far as it can) and show both outcomes.
"""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lockgate.connectors import DeltaSink
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext
from s3_server import DUMMY_CREDENTIALS, MotoServer, start_moto_server

deltalake = pytest.importorskip("deltalake")


@contextlib.contextmanager
def _server(monkeypatch: pytest.MonkeyPatch, pair: str, lock: bool) -> Iterator[MotoServer]:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    env = {"LOCKGATE_TEST_MOTO_PAIR_WRITES": pair}
    if not lock:
        env["LOCKGATE_TEST_MOTO_NO_LOCK"] = "1"
    server = start_moto_server(env=env)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def paired_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[MotoServer]:
    """The tests' moto, with writes of keys containing ``race/`` paired."""
    with _server(monkeypatch, "race/", lock=True) as server:
        yield server


def _put_if_absent(server: MotoServer, key: str, body: bytes) -> int:
    request = urllib.request.Request(
        f"{server.http_url}/{server.bucket}/{key}",
        data=body,
        method="PUT",
        headers={"If-None-Match": "*", "Content-Type": "application/octet-stream"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _at_once(*calls: Any) -> list[Any]:
    """Run ``calls`` in threads at the same time; their results, in order."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call: Any) -> None:
        try:
            results[i] = call()
        except BaseException as e:  # noqa: BLE001 - re-raised by the test below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a concurrent call did not end in 60 s"
    if errors:
        raise errors[0]
    return results


def _get(server: MotoServer, key: str) -> bytes:
    with server.filesystem().open_input_stream(f"{server.bucket}/{key}") as f:
        body: bytes = f.read()
        return body


def test_two_writes_of_one_absent_key_at_once_give_one_200_and_one_412(paired_server) -> None:
    key = f"race/{uuid.uuid4().hex}"
    statuses = _at_once(
        lambda: _put_if_absent(paired_server, key, b"first"),
        lambda: _put_if_absent(paired_server, key, b"second"),
    )
    assert sorted(statuses) == [200, 412], f"statuses {statuses}: a conditional write is atomic"
    winner = b"first" if statuses[0] == 200 else b"second"
    assert _get(paired_server, key) == winner, "the 412's body must not replace the object"


def test_plain_moto_lets_both_writes_through_which_is_why_the_lock_is_there(monkeypatch) -> None:
    """Without the launcher's lock the same collision gives two 200s (moto 5's check and
    store are separate steps): the paired test above can see the race it guards."""
    with _server(monkeypatch, "race/", lock=False) as server:
        key = f"race/{uuid.uuid4().hex}"
        statuses = _at_once(
            lambda: _put_if_absent(server, key, b"first"),
            lambda: _put_if_absent(server, key, b"second"),
        )
        assert statuses == [200, 200], statuses


def _subtask(subtask: int) -> RuntimeContext:
    return RuntimeContext(
        task_name="t",
        operator_name="delta",
        operator_uid="delta",
        subtask_index=subtask,
        parallelism=2,
        max_parallelism=128,
        attempt_number=0,
        job_name="race",
        run_id="run1",
    )


@pytest.mark.parametrize("table_exists", [False, True], ids=["creating", "appending"])
def test_m_x2_two_subtasks_committing_one_version_at_once_both_land(
    monkeypatch, table_exists: bool
) -> None:
    """Two sink subtasks commit checkpoint 1 at the same moment, both writing the same
    Delta log version (the table's first, or the next one of an existing table): one
    wins, the other is refused with 412 and commits on the next version; the table
    holds both subtasks' rows and both transaction ids."""
    # the two commits write this log entry at once (the table's first, or the one after
    # the commit made alone below)
    entry = f"_delta_log/{int(table_exists):020d}.json"
    with _server(monkeypatch, entry, lock=True) as server:
        options = {
            "AWS_ENDPOINT_URL": server.http_url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        uri = f"s3://{server.bucket}/delta-{uuid.uuid4().hex[:8]}"
        if table_exists:
            import pyarrow as pa

            deltalake.write_deltalake(
                uri, pa.table({"k": [-1], "v": [-1]}), storage_options=options
            )
        sinks = [DeltaSink(uri, storage_options=options) for _ in range(2)]
        transactions = []
        for i, sink in enumerate(sinks):
            sink.open(_subtask(i))
            txn = sink.begin_transaction()
            sink.write(txn, RowBatch([{"k": i, "v": 10 * i + j} for j in range(3)]))
            sink.pre_commit_at(txn, 1)
            transactions.append(txn)
        _at_once(*(lambda s=s, t=t: s.commit(t) for s, t in zip(sinks, transactions)))
        table = deltalake.DeltaTable(uri, storage_options=options)
        rows = sorted(zip(*table.to_pyarrow_table().select(["k", "v"]).to_pydict().values()))
        want = [(0, 0), (0, 1), (0, 2), (1, 10), (1, 11), (1, 12)]
        assert [r for r in rows if r[0] >= 0] == want, f"rows {rows}: a commit was lost"
        for txn in transactions:
            assert table.transaction_version(txn.app_id) == 1, f"{txn.app_id} not recorded"
        for sink in sinks:
            sink.close()
