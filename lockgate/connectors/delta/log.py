"""The Delta log side of :class:`~lockgate.connectors.DeltaSink`: loading the table,
committing a transaction's data files exactly once, reading schemas.

Exactly once rests on the Delta protocol's *transaction identifiers* (``txn`` actions,
``SetTransaction``, what Spark's own streaming writer uses): each commit of a sink
subtask carries ``(app_id, version)``, and the table keeps, per ``app_id``, the largest
version committed. A commit whose version is not above it was made before (by an
earlier attempt, or by the driver) and is skipped. The check and the commit are one
optimistic Delta transaction: a writer committing the same ``app_id`` concurrently (a
zombie of a failed attempt) makes this commit fail with a conflict, and the retry sees
the version and skips. Commits of other writers (other application ids, other jobs)
do not conflict with appends: delta-rs retries the commit on a newer table version.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

import pyarrow as pa

from ...errors import ConfigurationError
from .files import DataFile

log = logging.getLogger(__name__)

_INSTALL = "install the delta extra: pip install 'lockgate[delta]'"
#: how often a commit is tried again after a conflict it cannot resolve by itself
COMMIT_ATTEMPTS = 5


def deltalake() -> ModuleType:
    """The ``deltalake`` module, or a :class:`ConfigurationError` saying how to install it."""
    try:
        import deltalake as module
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise ConfigurationError(f"DeltaSink needs the deltalake package ({e}); {_INSTALL}") from e
    return module


def load_table(uri: str, storage_options: dict[str, str] | None) -> Any:
    """The newest version of the Delta table at ``uri``, or None when there is none yet."""
    dl = deltalake()
    try:
        return dl.DeltaTable(uri, storage_options=storage_options)
    except dl.exceptions.TableNotFoundError:
        return None


def arrow_schema(table: Any) -> pa.Schema:
    """The table's schema as a ``pyarrow.Schema``."""
    return pa.schema(table.schema().to_arrow())


def delta_schema(schema: pa.Schema) -> Any:
    """``schema`` as a ``deltalake.Schema`` (raises ConfigurationError naming a column
    whose type Delta cannot hold)."""
    dl = deltalake()
    try:
        return dl.Schema.from_arrow(schema)
    except Exception as e:
        for f in schema:
            try:
                dl.Schema.from_arrow(pa.schema([f]))
            except Exception:  # noqa: BLE001
                raise ConfigurationError(
                    f"DeltaSink: column {f.name!r} of type {f.type} cannot be stored in a Delta "
                    f"table ({e}); give schema= with a type Delta supports"
                ) from e
        raise ConfigurationError(f"DeltaSink: schema {schema} is not a Delta schema: {e}") from e


def commit_files(
    uri: str,
    storage_options: dict[str, str] | None,
    *,
    app_id: str,
    version: int,
    files: list[DataFile],
    schema_json: str,
    partition_by: list[str],
) -> bool:
    """Add ``files`` to the table in one Delta commit carrying the transaction identifier
    ``(app_id, version)``, creating the table (with the schema ``schema_json`` and
    ``partition_by``) if there is none. Returns False, committing nothing, when the table
    already holds a version >= ``version`` for ``app_id`` (committed before).
    """
    dl = deltalake()
    from deltalake.transaction import (
        AddAction,
        CommitProperties,
        Transaction,
        create_table_with_add_actions,
    )

    now = int(time.time() * 1000)
    adds = [AddAction(f.path, f.size, dict(f.partition_values), now, True, f.stats) for f in files]
    schema = dl.Schema.from_json(schema_json)
    props = CommitProperties(
        app_transactions=[Transaction(app_id, version)],
        custom_metadata={"lockgate.app_id": app_id, "lockgate.version": str(version)},
    )
    last: Exception | None = None
    for _ in range(COMMIT_ATTEMPTS):
        table = load_table(uri, storage_options)
        if table is None:
            try:
                create_table_with_add_actions(
                    uri,
                    schema,
                    adds,
                    mode="error",
                    partition_by=partition_by or None,
                    storage_options=storage_options,
                    commit_properties=props,
                )
                return True
            except dl.exceptions.DeltaError as e:
                # another subtask (or job) created the table meanwhile: append to it
                last = e
                log.debug("DeltaSink: creating %s failed (%s); trying again as an append", uri, e)
                continue
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return False
        check_schema_fits(arrow_schema(table), pa.schema(schema.to_arrow()), uri)
        check_partitioning(list(table.metadata().partition_columns), partition_by, uri)
        try:
            table.create_write_transaction(
                adds,
                "append",
                schema,
                partition_by=partition_by or None,
                commit_properties=props,
            )
            return True
        except dl.exceptions.CommitFailedError as e:
            # a conflict delta-rs does not retry by itself (another writer of this app id):
            # reload and look at the app id's version again
            last = e
            log.debug("DeltaSink: commit of %s v%d to %s conflicted (%s)", app_id, version, uri, e)
    assert last is not None
    raise last


def check_schema_fits(table_schema: pa.Schema, files_schema: pa.Schema, uri: str) -> None:
    """Raise TypeError naming the columns if files of ``files_schema`` do not fit the table."""
    want = {f.name: f.type for f in table_schema}
    have = {f.name: f.type for f in files_schema}
    wrong = [
        f"{name} ({have.get(name, 'missing')} instead of {want.get(name, 'absent')})"
        for name in sorted(set(want) | set(have))
        if want.get(name) != have.get(name)
    ]
    if wrong:
        raise TypeError(
            f"DeltaSink: the data files do not fit the schema of the table at {uri}: "
            f"{', '.join(wrong)}. The table was created meanwhile with another schema "
            "(by another writer, or another subtask that saw different first records): "
            "give DeltaSink a schema= matching the table"
        )


def check_partitioning(table_columns: list[str], partition_by: list[str], uri: str) -> None:
    if table_columns != partition_by:
        raise ConfigurationError(
            f"DeltaSink: the table at {uri} is partitioned by {table_columns}, the sink by "
            f"{partition_by}; give partition_by={table_columns or None}"
        )
