"""IcebergSink: records appended to an Apache Iceberg table, exactly once (M-X1, M-X2, M-X3).

A :class:`TwoPhaseCommitSink` on `pyiceberg <https://py.iceberg.apache.org>`_, modelled on
Flink's Iceberg sink:

* **Transactions.** Each subtask writes the records of one checkpoint interval into one
  Parquet data file in the table's data folder (``write.data.path``, by default
  ``<table location>/data``), named ``<prefix>-<run>-<attempt>-<subtask>-<n>.parquet``
  (``prefix`` is ``lockgate-<hash of the job's name and the sink's uid>``). The file is
  written as records come (with the table's Iceberg field ids) and closed on the
  checkpoint barrier (pre-commit). No snapshot refers to it yet, so no reader sees it.
* **Commit.** When the checkpoint completes, the subtask commits one ``append``
  snapshot adding its file (a fast append). Its summary records
  ``lockgate.sink-id`` (``<job name>/<sink uid>``), ``lockgate.run-id``,
  ``lockgate.subtask``, ``lockgate.checkpoint-id`` and ``lockgate.transaction`` (the
  file's name without ``.parquet``). Readers see only committed snapshots: a checkpoint
  interval's rows of a subtask appear at once, or not at all.
* **Idempotent commit (the skip on restore).** Before appending, the commit walks the
  current snapshot's history back to the newest snapshot of the same sink id, run and
  subtask: if its checkpoint id is at least the transaction's, the transaction is
  already committed and is skipped. This is Flink's ``max-committed-checkpoint-id``
  rule (its job id is our run id, kept in the transaction, so a restored job checks the
  run that wrote the transaction); it is sound because a subtask commits its
  transactions in checkpoint order. A repeated commit (after a failure between commit
  and acknowledgement, or on restore) therefore adds nothing.
* **Concurrent committers.** Every subtask (and any other writer of the table) commits
  on its own; the catalog refuses a commit based on a stale snapshot
  (``CommitFailedException``). pyiceberg retries it itself (table properties
  ``commit.retry.*``, 4 retries by default); when that gives up, the sink reloads the
  table, checks again whether the transaction is committed, and tries again, at most
  :data:`COMMIT_ROUNDS` times, then fails the task (the transaction stays pending and
  the restarted job commits it, M-X3).
* **End of a bounded input.** With checkpoints the last file is committed by the
  task's final checkpoint (FLIP-147). Without checkpoints the driver commits each
  subtask's single transaction once the job has succeeded, under checkpoint id
  :data:`FINAL_CHECKPOINT_ID` (``2**63 - 1``, Java's ``Long.MAX_VALUE``: what Flink's
  Iceberg committer uses for the end of a batch input).
* **Abort.** An aborted transaction's file is deleted (unless a snapshot already
  committed it). After a restart, subtask 0 deletes the files earlier attempts of this
  run left uncommitted (those of the restored checkpoint excepted); when the job ends,
  the driver deletes every uncommitted file of the run. Only files named with this
  sink's prefix and this run's id are ever deleted. Files of *another* run (one whose
  checkpoint this run restored, pre-committed for checkpoints that never completed)
  are left: they are unreferenced, invisible to readers, and Iceberg's orphan-file
  removal deletes them.

Tables. The table (``"namespace.table"``) is created from the first batch's Arrow
schema when it does not exist (unpartitioned; ``properties`` become its table
properties); subtasks racing to create it settle on one. Existing tables must be
unpartitioned. Each record must fit the table's schema: a field the table has no column
for, a value that cannot be cast to its column's type, or a null in a required column
fails the job naming the field (:class:`IcebergSchemaError`, not restartable). Columns a
record lacks are null.

Catalogs. ``catalog`` is a dict of pyiceberg catalog properties (``"name"`` names the
catalog, default ``"default"``; e.g. ``{"type": "sql", "uri": "sqlite:////data/cat.db",
"warehouse": "file:///data/warehouse"}``, or a PostgreSQL ``uri`` such as
``postgresql+psycopg://user@host/db``, or an ``s3://`` warehouse with ``s3.endpoint``,
``s3.access-key-id``, ...), or a live pyiceberg ``Catalog`` whose name and properties
are taken (a live catalog is not picklable; every process opens its own from the
properties). Data files go through pyiceberg's ``PyArrowFileIO`` (local paths, S3,
GCS, HDFS, Azure).

Snapshot expiry: the skip test reads the snapshot history; expiring the newest snapshot
of a run and subtask while a checkpoint of that run may still be restored could commit
its transactions again. Keep snapshots younger than the oldest checkpoint you may
restore (Flink's sink has the same requirement).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...core.batch import Batch, num_rows, to_arrow
from ...core.state_records import state_record
from ...errors import ConfigurationError, LockgateError, NonRestartableError
from ...runtime.context import RuntimeContext
from ..base import SinkWriter
from ..two_phase_commit import TwoPhaseCommitSink, TwoPhaseCommitWriter

log = logging.getLogger(__name__)

#: the checkpoint id of a transaction committed at the end of a bounded job without
#: checkpoints (Java's Long.MAX_VALUE, as in Flink's Iceberg committer)
FINAL_CHECKPOINT_ID = 2**63 - 1
#: rounds of "reload, check, append" after pyiceberg's own retries gave up on a conflict
COMMIT_ROUNDS = 10
#: summary properties of the sink's snapshots
SINK_ID = "lockgate.sink-id"
RUN_ID = "lockgate.run-id"
SUBTASK = "lockgate.subtask"
CHECKPOINT_ID = "lockgate.checkpoint-id"
TRANSACTION = "lockgate.transaction"
#: the FileIO the sink uses unless the catalog properties name one
PYARROW_FILE_IO = "pyiceberg.io.pyarrow.PyArrowFileIO"

_IDENTIFIER_PART = re.compile(r"[^.\s][^.]*")


class IcebergSchemaError(NonRestartableError, TypeError):
    """A record does not fit the Iceberg table's schema (the message names the field);
    replaying it cannot help, so the job does not restart."""


class IcebergCommitError(LockgateError, RuntimeError):
    """A transaction could not be committed (its data file is gone, or conflicts never
    ended); the message says which and why."""


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
        import pyiceberg.io.pyarrow
    except ImportError as e:
        raise ImportError(
            "lockgate.connectors.IcebergSink needs pyiceberg: pip install 'lockgate[iceberg]' "
            f"({e})"
        ) from e
    import pyiceberg

    return pyiceberg


def split_identifier(table: object, what: str = "IcebergSink") -> tuple[str, ...]:
    """``"namespace.table"`` (or ``"a.b.table"``) as its parts; ConfigurationError otherwise
    (naming ``what``)."""
    if not isinstance(table, str) or not table.strip():
        raise ConfigurationError(f"{what} table must be 'namespace.table' (a str), got {table!r}")
    parts = tuple(table.split("."))
    if len(parts) < 2 or not all(_IDENTIFIER_PART.fullmatch(p) for p in parts):
        raise ConfigurationError(
            f"{what} table must be 'namespace.table' (dot-separated, no empty part, "
            f"e.g. 'analytics.totals'), got {table!r}"
        )
    return parts


def _catalog_config(catalog: object, what: str = "IcebergSink") -> tuple[str, dict[str, str]]:
    """(name, properties) of ``catalog``: a dict of properties or a live pyiceberg Catalog;
    errors name ``what``."""
    if isinstance(catalog, Mapping):
        props = dict(catalog)
        bad = [k for k, v in props.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise ConfigurationError(
                f"{what} catalog properties must map str to str; {bad[0]!r} maps to "
                f"{props[bad[0]]!r} (write numbers and booleans as strings, e.g. 'true')"
            )
        name = props.pop("name", "default")
        if not name:
            raise ConfigurationError(f"{what} catalog 'name' must not be empty")
        if "type" not in props and "uri" not in props and "py-catalog-impl" not in props:
            raise ConfigurationError(
                f"{what} catalog needs a 'type' (e.g. 'sql') or a 'uri', e.g. "
                "{'type': 'sql', 'uri': 'sqlite:////data/catalog.db', "
                "'warehouse': 'file:///data/warehouse'}"
            )
        if props.get("type", "sql" if "uri" in props else "") == "sql" and "uri" not in props:
            raise ConfigurationError(
                f"{what} catalog of type 'sql' needs a 'uri' (an SQLAlchemy URL such as "
                "'sqlite:////data/catalog.db' or 'postgresql+psycopg://user@host/db')"
            )
        return name, props
    _pyiceberg()
    from pyiceberg.catalog import Catalog

    if isinstance(catalog, Catalog):
        return catalog.name, {str(k): str(v) for k, v in catalog.properties.items()}
    raise ConfigurationError(
        f"{what} catalog must be a dict of pyiceberg catalog properties (e.g. "
        f"{{'type': 'sql', 'uri': 'sqlite:////data/catalog.db', 'warehouse': "
        f"'file:///data/warehouse'}}) or a pyiceberg Catalog, got {type(catalog).__name__}"
    )


@state_record("iceberg.transaction")
@dataclass
class IcebergTransaction:
    """One subtask's data file of one checkpoint interval (picklable, small).

    ``files``: the data files' locations (empty: nothing was written, nothing to commit).
    ``checkpoint_id``: set when a checkpoint covers it (None: the end of a bounded input
    without checkpoints, committed as :data:`FINAL_CHECKPOINT_ID`). ``sink_id``, ``run``
    and ``subtask`` are those of the subtask that began it: the skip test on restore
    looks them up, whoever commits."""

    sink_id: str
    run: str
    subtask: int
    token: str
    files: list[str] = field(default_factory=list)
    records: int = 0
    checkpoint_id: int | None = None


class _DataFile:
    """A Parquet data file being written through the table's FileIO."""

    def __init__(self, io: Any, location: str, schema: pa.Schema, compression: str) -> None:
        self.location = location
        self.stream = io.new_output(location).create(overwrite=True)
        self.writer = pq.ParquetWriter(self.stream, schema, compression=compression)

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)

    def close(self) -> None:
        self.writer.close()
        self.stream.close()

    def release(self) -> None:
        try:
            self.writer.close()
        finally:
            self.stream.close()


class IcebergSink(TwoPhaseCommitSink[IcebergTransaction]):
    """Appends records to the Iceberg table ``table`` (``"namespace.table"``) of
    ``catalog``, exactly once: one append snapshot per subtask and completed checkpoint,
    skipped when a restored job commits it again (see the module docstring).

    ``catalog``: a dict of pyiceberg catalog properties (``"name"`` optional) or a
    pyiceberg ``Catalog`` (its name and properties are used). ``properties``: table
    properties for a table the sink creates (ignored when it exists).
    """

    default_name = "iceberg"

    def __init__(
        self,
        catalog: Mapping[str, str] | Any,
        table: str,
        *,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        _pyiceberg()
        self.catalog_name, self.catalog_properties = _catalog_config(catalog)
        self.catalog_properties.setdefault("py-io-impl", PYARROW_FILE_IO)
        self.identifier = split_identifier(table)
        self.table = table
        if properties is not None and (
            not isinstance(properties, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items())
        ):
            raise ConfigurationError(
                f"IcebergSink properties must be a dict of str to str (Iceberg table "
                f"properties such as {{'write.parquet.compression-codec': 'zstd'}}), "
                f"got {properties!r}"
            )
        self.properties = dict(properties or {})
        self._reset()

    def _reset(self) -> None:
        # per-process state, never pickled
        self._catalog_obj: Any = None
        self._table_obj: Any = None
        self._ctx: RuntimeContext | None = None
        self._seq = 0
        self._files: dict[str, _DataFile] = {}
        self._arrow_schema: pa.Schema | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in (
            "_catalog_obj",
            "_table_obj",
            "_ctx",
            "_seq",
            "_files",
            "_arrow_schema",
        ):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"IcebergSink(catalog={self.catalog_name!r}, table={self.table!r})"

    # -- catalog and table -------------------------------------------------------------
    def _catalog(self) -> Any:
        if self._catalog_obj is None:
            _pyiceberg()
            from pyiceberg.catalog import load_catalog

            try:
                self._catalog_obj = load_catalog(self.catalog_name, **self.catalog_properties)
            except Exception as e:
                raise ConfigurationError(
                    f"IcebergSink cannot open catalog {self.catalog_name!r} "
                    f"({_redacted(self.catalog_properties)}): {type(e).__name__}: {e}"
                ) from e
        return self._catalog_obj

    def _load_table(self) -> Any | None:
        """The table, reloaded from the catalog; None when it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = self._catalog().load_table(self.identifier)
        except NoSuchTableError:
            return None
        self._check_table(table)
        self._table_obj = table
        return table

    def _check_table(self, table: Any) -> None:
        if not table.metadata.spec().is_unpartitioned():
            raise ConfigurationError(
                f"IcebergSink writes unpartitioned tables only; {self.table!r} is partitioned "
                f"by {table.metadata.spec()}. Write to an unpartitioned table (and rewrite it "
                "partitioned with Spark if needed)"
            )

    def _create_table(self, schema: pa.Schema) -> Any:
        """Create the table from ``schema`` (a racing subtask may create it first)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        untyped = [f.name for f in schema if pa.types.is_null(f.type)]
        if untyped:
            raise IcebergSchemaError(
                f"IcebergSink cannot create table {self.table!r} from the first records: "
                f"field {untyped[0]!r} is None in all of them, so its type is unknown. "
                "Create the table yourself (pyiceberg catalog.create_table) with its type"
            )
        catalog = self._catalog()
        catalog.create_namespace_if_not_exists(self.identifier[:-1])
        try:
            table = catalog.create_table(self.identifier, schema=schema, properties=self.properties)
            log.info("IcebergSink created table %r (%s)", self.table, table.location())
        except TableAlreadyExistsError:
            table = self._load_table()
        self._table_obj = table
        return table

    def check_before_run(self) -> None:
        """On the driver: the catalog opens (an SQL catalog creates its tables here, once,
        not in racing subtasks), the namespace exists, and an existing table is
        unpartitioned."""
        catalog = self._catalog()
        try:
            catalog.create_namespace_if_not_exists(self.identifier[:-1])
        except Exception as e:
            raise ConfigurationError(
                f"IcebergSink cannot create namespace {'.'.join(self.identifier[:-1])!r} in "
                f"catalog {self.catalog_name!r}: {type(e).__name__}: {e}"
            ) from e
        self._load_table()

    # -- lifecycle ---------------------------------------------------------------------
    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        return _IcebergWriter(self, ctx)

    def open(self, ctx: RuntimeContext) -> None:
        self._ctx = ctx
        self._seq = 0
        self._load_table()

    def close(self) -> None:
        for data_file in self._files.values():
            try:
                data_file.release()
            except Exception as e:  # noqa: BLE001 - closing after a failure
                log.debug("closing an IcebergSink data file failed: %s", e)
        catalog = self._catalog_obj
        self._reset()
        close = getattr(catalog, "close", None)
        if close is not None:
            try:
                close()
            except Exception as e:  # noqa: BLE001 - closing after a failure
                log.debug("closing an IcebergSink catalog failed: %s", e)

    # -- transactions ------------------------------------------------------------------
    def begin_transaction(self) -> IcebergTransaction:
        ctx = self._ctx
        if ctx is None:
            raise RuntimeError("IcebergSink.begin_transaction before open(ctx)")
        token = (
            f"{self._prefix(ctx)}-{ctx.run_id}-{ctx.attempt_number}-{ctx.subtask_index}-{self._seq}"
        )
        self._seq += 1
        return IcebergTransaction(_sink_id(ctx), ctx.run_id, ctx.subtask_index, token)

    def write(self, transaction: IcebergTransaction, batch: Batch) -> None:
        if num_rows(batch) == 0:
            return
        arrow = to_arrow(batch, operator="IcebergSink")
        data_file = self._files.get(transaction.token)
        if data_file is None:
            if transaction.files:
                raise RuntimeError(
                    f"IcebergSink: write to transaction {transaction.token} after its pre-commit"
                )
            table = self._table_obj or self._load_table() or self._create_table(arrow.schema)
            self._arrow_schema = _table_arrow_schema(table)
            location = f"{_data_root(table)}/{transaction.token}.parquet"
            codec = table.metadata.properties.get("write.parquet.compression-codec", "zstd")
            data_file = _DataFile(
                table.io, location, self._arrow_schema, "none" if codec == "uncompressed" else codec
            )
            self._files[transaction.token] = data_file
            transaction.files.append(location)
        assert self._arrow_schema is not None
        data_file.write(conform(arrow, self._arrow_schema, self.table))
        transaction.records += arrow.num_rows

    def pre_commit(self, transaction: IcebergTransaction) -> None:
        self.pre_commit_at(transaction, None)

    def pre_commit_at(self, transaction: IcebergTransaction, checkpoint_id: int | None) -> None:
        """Close the data file (flushed and durable) and note the checkpoint id."""
        transaction.checkpoint_id = checkpoint_id
        data_file = self._files.pop(transaction.token, None)
        if data_file is not None:
            data_file.close()
            _fsync_local(data_file.location)

    def commit(self, transaction: IcebergTransaction) -> None:
        """Append the transaction's data file in one snapshot, unless the history shows it
        committed (see the module docstring); conflicts are retried, bounded."""
        if not transaction.files:
            return
        from pyiceberg.exceptions import CommitFailedException

        checkpoint = _checkpoint_of(transaction)
        last: Exception | None = None
        for round_ in range(COMMIT_ROUNDS):
            table = self._load_table()
            if table is None:
                raise IcebergCommitError(
                    f"IcebergSink cannot commit {transaction.token}: table {self.table!r} "
                    f"no longer exists in catalog {self.catalog_name!r} (dropped while the "
                    f"job ran?); its {transaction.records} records are not published"
                )
            newest = max_committed_checkpoint(
                table, transaction.sink_id, transaction.run, transaction.subtask
            )
            if newest >= checkpoint:
                return
            data_files = [self._data_file(table, transaction, f) for f in transaction.files]
            tx = table.transaction()
            summary = {
                SINK_ID: transaction.sink_id,
                RUN_ID: transaction.run,
                SUBTASK: str(transaction.subtask),
                CHECKPOINT_ID: str(checkpoint),
                TRANSACTION: transaction.token,
            }
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for data_file in data_files:
                    append.append_data_file(data_file)
            try:
                with _conflicts_logged_at_info():
                    tx.commit_transaction()
                return
            except CommitFailedException as e:
                last = e
                log.info(
                    "IcebergSink: commit of %s conflicted with another writer of %r "
                    "(round %d of %d): %s",
                    transaction.token,
                    self.table,
                    round_ + 1,
                    COMMIT_ROUNDS,
                    e,
                )
                threading.Event().wait(random.uniform(0.01, 0.05 * (round_ + 1)))
        raise IcebergCommitError(
            f"IcebergSink could not commit {transaction.token} to {self.table!r}: "
            f"{COMMIT_ROUNDS} rounds of commits conflicted with other writers (last: {last}); "
            "the transaction stays pending and is committed again after the restart"
        ) from last

    def _data_file(self, table: Any, transaction: IcebergTransaction, location: str) -> Any:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        try:
            return parquet_file_to_data_file(table.io, table.metadata, location)
        except FileNotFoundError as e:
            raise IcebergCommitError(
                f"IcebergSink cannot commit {transaction.token}: its data file {location} is "
                f"gone, so {transaction.records} records are lost (was the table's data "
                "folder cleaned, e.g. by orphan-file removal with a too short age, while the "
                "job ran?)"
            ) from e

    def abort(self, transaction: IcebergTransaction) -> None:
        """Delete the transaction's data file, unless a snapshot committed it."""
        data_file = self._files.pop(transaction.token, None)
        if data_file is not None:
            try:
                data_file.release()
            except Exception as e:  # noqa: BLE001 - aborting after a failure
                log.debug("closing an aborted IcebergSink data file failed: %s", e)
        if not transaction.files:
            return
        table = self._table_obj or self._load_table()
        if table is None:
            return
        tokens = committed_tokens(table, transaction.sink_id, transaction.run, transaction.subtask)
        if transaction.token in tokens:
            return
        for location in transaction.files:
            _delete(table.io, location)

    def abort_lingering(
        self, keep: list[IcebergTransaction], ctx: RuntimeContext, *, job_ended: bool = False
    ) -> None:
        """Delete the data files of this run that no snapshot committed, except those of
        ``keep``: by subtask 0 after recovery (files of earlier attempts), and by the
        driver when the job has ended (every attempt's). Files of other runs and other
        sinks are never touched."""
        if not job_ended and (ctx.attempt_number == 0 or ctx.subtask_index != 0):
            return
        table = self._load_table()
        if table is None:
            return
        start = f"{self._prefix(ctx)}-{ctx.run_id}-"
        kept = {t.token for t in keep if isinstance(t, IcebergTransaction)}
        done = committed_tokens(table, _sink_id(ctx), ctx.run_id, None)
        removed = 0
        for location in _list_files(table.io, _data_root(table)):
            name = location.rsplit("/", 1)[-1]
            if not (name.startswith(start) and name.endswith(".parquet")):
                continue
            token = name[: -len(".parquet")]
            attempt = token[len(start) :].split("-", 1)[0]
            if token in kept or token in done:
                continue
            if not job_ended and attempt == str(ctx.attempt_number):
                continue
            _delete(table.io, location)
            removed += 1
        if removed:
            log.info(
                "IcebergSink '%s': deleted %d uncommitted data files of run %s",
                ctx.operator_name,
                removed,
                ctx.run_id,
            )

    # -- helpers -----------------------------------------------------------------------
    @staticmethod
    def _prefix(ctx: RuntimeContext) -> str:
        digest = hashlib.sha1(f"{ctx.job_name}\0{ctx.operator_uid}".encode()).hexdigest()
        return f"lockgate-{digest[:12]}"


class _IcebergWriter(TwoPhaseCommitWriter[IcebergTransaction]):
    """Gives a transaction pre-committed at the end of input the id of the final
    checkpoint that covers it (FLIP-147), so its snapshot records the real id."""

    def snapshot_state(self, checkpoint_id: int) -> Any:
        for pending in self._pending:
            if pending.checkpoint_id is None:
                pending.transaction.checkpoint_id = checkpoint_id
        return super().snapshot_state(checkpoint_id)


# ----------------------------------------------------------------------------- helpers


def _sink_id(ctx: RuntimeContext) -> str:
    return f"{ctx.job_name}/{ctx.operator_uid}"


def _checkpoint_of(transaction: IcebergTransaction) -> int:
    cp = transaction.checkpoint_id
    return FINAL_CHECKPOINT_ID if cp is None else int(cp)


def _own_snapshots(table: Any, sink_id: str, run: str, subtask: int | None) -> Iterator[Any]:
    """The summaries of the sink's snapshots of ``run`` (and ``subtask``; None: every
    subtask) in the current snapshot's history, newest first."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is None or summary[SINK_ID] != sink_id or summary[RUN_ID] != run:
            continue
        if subtask is None or summary[SUBTASK] == str(subtask):
            yield summary


def max_committed_checkpoint(table: Any, sink_id: str, run: str, subtask: int) -> int:
    """The checkpoint id of the newest snapshot of the sink's ``run`` and ``subtask`` in
    the current snapshot's history (-1: none), as Flink's ``getMaxCommittedCheckpointId``;
    the walk stops at that snapshot."""
    for summary in _own_snapshots(table, sink_id, run, subtask):
        checkpoint = summary[CHECKPOINT_ID]
        if checkpoint is not None:
            return int(checkpoint)
    return -1


def committed_tokens(table: Any, sink_id: str, run: str, subtask: int | None) -> set[str]:
    """The transactions (tokens) of the sink's ``run`` (and ``subtask``) the current
    snapshot's history holds."""
    return {
        str(summary[TRANSACTION])
        for summary in _own_snapshots(table, sink_id, run, subtask)
        if summary[TRANSACTION]
    }


def _table_arrow_schema(table: Any) -> pa.Schema:
    """The table's schema in Arrow, with the Iceberg field ids Parquet files carry."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(table.schema())


def _data_root(table: Any) -> str:
    root = table.metadata.properties.get("write.data.path") or f"{table.location()}/data"
    return str(root).rstrip("/")


def conform(batch: pa.RecordBatch, schema: pa.Schema, table: str) -> pa.RecordBatch:
    """``batch`` with the columns and types of ``schema`` (missing nullable columns
    filled with nulls); :class:`IcebergSchemaError` naming the first field that does
    not fit."""
    names = set(schema.names)
    for name in batch.schema.names:
        if name not in names:
            raise IcebergSchemaError(
                f"IcebergSink: record field {name!r} is not a column of table {table!r} "
                f"(columns: {', '.join(schema.names)}); drop it before the sink or add the "
                "column to the table (schema evolution)"
            )
    arrays = []
    for target in schema:
        index = batch.schema.get_field_index(target.name)
        if index < 0:
            if not target.nullable:
                raise IcebergSchemaError(
                    f"IcebergSink: records lack field {target.name!r}, a required column "
                    f"of table {table!r}"
                )
            arrays.append(pa.nulls(batch.num_rows, target.type))
            continue
        column = batch.column(index)
        if not column.type.equals(target.type):
            column = _cast(column, target, table)
        if not target.nullable and column.null_count:
            raise IcebergSchemaError(
                f"IcebergSink: field {target.name!r} is null in {column.null_count} records, "
                f"but column {target.name!r} of table {table!r} is required"
            )
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _kind(t: pa.DataType) -> str:
    """The family of an Arrow type: values cast only within one (no text to numbers)."""
    checks = (
        ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("bool", pa.types.is_boolean),
        ("number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)),
        ("number", pa.types.is_decimal),
        ("timestamp", pa.types.is_timestamp),
        ("date", pa.types.is_date),
        ("time", pa.types.is_time),
    )
    for kind, check in checks:
        if check(t):
            return kind
    return str(t).split("<", 1)[0]  # nested and other types: by their name (struct, list)


def _cast(column: Any, target: pa.Field, table: str) -> Any:
    """``column`` cast to ``target``'s type, safely (no overflow, no truncation)."""
    problem = ""
    if _kind(column.type) != _kind(target.type) and not pa.types.is_null(column.type):
        problem = "a different kind of value"
    else:
        try:
            return column.cast(target.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            problem = str(e)
    # not chained: the error is the record's, and a restart cannot fix it
    raise IcebergSchemaError(
        f"IcebergSink: field {target.name!r} of type {column.type} does not fit column "
        f"{target.name!r} ({target.type}) of table {table!r}: {problem}; convert it before "
        "the sink or evolve the table's schema"
    )


_committing = threading.local()


class _ConflictRetriesAtInfo(logging.Filter):
    """pyiceberg logs each retry of a conflicting commit at WARNING. Subtasks committing
    the same checkpoint conflict as a rule, so during the sink's own commits (on this
    thread only) those records are demoted to INFO; other pyiceberg users keep theirs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(_committing, "active", False) and record.levelno == logging.WARNING:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_conflict_filter = _ConflictRetriesAtInfo()


@contextlib.contextmanager
def _conflicts_logged_at_info() -> Iterator[None]:
    logger = logging.getLogger("pyiceberg.table")
    if _conflict_filter not in logger.filters:
        logger.addFilter(_conflict_filter)
    _committing.active = True
    try:
        yield
    finally:
        _committing.active = False


def _fsync_local(location: str) -> None:
    """fsync a data file on a local filesystem (object stores are durable on close)."""
    path = location[len("file://") :] if location.startswith("file://") else location
    if "://" in path or not os.path.exists(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _delete(io: Any, location: str) -> None:
    try:
        io.delete(location)
    except FileNotFoundError:
        pass


def _list_files(io: Any, root: str) -> list[str]:
    """The locations of the files directly in the folder ``root`` (none if it is missing)."""
    from pyarrow.fs import FileSelector, FileType

    scheme, netloc, path = io.parse_location(root, io.properties)
    fs = io.fs_by_scheme(scheme, netloc)
    infos = fs.get_file_info(FileSelector(path, allow_not_found=True))
    return [f"{root}/{info.base_name}" for info in infos if info.type == FileType.File]


def _redacted(properties: Mapping[str, str]) -> str:
    secret = re.compile(r"secret|password|token|credential|key-id|session", re.I)
    shown = {k: ("***" if secret.search(k) else v) for k, v in properties.items()}
    for k, v in shown.items():
        if "://" in v and "@" in v:
            shown[k] = re.sub(r"://[^@/]*@", "://***@", v)
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
