"""How a checkpoint storage writes and checks its files: the signing key and permissions.

A checkpoint is code: state files are pickles, and restoring a checkpoint unpickles
them. :class:`StorageOptions` carries the two defences the storage applies:

* ``signing_key``: every file the storage writes through its checkpoint API (state
  files, ``_metadata``, ``_latest``, savepoint and export ``_metadata``) ends with an
  HMAC-SHA256 of its header and payload (see :mod:`lockgate.checkpoint.fs_storage`),
  and the handle of every shared file of an incremental checkpoint records the
  HMAC-SHA256 of its bytes. With a key, a file without a valid MAC is refused before
  any of it is unpickled; without a key, MACs are not checked.
* ``file_mode`` / ``dir_mode``: the permissions of the files and folders the storage
  creates on a local filesystem (default owner only: ``0o600`` / ``0o700``). Object
  stores and remote filesystems use their own access control.

The options of a storage URL are registered per process (:func:`register`) when the
storage is opened with them, so that every later ``open_storage(url)`` of the process
(restore, RocksDB shared files, settling sinks) checks with the same key. A job's
:class:`~lockgate.checkpoint.config.CheckpointConfig` registers its options when it is
unpickled in a worker process.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from dataclasses import dataclass, field

from ..errors import ConfigurationError

#: the shortest signing key accepted, in bytes
MIN_KEY_BYTES = 16
MAC_SIZE = 32  # HMAC-SHA256


def signing_key_bytes(key: object) -> bytes | None:
    """``key`` as bytes (a ``str`` is UTF-8 encoded); ``ConfigurationError`` when it is
    not bytes, str or None, or shorter than :data:`MIN_KEY_BYTES`."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)):
        raise ConfigurationError(
            f"checkpoint signing_key must be bytes or str (e.g. os.urandom(32) kept in a "
            f"secret store), got {type(key).__name__}"
        )
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(
            f"checkpoint signing_key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}; "
            "use a random key such as os.urandom(32)"
        )
    return bytes(key)


def _check_mode(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ConfigurationError(
            f"checkpoint {what} must be permission bits between 0o000 and 0o777 (e.g. "
            f"0o600), got {value!r}"
        )
    return value


@dataclass(frozen=True)
class StorageOptions:
    """The signing key (None: files are not signed and MACs not checked) and the
    permissions of created files and folders. ``repr`` never shows the key."""

    signing_key: bytes | None = field(default=None, repr=False)
    file_mode: int = 0o600
    dir_mode: int = 0o700

    def __post_init__(self) -> None:
        object.__setattr__(self, "signing_key", signing_key_bytes(self.signing_key))
        _check_mode(self.file_mode, "file_mode")
        _check_mode(self.dir_mode, "dir_mode")

    @property
    def signed(self) -> bool:
        return self.signing_key is not None

    def mac(self, data: bytes) -> bytes:
        """HMAC-SHA256 of ``data`` with the signing key (there must be one)."""
        assert self.signing_key is not None
        return hmac.new(self.signing_key, data, hashlib.sha256).digest()

    def mac_matches(self, data: bytes, mac: bytes) -> bool:
        return hmac.compare_digest(self.mac(data), mac)


DEFAULT_OPTIONS = StorageOptions()

_registered: dict[str, StorageOptions] = {}
_lock = threading.Lock()


def _key(url: str) -> str:
    if "://" not in url:
        url = os.path.abspath(os.path.expanduser(url))
    return url.rstrip("/") or url


def register(url: str, options: StorageOptions) -> None:
    """Use ``options`` for every storage this process opens at ``url`` from now on."""
    with _lock:
        _registered[_key(url)] = options


def options_for(url: str) -> StorageOptions:
    """The options registered for ``url`` in this process, else the defaults (no key,
    owner-only permissions)."""
    with _lock:
        return _registered.get(_key(url), DEFAULT_OPTIONS)
