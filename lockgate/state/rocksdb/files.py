"""The local RocksDB folders of the RocksDB keyed state backend and its checkpoint
payload format.

A database folder holds immutable SST files (the data; *shared* between
incremental checkpoints, M-R4) and small *private* files (``CURRENT``,
``MANIFEST-*``, ``OPTIONS-*``, the write-ahead log, rocksdict's config) that
describe which SST files make up the database. A RocksDB checkpoint
(:func:`create_checkpoint`) is a new folder of hard links to the SST files plus
copies of the private files: a consistent, immutable view made in milliseconds.

The native (incremental) checkpoint payload, what ``materialize_to(uploader)``
returns and ``restore`` reads back, is a picklable dict::

    {"format": NATIVE_FORMAT, "version": 1, "max_parallelism": M,
     "storage_url": <checkpoint storage the shared files are in>,
     "states": {name: {"kind": kind, "id": state id}},
     "sst": {file name: StateHandle of its shared file},
     "private": {file name: bytes},
     "key_group_span": (first, last + 1) | None}   # None: no rows
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, cast

from rocksdict import AccessType, BlockBasedOptions, Cache, Checkpoint, Options, Rdict, WriteOptions

#: the ``format`` of a native (incremental) checkpoint payload
from ..canonical import NATIVE_FORMAT, NATIVE_VERSION  # noqa: F401 - one definition

#: files RocksDB keeps in an open database folder that are not part of its state
_RUNTIME_FILES = ("LOCK", "LOG", "IDENTITY")


#: memtable size: a smaller memtable makes each write cheaper (measured: about 2.5x at
#: a million keys) and moves older rows into SST files, read through the bloom filters
#: and the block cache
WRITE_BUFFER_BYTES = 16 << 20
#: the block cache every database of this process shares (a bound, filled lazily)
BLOCK_CACHE_BYTES = 128 << 20
_block_cache: Cache | None = None


def _shared_block_cache() -> Cache:
    global _block_cache
    if _block_cache is None:
        _block_cache = Cache(BLOCK_CACHE_BYTES)
    return _block_cache


def db_options() -> Options:
    """The options of every database the backend opens: raw bytes keys and values,
    ``WRITE_BUFFER_BYTES`` memtables written by one thread (the task's; no concurrent
    memtable writes), SST files with bloom filters (10 bits a key) and one block cache
    of ``BLOCK_CACHE_BYTES`` shared by the process's databases."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_allow_concurrent_memtable_write(False)
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    table.set_block_cache(_shared_block_cache())
    options.set_block_based_table_factory(table)
    return options


def open_db(path: str) -> Rdict:
    """Open (or create) the read-write database at ``path``. Writes skip the
    write-ahead log: the state is recovered from checkpoints, never from the log."""
    db = Rdict(path, db_options())
    write_options = WriteOptions()
    # a property at runtime (the type stub wrongly declares a method)
    setattr(write_options, "disable_wal", True)  # noqa: B010
    db.set_write_options(write_options)
    return db


def open_read_only(path: str) -> Rdict:
    """Open the database (or RocksDB checkpoint) at ``path`` for reading only."""
    return Rdict(path, db_options(), access_type=AccessType.read_only())


def create_checkpoint(db: Rdict, path: str) -> None:
    """Flush ``db`` and make a RocksDB checkpoint of it at ``path`` (must not exist;
    its parent must): hard links to the SST files and copies of the private files."""
    Checkpoint(db).create_checkpoint(path)


def is_shared_file(name: str) -> bool:
    """Whether the database file ``name`` is an (immutable) SST file."""
    return name.endswith(".sst")


def state_files(path: str) -> list[str]:
    """The names of the files that make up the database at ``path``, sorted (without
    the lock and info-log files of an open database)."""
    return sorted(
        n
        for n in os.listdir(path)
        if not n.startswith(_RUNTIME_FILES) and os.path.isfile(os.path.join(path, n))
    )


def first_and_last_row(db: Rdict) -> tuple[bytes, bytes] | None:
    """The smallest and largest row keys of ``db``, or None when it has no rows."""
    it: Any = db.iter()
    try:
        it.seek_to_first()
        if not it.valid():
            return None
        first = cast(bytes, it.key())
        it.seek_to_last()
        return first, cast(bytes, it.key())
    finally:
        del it


def rows(db: Rdict, from_key: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """``(row key, value)`` of ``db`` in key order (from ``from_key`` when given)."""
    items = db.items() if from_key is None else db.items(from_key=from_key)
    return cast(Iterator[tuple[bytes, bytes]], iter(items))
