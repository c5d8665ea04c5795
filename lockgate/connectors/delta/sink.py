"""DeltaSink: exactly-once output into a Delta Lake table (two-phase commit, M-X2).

Built on :class:`TwoPhaseCommitSink` and the ``deltalake`` package (delta-rs):

* a transaction is one checkpoint interval of one subtask. Its records go into Parquet
  files in the table's folder as they arrive (one open file per partition); on the
  checkpoint barrier the files are closed (pre-commit). Files no Delta commit adds are
  invisible to every Delta reader: the Delta log is the truth;
* when the checkpoint completes, one Delta commit adds exactly those files, carrying the
  transaction identifier ``(app_id, version)`` (a ``txn`` action, as Spark's streaming
  writer does) with ``app_id = "lockgate:<job>:<sink uid>:<subtask>:<run id>"`` and
  ``version`` = the checkpoint id. A commit repeated after a restore (or by the driver)
  finds the table's version for its app id >= its own and is skipped: every record is
  published once, never twice;
* a transaction without records commits nothing (no empty Delta versions);
* the first commit creates the table (schema from ``schema=`` or the first records;
  ``partition_by`` as given) when there is none; a subtask that loses that race appends;
* transactions begun after the restored checkpoint are discarded, their files deleted
  (``abort``, ``abort_lingering``), but only files of runs proven dead: this run's
  earlier attempts, and the run whose checkpoint this run restored once no process of it
  holds its run lock (:mod:`.run_locks`; a job forked from a savepoint of a job that
  goes on leaves that job's files to it). Files of other jobs, sinks and runs, and every
  file a commit may have added, are never deleted (see ``DeltaSink.abort_lingering``).

``mode="merge"`` (with ``key=``) applies a changelog instead (:mod:`.delta_merge`): each
transaction's changes, compacted per key (the last change wins), are staged in one file
on the barrier and merged into the table by one Delta commit (delta-rs's ``MERGE``:
deletes included) with the same ``(app_id, version)`` rule, so every change is applied
once.

The run id in the app id keeps a new run (a fresh start, or a new checkpoint storage
whose ids start at 1 again) from being mistaken for a repeat of an earlier run. With
rescaling every restored transaction keeps the app id it was begun with, and new
subtask indexes get app ids of their own. At the end of a bounded input the last
transaction's version is the newest checkpoint id the subtask saw plus one (1 when
there were no checkpoints: the driver commits it when the job has succeeded).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ...core.batch import Batch, num_rows, user_view
from ...core.state_records import state_record
from ...errors import ConfigurationError, LockgateError
from ...runtime.context import RuntimeContext
from ..changelog_compaction import ChangeBuffer
from ..local_paths import local_path
from ..run_locks import RunLock, forget_run, hold_run_lock, run_is_alive, writer_run_lock
from ..two_phase_commit import TwoPhaseCommitSink
from .files import (
    PARTITION_TYPES,
    DataFile,
    FileSet,
    file_prefix,
    parse_name,
    partition_type_ok,
)
from .log import (
    arrow_schema,
    check_partitioning,
    check_schema_fits,
    commit_files,
    delta_schema,
    deltalake,
    load_table,
)
from .merge import merge_changes, staged_table, staging_schema
from .records import conform, infer_schema

log = logging.getLogger(__name__)

MODES = ("append", "merge")
#: key column types a merge can match on (compared with ``=`` in the merge predicate)
_KEY_TYPES = "integers, strings, binaries, booleans, decimals, dates and timestamps"
#: URL schemes delta-rs (and so DeltaSink) writes to; a plain path is a local folder
SCHEMES = ("file", "s3", "s3a", "gs", "az", "abfs", "abfss")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


class DeltaCommitError(LockgateError, RuntimeError):
    """A Delta commit failed (``__cause__`` says why); the transaction stays pending and
    is committed again after the restart (M-X3)."""


@state_record("delta.transaction")
@dataclass
class DeltaTransaction:
    """One checkpoint interval of one subtask (picklable and small: names, not data).

    ``version`` is set by pre-commit (the checkpoint id); ``files`` are the closed data
    files the commit adds; ``schema_json`` the Delta schema they were written with.
    """

    app_id: str
    #: the lowest version this transaction can get (also in its files' names)
    floor: int
    #: start of its data files' names
    stem: str
    version: int | None = None
    files: list[DataFile] = field(default_factory=list)
    schema_json: str = ""
    records: int = 0
    #: mode="merge": ``files`` holds the staged changes file, merged (not added) by commit
    merge: bool = False

    @property
    def run_and_subtask(self) -> tuple[str, int]:
        _, subtask, run = self.app_id.rsplit(":", 2)
        return run, int(subtask)


def app_id_of(job_name: str, sink_uid: str, subtask: int, run_id: str) -> str:
    """The Delta transaction identifier's application id of one sink subtask in one run."""
    return f"lockgate:{job_name}:{sink_uid}:{subtask}:{run_id or 'norun'}"


def _keys(key: object, mode: str) -> list[str]:
    """``key`` as a list of column names, checked against ``mode``."""
    keys = [key] if isinstance(key, str) else list(key) if isinstance(key, (list, tuple)) else key
    if keys is not None and (
        not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)
    ):
        raise ConfigurationError(
            f"DeltaSink key must be a column name or a list of them, got {key!r}"
        )
    keys = keys or []
    bad = [k for k in keys if "`" in k]
    if bad:
        raise ConfigurationError(
            f"DeltaSink key column {bad[0]!r}: a name with '`' is not supported"
        )
    if len(set(keys)) != len(keys):
        raise ConfigurationError(f"DeltaSink key names a column twice: {keys}")
    if mode == "merge" and not keys:
        raise ConfigurationError(
            "DeltaSink mode='merge' needs key=<column or columns> identifying a row, to "
            "update and delete rows by, e.g. DeltaSink(uri, mode='merge', key='id')"
        )
    if mode != "merge" and keys:
        raise ConfigurationError(
            f"DeltaSink key={key!r} is for mode='merge' (which applies inserts, updates "
            f"and deletes by key); mode={mode!r} adds every record as a row: drop key= or "
            "use mode='merge'"
        )
    return keys


def _table_uri(uri: object, what: str = "DeltaSink table_uri") -> str:
    """``uri`` as delta-rs takes it (a local folder made absolute); ``what`` names the
    argument in errors."""
    if not isinstance(uri, (str, os.PathLike)) or not os.fspath(uri):
        raise ConfigurationError(
            f"{what} must be a non-empty str or path (a local folder, a file:// "
            f"URL, or an s3:// / gs:// / az:// URL), got {uri!r}"
        )
    text = os.fspath(uri)
    assert isinstance(text, str)
    m = _SCHEME.match(text)
    if m is None or m.group(1).lower() == "file":
        return os.path.abspath(local_path(what, text))
    scheme = m.group(1).lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"{what} {text!r}: {scheme}:// is not supported; give a local "
            f"folder or a URL with one of: {', '.join(s + '://' for s in SCHEMES)}"
        )
    if not text[m.end() :].strip("/"):
        raise ConfigurationError(f"{what} {text!r} names no bucket or container")
    return text


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DeltaSink(TwoPhaseCommitSink[DeltaTransaction]):
    """Writes records (dicts, or Arrow batches) into the Delta Lake table at ``table_uri``,
    exactly once: each subtask publishes one Delta commit per checkpoint interval with
    records, atomically, when the checkpoint completes (see the module docstring).

    ``table_uri``: a local folder, a ``file://`` URL, or an object store URL (``s3://``,
    ``gs://``, ``az://``, ``abfss://``) with ``storage_options`` as delta-rs takes them
    (e.g. ``{"AWS_ENDPOINT_URL": ..., "AWS_REGION": ..., "AWS_ACCESS_KEY_ID": ...}``).
    ``mode``: ``"append"`` (records are added to the table) or ``"merge"`` (a changelog
    is applied by ``key``: ``+I``/``+U`` insert or update the row with that key, ``-D``
    and ``-U`` delete it; one Delta ``MERGE`` commit per subtask and checkpoint, exactly
    once; changes of one key must reach one subtask: ``key_by`` the key upstream).
    ``key``: the column name(s) identifying a row, for ``"merge"`` only; the sink keeps
    them unique in the table when it is the table's only writer.
    ``partition_by``: columns to partition a new table by (integers, strings, booleans or
    dates); an existing table's partitioning must be the same. ``schema``: a
    ``pyarrow.Schema`` for a new table (default: the types of the first records); an
    existing table's schema always rules, and a record that does not fit it fails the
    job naming the field.
    """

    default_name = "delta"

    def __init__(
        self,
        table_uri: str | os.PathLike[str],
        *,
        mode: str = "append",
        key: str | list[str] | tuple[str, ...] | None = None,
        partition_by: list[str] | str | None = None,
        storage_options: dict[str, str] | None = None,
        schema: pa.Schema | None = None,
    ) -> None:
        deltalake()  # fails early, saying how to install it
        self.table_uri = _table_uri(table_uri)
        if mode not in MODES:
            raise ConfigurationError(
                f"DeltaSink mode must be 'append' or 'merge', got {mode!r}: 'append' adds "
                "each checkpoint's records to the table, 'merge' (with key=) applies a "
                "changelog's inserts, updates and deletes by key (to replace a table's "
                "content, delete or overwrite it before the job starts)"
            )
        self.mode = mode
        self.key: list[str] = _keys(key, mode)
        if isinstance(partition_by, str):
            partition_by = [partition_by]
        if partition_by is None:
            partition_by = []
        if not isinstance(partition_by, (list, tuple)) or not all(
            isinstance(c, str) and c for c in partition_by
        ):
            raise ConfigurationError(
                f"DeltaSink partition_by must be a column name or a list of them, got "
                f"{partition_by!r}"
            )
        if len(set(partition_by)) != len(partition_by):
            raise ConfigurationError(f"DeltaSink partition_by names a column twice: {partition_by}")
        self.partition_by: list[str] = list(partition_by)
        if storage_options is not None and (
            not isinstance(storage_options, dict)
            or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in storage_options.items()
            )
        ):
            raise ConfigurationError(
                "DeltaSink storage_options must be a dict of str to str (delta-rs's object "
                f"store options, e.g. {{'AWS_REGION': 'us-east-1'}}), got {storage_options!r}"
            )
        self.storage_options = dict(storage_options) if storage_options else None
        if schema is not None:
            if not isinstance(schema, pa.Schema):
                raise ConfigurationError(
                    f"DeltaSink schema must be a pyarrow.Schema, got {type(schema).__name__}"
                )
            schema = self._delta_arrow(schema)
            self._check_key(schema, "the schema= given")
        self.schema: pa.Schema | None = schema
        self._reset()

    def _check_key(self, schema: pa.Schema, what: str) -> None:
        """The key columns are in ``schema`` (``what`` names it) and of a type a merge can
        match on."""
        missing = [k for k in self.key if k not in schema.names]
        if missing:
            raise ConfigurationError(
                f"DeltaSink key {self.key}: {what} has no column(s) {missing} (columns: "
                f"{', '.join(schema.names)}); key by columns of the table"
            )
        for k in self.key:
            t = schema.field(k).type
            if pa.types.is_nested(t) or pa.types.is_floating(t) or pa.types.is_null(t):
                raise ConfigurationError(
                    f"DeltaSink key column {k!r} has type {t}; a merge matches rows by "
                    f"equal keys, so key by {_KEY_TYPES}"
                )

    @property
    def accepts_changes(self) -> bool:
        """True in ``"merge"`` mode: updates and deletes are applied by key."""
        return self.mode == "merge"

    # -------------------------------------------------------------- configuration

    def _delta_arrow(self, schema: pa.Schema) -> pa.Schema:
        """``schema`` as the table will hold it (Delta's types), partition columns checked."""
        delta = pa.schema(delta_schema(schema).to_arrow())
        # keep nullability as given (Delta's arrow form keeps it too, but be explicit)
        delta = pa.schema(
            [pa.field(f.name, f.type, nullable=schema.field(f.name).nullable) for f in delta]
        )
        for col in self.partition_by:
            if col not in delta.names:
                raise ConfigurationError(
                    f"DeltaSink partition column {col!r} is not in the schema (columns: "
                    f"{', '.join(delta.names)}); fix partition_by or the schema"
                )
            if not partition_type_ok(delta.field(col).type):
                raise ConfigurationError(
                    f"DeltaSink partition column {col!r} has type {delta.field(col).type}; "
                    f"partition by {PARTITION_TYPES} only"
                )
        if self.partition_by and len(self.partition_by) == len(delta):
            raise ConfigurationError(
                "DeltaSink: every column is a partition column; a table needs at least one "
                "data column"
            )
        return delta

    @property
    def commits_on_checkpoint(self) -> bool:
        """Always: records are published by the Delta commit of a completed checkpoint."""
        return True

    def _reset(self) -> None:
        # per-subtask state, set up by open(); never pickled
        self._ctx: RuntimeContext | None = None
        self._app_id = ""
        self._prefix = ""
        self._stem = ""
        self._last_id = 0
        self._seq = 0
        self._table_schema: pa.Schema | None = None
        self._fs: Any = None
        self._sets: dict[str, FileSet] = {}
        self._run_lock: RunLock | None = None
        #: mode="merge": the open transactions' changes (by stem), staged on the barrier
        self._changes: dict[str, ChangeBuffer] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in (
            "_ctx",
            "_app_id",
            "_prefix",
            "_stem",
            "_last_id",
            "_seq",
            "_table_schema",
            "_fs",
            "_sets",
            "_run_lock",
            "_changes",
        ):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        keyed = f", mode='merge', key={self.key!r}" if self.mode == "merge" else ""
        return f"DeltaSink({self.table_uri!r}{keyed}, partition_by={self.partition_by!r})"

    def _where(self) -> str:
        ctx = self._ctx
        if ctx is None:
            return f"DeltaSink({self.table_uri})"
        return (
            f"DeltaSink '{ctx.operator_name}' ({self.table_uri}, subtask "
            f"{ctx.subtask_index + 1}/{ctx.parallelism})"
        )

    def filesystem(self) -> Any:
        """A ``pyarrow.fs.FileSystem`` rooted at the table folder (delta-rs's object store,
        configured by ``storage_options``)."""
        if self._fs is None:
            import pyarrow.fs as pafs
            from deltalake.fs import DeltaStorageHandler

            if not _SCHEME.match(self.table_uri):
                os.makedirs(self.table_uri, exist_ok=True)
            self._fs = pafs.PyFileSystem(
                DeltaStorageHandler(self.table_uri, options=self.storage_options)
            )
        return self._fs

    # ------------------------------------------------------------ transactions

    def open(self, ctx: RuntimeContext) -> None:
        """Name this subtask's transactions and check an existing table against the sink."""
        self._ctx = ctx
        self._app_id = app_id_of(ctx.job_name, ctx.operator_uid, ctx.subtask_index, ctx.run_id)
        self._prefix = file_prefix(ctx.job_name, ctx.operator_uid)
        run = re.sub(r"[^0-9A-Za-z_]", "_", ctx.run_id) or "norun"
        self._stem = f"{self._prefix}{ctx.subtask_index}-{run}-{ctx.attempt_number}"
        if self._local and ctx.run_id:  # this run is alive while this writer is open
            self._run_lock = writer_run_lock(self.table_uri, run, self._where())
        table = load_table(self.table_uri, self.storage_options)
        if table is not None:
            existing = arrow_schema(table)
            check_partitioning(
                list(table.metadata().partition_columns), self.partition_by, self.table_uri
            )
            if self.schema is not None:
                try:
                    check_schema_fits(existing, self.schema, self.table_uri)
                except TypeError as e:
                    raise ConfigurationError(str(e).replace("data files", "schema= given")) from e
            if self.mode == "merge":
                self._check_key(existing, f"the table at {self.table_uri}")
            self._table_schema = existing
        else:
            self._table_schema = self.schema

    def begin_transaction(self) -> DeltaTransaction:
        if self._ctx is None:
            raise RuntimeError("DeltaSink.begin_transaction before open(ctx)")
        self._seq += 1
        floor = self._last_id + 1
        return DeltaTransaction(self._app_id, floor, f"{self._stem}-{floor}-{self._seq}")

    def write(self, transaction: DeltaTransaction, batch: Batch) -> None:
        """Append ``batch``'s records to the transaction's data files (one per partition)."""
        if num_rows(batch) == 0:
            return
        if self._table_schema is None:
            inferred = self._delta_arrow(infer_schema(user_view(batch), self._where()))
            if self.mode == "merge":
                self._check_key(inferred, "the first records")
            self._table_schema = inferred
        if self.mode == "merge":
            if transaction.version is not None:
                raise RuntimeError(f"{self._where()}: write after the transaction's pre-commit")
            changes = self._changes.get(transaction.stem)
            if changes is None:
                changes = self._changes[transaction.stem] = ChangeBuffer(self.key, self._where())
            changes.add(batch)
            transaction.records += num_rows(batch)
            return
        schema = self._table_schema
        table = conform(batch, schema, self._where())
        files = self._sets.get(transaction.stem)
        if files is None:
            if transaction.version is not None:
                raise RuntimeError(f"{self._where()}: write after the transaction's pre-commit")
            data = pa.schema([f for f in schema if f.name not in self.partition_by])
            files = FileSet(self.filesystem(), transaction.stem, data, list(self.partition_by))
            self._sets[transaction.stem] = files
        files.write(table)
        transaction.records += table.num_rows

    def pre_commit(self, transaction: DeltaTransaction) -> None:
        self.pre_commit_at(transaction, None)

    def pre_commit_at(self, transaction: DeltaTransaction, checkpoint_id: int | None) -> None:
        """Close the transaction's data files (durable) and give it its version: the
        checkpoint id, or at the end of input the newest id seen plus one. ``"merge"``:
        the compacted changes are staged in one closed file first."""
        changes = self._changes.pop(transaction.stem, None)
        if changes is not None and len(changes):
            assert self._table_schema is not None
            staged = staged_table(changes.compact(), self._table_schema, self._where())
            files_of = FileSet(
                self.filesystem(), transaction.stem, staging_schema(self._table_schema), []
            )
            files_of.write(staged)
            self._sets[transaction.stem] = files_of
            transaction.merge = True
        files = self._sets.pop(transaction.stem, None)
        if files is not None:
            transaction.files = files.close()
            self._sync(transaction.files)
            assert self._table_schema is not None
            transaction.schema_json = delta_schema(self._table_schema).to_json()
        if checkpoint_id is None:
            transaction.version = max(self._last_id + 1, transaction.floor)
        else:
            transaction.version = checkpoint_id
            self._last_id = max(self._last_id, checkpoint_id)

    def _sync(self, files: list[DataFile]) -> None:
        """On a local table, fsync the closed files and their folders, so that a pending
        transaction survives a machine crash (object stores are durable once a file is
        closed)."""
        if _SCHEME.match(self.table_uri):
            return
        folders = set()
        for f in files:
            path = os.path.join(self.table_uri, f.path)
            _fsync(path)
            folders.add(os.path.dirname(path))
        for folder in folders:
            _fsync(folder)

    def commit(self, transaction: DeltaTransaction) -> None:
        """One Delta commit adding the transaction's files with its ``(app_id, version)``;
        skipped when the table already holds that version (idempotent)."""
        if not transaction.files:
            return
        if transaction.version is None:
            raise RuntimeError(f"{self._where()}: commit of {transaction!r} before pre-commit")
        if transaction.merge:
            self._commit_merge(transaction)
            return
        try:
            committed = commit_files(
                self.table_uri,
                self.storage_options,
                app_id=transaction.app_id,
                version=transaction.version,
                files=transaction.files,
                schema_json=transaction.schema_json,
                partition_by=self.partition_by,
            )
        except (ConfigurationError, TypeError):
            raise
        except Exception as e:
            raise DeltaCommitError(
                f"{self._where()}: could not commit {transaction.records} records "
                f"({len(transaction.files)} files) as {transaction.app_id} v"
                f"{transaction.version}: {e}"
            ) from e
        if not committed:
            log.info(
                "%s: %s v%d was committed before; skipped",
                self._where(),
                transaction.app_id,
                transaction.version,
            )

    def _commit_merge(self, transaction: DeltaTransaction) -> None:
        """Merge the staged changes (one Delta commit with the transaction's ``(app_id,
        version)``, skipped when the table records it), then delete the staged file."""
        assert transaction.version is not None
        try:
            merged = merge_changes(
                self.table_uri,
                self.storage_options,
                app_id=transaction.app_id,
                version=transaction.version,
                staged=transaction.files[0].path,
                filesystem=self.filesystem(),
                key=self.key,
                schema_json=transaction.schema_json,
                partition_by=self.partition_by,
                where=self._where(),
            )
        except (ConfigurationError, TypeError, LockgateError):
            raise
        except Exception as e:
            raise DeltaCommitError(
                f"{self._where()}: could not merge {transaction.records} changes as "
                f"{transaction.app_id} v{transaction.version}: {e}"
            ) from e
        if not merged:
            log.info(
                "%s: %s v%d was merged before; skipped",
                self._where(),
                transaction.app_id,
                transaction.version,
            )
        # in the log now: the staged file is needed by nobody (a repeat is skipped)
        self._delete([f.path for f in transaction.files])

    def abort(self, transaction: DeltaTransaction) -> None:
        """Delete the transaction's data files (those still open and those closed)."""
        self._changes.pop(transaction.stem, None)
        paths: list[str] = []
        files = self._sets.pop(transaction.stem, None)
        if files is not None:
            paths.extend(files.release())
        paths.extend(f.path for f in transaction.files)
        self._delete(paths)

    def finish_recovery(self, recovered: list[DeltaTransaction]) -> None:
        """Continue versions after the restored transactions of this subtask's app id."""
        for t in recovered:
            if isinstance(t, DeltaTransaction) and t.app_id == self._app_id:
                seen = t.version if t.version is not None else t.floor - 1
                self._last_id = max(self._last_id, seen)

    @property
    def _local(self) -> bool:
        """Whether the table is a local (or network) folder, where runs hold run locks."""
        return not _SCHEME.match(self.table_uri)

    def hold_run(self, ctx: RuntimeContext) -> RunLock | None:
        """On the driver, for the whole run: the run's lock in the table folder (see
        :mod:`.run_locks`); None on an object store (no locks there)."""
        if not self._local or not ctx.run_id:
            return None
        return hold_run_lock(self.table_uri, re.sub(r"[^0-9A-Za-z_]", "_", ctx.run_id))

    def abort_lingering(
        self, keep: list[DeltaTransaction], ctx: RuntimeContext, *, job_ended: bool = False
    ) -> None:
        """Delete data files that earlier attempts wrote, no commit added and no run that
        may still be running will add (M-X2).

        Done once, by subtask 0 after recovery or by the driver when the job has ended.
        A file is deleted only when its name says it is this sink's, it is in no
        transaction of ``keep``, its floor is above the version the table holds for its
        app id (then no commit ever added it), and its run is proven dead:

        * this run's files of earlier attempts (stopped before the attempt now running
          started; at the job's end, every attempt's);
        * files of a run whose transactions were restored (``keep``) only once no process
          of it holds its run lock in the table folder (:mod:`.run_locks`, the file-system
          form of PostgresSink's run locks: the run's driver holds it for the whole run,
          each writer while open). A restored run still running (a job forked from a
          savepoint of a job that goes on) keeps its files: it commits them. Where nothing
          can prove it dead (an object store, or no lock file of it), its files stay too.

        Files of other jobs, sinks and runs are never touched. Files left this way are
        invisible to every reader (no commit adds them); their run deletes them when it
        restarts or ends, and ``DeltaTable.vacuum`` removes those of a run that died
        without ending once older than its retention (7 days by default; keep it longer
        than a checkpoint interval plus the checkpoint timeout).
        """
        if not job_ended and (ctx.subtask_index != 0 or (ctx.attempt_number == 0 and not keep)):
            return  # not subtask 0, or a fresh start: no earlier attempt, no restored run
        prefix = file_prefix(ctx.job_name, ctx.operator_uid)
        run = re.sub(r"[^0-9A-Za-z_]", "_", ctx.run_id) or "norun"
        ours = [t for t in keep if isinstance(t, DeltaTransaction)]
        restored = {t.run_and_subtask: t.app_id for t in ours}
        kept = {f.path for t in ours for f in t.files}
        table = load_table(self.table_uri, self.storage_options)
        versions: dict[str, int | None] = {}
        alive: dict[str, bool | None] = {}
        doomed: list[str] = []
        for path in self._own_files(prefix):
            owner = parse_name(prefix, path.rsplit("/", 1)[-1])
            if owner is None or path in kept:
                continue
            if owner.run == run:
                if not job_ended and owner.attempt == ctx.attempt_number:
                    continue  # the attempt now running
                app_id = app_id_of(ctx.job_name, ctx.operator_uid, owner.subtask, ctx.run_id)
            elif (owner.run, owner.subtask) in restored:
                if not self._ended(owner.run, alive):
                    continue  # it may still commit it
                app_id = restored[(owner.run, owner.subtask)]
            else:
                continue
            if app_id not in versions:
                versions[app_id] = None if table is None else table.transaction_version(app_id)
            done = versions[app_id]
            if done is None or owner.floor > done:
                doomed.append(path)
        where = self._where() if self._ctx else f"DeltaSink '{ctx.operator_name}'"
        if doomed:
            log.info(
                "%s: deleting %d data files ended attempts wrote and never committed",
                where,
                len(doomed),
            )
            self._delete(doomed)
        for other, state in alive.items():
            if state is False:
                forget_run(self.table_uri, other)  # nothing of it is left to prove
            else:
                log.info(
                    "%s: run %s, whose checkpoint this run restored, %s; its uncommitted "
                    "data files are left to it (or to DeltaTable.vacuum)",
                    where,
                    other,
                    "is still running" if state else "cannot be proven ended",
                )

    def _ended(self, run: str, alive: dict[str, bool | None]) -> bool:
        """Whether no process of ``run`` is left (its run lock is free); ``alive`` caches
        :func:`.run_locks.run_is_alive` per run (None: nothing can tell)."""
        if run not in alive:
            alive[run] = run_is_alive(self.table_uri, run) if self._local else None
        return alive[run] is False

    def _own_files(self, prefix: str) -> list[str]:
        """Paths (relative to the table root) of files named with ``prefix``, in the table
        folder and its partition folders (the Delta log's folder is skipped)."""
        import pyarrow.fs as pafs

        fs = self.filesystem()
        out: list[str] = []
        try:
            infos = fs.get_file_info(pafs.FileSelector("", allow_not_found=True, recursive=True))
        except FileNotFoundError:
            return out
        for info in infos:
            if info.type != pafs.FileType.File or info.path.startswith("_delta_log"):
                continue
            if info.base_name.startswith(prefix):
                out.append(info.path.lstrip("/"))
        return out

    def _delete(self, paths: list[str]) -> None:
        fs = self.filesystem()
        for path in paths:
            try:
                fs.delete_file(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                if "not found" not in str(e).lower() and "no such file" not in str(e).lower():
                    raise

    def close(self) -> None:
        """Close open files (pending transactions stay intact; the open one is aborted on
        restore)."""
        for files in self._sets.values():
            files.release()
        self._sets = {}
        lock, self._run_lock = self._run_lock, None
        if lock is not None:
            lock.release()
