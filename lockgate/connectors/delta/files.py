"""The data files of a :class:`~lockgate.connectors.DeltaSink` transaction.

A transaction's records go into Parquet files in the table's folder (Hive-style
``col=value/`` folders for partition columns). A data file no commit in the Delta log
adds is invisible to every Delta reader, so files can be written before the checkpoint
completes and published later by one Delta commit (M-X2).

File names carry who wrote them, so that files an attempt wrote and never committed can
be found and deleted (``DeltaSink.abort_lingering``) without touching anybody else's::

    lockgate-<job>-<sink uid>-<subtask>-<run>-<attempt>-<floor>-<seq>-<random>.parquet

``floor`` is the lowest Delta transaction version the file's transaction can be
committed with (the newest checkpoint id the subtask knew when it began, plus one): a
file whose floor is above the version the table records for its application id was
certainly never committed.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...core.state_records import state_record

#: the folder name Hive (and Delta) gives a null partition value
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: partition column types a DeltaSink accepts (their values have a plain text form)
PARTITION_TYPES = "integers, strings, booleans and dates"
#: longest string kept as a min/max statistic (longer ones get no min/max for the file)
MAX_STAT_STRING = 64
_SLUG = re.compile(r"[^A-Za-z0-9_.]+")
_NAME = re.compile(
    r"(?P<subtask>\d+)-(?P<run>[0-9A-Za-z_]+)-(?P<attempt>\d+)-(?P<floor>\d+)-(?P<seq>\d+)"
    r"-[0-9a-f]+\.parquet"
)


def slug(text: str, limit: int = 40) -> str:
    """``text`` reduced to characters safe in a file name (for the name prefix only)."""
    return _SLUG.sub("_", text)[:limit] or "_"


def file_prefix(job_name: str, sink_uid: str) -> str:
    """The start of the name of every data file a sink writes."""
    return f"lockgate-{slug(job_name)}-{slug(sink_uid)}-"


@dataclass(frozen=True)
class FileOwner:
    """Who wrote a data file, parsed from its name."""

    subtask: int
    run: str
    attempt: int
    floor: int
    seq: int


def parse_name(prefix: str, name: str) -> FileOwner | None:
    """The owner of the data file called ``name`` (no folder), or None when the name is
    not of a file this sink writes under ``prefix``."""
    if not name.startswith(prefix):
        return None
    m = _NAME.fullmatch(name[len(prefix) :])
    if m is None:
        return None
    return FileOwner(int(m["subtask"]), m["run"], int(m["attempt"]), int(m["floor"]), int(m["seq"]))


@state_record("delta.data_file")
@dataclass(frozen=True)
class DataFile:
    """One written, closed data file of a transaction (what its Delta add action says)."""

    #: relative to the table root, as stored (delta-rs percent-encodes it in the log)
    path: str
    size: int
    partition_values: dict[str, str | None]
    #: the add action's ``stats`` JSON (numRecords, minValues, maxValues, nullCount)
    stats: str
    records: int


def partition_text(value: Any, column: str) -> str | None:
    """A partition value as the Delta log holds it (a string; None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(
        f"partition column {column!r} holds {value!r} ({type(value).__name__}); "
        f"DeltaSink partitions by {PARTITION_TYPES} only"
    )


def partition_type_ok(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
    )


def _escape(text: str) -> str:
    """Hive's escaping of a partition folder name (what Spark and delta-rs write)."""
    return "".join(c if c.isalnum() or c in "_.-" else f"%{ord(c):02X}" for c in text)


def partition_folder(partition_values: dict[str, str | None]) -> str:
    return "/".join(
        f"{_escape(col)}={NULL_PARTITION if v is None else _escape(v)}"
        for col, v in partition_values.items()
    )


def _stat_value(value: Any) -> Any:
    """A Parquet min/max statistic as JSON for the Delta log, or None to leave it out
    (types whose text form readers might compare differently: timestamps, decimals,
    bytes, long strings, non-finite floats)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value if len(value) <= MAX_STAT_STRING else None
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return None


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """The Delta ``stats`` of a closed Parquet file, from its footer: record count, and
    per top-level primitive column its null count and (when every row group has them and
    the type has a safe text form) its min and max."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    columns = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    for f in schema:
        index = columns.get(f.name)
        if index is None or pa.types.is_nested(f.type):
            continue
        lo: Any = None
        hi: Any = None
        null_count = 0
        ok_nulls = ok_range = True
        for g in range(metadata.num_row_groups):
            stats = metadata.row_group(g).column(index).statistics
            if stats is None:
                ok_nulls = ok_range = False
                break
            if stats.has_null_count:
                null_count += stats.null_count
            else:
                ok_nulls = False
            if metadata.row_group(g).num_rows == stats.null_count:
                continue  # only nulls: no min/max to merge
            if not stats.has_min_max:
                ok_range = False
                continue
            a, b = _stat_value(stats.min), _stat_value(stats.max)
            if a is None or b is None:
                ok_range = False
                continue
            lo = a if lo is None or a < lo else lo
            hi = b if hi is None or b > hi else hi
        if ok_nulls:
            nulls[f.name] = null_count
        if ok_range and lo is not None:
            mins[f.name] = lo
            maxs[f.name] = hi
    return json.dumps(
        {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


@dataclass
class _OpenFile:
    relative: str  # the physical path, relative to the table root
    partition_values: dict[str, str | None]
    stream: Any
    writer: pq.ParquetWriter
    records: int = 0


@dataclass
class FileSet:
    """The open Parquet files of one transaction, one per partition (on one subtask).

    ``filesystem`` is a ``pyarrow.fs.FileSystem`` rooted at the table folder;
    ``data_schema`` the schema of the files (the table's without its partition columns).
    """

    filesystem: Any
    name_stem: str
    data_schema: pa.Schema
    partition_by: list[str]
    files: dict[tuple[str | None, ...], _OpenFile] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)

    def write(self, table: pa.Table) -> None:
        """Append ``table`` (already in the table's schema) to the files of its partitions."""
        if not self.partition_by:
            self._file(()).writer.write_table(table.select(self.data_schema.names))
            self._file(()).records += table.num_rows
            return
        keys = table.select(self.partition_by)
        groups = keys.group_by(self.partition_by, use_threads=False).aggregate([])
        for row in groups.to_pylist():
            mask = None
            for col in self.partition_by:
                value = row[col]
                cond = pc.is_null(table[col]) if value is None else pc.equal(table[col], value)
                mask = cond if mask is None else pc.and_(mask, cond)
            part = table.filter(mask).select(self.data_schema.names)
            key = tuple(partition_text(row[col], col) for col in self.partition_by)
            f = self._file(key)
            f.writer.write_table(part)
            f.records += part.num_rows

    def _file(self, key: tuple[str | None, ...]) -> _OpenFile:
        f = self.files.get(key)
        if f is None:
            values = dict(zip(self.partition_by, key))
            name = f"{self.name_stem}-{uuid.uuid4().hex[:8]}.parquet"
            folder = partition_folder(values)
            relative = f"{folder}/{name}" if folder else name
            if folder:
                self.filesystem.create_dir(folder, recursive=True)
            stream = self.filesystem.open_output_stream(relative)
            self.written.append(relative)
            writer = pq.ParquetWriter(stream, self.data_schema)
            f = _OpenFile(relative, values, stream, writer)
            self.files[key] = f
        return f

    def close(self) -> list[DataFile]:
        """Close every file (durable once closed) and describe it for the Delta log."""
        out: list[DataFile] = []
        for f in self.files.values():
            f.writer.close()
            size = f.stream.tell()
            f.stream.close()
            stats = file_stats(f.writer.writer.metadata, self.data_schema)
            out.append(DataFile(f.relative, size, f.partition_values, stats, f.records))
        self.files = {}
        return out

    def release(self) -> list[str]:
        """Close every file without describing it (after a failure); the paths written."""
        for f in self.files.values():
            for closeable in (f.writer, f.stream):
                try:
                    closeable.close()
                except Exception:  # noqa: BLE001 (best effort: the files are deleted next)
                    pass
        self.files = {}
        return list(self.written)
