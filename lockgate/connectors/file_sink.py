"""FileSink: writes records to part files in a folder (at-least-once in this version).

Each subtask writes its own part file ``part-<subtask>-<n>.<ext>`` (``n`` is
the first number not used yet, so reruns never overwrite earlier output).
Files are flushed and closed when the input ends.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import ConfigurationError
from ..runtime.batch import Batch, to_arrow, to_rows
from ..runtime.context import RuntimeContext
from .base import Sink, SinkWriter

EXTENSIONS = {"jsonl": "jsonl", "csv": "csv", "parquet": "parquet"}


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"a record field of type {type(value).__name__} ({value!r}) is not JSON")


def _merge_schemas(batches: list[pa.RecordBatch], where: str | None) -> pa.Schema:
    try:
        return pa.unify_schemas([b.schema.remove_metadata() for b in batches],
                                promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise TypeError(
            f"FileSink at {where}: records of incompatible shapes ({e}); a file needs one schema"
        ) from e


class FileSink(Sink):
    """Writes records as JSON lines, CSV or Parquet into the folder ``path``."""

    default_name = "files"

    def __init__(self, path: str | os.PathLike[str], format: str = "jsonl") -> None:
        if format not in EXTENSIONS:
            raise ConfigurationError(
                f"FileSink format must be one of {', '.join(EXTENSIONS)}, got {format!r}"
            )
        self.path = os.fspath(path)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ConfigurationError(
                f"FileSink path {self.path!r} is a file; give a folder (it is created if missing)"
            )
        self.format = format

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        os.makedirs(self.path, exist_ok=True)
        return _FileWriter(self, ctx)


class _FileWriter(SinkWriter):
    def __init__(self, sink: FileSink, ctx: RuntimeContext) -> None:
        self.sink = sink
        self.ctx = ctx
        self.file: Any = None
        self.writer: Any = None
        self.file_path: str | None = None
        self.schema: pa.Schema | None = None
        #: batches held while some column is still untyped (all None so far)
        self._untyped: list[pa.RecordBatch] = []

    def _target(self) -> str:
        ext = EXTENSIONS[self.sink.format]
        n = 0
        while True:
            candidate = os.path.join(self.sink.path, f"part-{self.ctx.subtask_index}-{n}.{ext}")
            try:
                fd = os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                n += 1
                continue
            os.close(fd)
            return candidate

    def write(self, batch: Batch) -> None:
        if self.file_path is None:
            self.file_path = self._target()
        fmt = self.sink.format
        if fmt == "jsonl":
            if self.file is None:
                self.file = open(self.file_path, "w", encoding="utf-8")
            dumps = json.dumps
            self.file.write("".join(
                dumps(r, default=_json_default, ensure_ascii=False) + "\n" for r in to_rows(batch)
            ))
            return
        arrow = to_arrow(batch, operator=f"FileSink({fmt})")
        if self.writer is None:
            # Columns that were None in every record so far have Arrow type null; wait for
            # a batch that types them before fixing the file's schema.
            self._untyped.append(arrow)
            schema = _merge_schemas(self._untyped, self.file_path)
            if any(pa.types.is_null(f.type) for f in schema):
                return
            writer = self._open_writer(schema)
            held, self._untyped = self._untyped, []
            for b in held:
                writer.write_batch(self._conform(b))
            return
        self.writer.write_batch(self._conform(arrow))

    def _open_writer(self, schema: pa.Schema) -> Any:
        assert self.file_path is not None
        self.schema = schema
        if self.sink.format == "csv":
            self.file = open(self.file_path, "wb")
            self.writer = pacsv.CSVWriter(self.file, schema)
        else:
            self.writer = pq.ParquetWriter(self.file_path, schema)
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
                f"FileSink({self.sink.format}) at {self.file_path}: records changed shape from "
                f"{schema} to {arrow.schema}; a {self.sink.format} file needs one schema"
            ) from e

    def finish(self) -> None:
        if self.writer is None and self._untyped:
            writer = self._open_writer(_merge_schemas(self._untyped, self.file_path))
            held, self._untyped = self._untyped, []
            for b in held:
                writer.write_batch(self._conform(b))
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.file is not None:
            self.file.close()
            self.file = None
