"""Files: :class:`FileSink` (exactly-once part files, JSON lines, CSV or Parquet) and
:class:`FileSource` (a folder it can keep watching), on local disks and on object stores
through ``pyarrow.fs`` (``locations``). See docs/connectors.md."""

from .sink import FileSink
from .source import FileSource

__all__ = ["FileSink", "FileSource"]
