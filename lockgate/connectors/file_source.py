"""FileSource: records from JSON-lines, CSV or Parquet files, one split per file.

A malformed record fails the job with its file and line (``MalformedRecordError``),
unless ``on_error="dead_letter"``: then it goes to the side output
``lg.DEAD_LETTER`` (``stream.get_side_output(lg.DEAD_LETTER)``) as a dict with
``location``, ``file``, ``line``, ``raw`` and ``error``. Nothing is dropped.
Each split keeps its read position (the lines or rows already emitted).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigurationError, MalformedRecordError
from ..runtime.batch import RowBatch
from ..runtime.context import RuntimeContext
from .base import InputStatus, ReaderOutput, Source, SourceReader

FORMATS = ("jsonl", "csv", "parquet")
ON_ERROR = ("fail", "dead_letter")


@dataclass
class FileSplit:
    """One file; ``position`` counts the records (lines for jsonl/csv, rows for parquet)
    already consumed, ``line`` the physical lines read."""

    split_id: str
    path: str
    position: int = 0


class FileSource(Source):
    """Reads ``path`` (a file, or every visible file of a folder, in name order).

    ``format``: ``"jsonl"`` (one JSON value per line; blank lines are skipped),
    ``"csv"`` (a header line, then one record per row; values become int, float
    or str, empty fields None, unless ``csv_types`` maps a column to a
    converter such as ``int`` or ``str``) or ``"parquet"``.
    """

    default_name = "files"

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: str = "jsonl",
        *,
        on_error: str = "fail",
        batch_size: int = 8192,
        csv_types: dict[str, Callable[[str], Any]] | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigurationError(
                f"FileSource format must be one of {', '.join(FORMATS)}, got {format!r}"
            )
        if on_error not in ON_ERROR:
            raise ConfigurationError(
                f"FileSource on_error must be 'fail' or 'dead_letter', got {on_error!r}"
            )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"FileSource batch_size must be >= 1, got {batch_size!r}")
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise ConfigurationError(
                f"FileSource path {self.path!r} does not exist: give an existing file or folder"
            )
        self.format = format
        self.on_error = on_error
        self.batch_size = batch_size
        self.csv_types = dict(csv_types or {})

    @property
    def side_outputs(self) -> tuple[str, ...]:
        return ("dead-letter",) if self.on_error == "dead_letter" else ()

    def files(self) -> list[str]:
        if os.path.isdir(self.path):
            names = sorted(
                n for n in os.listdir(self.path)
                if not n.startswith((".", "_")) and os.path.isfile(os.path.join(self.path, n))
            )
            return [os.path.join(self.path, n) for n in names]
        return [self.path]

    def create_splits(self, parallelism: int) -> list[FileSplit]:
        return [FileSplit(f"file-{i}", p) for i, p in enumerate(self.files())]

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        return _FileReader(self)


class _FileReader(SourceReader):
    def __init__(self, source: FileSource) -> None:
        self.source = source
        self.splits: list[FileSplit] = []
        self._open: Any = None

    def add_splits(self, splits: list[FileSplit]) -> None:
        self.splits.extend(splits)

    def poll(self, output: ReaderOutput) -> InputStatus:
        if not self.splits:
            return InputStatus.END_OF_INPUT
        split = self.splits[0]
        if self._open is None:
            self._open = _open_reader(self.source, split)
        records, done = self._open.read(self.source.batch_size, output)
        if records:
            output.emit_from_split(split.split_id, RowBatch(records)
                                   if not isinstance(records, pa.RecordBatch) else records)
        if done:
            self._open.close()
            self._open = None
            self.splits.pop(0)
            output.split_finished(split.split_id)
        return InputStatus.MORE_AVAILABLE if self.splits else InputStatus.END_OF_INPUT

    def snapshot_positions(self) -> list[FileSplit]:
        return [FileSplit(s.split_id, s.path, s.position) for s in self.splits]

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def _open_reader(source: FileSource, split: FileSplit) -> Any:
    if source.format == "jsonl":
        return _JsonLines(source, split)
    if source.format == "csv":
        return _Csv(source, split)
    return _Parquet(source, split)


def _bad(source: FileSource, output: ReaderOutput, path: str, line: int | None, raw: Any,
         error: str) -> None:
    location = f"{path}:{line}" if line is not None else path
    if source.on_error == "dead_letter":
        output.emit_dead_letter(
            {"location": location, "file": path, "line": line, "raw": raw, "error": error}
        )
        return
    raise MalformedRecordError(
        f"malformed {source.format} record at {location}: {error} (raw: {raw!r:.200}); fix the "
        "input, or pass on_error='dead_letter' to route such records to a side output",
        location=location,
        raw=raw,
    )


class _JsonLines:
    def __init__(self, source: FileSource, split: FileSplit) -> None:
        self.source = source
        self.split = split
        self.file = open(split.path, "rb")
        self.line = 0
        for _ in range(split.position):  # resume: skip consumed lines
            if not self.file.readline():
                break
            self.line += 1

    def read(self, n: int, output: ReaderOutput) -> tuple[list[Any], bool]:
        records: list[Any] = []
        loads = json.loads
        readline = self.file.readline
        path = self.split.path
        while len(records) < n:
            raw = readline()
            if not raw:
                return records, True
            self.line += 1
            self.split.position = self.line
            if not raw.strip():
                continue
            try:
                records.append(loads(raw))
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                _bad(self.source, output, path, self.line, text, f"invalid JSON: {e}")
        return records, False

    def close(self) -> None:
        self.file.close()


def _auto_convert(value: str) -> Any:
    if value == "":
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


class _DecodedLines:
    """UTF-8 lines of a binary file; an undecodable line becomes an empty line and its
    error is kept for the reader to report with the line number."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.error: str | None = None
        self.raw: bytes = b""

    def __iter__(self) -> "_DecodedLines":
        return self

    def __next__(self) -> str:
        raw = self.file.readline()
        if not raw:
            raise StopIteration
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
        self.file = open(split.path, "rb")
        self.lines = _DecodedLines(self.file)
        self.reader = csv.reader(self.lines)
        try:
            self.header = next(self.reader)
        except StopIteration:
            self.header = []
        except csv.Error as e:
            raise MalformedRecordError(
                f"malformed csv header at {split.path}:1: {e}", location=f"{split.path}:1"
            ) from e
        unknown = set(source.csv_types) - set(self.header)
        if unknown and self.header:
            raise ConfigurationError(
                f"FileSource csv_types names columns {sorted(unknown)} that {split.path} does not "
                f"have; its header is {self.header}"
            )
        self.converters = [source.csv_types.get(h, _auto_convert) for h in self.header]
        self.rows_read = 0
        while self.rows_read < split.position:
            if next(self.reader, None) is None:
                break
            self.rows_read += 1

    def read(self, n: int, output: ReaderOutput) -> tuple[list[Any], bool]:
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
                _bad(self.source, output, path, start_line,
                     self.lines.raw.decode("utf-8", "replace").rstrip("\r\n"), error)
                continue
            if not row:
                continue
            if len(row) != width:
                _bad(self.source, output, path, start_line, ",".join(row),
                     f"expected {width} fields ({', '.join(self.header)}), found {len(row)}")
                continue
            try:
                records.append({h: conv(v) for h, conv, v in zip(self.header, self.converters, row)})
            except (ValueError, TypeError) as e:
                _bad(self.source, output, path, start_line, ",".join(row),
                     f"cannot convert a field: {e}")
        return records, False

    def _advance(self) -> None:
        self.rows_read += 1
        self.split.position = self.rows_read

    def close(self) -> None:
        self.file.close()


class _Parquet:
    def __init__(self, source: FileSource, split: FileSplit) -> None:
        self.source = source
        self.split = split
        try:
            self.file = pq.ParquetFile(split.path)
            self.batches = self.file.iter_batches(batch_size=source.batch_size)
        except (pa.ArrowInvalid, OSError) as e:
            raise MalformedRecordError(
                f"{split.path} is not a readable Parquet file: {e}", location=split.path
            ) from e
        self.skip = split.position

    def read(self, n: int, output: ReaderOutput) -> tuple[Any, bool]:
        try:
            batch = next(self.batches, None)
        except (pa.ArrowInvalid, OSError) as e:
            raise MalformedRecordError(
                f"{self.split.path} is corrupt after row {self.split.position}: {e}",
                location=f"{self.split.path}@row{self.split.position}",
            ) from e
        if batch is None:
            return None, True
        if self.skip:
            drop = min(self.skip, batch.num_rows)
            batch = batch.slice(drop)
            self.skip -= drop
        self.split.position += batch.num_rows
        return (batch if batch.num_rows else None), False

    def close(self) -> None:
        self.file.close()


_ = io  # keep io imported for type checkers of file handles
