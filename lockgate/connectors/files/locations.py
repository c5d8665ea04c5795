"""Where a file connector reads or writes: a local path, or a path on any ``pyarrow.fs``
filesystem.

:class:`FileLocation` takes what a user gives ``FileSource`` or ``FileSink``: a plain
local path, a ``file://`` URL (see :mod:`.local_paths`), or any URL that
``pyarrow.fs.FileSystem.from_uri`` opens: ``s3://bucket/prefix`` (with
``?endpoint_override=host:port&scheme=http&region=...`` for an S3-compatible store,
credentials from the URL or the usual AWS environment, as for checkpoint storage),
``gs://``, ``abfs://``, ``hdfs://``. It offers the few file operations the connectors
need (list a folder's files, open for reading or writing, copy, delete, ...), with the
local filesystem served by ``os`` calls exactly as before (atomic ``os.replace``,
fsync) and every other one by ``pyarrow.fs``.

Paths of files inside a location are strings: local absolute paths, or for a URL
``<scheme>://<filesystem path>`` (``s3://bucket/prefix/part-0-0.jsonl``): no query, no
credentials, so they are safe in checkpoints, messages and dead letters.

Pickles as the URL only; the filesystem is opened again, lazily, in each process (a
Spark Python worker needs the credentials in the URL or its environment).
"""

from __future__ import annotations

import io
import os
import posixpath
from collections.abc import Callable
from typing import Any

import pyarrow.fs as pafs

from ...checkpoint.fs_storage import _OBJECT_STORES, _first_line, _redact
from ...errors import ConfigurationError
from ..local_paths import _URL, local_path

#: what every refusal of a URL says is supported
SUPPORTED = (
    "a local path ('/data/out'), a file:// URL, or a URL pyarrow.fs opens, such as "
    "'s3://bucket/prefix?region=us-east-1' (S3-compatible stores: add "
    "&endpoint_override=host:port&scheme=http), gs://bucket/prefix or abfs://..."
)


class FileLocation:
    """The folder or file ``path`` of connector ``owner`` (see the module docstring).

    ``path``: the local path, or the URL as given (it may hold credentials: messages
    show it redacted). ``root``: the local path (made absolute with ``absolute``), or
    ``<scheme>://<fs path>``.
    Opening a URL's filesystem fails with a :class:`ConfigurationError` naming the
    URL (without its password) and what is supported.
    """

    def __init__(self, owner: str, path: object, *, absolute: bool = False) -> None:
        self.owner = owner
        text = path if isinstance(path, str) else None
        match = _URL.match(text) if text else None
        self.local = match is None or match.group(1).lower() == "file"
        self._fs: Any = None
        if self.local:
            self.path = local_path(owner, path)
            self.url = self.path
            self.scheme = ""
            self.root = os.path.abspath(self.path) if absolute else self.path
            return
        assert text is not None and match is not None
        self.path = self.url = text
        self.scheme = match.group(1).lower()
        fs_root = self._open_uri()[1]
        self.root = self._prefix + fs_root

    # pickling: the URL only ------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fs"] = None
        return state

    def __repr__(self) -> str:
        return f"FileLocation({self.owner!r}, {self.shown!r})"

    @property
    def shown(self) -> str:
        """The location for messages: the URL without its password."""
        return _redact(self.url)

    @property
    def _prefix(self) -> str:
        return f"{self.scheme}://"

    def _open_uri(self) -> tuple[Any, str]:
        try:
            fs, fs_path = pafs.FileSystem.from_uri(self.url)
        except Exception as e:  # ArrowInvalid, OSError (no libjvm for hdfs), ...
            raise ConfigurationError(
                f"{self.owner} path {self.shown!r}: pyarrow.fs cannot open it "
                f"({_first_line(e, self.url)}); give {SUPPORTED}"
            ) from e
        fs_path = fs_path.rstrip("/") or ("/" if fs_path.startswith("/") else "")
        if not fs_path:
            raise ConfigurationError(
                f"{self.owner} path {self.shown!r} names no bucket or folder; give {SUPPORTED}"
            )
        self._fs = fs
        return fs, fs_path

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.FileSystem`` of a URL (opened on first use in this process)."""
        if self.local:
            raise RuntimeError(f"{self.owner}: {self.root!r} is local, it has no pyarrow fs")
        return self._fs if self._fs is not None else self._open_uri()[0]

    @property
    def object_store(self) -> bool:
        """Whether the files live in an object store (S3, GCS, Azure blob): there a
        rename is a copy and a delete, not atomic, and folders need not exist."""
        return not self.local and self.filesystem.type_name in _OBJECT_STORES

    def _fs_path(self, path: str) -> str:
        if not path.startswith(self._prefix):
            raise ValueError(f"{self.owner}: {path!r} is not a path under {self.root!r}")
        return path[len(self._prefix) :]

    # paths -----------------------------------------------------------------------------
    def child(self, name: str) -> str:
        """The path of ``name`` in the folder."""
        if self.local:
            return os.path.join(self.root, name)
        return f"{self.root.rstrip('/')}/{name}"

    @staticmethod
    def parent(path: str) -> str:
        """The folder of the file ``path``."""
        return posixpath.dirname(path) if "://" in path else os.path.dirname(path)

    # checks ----------------------------------------------------------------------------
    def kind(self, path: str | None = None) -> str:
        """``"file"``, ``"folder"`` or ``"missing"`` for ``path`` (default: the root).
        An object-store prefix with no objects under it is ``"missing"``."""
        path = self.root if path is None else path
        if self.local:
            if os.path.isdir(path):
                return "folder"
            return "file" if os.path.exists(path) else "missing"
        info = self.filesystem.get_file_info(self._fs_path(path))
        if info.type == pafs.FileType.File:
            return "file"
        if info.type == pafs.FileType.Directory:
            return "folder"
        return "missing"

    def exists(self, path: str) -> bool:
        return self.kind(path) != "missing"

    def size(self, path: str) -> int | None:
        """The size of the file ``path`` in bytes; None if there is none."""
        if self.local:
            try:
                return os.path.getsize(path)
            except FileNotFoundError:
                return None
        info = self.filesystem.get_file_info(self._fs_path(path))
        return int(info.size) if info.type == pafs.FileType.File else None

    def check_bucket(self) -> None:
        """On an object store: raise a :class:`ConfigurationError` if the bucket (or
        container) the URL names does not exist, saying how to fix it."""
        if not self.object_store:
            return
        bucket = self._fs_path(self.root).split("/", 1)[0]
        try:
            info = self.filesystem.get_file_info(bucket)
        except Exception as e:  # OSError from the store: access denied, unreachable, ...
            raise ConfigurationError(
                f"{self.owner} path {self.shown!r}: cannot reach bucket {bucket!r}: "
                f"{_first_line(e, self.url)}; check the endpoint and credentials (in the "
                "URL or the environment, e.g. AWS_ACCESS_KEY_ID)"
            ) from e
        if info.type == pafs.FileType.NotFound:
            raise ConfigurationError(
                f"{self.owner} path {self.shown!r}: bucket {bucket!r} does not exist; "
                f"create it (e.g. 'aws s3 mb {self.scheme}://{bucket}') or fix the URL"
            )

    # folders ---------------------------------------------------------------------------
    def make_folder(self) -> None:
        """Create the folder if missing (object stores have no folders: nothing)."""
        if self.local:
            os.makedirs(self.root, exist_ok=True)
        elif not self.object_store:
            self.filesystem.create_dir(self._fs_path(self.root), recursive=True)

    def file_names(self, keep: Callable[[str], bool] = lambda name: True) -> list[str]:
        """The names of the files directly in the folder that ``keep`` accepts (not of
        sub-folders; unsorted). A missing object-store prefix has none."""
        if self.local:
            return [
                n
                for n in os.listdir(self.root)
                if keep(n) and os.path.isfile(os.path.join(self.root, n))
            ]
        infos = self.filesystem.get_file_info(
            pafs.FileSelector(self._fs_path(self.root), recursive=False, allow_not_found=True)
        )
        return [i.base_name for i in infos if i.type == pafs.FileType.File and keep(i.base_name)]

    # files -----------------------------------------------------------------------------
    def open_read(self, path: str) -> Any:
        """A buffered binary reader of the file ``path`` (``readline`` works)."""
        if self.local:
            return open(path, "rb")
        stream = self.filesystem.open_input_stream(self._fs_path(path))
        return io.BufferedReader(stream, 1 << 20)

    def open_random(self, path: str) -> Any:
        """A random-access reader of the file ``path`` (for Parquet): the local path
        itself, or an open ``pyarrow`` file the caller closes."""
        if self.local:
            return path
        return self.filesystem.open_input_file(self._fs_path(path))

    def open_write(self, path: str) -> Any:
        """A binary writer creating (or replacing) the file ``path``. On an object store
        the object exists, whole, once the writer is closed; not before."""
        if self.local:
            return open(path, "wb")
        return self.filesystem.open_output_stream(self._fs_path(path))

    def delete(self, path: str) -> None:
        """Delete the file ``path``; a missing one is fine."""
        if self.local:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            return
        try:
            self.filesystem.delete_file(self._fs_path(path))
        except FileNotFoundError:
            pass

    def move(self, source: str, target: str) -> None:
        """Rename the file ``source`` to ``target`` on a filesystem that is neither local
        nor an object store (HDFS and the like: an atomic rename there)."""
        self.filesystem.move(self._fs_path(source), self._fs_path(target))

    def copy(self, source: str, target: str) -> None:
        """Copy the file ``source`` to ``target`` (replacing it). On S3 a server-side
        copy: ``target`` appears whole or not at all."""
        if self.local:
            raise RuntimeError(f"{self.owner}: local files are renamed, not copied")
        self.filesystem.copy_file(self._fs_path(source), self._fs_path(target))
