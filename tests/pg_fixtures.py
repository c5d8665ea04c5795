"""PostgreSQL helpers of the connector tests: the test database on 127.0.0.1 (started by
``scripts/services.sh`` with ``max_prepared_transactions`` > 0), fresh tables, and a
second, throwaway server without prepared transactions."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

#: the shared test database, made by scripts/services.sh
SHARED_DSN = os.environ.get("LOCKGATE_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _worker_dsn(shared: str) -> str:
    """In a parallel run, a database of this worker's own beside the shared one (made
    here if missing): the checks for prepared transactions left behind look at their own
    database (``pg_prepared_xacts.database``), and another worker's job may hold one at
    that moment."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.isidentifier():
        return shared
    info = psycopg.conninfo.conninfo_to_dict(shared)
    name = f"{info.get('dbname', 'test')}_{worker}"
    with psycopg.connect(shared, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchall():
            try:
                conn.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
                )
            except psycopg.errors.DuplicateDatabase:
                pass  # made meanwhile by a run beside this one
    if shared.startswith(("postgresql://", "postgres://")):  # stays a URL (tests parse it)
        return urllib.parse.urlsplit(shared)._replace(path=f"/{name}").geturl()
    return psycopg.conninfo.make_conninfo(shared, dbname=name)


_dsn: str | None = None


def worker_dsn() -> str:
    """This worker's test database (made on first use: a run that needs no PostgreSQL,
    such as the unit tests of ``scripts/test.sh --fast``, never connects)."""
    global _dsn
    if _dsn is None:
        _dsn = _worker_dsn(SHARED_DSN)
    return _dsn


def __getattr__(name: str) -> Any:
    """``DSN``: :func:`worker_dsn`, resolved when a test module imports it."""
    if name == "DSN":
        return worker_dsn()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def query(sql: str, params: Any = None, dsn: str | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn or worker_dsn(), autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def prepared(prefix: str = "lockgate-") -> list[str]:
    """Ids of the prepared transactions of the test database starting with ``prefix``."""
    return [
        r[0]
        for r in query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND starts_with(gid, %s) ORDER BY gid",
            (prefix,),
        )
    ]


@pytest.fixture
def pg_table(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(columns_sql)`` creates a table with a unique name and returns the name;
    every table made is dropped at the end (with any transaction left prepared on it)."""
    made: list[str] = []

    def make(columns: str) -> str:
        name = f"lg_{request.node.name[:30].lower().replace('[', '_').replace(']', '')}"
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        name = f"{name}_{uuid.uuid4().hex[:6]}"
        query(f"CREATE TABLE {name} ({columns})")
        made.append(name)
        return name

    yield make
    release_tables(made)


def release_tables(tables: list[str]) -> None:
    """Drop ``tables`` (made by a test), first rolling back the prepared transactions
    that hold a lock on one of them (a failed test may leave some; DROP TABLE would wait
    for them forever).

    Guarantee: no other prepared transaction is touched, whatever its id. The test
    database is shared by every pytest session on the machine (several worktrees run
    suites at once): a prepared transaction on another table belongs to a test running
    beside this one, e.g. a job whose writer's host was just killed and whose restarted
    attempt is about to commit it from its checkpoint. Rolling those back by prefix
    (``lockgate-``, ``lgtest-``) made such a job fail for good with TransactionLostError
    (tests/connectors/test_pg_fixtures_isolation.py)."""
    if not tables:
        return
    with psycopg.connect(worker_dsn(), autocommit=True) as conn:
        for (gid,) in conn.execute(PREPARED_ON_TABLES, (list(tables),)).fetchall():
            try:
                conn.execute(
                    psycopg.sql.SQL("ROLLBACK PREPARED {}").format(psycopg.sql.Literal(gid))
                )
            except psycopg.errors.UndefinedObject:
                pass  # finished meanwhile
        conn.execute("SET lock_timeout = '30s'")  # a lock missed here fails, never hangs
        for name in tables:
            conn.execute(f"DROP TABLE IF EXISTS {name}")


#: the ids of the prepared transactions of this database holding a lock on one of the
#: tables named by the parameter (a prepared transaction's locks have no pid; its
#: relation locks share the virtual transaction of the lock on its own xid)
PREPARED_ON_TABLES = """
SELECT DISTINCT p.gid
FROM pg_prepared_xacts p
JOIN pg_locks x ON x.locktype = 'transactionid' AND x.pid IS NULL
    AND x.transactionid = p.transaction
JOIN pg_locks r ON r.locktype = 'relation' AND r.pid IS NULL
    AND r.virtualtransaction = x.virtualtransaction
WHERE p.database = current_database()
    AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND r.relation IN (SELECT to_regclass(t) FROM unnest(%s::text[]) AS t)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def pg_without_prepared_transactions() -> Iterator[str]:
    """The dsn of a throwaway PostgreSQL server with ``max_prepared_transactions = 0``
    (the default of a fresh installation), stopped and removed after the session."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        pytest.fail(
            "PostgreSQL's server programs (/usr/lib/postgresql/*/bin) are missing: "
            "install postgresql (scripts/services.sh expects it)"
        )
    bin_dir = bins[-1]
    root = tempfile.mkdtemp(prefix="lockgate-pg0-")
    data = os.path.join(root, "data")
    port = _free_port()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    shutil.chown(root, "postgres") if os.geteuid() == 0 else None

    def run(*args: str) -> None:
        subprocess.run([*as_postgres, *args], check=True, capture_output=True, timeout=60)

    run(f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres")
    run(
        f"{bin_dir}/pg_ctl",
        "-D",
        data,
        "-l",
        os.path.join(root, "log"),
        "-w",
        "-o",
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_prepared_transactions=0",
        "start",
    )
    try:
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        query("CREATE TABLE t (k bigint, v bigint)", dsn=dsn)
        yield dsn
    finally:
        run(f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
