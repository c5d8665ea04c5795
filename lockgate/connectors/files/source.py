"""FileSource: records from JSON-lines, CSV or Parquet files, one split per file.

A malformed record fails the job with its file and line (``MalformedRecordError``),
unless ``on_error="dead_letter"``: then it goes to the side output
``lg.DEAD_LETTER`` (``stream.get_side_output(lg.DEAD_LETTER)``) as a dict with
``location``, ``file``, ``line``, ``raw`` and ``error``. Nothing is dropped.
Each split keeps its read position (the lines or rows already emitted).

With ``monitor_interval`` the source watches a folder and never ends (see
:class:`FileSource`): every subtask claims the new files whose name hashes to it and
checkpoints the positions of its unfinished files plus the names of its finished ones
(:class:`DoneFiles`), so a restore, also at another parallelism, reads every file
exactly once (M-X1, M-R1).

``path`` may be any URL ``pyarrow.fs`` opens (``s3://bucket/prefix?...``, see
:mod:`.file_locations`): files are listed with ``get_file_info`` and read with
``open_input_stream`` (Parquet: ``open_input_file``), and watching polls the listing
of the prefix the same way. Keys whose name starts with "." or "_" are skipped, so a
``FileSink`` writing to the watched prefix is read only as it commits.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...core.batch import RowBatch
from ...core.state_records import state_record
from ...errors import ConfigurationError, MalformedRecordError
from ...runtime.context import RuntimeContext
from ..base import (
    DECODE_ERRORS,
    DEFAULT_MAX_RECORD_BYTES,
    OVERSIZED_PREFIX_BYTES,
    InputStatus,
    ReaderOutput,
    Source,
    SourceReader,
    check_max_record_bytes,
    check_on_error,
    decode_error,
    oversized,
    report_malformed,
)
from .locations import FileLocation

FORMATS = ("jsonl", "csv", "parquet")


@state_record("files.split")
@dataclass
class FileSplit:
    """One file; ``position`` counts what is already consumed (physical lines for jsonl,
    rows after the header for csv, rows for parquet): a restore resumes after it."""

    split_id: str
    path: str
    position: int = 0


@state_record("files.done")
@dataclass(frozen=True)
class DoneFiles:
    """Checkpoint marker of a :class:`FileSource` subtask: the names (not paths) of the
    files it has read to the end. Stored beside its unfinished :class:`FileSplit` s; on
    restore the union over every old subtask is never read again. ``bounded``: written
    by a bounded run (whose end was the files of its start), not by a watching one."""

    names: frozenset[str]
    bounded: bool = False


def _visible(name: str) -> bool:
    """Whether a folder entry is input: names starting with "." or "_" (in-progress
    files, markers such as ``_SUCCESS``) are not."""
    return not name.startswith((".", "_"))


def file_owner(name: str, parallelism: int) -> int:
    """The subtask (of ``parallelism``) that reads the watched file called ``name``: a
    CRC-32 of its UTF-8 name, so every process and every run agrees (unlike ``hash``)."""
    return zlib.crc32(name.encode("utf-8", "surrogateescape")) % parallelism


def _interval_s(value: object) -> float:
    """``monitor_interval`` in seconds, checked: a positive finite number or timedelta."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigurationError(
            f"FileSource monitor_interval must be a positive number of seconds or a "
            f"datetime.timedelta (or None for a bounded source that reads what is there), "
            f"got {value!r}"
        )
    return seconds


class FileSource(Source):
    """Reads ``path`` (a file, or every visible file of a folder, in name order): a local
    path, a ``file://`` URL or any URL ``pyarrow.fs`` opens (``s3://bucket/prefix?...``;
    a "folder" there is a prefix: the keys directly under it).

    ``format``: ``"jsonl"`` (one JSON value per line; blank lines are skipped),
    ``"csv"`` (a header line, then one record per row; values become int, float
    or str, empty fields None, unless ``csv_types`` maps a column to a
    converter such as ``int`` or ``str``) or ``"parquet"``. Visible files are
    those whose name starts with neither "." nor "_".

    Decoding never fails the job with ``on_error="dead_letter"``: every record that
    cannot be decoded, whatever the cause (bad JSON or UTF-8, an integer of more than
    4,300 digits, nesting deeper than Python's recursion limit, a corrupt Parquet
    file), goes to the dead-letter output with its file and line (Parquet: the row it
    was read up to). ``max_record_bytes`` (default 32 MiB) bounds a JSON-lines or CSV
    line: a longer one is not decoded (nor held in memory whole: it is read in bounded
    pieces) and its dead letter keeps its first 1 KiB as ``raw``; with
    ``on_error="fail"`` it fails the job naming its file and line.

    ``columns`` (Parquet only) reads just those columns, in that order (projection
    pushdown: the others are never decoded); a file without one of them fails the job
    naming the file.

    Without ``monitor_interval`` the source is bounded: it reads the files there
    when the job starts (one split each, spread over the subtasks) and ends. Restored
    from a bounded run's checkpoint or savepoint, it reads that run's unfinished files
    from their positions, and no others. Restored from a watching run's (to catch up
    with the files that came since, then end), it reads the unfinished files from their
    positions and then the files there at the restore that the watching run never read
    (as at a fresh start), and ends; the files it finished are not read again. Either
    way each file goes to the subtask :func:`file_owner` names (:meth:`restore_splits`).
    A bounded run's checkpoints name the files it finished (:class:`DoneFiles`), so a
    watching source restored from one reads only the files it never read.

    ``monitor_interval`` (seconds, or a ``datetime.timedelta``) watches the folder
    ``path`` instead (on an object store: the prefix, which may still be empty; its
    bucket must exist); the source is then unbounded (the job runs until it is
    cancelled or stopped):

    * each subtask lists the folder at most once per interval (on the job's clock)
      and claims the visible files whose name hashes to it
      (:func:`file_owner`: CRC-32 of the name modulo the parallelism), reading them
      one after another in name order; it lists only between files, so a file in
      progress is read to its end first;
    * files are identified by their name: a file is read once, and a name once read
      is never read again, even if the file is rewritten or replaced;
    * writers must create files atomically: write under a hidden name (e.g.
      ``.name.tmp``) and rename it into place when complete (on an object store one
      PUT, or a copy, is atomic: write the key once, complete). A visible file is
      taken to be complete; appending to it, or deleting it before it was read,
      is not supported (the latter fails the job naming the file);
    * checkpoints hold each subtask's unfinished files with their read positions
      and the names of its finished ones (:class:`DoneFiles`). On restore, also at
      another parallelism, the subtasks re-divide those files by the same hash and
      resume each at its position (M-R1), so with an exactly-once sink every record
      arrives exactly once (M-X1). The set of finished names grows with the number
      of files ever read (names only, a few bytes each).
    """

    default_name = "files"

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: str = "jsonl",
        *,
        monitor_interval: float | datetime.timedelta | None = None,
        on_error: str = "fail",
        batch_size: int = 8192,
        csv_types: dict[str, Callable[[str], Any]] | None = None,
        columns: Sequence[str] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        if format not in FORMATS:
            raise ConfigurationError(
                f"FileSource format must be one of {', '.join(FORMATS)}, got {format!r}"
            )
        check_on_error("FileSource", on_error)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"FileSource batch_size must be >= 1, got {batch_size!r}")
        #: where the files are (local, or any pyarrow.fs URL)
        self.location = FileLocation("FileSource", path)
        self.path = self.location.path
        self.max_record_bytes = check_max_record_bytes("FileSource", max_record_bytes)
        self.location.check_bucket()
        kind = self.location.kind()
        watching_a_prefix = (
            monitor_interval is not None and kind == "missing" and self.location.object_store
        )
        if kind == "missing" and not watching_a_prefix:
            raise ConfigurationError(
                f"FileSource path {self.location.shown!r} does not exist: give an existing "
                "file or folder"
            )
        #: seconds between listings of the watched folder; None: bounded
        self.monitor_interval: float | None = None
        if monitor_interval is not None:
            self.monitor_interval = _interval_s(monitor_interval)
            if kind == "file":
                raise ConfigurationError(
                    f"FileSource with monitor_interval watches a folder, but "
                    f"{self.location.shown!r} is not one: give a folder (new files appear in "
                    "it by an atomic rename)"
                )
            self.bounded = False
        self.format = format
        self.on_error = on_error
        self.batch_size = batch_size
        self.csv_types = dict(csv_types or {})
        #: Parquet only: the columns read (projection pushdown); None: every column
        self.columns: list[str] | None = _check_columns(columns, format)

    @property
    def monitoring(self) -> bool:
        """Whether the source watches its folder (``monitor_interval`` was given)."""
        return self.monitor_interval is not None

    def files(self) -> list[str]:
        location = self.location
        if location.kind() == "folder":
            return [location.child(n) for n in sorted(location.file_names(_visible))]
        return [location.root]

    def create_splits(self, parallelism: int) -> list[FileSplit]:
        """Bounded: one split per file. Watching: none (each subtask finds its files
        when it lists the folder)."""
        if self.monitoring:
            return []
        return [FileSplit(f"file-{i}", p) for i, p in enumerate(self.files())]

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        if self.monitoring:
            return _MonitoringFileReader(self, ctx)
        return _FileReader(self)

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        """Bounded: this subtask's share (:func:`file_owner` of the file name) of the
        restored state of every old subtask (M-R3). A bounded run's state is kept as it
        is: its end was the files of its start. A watching run's ends now: its
        unfinished files at their positions, then the files listed now that it had
        neither finished nor started, in name order. The names of the finished files
        follow (one :class:`DoneFiles`), for the next checkpoints. Watching: the state
        unchanged (the reader keeps its share)."""
        if self.monitoring:
            return splits
        done: set[str] = set()
        watching = False
        restored: dict[str, FileSplit] = {}
        for item in splits:
            if isinstance(item, DoneFiles):
                watching = watching or not item.bounded
                done.update(item.names)
            elif isinstance(item, FileSplit):
                restored.setdefault(os.path.basename(item.path), item)
            else:
                raise ConfigurationError(
                    f"FileSource reading {self.path!r} cannot restore {item!r}: the "
                    "checkpoint holds another source's state under this source's uid"
                )

        def owned(name: str) -> bool:
            return file_owner(name, ctx.parallelism) == ctx.subtask_index

        out = [FileSplit(s.split_id, s.path, s.position) for n, s in restored.items() if owned(n)]
        if watching:
            for path in self.files():
                name = os.path.basename(path)
                if name not in done and name not in restored and owned(name):
                    out.append(FileSplit(_MonitoringFileReader.split_id(name), path))
            out.sort(key=lambda s: os.path.basename(s.path))
        return [*out, DoneFiles(frozenset(n for n in done if owned(n)), bounded=True)]


def _check_columns(columns: Sequence[str] | None, format: str) -> list[str] | None:
    if columns is None:
        return None
    if format != "parquet":
        raise ConfigurationError(
            f"FileSource columns= selects Parquet columns, but the format is {format!r}: "
            "drop columns=, or select fields in a map after the source"
        )
    if (
        isinstance(columns, str)
        or not isinstance(columns, Sequence)
        or not columns
        or any(not isinstance(c, str) or not c for c in columns)
    ):
        raise ConfigurationError(
            f"FileSource columns must be a non-empty list of column names, got {columns!r}"
        )
    if len(set(columns)) != len(columns):
        raise ConfigurationError(f"FileSource columns name a column twice: {list(columns)!r}")
    return list(columns)


class _FileReader(SourceReader):
    """Reads its splits one after another; ends when they are exhausted. Restores take
    the state of every old subtask; the source keeps this subtask's share
    (``FileSource.restore_splits``)."""

    restores_every_split = True

    #: whether the reader's checkpoints come from a bounded run (``DoneFiles.bounded``)
    bounded = True

    def __init__(self, source: FileSource) -> None:
        self.source = source
        self.splits: list[FileSplit] = []
        self._open: Any = None
        #: names of the files this subtask has read to the end (in its checkpoints, so a
        #: restore, also into a watching source, never reads them again)
        self.done: set[str] = set()

    def add_splits(self, splits: list[Any]) -> None:
        for item in splits:
            if isinstance(item, DoneFiles):
                self.done.update(item.names)
            else:
                self.splits.append(item)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.splits:
            return InputStatus.END_OF_INPUT
        self._read_first(output)
        return InputStatus.MORE_AVAILABLE if self.splits else InputStatus.END_OF_INPUT

    def _read_first(self, output: ReaderOutput) -> None:
        """Emit the next batch of the first split; when it is exhausted, close it, drop
        it and report it finished."""
        split = self.splits[0]
        if self._open is None:
            self._open = _open_reader(self.source, split)
        records, done = self._open.read(self.source.batch_size, output)
        if records:
            output.emit_from_split(
                split.split_id,
                RowBatch(records) if not isinstance(records, pa.RecordBatch) else records,
            )
        if done:
            self._open.close()
            self._open = None
            self.splits.pop(0)
            self._finished(split)
            output.split_finished(split.split_id)

    def _finished(self, split: FileSplit) -> None:
        """``split`` was read to its end."""
        self.done.add(os.path.basename(split.path))

    def snapshot_positions(self) -> list[Any]:
        """Copies of the unfinished files with their positions, then one
        :class:`DoneFiles` with the names of the finished ones."""
        return [
            *(FileSplit(s.split_id, s.path, s.position) for s in self.splits),
            DoneFiles(frozenset(self.done), bounded=self.bounded),
        ]

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


class _MonitoringFileReader(_FileReader):
    """Watches ``source.path``: claims the files :func:`file_owner` gives to this
    subtask, reads them in name order, never ends.

    Restores take the splits of every old subtask (``restores_every_split``): the
    :class:`DoneFiles` of all of them and the unfinished :class:`FileSplit` s this
    subtask owns at the new parallelism.
    """

    restores_every_split = True
    bounded = False

    def __init__(self, source: FileSource, ctx: RuntimeContext) -> None:
        super().__init__(source)
        assert source.monitor_interval is not None
        self.clock = ctx.clock
        self.subtask_index = ctx.subtask_index
        self.parallelism = ctx.parallelism
        self.interval_ms = source.monitor_interval * 1000.0
        #: names of the files this subtask has read to the end (its own share)
        self.done: set[str] = set()
        #: when the folder may be listed next (None: at the next poll)
        self._next_scan_ms: float | None = None

    @staticmethod
    def split_id(name: str) -> str:
        """The split id of the watched file ``name``: the same in every run and subtask."""
        return f"file:{name}"

    def _owns(self, name: str) -> bool:
        return file_owner(name, self.parallelism) == self.subtask_index

    def add_splits(self, splits: list[Any]) -> None:
        """Take restored state (everything of every old subtask): union the finished
        names, keep the unfinished files this subtask owns, at their positions."""
        restored: dict[str, FileSplit] = {}
        for item in splits:
            if isinstance(item, DoneFiles):
                self.done.update(n for n in item.names if self._owns(n))
            elif isinstance(item, FileSplit):
                name = os.path.basename(item.path)
                if self._owns(name) and name not in restored:
                    restored[name] = FileSplit(self.split_id(name), item.path, item.position)
            else:
                raise ConfigurationError(
                    f"FileSource watching {self.source.path!r} cannot restore {item!r}: the "
                    "checkpoint holds another source's state under this source's uid"
                )
        have = {os.path.basename(s.path) for s in self.splits}
        self.splits.extend(
            s for name, s in restored.items() if name not in self.done and name not in have
        )
        self._sort()

    def _sort(self) -> None:
        """Name order; the file being read (if any) stays first."""
        keep = 1 if self._open is not None else 0
        self.splits[keep:] = sorted(self.splits[keep:], key=lambda s: os.path.basename(s.path))

    def _scan(self) -> None:
        """Claim the visible files of the folder that this subtask owns and has neither
        finished nor claimed yet."""
        location = self.source.location
        claimed = {os.path.basename(s.path) for s in self.splits}

        def new(name: str) -> bool:
            return (
                _visible(name)
                and name not in self.done
                and name not in claimed
                and self._owns(name)
            )

        try:
            names = location.file_names(new)
        except OSError as e:
            raise OSError(
                f"FileSource cannot list the watched folder {location.shown!r}: {e}"
            ) from e
        for name in names:
            self.splits.append(FileSplit(self.split_id(name), location.child(name)))
        self._sort()

    def poll(self, output: ReaderOutput) -> InputStatus:
        """Read the next batch of the claimed files; between files, list the folder when
        the interval has passed. Never END_OF_INPUT."""
        if self._open is None and self._scan_due():
            self._scan()
            self._next_scan_ms = self.clock.monotonic_ms() + self.interval_ms
        if not self.splits:
            return InputStatus.NOTHING_AVAILABLE
        self._read_first(output)
        if self.splits or self._scan_due():
            return InputStatus.MORE_AVAILABLE
        return InputStatus.NOTHING_AVAILABLE

    def _scan_due(self) -> bool:
        return self._next_scan_ms is None or self.clock.monotonic_ms() >= self._next_scan_ms

    def wait_hint_ms(self) -> float | None:
        """Milliseconds until the next listing of the folder."""
        if self._next_scan_ms is None:
            return 0.0
        return max(0.0, self._next_scan_ms - self.clock.monotonic_ms())


def _open_reader(source: FileSource, split: FileSplit) -> Any:
    if source.format == "jsonl":
        return _JsonLines(source, split)
    if source.format == "csv":
        return _Csv(source, split)
    return _Parquet(source, split)


def _bad(
    source: FileSource, output: ReaderOutput, path: str, line: int | None, raw: Any, error: str
) -> None:
    location = f"{path}:{line}" if line is not None else path
    report_malformed(
        source.on_error,
        output,
        what=f"{source.format} record",
        location=location,
        raw=raw,
        error=error,
        file=path,
        line=line,
    )


#: bytes read at a time while skipping the rest of an oversized line
_SKIP_CHUNK = 1 << 20


def _line_end(piece: bytes) -> int:
    """The length of the line end ``piece`` ends with (0: none)."""
    return 2 if piece.endswith(b"\r\n") else 1 if piece.endswith(b"\n") else 0


def _read_line(file: Any, limit: int) -> tuple[bytes, int | None]:
    """The next line of the binary ``file`` with its line end (``b""`` at the end of
    the file), and None; or, for a line of more than ``limit`` bytes (its line end not
    counted), its first :data:`OVERSIZED_PREFIX_BYTES` bytes and its size. At most
    ``limit + 2`` bytes of a line are held in memory: the rest of an oversized line is
    read in pieces and dropped."""
    line = file.readline(limit + 2)
    return (line, None) if len(line) <= limit else _long_line(file, line, limit)


def _long_line(file: Any, line: bytes, limit: int) -> tuple[bytes, int | None]:
    """:func:`_read_line` for a ``line`` read of more than ``limit`` bytes."""
    if len(line) < limit + 2 or line.endswith(b"\n"):
        size = len(line) - _line_end(line)
        return (line, None) if size <= limit else (line[:OVERSIZED_PREFIX_BYTES], size)
    prefix, size, piece = line[:OVERSIZED_PREFIX_BYTES], len(line), line
    del line
    while piece and not piece.endswith(b"\n"):
        piece = file.readline(_SKIP_CHUNK)
        size += len(piece)
    return prefix, size - _line_end(piece)


class _JsonLines:
    def __init__(self, source: FileSource, split: FileSplit) -> None:
        self.source = source
        self.split = split
        self.file = source.location.open_read(split.path)
        self.line = 0
        limit = source.max_record_bytes
        for _ in range(split.position):  # resume: skip consumed lines
            if not _read_line(self.file, limit)[0]:
                break
            self.line += 1

    def read(self, n: int, output: ReaderOutput) -> tuple[list[Any], bool]:
        records: list[Any] = []
        loads = json.loads
        file = self.file
        readline = file.readline
        limit = self.source.max_record_bytes
        cap = limit + 2  # a line of ``limit`` bytes and its line end
        path = self.split.path
        while len(records) < n:
            raw = readline(cap)  # _read_line, its common case inlined
            size: int | None = None
            if len(raw) > limit:
                raw, size = _long_line(file, raw, limit)
            if not raw:
                return records, True
            self.line += 1
            self.split.position = self.line
            if size is not None:
                _bad(self.source, output, path, self.line, *oversized(size, limit, raw))
                continue
            if not raw.strip():
                continue
            try:
                record = loads(raw)
            except DECODE_ERRORS as e:
                error = decode_error("JSON", e)
            else:
                records.append(record)
                continue
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            _bad(self.source, output, path, self.line, text, error)
        return records, False

    def close(self) -> None:
        self.file.close()


#: what ``int`` parses: an int that it refuses has too many digits (not a float)
_INTEGER = re.compile(r"\s*[+-]?\d+(_\d+)*\s*")


def _auto_convert(value: str) -> Any:
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        if _INTEGER.fullmatch(value):
            raise  # more digits than Python converts (4,300): malformed, not a float
    try:
        return float(value)
    except ValueError:
        return value


class _DecodedLines:
    """UTF-8 lines of a binary file; an undecodable line, or one longer than ``limit``
    bytes, becomes an empty line and its error is kept for the reader to report with
    the line number."""

    def __init__(self, file: Any, limit: int) -> None:
        self.file = file
        self.limit = limit
        self.error: str | None = None
        self.raw: bytes = b""

    def __iter__(self) -> _DecodedLines:
        return self

    def __next__(self) -> str:
        raw, size = _read_line(self.file, self.limit)
        if not raw:
            raise StopIteration
        if size is not None:
            self.error = oversized(size, self.limit, raw)[1]
            self.raw = raw
            return "\n"
        try:
            return str(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            self.error = f"not valid UTF-8: {e}"
            self.raw = raw
            return "\n"


class _Csv:
    def __init__(self, source: FileSource, split: FileSplit) -> None:
        self.source = source
        self.split = split
        self.file = source.location.open_read(split.path)
        self.lines = _DecodedLines(self.file, source.max_record_bytes)
        self.reader = csv.reader(self.lines)
        #: the header cannot be read: ``read`` reports it (the file is not read further)
        self.broken: tuple[Any, str] | None = None
        try:
            self.header = next(self.reader)
        except StopIteration:
            self.header = []
        except csv.Error as e:
            self.header, self.broken = [], (None, f"malformed csv header: {e}")
        if self.lines.error is not None:
            self.header = []
            self.broken = (
                self.lines.raw.decode("utf-8", "replace").rstrip("\r\n"),
                f"malformed csv header: {self.lines.error}",
            )
        unknown = set(source.csv_types) - set(self.header)
        if unknown and self.header:
            raise ConfigurationError(
                f"FileSource csv_types names columns {sorted(unknown)} that {split.path} does not "
                f"have; its header is {self.header}"
            )
        self.converters = [source.csv_types.get(h, _auto_convert) for h in self.header]
        self.rows_read = 0
        while self.rows_read < split.position:  # resume: skip consumed rows, bad ones too
            try:
                if next(self.reader, None) is None:
                    break
            except csv.Error:
                pass  # reported when it was read; ``read`` counts it as a row as well
            self.lines.error = None
            self.rows_read += 1

    def read(self, n: int, output: ReaderOutput) -> tuple[list[Any], bool]:
        if self.broken is not None:
            _bad(self.source, output, self.split.path, 1, *self.broken)
            return [], True
        records: list[Any] = []
        width = len(self.header)
        path = self.split.path
        while len(records) < n:
            start_line = self.reader.line_num + 1
            try:
                row = next(self.reader, None)
            except csv.Error as e:
                self._advance()
                _bad(self.source, output, path, start_line, None, f"unparseable CSV: {e}")
                continue
            if row is None:
                return records, True
            self._advance()
            if self.lines.error is not None:
                error, self.lines.error = self.lines.error, None
                _bad(
                    self.source,
                    output,
                    path,
                    start_line,
                    self.lines.raw.decode("utf-8", "replace").rstrip("\r\n"),
                    error,
                )
                continue
            if not row:
                continue
            if len(row) != width:
                _bad(
                    self.source,
                    output,
                    path,
                    start_line,
                    ",".join(row),
                    f"expected {width} fields ({', '.join(self.header)}), found {len(row)}",
                )
                continue
            try:
                records.append(
                    {h: conv(v) for h, conv, v in zip(self.header, self.converters, row)}
                )
            except (ValueError, TypeError, OverflowError) as e:
                _bad(
                    self.source,
                    output,
                    path,
                    start_line,
                    ",".join(row),
                    f"cannot convert a field: {e}",
                )
        return records, False

    def _advance(self) -> None:
        self.rows_read += 1
        self.split.position = self.rows_read

    def close(self) -> None:
        self.file.close()


class _Parquet:
    """A Parquet file. One that cannot be opened, or is corrupt after some row, is a
    malformed record at that row (``line`` None; the location names the row): with
    ``on_error="dead_letter"`` the rest of the file is skipped."""

    def __init__(self, source: FileSource, split: FileSplit) -> None:
        self.source = source
        self.split = split
        self.file: Any = None
        #: the pyarrow file of a remote path (ParquetFile does not close what it was given)
        self.raw: Any = None
        #: why the file cannot be read (reported by ``read``)
        self.broken: str | None = None
        try:
            where = source.location.open_random(split.path)
            if not isinstance(where, str):
                self.raw = where
            self.file = pq.ParquetFile(where)
        except (pa.ArrowException, OSError, *DECODE_ERRORS) as e:
            self.broken = f"not a readable Parquet file: {e}"
            return
        columns = source.columns
        if columns is not None:
            missing = [c for c in columns if c not in self.file.schema_arrow.names]
            if missing:
                self.close()
                raise MalformedRecordError(
                    f"{split.path} has no column(s) {missing} of FileSource columns="
                    f"{columns}; it has {self.file.schema_arrow.names}",
                    location=split.path,
                )
        self.batches = self.file.iter_batches(batch_size=source.batch_size, columns=columns)
        self.skip = split.position

    def read(self, n: int, output: ReaderOutput) -> tuple[Any, bool]:
        if self.broken is not None:
            self._report(output, self.broken)
            return None, True
        try:
            batch = next(self.batches, None)
        except (pa.ArrowException, OSError, *DECODE_ERRORS) as e:
            self._report(output, f"corrupt after row {self.split.position}: {e}")
            return None, True
        if batch is None:
            return None, True
        if self.skip:
            drop = min(self.skip, batch.num_rows)
            batch = batch.slice(drop)
            self.skip -= drop
        self.split.position += batch.num_rows
        return (batch if batch.num_rows else None), False

    def _report(self, output: ReaderOutput, error: str) -> None:
        path, row = self.split.path, self.split.position
        report_malformed(
            self.source.on_error,
            output,
            what="parquet file",
            location=f"{path}@row{row}",
            raw=None,
            error=error,
            file=path,
            line=None,
        )

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.raw is not None:
            self.raw.close()


_ = io  # keep io imported for type checkers of file handles
