"""Checkpoint storage on any filesystem ``pyarrow.fs`` opens.

:class:`FileSystemCheckpointStorage` takes a URL: a plain local path (relative
paths are made absolute when the storage is created, on the driver), ``file://``,
``s3://bucket/prefix?endpoint_override=host:port&scheme=http&region=...``,
``gs://``, ``hdfs://``, ``abfs://`` - whatever ``pyarrow.fs.FileSystem.from_uri``
accepts.

File format (every file it writes)::

    offset  size  field
    0       4     magic b"LGCK"
    4       2     format version, uint16 little-endian (currently 1)
    6       1     payload kind: 1 = state (a state tree, lockgate.checkpoint.state_tree;
                  before it, one pickle), 2 = JSON utf-8 (_metadata, _latest)
    7       4     CRC32 of the payload, uint32 little-endian
    11      8     payload length in bytes, uint64 little-endian
    19      ...   payload

Format version 2 is a signed file: the same header (version 2), the payload, then a
32-byte HMAC-SHA256 of header and payload made with the storage's signing key
(``checkpoint_config.signing_key``, see :mod:`lockgate.checkpoint.storage_options`).

Reading checks magic, version, kind, length and checksum, and with a signing key the
MAC (a version 1 file, unsigned, is then refused); any failure raises
:class:`~lockgate.checkpoint.storage.CorruptCheckpointError` naming the file. The MAC
is checked before a state file is unpickled. Without a key, MACs are not checked:
restore only from storage nobody else can write.

Permissions: on the local filesystem, files are created with the storage options'
``file_mode`` (default ``0o600``) and the folders the storage creates with ``dir_mode``
(default ``0o700``).

Atomicity: ``_metadata`` and ``_latest`` are written to a temporary file in the same
folder and renamed into place on filesystems with an atomic rename (local, HDFS, ...);
on object stores (S3, GCS, Azure blob) one object PUT is already atomic, so they are
written directly. On the local filesystem every file is fsync'ed (and the folder, after
a rename) so a completed checkpoint and the pointer to it survive a machine crash.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import struct
import threading
import uuid
import zlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow.fs as pafs

from ..errors import ConfigurationError
from .state_tree import decode_tree, encode_tree
from .storage import (
    LATEST,
    METADATA,
    CorruptCheckpointError,
    check_file_data,
    check_rel,
    checkpoint_folder,
    state_file_path,
)
from .storage_options import MAC_SIZE, StorageOptions, options_for
from .types import StateHandle

MAGIC = b"LGCK"
FORMAT_VERSION = 1
SIGNED_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
KIND_PICKLE = 1
KIND_JSON = 2
_KIND_NAMES = {KIND_PICKLE: "pickle", KIND_JSON: "JSON"}
#: magic, version, kind, crc32, payload length
HEADER = struct.Struct("<4sHBIQ")
HEADER_SIZE = HEADER.size  # 19

#: filesystems (``FileSystem.type_name``) where one object PUT is atomic and a rename is a
#: copy: atomic files are written directly there
_OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
_CHK_FOLDER = re.compile(r"chk-(0|[1-9][0-9]*)")
#: the temporary file of an atomic write in progress (see ``_write`` and ``_write_local``)
_TMP_FILE = re.compile(r"\..+\.[0-9a-f]{32}\.tmp")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def encode_file(payload: bytes, kind: int, options: StorageOptions | None = None) -> bytes:
    """The bytes of a checkpoint file holding ``payload`` (header + payload; with a
    signing key in ``options``: a version 2 file, header + payload + MAC)."""
    if options is None or options.signing_key is None:
        return HEADER.pack(MAGIC, FORMAT_VERSION, kind, zlib.crc32(payload), len(payload)) + payload
    body = HEADER.pack(MAGIC, SIGNED_VERSION, kind, zlib.crc32(payload), len(payload)) + payload
    return body + options.mac(body)


def decode_file(
    data: bytes, kind: int, where: str, options: StorageOptions | None = None
) -> tuple[bytes, int]:
    """Check a checkpoint file's header (and, with a signing key in ``options``, its
    MAC) and return ``(payload, crc32)``; ``where`` names the file in errors. Never
    unpickles anything."""
    if len(data) < HEADER_SIZE:
        if not MAGIC.startswith(data[: len(MAGIC)]):
            raise CorruptCheckpointError(
                f"checkpoint file {where} is not a lockgate checkpoint file (bad magic bytes)"
            )
        raise CorruptCheckpointError(
            f"checkpoint file {where} is truncated: {len(data)} bytes, "
            f"shorter than the {HEADER_SIZE}-byte header"
        )
    magic, version, found_kind, crc, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpointError(
            f"checkpoint file {where} is not a lockgate checkpoint file (magic bytes "
            f"{magic!r}, expected {MAGIC!r})"
        )
    if version not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        raise CorruptCheckpointError(
            f"checkpoint file {where} has format version {version}; this version of lockgate "
            f"reads format version(s) {supported} (was it written by a newer lockgate?)"
        )
    if found_kind != kind:
        raise CorruptCheckpointError(
            f"checkpoint file {where} holds a {_KIND_NAMES.get(found_kind, found_kind)} payload, "
            f"expected {_KIND_NAMES.get(kind, kind)}"
        )
    signing = options is not None and options.signing_key is not None
    if version == SIGNED_VERSION:
        if len(data) < HEADER_SIZE + MAC_SIZE:
            raise CorruptCheckpointError(
                f"checkpoint file {where} is truncated: a signed file "
                f"needs a {MAC_SIZE}-byte MAC after the header"
            )
        data, mac = data[:-MAC_SIZE], data[-MAC_SIZE:]
        if signing:
            assert options is not None
            if not hmac.compare_digest(options.mac(data), mac):
                raise CorruptCheckpointError(
                    f"checkpoint file {where} is not signed with this job's signing key (its "
                    f"HMAC-SHA256 does not match): it was changed, or written with another "
                    f"key; refusing to load it"
                )
    elif signing:
        raise CorruptCheckpointError(
            f"checkpoint file {where} is not signed, and checkpoint_config.signing_key is set: "
            f"refusing to load it (a checkpoint runs pickled code); restore it without a "
            f"signing key only if you trust whoever could write it"
        )
    payload = data[HEADER_SIZE:]
    if len(payload) < length:
        raise CorruptCheckpointError(
            f"checkpoint file {where} is truncated: payload has {len(payload)} of {length} bytes"
        )
    if len(payload) > length:
        raise CorruptCheckpointError(
            f"checkpoint file {where} is corrupt: {len(payload) - length} "
            f"bytes after the {length}-byte payload"
        )
    actual = zlib.crc32(payload)
    if actual != crc:
        raise CorruptCheckpointError(
            f"checkpoint file {where} is corrupt: CRC32 of the payload "
            f"is {actual:#010x}, the header says {crc:#010x}"
        )
    return payload, crc


def _has_scheme(url: str) -> bool:
    # a single letter before ':' is a Windows drive, not a scheme
    m = _SCHEME.match(url)
    return m is not None and len(m.group(0)) > 2


def _redact(url: str) -> str:
    """``url`` without a password (``s3://key:secret@bucket`` -> ``s3://key:***@bucket``)."""
    if not _has_scheme(url):
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname or ''}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _first_line(error: BaseException, url: str) -> str:
    """The first line of ``error``'s message, without the password of ``url``."""
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else type(error).__name__
    if len(lines) > 1:
        first += " (...)"
    if _has_scheme(url):
        password = urlsplit(url).password
        if password:
            first = first.replace(password, "***")
    return first


class FileSystemCheckpointStorage:
    """Checkpoint storage under a filesystem URL (see the module docstring).

    Pickles as its URL only; the filesystem is opened lazily in each process. Safe to call
    from several threads. ``options``: signing key and permissions (default: those
    registered for the URL in this process, see
    :mod:`lockgate.checkpoint.storage_options`).
    """

    def __init__(self, url: str, options: StorageOptions | None = None) -> None:
        if not isinstance(url, str) or not url.strip():
            raise ConfigurationError(
                f"checkpoint storage must be a filesystem URL or path, got {url!r}"
            )
        if not _has_scheme(url):
            url = os.path.abspath(os.path.expanduser(url))
        self.url = url
        #: signing key and permissions (default: those registered for the URL)
        self.options = options if options is not None else options_for(url)
        self._lock = threading.Lock()
        self._fs: Any = None
        self._root = ""
        fs = self._open()
        try:
            if isinstance(fs, pafs.LocalFileSystem):
                _makedirs(self._root, self.options.dir_mode)
            else:
                fs.create_dir(self._root, recursive=True)
        except Exception as e:  # pyarrow raises OSError, ArrowInvalid, ...
            raise ConfigurationError(
                f"checkpoint storage {_redact(url)!r} is unusable: cannot create its root "
                f"directory {self._root!r}: {_first_line(e, url)}"
            ) from e

    # pickling: the URL only (never the signing key): the copy uses the options
    # registered for the URL in the process that unpickles it
    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = state["url"]
        self.options = options_for(self.url)
        self._lock = threading.Lock()
        self._fs = None
        self._root = ""

    def __repr__(self) -> str:
        return f"FileSystemCheckpointStorage({_redact(self.url)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileSystemCheckpointStorage) and other.url == self.url

    def __hash__(self) -> int:
        return hash((FileSystemCheckpointStorage, self.url))

    # the filesystem -----------------------------------------------------------------
    def _open(self) -> Any:
        with self._lock:
            if self._fs is None:
                try:
                    if _has_scheme(self.url):
                        fs, root = pafs.FileSystem.from_uri(self.url)
                    else:
                        fs, root = pafs.LocalFileSystem(), self.url
                except Exception as e:  # ArrowInvalid, OSError (no libjvm for hdfs), ...
                    raise ConfigurationError(
                        f"checkpoint storage {_redact(self.url)!r} is unusable: "
                        f"{_first_line(e, self.url)}"
                    ) from e
                root = root.rstrip("/") or ("/" if root.startswith("/") else "")
                if not root:
                    raise ConfigurationError(
                        f"checkpoint storage {_redact(self.url)!r} names no bucket or directory"
                    )
                self._root = root
                self._fs = fs
            return self._fs

    @property
    def filesystem(self) -> Any:
        """The ``pyarrow.fs.FileSystem`` (opened on first use in this process)."""
        return self._open()

    @property
    def _atomic_put(self) -> bool:
        return self._open().type_name in _OBJECT_STORES

    def _path(self, rel: str) -> str:
        self._open()
        return f"{self._root.rstrip('/')}/{rel}"

    def location(self, rel: str = "") -> str:
        """The URL (or local path) of ``rel`` under the storage root, e.g. of ``chk-3``."""
        if not rel:
            return self.url
        if not _has_scheme(self.url):
            return os.path.join(self.url, rel)
        parts = urlsplit(self.url)
        return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + rel))

    @staticmethod
    def _check_rel(rel: str) -> None:
        check_rel(rel)

    # raw bytes ----------------------------------------------------------------------
    def _write(self, rel: str, data: bytes, *, atomic: bool) -> None:
        fs = self._open()
        path = self._path(rel)
        if isinstance(fs, pafs.LocalFileSystem):
            _write_local(path, data, atomic=atomic, options=self.options)
            return
        parent = path.rsplit("/", 1)[0]
        if not self._atomic_put:
            fs.create_dir(parent, recursive=True)
        if not atomic or self._atomic_put:
            with fs.open_output_stream(path) as out:
                out.write(data)
            return
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.{uuid.uuid4().hex}.tmp"
        try:
            with fs.open_output_stream(tmp) as out:
                out.write(data)
            fs.move(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: the original error matters
                fs.delete_file(tmp)
            raise

    def _read(self, rel: str) -> bytes:
        with self._open().open_input_stream(self._path(rel)) as f:
            data: bytes = f.read()
        return data

    def _delete_file(self, rel: str) -> None:
        try:
            self._open().delete_file(self._path(rel))
        except FileNotFoundError:
            pass

    def _is_file(self, rel: str) -> bool:
        info = self._open().get_file_info(self._path(rel))
        return bool(info.type == pafs.FileType.File)

    # raw files (CheckpointStorage) ----------------------------------------------------
    def write_file(self, rel: str, data: bytes, *, atomic: bool = False) -> None:
        """Write ``data`` as is (no header) to ``rel``, creating folders; ``atomic``: through
        a temporary file renamed into place (one PUT on object stores), fsync'ed locally."""
        check_rel(rel)
        check_file_data(data)
        self._write(rel, bytes(data), atomic=atomic)

    def read_file(self, rel: str) -> bytes:
        """The bytes of ``rel``; ``FileNotFoundError`` naming it when it does not exist."""
        check_rel(rel)
        try:
            return self._read(rel)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{_redact(self.location(rel))} does not exist") from e

    def delete_file(self, rel: str) -> None:
        """Delete the file ``rel``; missing is fine."""
        check_rel(rel)
        self._delete_file(rel)

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` is an existing file."""
        check_rel(rel)
        return self._is_file(rel)

    def list_files(self, rel_dir: str = "") -> list[str]:
        """Every file under ``rel_dir`` (recursively, ``""``: the root) as sorted paths
        relative to the storage root, without the temporary files of atomic writes."""
        check_rel(rel_dir, what="folder path", allow_root=True)
        fs = self._open()
        base = self._root.rstrip("/")
        selector = pafs.FileSelector(
            self._path(rel_dir) if rel_dir else self._root, allow_not_found=True, recursive=True
        )
        found = []
        for info in fs.get_file_info(selector):
            if info.type != pafs.FileType.File or _TMP_FILE.fullmatch(info.base_name):
                continue
            path = info.path
            rel = path[len(base) + 1 :] if path.startswith(base + "/") else path.lstrip("/")
            found.append(rel)
        return sorted(found)

    # CheckpointStorage ----------------------------------------------------------------
    def write_state(self, checkpoint_id: int, name: str, state: Any) -> StateHandle:
        """Write ``state`` (a state tree, :mod:`lockgate.checkpoint.state_tree`, with the
        header) to a new file ``chk-<id>/<name>.<random token>`` (unique to this call, so
        a late writer of a failed attempt never overwrites another's file); return its
        handle."""
        rel = state_file_path(checkpoint_id, name)
        payload = encode_tree(state)  # objects cloudpickled: a driver script's classes by value
        data = encode_file(payload, KIND_PICKLE, self.options)
        self._write(rel, data, atomic=False)
        return StateHandle(rel, len(data), zlib.crc32(payload))

    def verify_state(self, handle: StateHandle) -> bytes:
        """Check the state file behind ``handle`` (header, length, CRC32 against the
        handle and, with a signing key, its MAC) without unpickling it; return its
        pickled payload. Raises :class:`CorruptCheckpointError` naming the file."""
        self._check_rel(handle.path)
        where = self.location(handle.path)
        try:
            data = self._read(handle.path)
        except FileNotFoundError as e:
            raise CorruptCheckpointError(f"state file {_redact(where)} is missing") from e
        payload, crc = decode_file(data, KIND_PICKLE, _redact(where), self.options)
        if crc != handle.checksum or len(data) != handle.size:
            raise CorruptCheckpointError(
                f"state file {_redact(where)} does not match its handle: {len(data)} bytes with "
                f"CRC32 {crc:#010x}, the handle says {handle.size} bytes with CRC32 "
                f"{handle.checksum:#010x} (overwritten by another checkpoint?)"
            )
        return payload

    def read_state(self, handle: StateHandle, *, unpickle: bool = True) -> Any:
        """The state behind ``handle``: verified first (:meth:`verify_state`), then
        decoded; its pickled parts are unpickled - which runs code: only from trusted or
        signed storage - or, with ``unpickle=False``, left as
        :class:`~lockgate.checkpoint.state_tree.PickledValue` placeholders."""
        where = _redact(self.location(handle.path))
        return decode_tree(self.verify_state(handle), unpickle=unpickle, where=where)

    def write_metadata(self, checkpoint_id: int, metadata: dict[str, Any]) -> str:
        if not isinstance(metadata, dict):
            raise TypeError(f"checkpoint metadata must be a dict, got {type(metadata).__name__}")
        folder = checkpoint_folder(checkpoint_id)
        payload = json.dumps(metadata, allow_nan=False).encode("utf-8")
        self._write(
            f"{folder}/{METADATA}", encode_file(payload, KIND_JSON, self.options), atomic=True
        )
        return self.location(folder)

    def read_metadata(self, checkpoint_id: int) -> dict[str, Any]:
        rel = f"{checkpoint_folder(checkpoint_id)}/{METADATA}"
        try:
            data = self._read(rel)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"checkpoint {checkpoint_id} has no metadata "
                f"({_redact(self.location(rel))} does not exist)"
            ) from e
        result = self._load_json(data, rel)
        if not isinstance(result, dict):
            raise CorruptCheckpointError(
                f"checkpoint file {_redact(self.location(rel))} does not hold a JSON object"
            )
        return result

    def discard(self, checkpoint_id: int) -> None:
        folder = checkpoint_folder(checkpoint_id)
        # _metadata first: a half-deleted folder must not look like a completed checkpoint
        self._delete_file(f"{folder}/{METADATA}")
        fs = self._open()
        path = self._path(folder)
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def discard_handle(self, handle: StateHandle) -> None:
        self._check_rel(handle.path)
        self._delete_file(handle.path)

    def completed_ids(self) -> list[int]:
        fs = self._open()
        selector = pafs.FileSelector(self._root, allow_not_found=True, recursive=False)
        ids = []
        for info in fs.get_file_info(selector):
            m = _CHK_FOLDER.fullmatch(info.base_name)
            if m and info.type == pafs.FileType.Directory:
                ids.append(int(m.group(1)))
        if not ids:
            return []
        metas = fs.get_file_info([self._path(f"{checkpoint_folder(i)}/{METADATA}") for i in ids])
        return sorted(i for i, meta in zip(ids, metas) if meta.type == pafs.FileType.File)

    def write_latest(self, checkpoint_id: int) -> None:
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise TypeError(f"checkpoint_id must be an int, got {checkpoint_id!r}")
        payload = json.dumps({"checkpoint_id": checkpoint_id}).encode("utf-8")
        self._write(LATEST, encode_file(payload, KIND_JSON, self.options), atomic=True)

    def read_latest(self) -> int | None:
        try:
            data = self._read(LATEST)
        except FileNotFoundError:
            return None
        value = self._load_json(data, LATEST)
        checkpoint_id = value.get("checkpoint_id") if isinstance(value, dict) else None
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise CorruptCheckpointError(
                f"checkpoint pointer {_redact(self.location(LATEST))} "
                f'holds {value!r}, not {{"checkpoint_id": <int>}}'
            )
        return checkpoint_id

    def _load_json(self, data: bytes, rel: str) -> Any:
        where = _redact(self.location(rel))
        payload, _ = decode_file(data, KIND_JSON, where, self.options)
        try:
            return json.loads(payload.decode("utf-8"))
        except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise CorruptCheckpointError(f"checkpoint file {where} holds invalid JSON: {e}") from e


def _makedirs(path: str, mode: int) -> None:
    """Create the local folder ``path`` and its missing parents with permissions
    ``mode`` (exactly: not narrowed by the umask); existing folders are left as they are."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            if os.path.isdir(folder):  # made by another writer meanwhile
                continue
            raise
        os.chmod(folder, mode)


def _write_local(path: str, data: bytes, *, atomic: bool, options: StorageOptions) -> None:
    """Write ``data`` to the local file ``path`` (permissions ``options.file_mode``; its
    missing folders ``options.dir_mode``), fsync'ed; ``atomic``: through a temporary
    file in the same folder, renamed into place (and the folder fsync'ed)."""
    folder, base = os.path.split(path)
    _makedirs(folder, options.dir_mode)
    target = os.path.join(folder, f".{base}.{uuid.uuid4().hex}.tmp") if atomic else path
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, options.file_mode)
        try:
            os.fchmod(fd, options.file_mode)  # exactly the mode, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if atomic:
            os.replace(target, path)
    except BaseException:
        if atomic:
            try:
                os.unlink(target)
            except OSError:
                pass
        raise
    if atomic:
        _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems do not support fsync on directories
    finally:
        os.close(fd)
