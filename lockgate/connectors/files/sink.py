"""FileSink: writes records to part files in a folder, exactly-once by default.

Each subtask writes part files ``part-<subtask>-<n>.<ext>``; ``n`` continues
after the numbers already in the folder, so reruns never overwrite earlier
output.

* ``exactly_once=True`` (default) builds on :class:`TwoPhaseCommitSink`
  (M-X2): a transaction is one part file per subtask and checkpoint interval,
  written to the hidden ``.part-<subtask>-<n>.<ext>.inprogress`` in the same
  folder (readers such as Spark and ``pyarrow.dataset`` skip names starting
  with "."). On the checkpoint barrier it is flushed, closed and fsynced; when
  the checkpoint completes it is renamed atomically into place. At the end of
  a bounded input the last file is pre-committed and the task's final checkpoint
  publishes it (FLIP-147); without checkpoints the driver publishes the last files
  once the whole job has succeeded. A reader thus never sees a partial or
  uncommitted file, and after failures and restarts every record is in exactly one
  published file (with a replayable source, M-X1).
* On an object store (``s3://``, ``gs://``, ``abfs://``; see :mod:`.file_locations`)
  the temporary file is an object under the same hidden name, complete once its
  upload is closed at pre-commit; committing copies it server-side to the final
  ``part-*`` key (which appears whole or not at all) and then deletes the temporary
  key. A restore that finds the temporary key copies again (same bytes); one that
  finds only the final key, of the size recorded at pre-commit, knows the commit
  was done. Readers that skip hidden names (every ``part-*`` lister: Spark,
  ``pyarrow.dataset``, ``FileSource``) see only committed files; between the copy and
  the delete the bytes exist twice, once under the hidden name.
* What a restore deletes: only temporary files of runs proven dead: its own run's
  (earlier attempts, all stopped), and those of the run whose checkpoint or savepoint it
  restored once no process of that run holds its run lock (``.lockgate-runs/<run>.lock``
  in the folder, held by the run's driver for the whole run and by each writer while
  open; see :mod:`.run_locks`). A run still running (a job forked from a savepoint of a
  job that goes on) keeps its files: it commits them. Numbering continues after every
  number a temporary file in the folder uses, and a local commit never replaces a part
  file (a hard link, not a rename over it): a number another run published meanwhile
  makes the file ``part-<subtask>-<n>.<run>.<ext>``. On an object store there are no run
  locks (another run's temporary files are left, hidden, to delete by hand once it has
  ended) and the copy to the final key cannot refuse an existing key: give forked jobs
  their own folders there.
* ``exactly_once=False``: at-least-once. Part files are written in place and
  closed when the input ends; a failure leaves partial files and a restart
  writes its records again.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ...core.batch import Batch, num_rows, to_arrow, to_rows
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import SinkWriter
from ..formats.json_values import json_default
from ..run_locks import (
    RunLock,
    forget_ended_runs,
    hold_run_lock,
    run_is_alive,
    writer_run_lock,
)
from ..two_phase_commit import TwoPhaseCommitSink, TwoPhaseCommitWriter
from .locations import FileLocation

EXTENSIONS = {"jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}
#: suffix of the hidden file a transaction writes before it is committed
IN_PROGRESS_SUFFIX = ".inprogress"


def _merge_schemas(batches: list[pa.RecordBatch], where: str | None) -> pa.Schema:
    try:
        return pa.unify_schemas(
            [b.schema.remove_metadata() for b in batches], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise TypeError(
            f"FileSink at {where}: records of incompatible shapes ({e}); a file needs one schema"
        ) from e


def _fsync_path(path: str) -> None:
    """Make ``path`` (a file, or a folder's entries) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_no_replace(source: str, target: str) -> None:
    """Give the file ``source`` the name ``target`` too, atomically, failing with
    ``FileExistsError`` when ``target`` exists. Where hard links are not supported, the
    file is renamed after a check that ``target`` does not exist (not atomic)."""
    try:
        os.link(source, target)
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as e:
        # ENOSYS: FUSE file systems without link(); EACCES: CIFS shares that refuse it
        if e.errno not in (
            errno.EPERM,
            errno.ENOTSUP,
            errno.EOPNOTSUPP,
            errno.EMLINK,
            errno.ENOSYS,
            errno.EACCES,
        ):
            raise
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "file exists", target) from e
        os.rename(source, target)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class _PartFile:
    """Writes one file at ``path`` in ``format``; both sink modes use it.

    CSV and Parquet files get one schema: columns that are None in every
    record so far (Arrow type null) are held back until a batch types them
    (or the file is closed); later batches are cast to that schema. ``label``
    names the file in error messages.
    """

    def __init__(
        self,
        path: str,
        format: str,
        label: str | None = None,
        location: FileLocation | None = None,
    ) -> None:
        self.path = path
        #: where ``path`` is (None: a local path)
        self.location = location
        self.format = format
        self.label = label or path
        self.file: Any = None
        self.writer: Any = None
        self.schema: pa.Schema | None = None
        #: batches held while some column is still untyped (all None so far)
        self._untyped: list[pa.RecordBatch] = []

    def write(self, batch: Batch) -> None:
        fmt = self.format
        if fmt == "jsonl":
            if self.file is None:
                self.file = self._open()
            dumps = json.dumps
            self.file.write(
                "".join(
                    dumps(r, default=json_default, ensure_ascii=False) + "\n"
                    for r in to_rows(batch)
                ).encode("utf-8")
            )
            return
        arrow = to_arrow(batch, operator=f"FileSink({fmt})")
        if self.writer is None:
            # Columns that were None in every record so far have Arrow type null; wait for
            # a batch that types them before fixing the file's schema.
            self._untyped.append(arrow)
            schema = _merge_schemas(self._untyped, self.label)
            if any(pa.types.is_null(f.type) for f in schema):
                return
            self._write_held(schema)
            return
        self.writer.write_batch(self._conform(arrow))

    def _write_held(self, schema: pa.Schema) -> None:
        writer = self._open_writer(schema)
        held, self._untyped = self._untyped, []
        for b in held:
            writer.write_batch(self._conform(b))

    def _open(self) -> Any:
        """The binary file to write (open across write calls, closed in ``close``)."""
        if self.location is None:
            return open(self.path, "wb")
        return self.location.open_write(self.path)

    def _open_writer(self, schema: pa.Schema) -> Any:
        self.schema = schema
        if self.format == "csv":
            self.file = self._open()
            self.writer = pacsv.CSVWriter(self.file, schema)
        elif self.location is None or self.location.local:
            self.writer = pq.ParquetWriter(self.path, schema)
        else:
            self.file = self._open()
            self.writer = pq.ParquetWriter(self.file, schema)
        return self.writer

    def _conform(self, arrow: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.schema
        assert schema is not None
        if arrow.schema.equals(schema):
            return arrow
        try:
            return arrow.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise TypeError(
                f"FileSink({self.format}) at {self.label}: records changed shape from "
                f"{schema} to {arrow.schema}; a {self.format} file needs one schema"
            ) from e

    def close(self) -> None:
        """Write what is held back (untyped columns stay null) and close the file."""
        if self.writer is None and self._untyped:
            self._write_held(_merge_schemas(self._untyped, self.label))
        self.release()

    def release(self) -> None:
        """Close the open handles without writing what is held back (after a failure)."""
        self._untyped = []
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()
        if self.file is not None:
            file, self.file = self.file, None
            file.close()


# ------------------------------------------------------------------------- exactly-once


@state_record("files.transaction")
@dataclass
class FileTransaction:
    """One part file of one subtask and checkpoint interval (picklable; absolute paths).

    Records go to ``temp_path`` (hidden); committing renames it to
    ``final_path`` (on an object store: copies it there, then deletes it). Paths are
    local, or ``<scheme>://...`` without credentials. ``seq`` is the ``n`` of
    ``part-<subtask>-<n>``: restored transactions tell a restarted subtask where its
    numbering continues. ``size``: the file's bytes, recorded at pre-commit (a
    commit repeated on an object store checks the final key against it). A
    transaction with no records publishes nothing.
    """

    temp_path: str
    final_path: str
    subtask: int
    seq: int
    records: int = 0
    size: int | None = None


def fallback_path(transaction: FileTransaction) -> str | None:
    """Where ``transaction`` is published when its final name is another file already:
    ``part-<subtask>-<n>.<run>.<ext>`` beside it, the run read from its temporary file's
    name (None for a transaction of a run without an id)."""
    final_name = transaction.final_path.rsplit("/", 1)[-1]  # part-<subtask>-<n>.<ext>
    temp_name = transaction.temp_path.rsplit("/", 1)[-1]  # .<final name>[.<run>].inprogress
    run = temp_name[1 + len(final_name) : -len(IN_PROGRESS_SUFFIX)].lstrip(".")
    if not run or not temp_name.startswith(f".{final_name}"):
        return None
    stem, ext = final_name.rsplit(".", 1)
    folder = transaction.final_path[: -len(final_name)]
    return f"{folder}{stem}.{run}.{ext}"


def _temp_run(temp_path: str) -> str | None:
    """The run id in the name of the temporary file ``temp_path``
    (``.part-<subtask>-<n>.<ext>[.<run>].inprogress``; "" without one), or None when it
    is not such a name."""
    name = temp_path.rsplit("/", 1)[-1]
    if not (name.startswith(".part-") and name.endswith(IN_PROGRESS_SUFFIX)):
        return None
    parts = name[1 : -len(IN_PROGRESS_SUFFIX)].split(".")
    if len(parts) == 2 and parts[1] in EXTENSIONS.values():
        return ""
    if len(parts) == 3 and parts[1] in EXTENSIONS.values():
        return parts[2]
    return None


def _has_temps(folder: str, run: str) -> bool:
    suffix = f".{run}{IN_PROGRESS_SUFFIX}"
    return any(n.endswith(suffix) for n in os.listdir(folder))


class _RunMark:
    """The driver's run lock of a ``FileSink`` folder (``FileSink.hold_run``). Released
    with ``forget`` once the run has ended: its lock file goes, and so do those of runs
    found dead that left no temporary file for a restore to clean up."""

    def __init__(self, folder: str, lock: RunLock) -> None:
        self.folder = folder
        self.lock = lock

    def release(self, *, forget: bool = False) -> None:
        # a run that left temporary files keeps its lock file: a restore proves it dead
        self.lock.release(forget=forget and not _has_temps(self.folder, self.lock.run))
        if forget:
            forget_ended_runs(self.folder, lambda run: _has_temps(self.folder, run))


class FileSink(TwoPhaseCommitSink[FileTransaction]):
    """Writes records as JSON lines, CSV or Parquet into the folder ``path``: a local path,
    a ``file://`` URL (``file:///data/out``) or any URL ``pyarrow.fs`` opens
    (``s3://bucket/prefix?region=...``; see :mod:`.file_locations`). On an object store
    the bucket must exist (checked here); the prefix needs no folder.

    ``exactly_once=True`` (default): each subtask publishes one part file per
    checkpoint interval, atomically, when the checkpoint completes (at the end
    of a bounded input, when its final checkpoint completes; without
    checkpoints, when the job has succeeded); nothing partial or
    uncommitted is ever visible under a ``part-*`` name (M-X2). ``False``:
    at-least-once, part files written in place (see the module docstring).
    The folder is created if missing. On object stores a part file is published by
    a server-side copy and delete (see the module docstring).
    """

    default_name = "files"

    def __init__(
        self, path: str | os.PathLike[str], format: str = "jsonl", exactly_once: bool = True
    ) -> None:
        if format not in EXTENSIONS:
            raise ConfigurationError(
                f"FileSink format must be one of {', '.join(EXTENSIONS)}, got {format!r}"
            )
        if not isinstance(exactly_once, bool):
            raise ConfigurationError(
                f"FileSink exactly_once must be True or False, got {exactly_once!r}; pass "
                "exactly_once=True for transactional part files or False for at-least-once"
            )
        #: where the part files go (local, or any pyarrow.fs URL)
        self.location = FileLocation("FileSink", path, absolute=True)
        self.path = self.location.path
        self.location.check_bucket()
        if self.location.kind() == "file":
            raise ConfigurationError(
                f"FileSink path {self.location.shown!r} is a file; give a folder "
                "(it is created if missing)"
            )
        self.format = format
        self.exactly_once = exactly_once
        #: the folder, absolute (``<scheme>://...`` on a URL): transactions name it so that
        #: the driver can commit them
        self.folder = self.location.root
        self._reset()

    @property
    def commits_on_checkpoint(self) -> bool:
        """``exactly_once``: part files are published when checkpoints complete."""
        return self.exactly_once

    def _reset(self) -> None:
        # per-subtask state, set up by open(); never pickled
        self._subtask: int | None = None
        self._run = ""
        self._restarted = False
        self._next_seq: int | None = None
        self._files: dict[str, _PartFile] = {}
        self._run_lock: RunLock | None = None
        self._alive: dict[str, bool | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in (
            "_subtask",
            "_run",
            "_restarted",
            "_next_seq",
            "_files",
            "_run_lock",
            "_alive",
        ):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        self.location.make_folder()
        if not self.exactly_once:
            return _AtLeastOnceWriter(self, ctx)
        return TwoPhaseCommitWriter(self, ctx)

    # ------------------------------------------------------------ transactions

    def open(self, ctx: RuntimeContext) -> None:
        self._subtask = ctx.subtask_index
        self._run = ctx.run_id
        self._restarted = ctx.attempt_number > 0
        if self.location.local and ctx.run_id:  # the run is alive while this writer is open
            where = f"FileSink '{ctx.operator_name}' ({self.location.shown})"
            self._run_lock = writer_run_lock(self.folder, ctx.run_id, where)

    def hold_run(self, ctx: RuntimeContext) -> _RunMark | None:
        """On the driver, for the whole run: the run's lock in the folder (see
        :mod:`.run_locks`); None on an object store (no locks there)."""
        if not (self.exactly_once and self.location.local and ctx.run_id):
            return None
        self.location.make_folder()
        lock = hold_run_lock(self.folder, ctx.run_id)
        return None if lock is None else _RunMark(self.folder, lock)

    def _names(self, seq: int) -> tuple[str, str]:
        name = f"part-{self._subtask}-{seq}.{EXTENSIONS[self.format]}"
        run = f".{self._run}" if self._run else ""
        return (
            self.location.child(f".{name}{run}{IN_PROGRESS_SUFFIX}"),
            self.location.child(name),
        )

    def _used(self) -> tuple[set[int], dict[str, int]]:
        """The numbers of this subtask's part files, and its temporary files with theirs."""
        final = re.compile(rf"part-{self._subtask}-(\d+)\.")
        temp = re.compile(rf"\.part-{self._subtask}-(\d+)\..*{re.escape(IN_PROGRESS_SUFFIX)}")
        published: set[int] = set()
        in_progress: dict[str, int] = {}
        for name in self.location.file_names():
            if m := final.match(name):
                published.add(int(m.group(1)))
            elif m := temp.fullmatch(name):
                in_progress[self.location.child(name)] = int(m.group(1))
        return published, in_progress

    def begin_transaction(self) -> FileTransaction:
        """A transaction for the next part number; its file is created on the first record.

        On a fresh start numbering begins after every part file and temporary
        file of this subtask already in the folder (earlier runs' output, and
        pending files a retained checkpoint may still commit, M-S3).
        """
        if self._subtask is None:
            raise RuntimeError("FileSink.begin_transaction before open(ctx)")
        if self._next_seq is None:
            self._drop_abandoned()
            published, in_progress = self._used()
            self._next_seq = max(published | set(in_progress.values()), default=-1) + 1
        seq = self._next_seq
        temp, final = self._names(seq)
        while self.location.exists(temp) or self.location.exists(final):
            seq += 1
            temp, final = self._names(seq)
        self._next_seq = seq
        return FileTransaction(temp, final, self._subtask, seq)

    def write(self, transaction: FileTransaction, batch: Batch) -> None:
        n = num_rows(batch)
        if n == 0:
            return
        part = self._files.get(transaction.temp_path)
        if part is None:
            if transaction.records:
                raise RuntimeError(
                    f"FileSink: write to {transaction.final_path} after it was pre-committed"
                )
            part = _PartFile(
                transaction.temp_path,
                self.format,
                label=transaction.final_path,
                location=self.location,
            )
            self._files[transaction.temp_path] = part
            # the number is used now; an empty transaction leaves it to the next one
            self._next_seq = max(self._next_seq or 0, transaction.seq + 1)
        part.write(batch)
        transaction.records += n

    def pre_commit(self, transaction: FileTransaction) -> None:
        """Close the temporary file and fsync it and the folder (on an object store:
        complete its upload); record its size."""
        part = self._files.pop(transaction.temp_path, None)
        if part is None:
            return
        part.close()
        if self.location.local:
            _fsync_path(transaction.temp_path)
            _fsync_path(self.folder)
        transaction.size = self.location.size(transaction.temp_path)

    def commit(self, transaction: FileTransaction) -> None:
        """Publish the temporary file under its final name without ever replacing a file
        there (a hard link, then the temporary name is removed; atomic) and fsync the
        folder; on an object store copy it to the final key and delete it. Idempotent.

        When the final name is already another file (another run writing the same folder
        took the number: a job forked from a savepoint of a job that goes on), the file is
        published as ``part-<subtask>-<n>.<run>.<ext>`` instead, never over it."""
        if transaction.records == 0:
            # No file was ever created for it, and its number may already belong to the
            # next transaction (numbers are used up by a first record): touch nothing.
            return
        if not self.location.local:
            self._commit_by_copy(transaction)
            return
        temp = transaction.temp_path
        targets = [transaction.final_path]
        fallback = fallback_path(transaction)
        if fallback is not None:
            targets.append(fallback)
        for target in targets:
            try:
                _link_no_replace(temp, target)
            except FileExistsError:
                if _same_file(temp, target):
                    break  # linked before (a crash before the temporary name was removed)
                continue  # another writer's file: never replaced
            except FileNotFoundError as e:
                if any(os.path.exists(t) for t in targets):
                    return  # committed before
                raise FileNotFoundError(
                    f"FileSink cannot commit {transaction.final_path}: its data file "
                    f"{temp} is gone, so {transaction.records} records are lost (was the "
                    "folder cleaned or moved while the job ran?)"
                ) from e
            break
        else:
            raise FileExistsError(
                f"FileSink cannot commit {temp}: {' and '.join(targets)} are other files "
                "already (another writer uses this folder with the same run id?); the "
                f"{transaction.records} records stay in {temp}"
            )
        with contextlib.suppress(FileNotFoundError):  # gone already when renamed
            os.unlink(temp)
        _fsync_path(os.path.dirname(transaction.final_path))

    def _commit_by_copy(self, transaction: FileTransaction) -> None:
        """Publish through ``pyarrow.fs``. On an object store (no atomic rename): copy the
        temporary key to the final key (the final key appears whole), then delete the
        temporary key; elsewhere (HDFS, ...) rename it with ``move``. A repeat
        (restore) finds the temporary key and copies again, or finds it gone and the final
        key of the recorded size: already committed."""
        loc, temp, final = self.location, transaction.temp_path, transaction.final_path
        if loc.size(temp) is not None:
            if loc.object_store:
                loc.copy(temp, final)
                loc.delete(temp)
            else:  # HDFS and the like rename atomically
                loc.move(temp, final)
            return
        size = loc.size(final)
        if size is not None and (transaction.size is None or size == transaction.size):
            return  # committed before
        if size is not None:
            raise FileNotFoundError(
                f"FileSink cannot commit {final}: its data file {temp} is gone and {final} "
                f"has {size} bytes, not the {transaction.size} pre-committed, so its "
                f"{transaction.records} records are lost (did another writer use the prefix?)"
            )
        raise FileNotFoundError(
            f"FileSink cannot commit {final}: its data file {temp} is gone, so "
            f"{transaction.records} records are lost (was the prefix cleaned, or a "
            "lifecycle rule deleting objects, while the job ran?)"
        )

    def abort(self, transaction: FileTransaction) -> None:
        """Delete the temporary file (missing is fine)."""
        part = self._files.pop(transaction.temp_path, None)
        if part is not None:
            part.release()
        self.location.delete(transaction.temp_path)

    def recover_and_abort(self, transaction: FileTransaction) -> None:
        """Discard a restored transaction that was open at the checkpoint, deleting its
        temporary file, when its run is proven dead: this run (an earlier attempt,
        stopped), or another run none of whose processes holds its run lock any more
        (:mod:`.run_locks`). A transaction of a run that may still be running (a job
        forked from a savepoint of a job that goes on) is left to it: it pre-commits and
        commits it."""
        run = _temp_run(transaction.temp_path)
        if run is not None and self._ended(run):
            self.abort(transaction)

    def finish_recovery(self, recovered: list[FileTransaction]) -> None:
        """Continue numbering after the restored transactions of this subtask, and after
        every number a temporary file left in the folder uses for it, and delete the
        temporary files numbered from the restored transactions on (transactions begun
        after the checkpoint) of runs proven dead: this run's, and those of the restored
        run once none of its processes holds its run lock. Temporary files of other runs
        are kept (a run still running commits them; another run's retained checkpoint may,
        M-S3)."""
        mine = [
            t
            for t in recovered
            if isinstance(t, FileTransaction)
            and t.subtask == self._subtask
            and FileLocation.parent(t.final_path) == self.folder
        ]
        if not mine:
            return
        restored = {_temp_run(t.temp_path) for t in mine}
        next_seq = max(t.seq + 1 if t.records else t.seq for t in mine)
        self._drop_abandoned()
        published, in_progress = self._used()
        in_use = set(published)
        for temp, seq in in_progress.items():
            run = _temp_run(temp)
            if seq >= next_seq and run in restored and run is not None and self._ended(run):
                self.location.delete(temp)
            else:
                in_use.add(seq)
        self._next_seq = max(next_seq, max(in_use, default=-1) + 1)

    def _ended(self, run: str) -> bool:
        """Whether no process of ``run`` is left: this run's earlier attempts (stopped),
        or another run whose run lock nobody holds (cached per run)."""
        if run == self._run:
            return True
        if run not in self._alive:
            local = self.location.local and bool(run)
            self._alive[run] = run_is_alive(self.folder, run) if local else None
        return self._alive[run] is False

    def _drop_abandoned(self) -> None:
        """In a restarted attempt: delete this subtask's temporary files begun by earlier
        attempts of the same run. The restored transactions were committed or aborted
        before this is called, so no checkpoint this run can restore refers to them."""
        if not (self._restarted and self._run):
            return
        marker = f".{self._run}{IN_PROGRESS_SUFFIX}"
        _, in_progress = self._used()
        for temp in in_progress:
            if temp.endswith(marker):
                self.location.delete(temp)

    def close(self) -> None:
        """Close open files; their temporary files stay for ``recover_and_abort``."""
        parts, self._files = list(self._files.values()), {}
        lock, self._run_lock = self._run_lock, None
        if lock is not None:
            lock.release()
        errors: list[BaseException] = []
        for part in parts:
            try:
                part.release()
            except (OSError, pa.ArrowException) as e:  # close the others, then report it
                errors.append(e)
        if errors:
            raise errors[0]


# ------------------------------------------------------------------------- at-least-once


class _AtLeastOnceWriter(SinkWriter):
    """``exactly_once=False``: one part file per subtask, written in place."""

    def __init__(self, sink: FileSink, ctx: RuntimeContext) -> None:
        self.sink = sink
        self.ctx = ctx
        self.part: _PartFile | None = None

    def _target(self) -> str:
        ext = EXTENSIONS[self.sink.format]
        location = self.sink.location
        if not location.local:
            # no exclusive create on object stores: the number after this subtask's files
            used = re.compile(rf"\.?part-{self.ctx.subtask_index}-(\d+)\.")
            numbers = [int(m.group(1)) for n in location.file_names() if (m := used.match(n))]
            return location.child(
                f"part-{self.ctx.subtask_index}-{max(numbers, default=-1) + 1}.{ext}"
            )
        n = 0
        while True:
            candidate = os.path.join(self.sink.folder, f"part-{self.ctx.subtask_index}-{n}.{ext}")
            try:
                fd = os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                n += 1
                continue
            os.close(fd)
            return candidate

    def write(self, batch: Batch) -> None:
        if self.part is None:
            self.part = _PartFile(self._target(), self.sink.format, location=self.sink.location)
        self.part.write(batch)

    def finish(self) -> None:
        if self.part is not None:
            self.part.close()

    def close(self) -> None:
        if self.part is not None:
            self.part.release()
