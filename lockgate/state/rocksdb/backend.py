"""The RocksDB keyed state backend: keyed state in an embedded RocksDB on local disk
(through ``rocksdict``), so it can be larger than memory (DESIGN.md §3).

Interface and semantics are those of
:class:`~lockgate.state.keyed.HeapKeyedStateBackend`: ``current_key``,
``get_state(descriptor)`` (the shared handles of :mod:`lockgate.state.handles`, over
one :class:`~lockgate.state.rocksdb.table.RocksDBStateTable` per state), ``snapshot()``, ``restore(snapshots,
key_groups)``, ``keys(name)``, ``entries()`` and ``close()``; TTL time comes from
``clock``, ``current_watermark`` and ``current_timestamp``. The same job gives the
same results on either backend, with two documented differences: a mutable value read
from state is a deserialized copy (change state with ``update``/``put``, as the handles
do; immutable values, which cannot be changed in place, may be handed out as the cached
object), and keys of different types never match (``1`` and ``1.0`` are two keys).

Layout (:mod:`lockgate.state.rocksdb.codec`): one row per (state, key), keyed by
key group, state id and the encoded key, so a key-group range is one contiguous
range of rows. Values are pickled stored forms.

Checkpoints (M-T3, M-R4)
------------------------
* ``snapshot()`` (synchronous part, task thread): flush + RocksDB checkpoint (hard
  links) into ``<working folder>/snapshots/<n>``; O(memtable), never O(state).
* the view's ``materialize()``: the canonical snapshot (savepoints; checkpoints with
  ``incremental=False``, which then hold the full canonical state);
  ``materialize_to(uploader)`` (``incremental=True``): uploads only the SST files not
  uploaded for a completed checkpoint and references the others (see
  :mod:`lockgate.state.rocksdb.snapshot`).
* ``restore``: one native payload (same parallelism, or any single payload): the
  base and the increments it references are downloaded and opened as the working
  database, rows outside ``key_groups`` deleted; several payloads (rescaling) or
  canonical snapshots: the rows of ``key_groups`` are copied into the database.
  The database gets a new identity, so the first checkpoint after a restore uploads
  every file (it never shares files with the restored checkpoint, which may live in
  another job's storage).

Write-back cache (:mod:`lockgate.state.rocksdb.cache`)
-----------------------------------------------------
``cache_entries`` (default 100,000) bounds a cache of the most recently loaded or
written (state, key) entries that lives across input batches: hits never touch the
database, writes and deletes stay in the cache (dirty) until a snapshot, ``keys()``,
``entries()``, a restore (:meth:`RocksDBKeyedStateBackend.flush`) or an eviction
writes them back as one write batch. The database plus the cache is at every moment
exactly the state the per-call path would hold; a snapshot sees every write made
before it (M-T3) and its synchronous part includes that write-back (at most the
bound's entries); a restore writes back, then starts with an empty cache.
``cache_entries=0``: no cache across batches (each input batch has its own, below).

Batch scopes (:mod:`lockgate.state.rocksdb.batch`)
------------------------------------------------
The keyed operator wraps each input batch in ``begin_batch(keys)`` / ``end_batch()``:
when the scope opens, the batch's keys that are not cached are fetched with one
multi-get per state already read through the cache; when it closes, the cache is
trimmed to its bound (with ``cache_entries=0``: the batch's writes are written as one
write batch and its cache dropped). Outside a scope (timers, broadcast state visits)
state calls use the cache too (with ``cache_entries=0`` each goes to the database).

Table stores (:mod:`lockgate.state.rocksdb.store`)
--------------------------------------------------
Each state's table delegates to one store per cache mode: direct (``cache_entries=0``
outside scopes), write-back (the per-key cache) or columnar (column mode,
:mod:`lockgate.state.rocksdb.columns`). The stores use the backend only through its
:class:`~lockgate.state.rocksdb.store.StoreHost` methods (the database, row keys,
admitting a key, making room); the backend reaches the stores only through their
public methods (prefetch, write-back, eviction).

Working folders live under ``local_dir`` (default: the system temporary folder);
``close()`` deletes them. Everything but the views' ``materialize``/``release``
belongs to the task thread.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from rocksdict import Rdict, WriteBatch

from ...checkpoint.storage import CheckpointStorage
from ...checkpoint.types import StateHandle
from ...core.clock import Clock, SystemClock
from ...core.key_groups import DEFAULT_MAX_PARALLELISM, check_max_parallelism
from ...errors import ConfigurationError
from ..descriptors import StateDescriptor
from ..handles import KeyedStateHandle, create_handle
from ..ttl import MIN_WATERMARK, StateTtlConfig, has_ttl_wrapper, snapshot_expiry
from ..typed.registry import TypedStates
from .batch import BatchScope, cache_key, encoded_of, int_key_groups
from .cache import DEFAULT_CACHE_ENTRIES, check_cache_entries
from .codec import (
    MAX_STATE_ID,
    ROW_PREFIX,
    U16,
    decode_key,
    dumps,
    encode_key,
    key_group_bound,
    key_group_of,
    loads,
    split_row,
)
from .files import create_checkpoint, first_and_last_row, open_db, open_read_only, rows
from .local_copies import LocalCopies
from .restore import (
    DEFAULT_TRANSFER_THREADS,
    canonical_states,
    check_transfer_threads,
    download,
    native_states,
    overlaps,
    payload_storage,
    snapshot_kind,
)
from .rows import int_key_rows
from .snapshot import IncrementalRocksDBSnapshot, RocksDBSnapshot, StateInfo
from .store_write_back import WriteBackStore
from .table import RocksDBStateTable

log = logging.getLogger(__name__)

_MISSING: Any = object()
_BATCH = 10_000
_SELF_KEYED = frozenset({int, str})
_DIRTY_SLACK = 65_536
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class RocksDBKeyedStateBackend:
    """Keyed state in an embedded RocksDB (see the module docstring).

    ``incremental``: checkpoints upload only new files (the views have
    ``materialize_to``); else they hold the canonical full state. ``local_dir``: the
    folder for the working database and snapshots (created if missing; default: the
    system temporary folder). ``clock``: processing time for TTL (default: the system
    clock). ``subtask_index`` names the working folder. ``cache_entries``: the bound of
    the write-back state cache (:mod:`lockgate.state.rocksdb.cache`; 0 turns it off).
    """

    def __init__(
        self,
        operator_name: str,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        *,
        clock: Clock | None = None,
        incremental: bool = True,
        local_dir: str | None = None,
        subtask_index: int = 0,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        local_recovery: bool = False,
        transfer_threads: int = DEFAULT_TRANSFER_THREADS,
    ) -> None:
        if not isinstance(local_recovery, bool):
            raise ConfigurationError(
                f"RocksDBKeyedStateBackend(local_recovery=...) must be True or False, got "
                f"{local_recovery!r}"
            )
        if not isinstance(operator_name, str):
            raise ConfigurationError(
                f"RocksDBKeyedStateBackend needs the operator's name (a str), got {operator_name!r}"
            )
        if not isinstance(incremental, bool):
            raise ConfigurationError(
                f"RocksDBKeyedStateBackend(incremental=...) must be True or False, got "
                f"{incremental!r}"
            )
        if (
            isinstance(subtask_index, bool)
            or not isinstance(subtask_index, int)
            or subtask_index < 0
        ):
            raise ConfigurationError(
                f"RocksDBKeyedStateBackend(subtask_index=...) must be an int >= 0, got "
                f"{subtask_index!r}"
            )
        if local_dir is not None and (not isinstance(local_dir, str) or not local_dir):
            raise ConfigurationError(
                f"RocksDBKeyedStateBackend(local_dir=...) must be a folder path or None, got "
                f"{local_dir!r}"
            )
        #: the maximum of cached (state, key) entries; 0: no cache across batches
        self.cache_entries = check_cache_entries(cache_entries, "RocksDBKeyedStateBackend")
        #: SST files a restore downloads at once
        self.transfer_threads = check_transfer_threads(transfer_threads, "RocksDBKeyedStateBackend")
        self.operator_name = operator_name
        #: the declared types of typed states, and restored typed state not asked for yet
        self.typed = TypedStates(operator_name)
        self.max_parallelism = check_max_parallelism(max_parallelism)
        self.incremental = incremental
        self.subtask_index = subtask_index
        self.current_key: Any = None
        #: processing time for TTL state
        self.clock: Clock = SystemClock() if clock is None else clock
        #: event time for TTL state: the operator's current watermark
        self.current_watermark: int = MIN_WATERMARK
        #: event time for TTL state: the timestamp of the record being processed, or None
        self.current_timestamp: int | None = None
        base = os.path.abspath(os.path.expanduser(local_dir or tempfile.gettempdir()))
        #: task-local recovery (:mod:`.local_copies`): incremental checkpoints only
        self.local_recovery = local_recovery and incremental
        self._local_base = base
        self._local_copies: LocalCopies | None = None
        name = _UNSAFE.sub("_", operator_name)[:40] or "operator"
        try:
            os.makedirs(base, exist_ok=True)
            self.working_dir = tempfile.mkdtemp(
                prefix=f"lockgate-rocksdb-{name}-{subtask_index}-", dir=base
            )
        except OSError as e:
            raise ConfigurationError(
                f"operator '{operator_name}': cannot create the RocksDB working folder in "
                f"{base!r} ({e}); give RocksDBStateBackend(local_dir=...) a writable folder"
            ) from e
        self._db_path = os.path.join(self.working_dir, "db")
        os.makedirs(os.path.join(self.working_dir, "snapshots"))
        self._db: Rdict = open_db(self._db_path)
        #: the identity of the database's files (a new one after every restore)
        self.db_id = uuid.uuid4().hex
        self._states: dict[str, StateInfo] = {}  # registered or restored
        self._ttl: dict[str, StateTtlConfig | None] = {}  # registered with a descriptor
        self._tables: dict[str, RocksDBStateTable] = {}
        self._next_id = 1
        self._last_key: Any = _MISSING
        self._last_prefix = b""  # key group bytes of the last key
        self._last_encoded = b""
        self._lock = threading.Lock()
        self._outstanding: set[RocksDBSnapshot] = set()
        self._snapshots = 0
        self._closed = False
        #: the open batch scope (rocksdb.batch), or None: state calls go to the database
        self._scope: BatchScope | None = None
        self._scope_spare = BatchScope(self.max_parallelism)
        #: cache key -> (key-group prefix, encoded key) of the cached keys that are
        #: neither int nor str (whose rows cannot be computed from the cache key)
        self._odd: dict[Any, tuple[bytes, bytes]] = {}
        self._kg = self._scope_spare.prefixes  # key-group prefixes
        #: a table's dirty list is compacted past this length
        self._dirty_limit = 2 * self.cache_entries + _DIRTY_SLACK

    # -- rows -------------------------------------------------------------------------------

    def approximate_keys(self) -> int | None:
        """RocksDB's estimate of its entries (every state's; a metric). Counts the rows
        in the database: an open batch scope's writes count once flushed. Never flushes,
        so a metrics thread may call it."""
        try:
            value = self._db.property_int_value("rocksdb.estimate-num-keys")
        except Exception:  # noqa: BLE001 - a closed database has no estimate
            return None
        return int(value) if value is not None else None

    # -- what the table stores use (lockgate.state.rocksdb.store.StoreHost) ------------------
    @property
    def db(self) -> Rdict:
        """The working database (a restore replaces it)."""
        return self._db

    @property
    def in_batch_scope(self) -> bool:
        """Whether a batch scope is open (:meth:`begin_batch`)."""
        return self._scope is not None

    def row_of(self, key: Any, state_id: bytes) -> bytes:
        """The row key of ``key`` in the state ``state_id`` (2 bytes); the last key's
        key group and encoding are remembered (a handle call reads, then writes, one key)."""
        if key is not self._last_key:
            self._last_prefix = U16.pack(key_group_of(key, self.max_parallelism))
            self._last_encoded = encode_key(key)
            self._last_key = key
        return self._last_prefix + state_id + self._last_encoded

    def rows_of(self, cks: list[Any], state_id: bytes) -> list[bytes]:
        """The row keys of the cached cache keys ``cks`` in the state ``state_id``: from the
        open scope's row parts, the tuple keys' registered parts, or (int and str keys)
        the key itself, the int keys' key groups computed at once."""
        scope = self._scope
        parts = scope.parts if scope is not None else {}
        odd = self._odd
        kgs = self._kg
        mp = self.max_parallelism
        ints = [ck for ck in cks if type(ck) is int and ck not in parts]
        groups = dict(zip(ints, int_key_groups(ints, mp))) if ints else {}
        out: list[bytes] = []
        for ck in cks:
            p = parts.get(ck)
            if p is not None:
                row = p[0] + state_id + p[1]
            elif type(ck) is tuple:
                p = odd[ck]
                row = p[0] + state_id + p[1]
            else:  # int or str: the key itself
                g = groups.get(ck)
                if g is None:
                    g = key_group_of(ck, mp)
                row = kgs[g] + state_id + encode_key(ck)
            out.append(row)
        return out

    def rows_of_ints(self, keys: np.ndarray, state_id: bytes) -> tuple[list[bytes], np.ndarray]:
        """The rows of int64 ``keys`` and their order (rocksdb.rows.int_key_rows), one key
        at a time for a key it cannot encode at once."""
        built = int_key_rows(keys, state_id, self.max_parallelism)
        if built is not None:
            return built
        kgs, mp = self._kg, self.max_parallelism
        listed = keys.tolist()
        return [kgs[key_group_of(k, mp)] + state_id + encode_key(k) for k in listed], np.arange(
            len(listed)
        )

    def admit(self, key: Any, ck: Any) -> tuple[bytes, bytes]:
        """Before ``ck`` (``key``'s cache key, not cached) enters the cache: make room
        (outside scopes) and register its row parts; returns them."""
        scope = self._scope
        if scope is not None:
            p = scope.part(key, ck)
        else:
            if self.cache_entries:
                self.make_room(1)
            p = (
                self._kg[key_group_of(key, self.max_parallelism)],
                encoded_of(key, ck),
            )
        if type(ck) is tuple and self.cache_entries:
            self._odd[ck] = p
        return p

    def make_room(self, extra: int) -> None:
        """Evict if the per-key cache with ``extra`` more entries would exceed its bound
        (columns are bounded on their own: rocksdb.columns)."""
        size = self._dict_entries()
        if size + extra > self.cache_entries:
            self._evict(size)

    def forget_odd(self, cks: list[Any]) -> None:
        """Drop the row parts of the (tuple) cache keys ``cks`` that no state caches now."""
        if not self._odd:
            return
        caches = [t.cache.entries for t in self._tables.values() if len(t.cache)]
        for ck in cks:
            if not any(ck in c for c in caches):
                self._odd.pop(ck, None)

    # -- batch scopes (rocksdb.batch) and the write-back cache (rocksdb.cache) ---------------
    def begin_batch(self, keys: Sequence[Any]) -> None:
        """Open a batch scope for an input batch whose records have ``keys`` (see
        :mod:`lockgate.state.rocksdb.batch`): the rows of these keys that are not cached
        yet, of every state read through the cache before, are fetched with one multi-get
        per state; until :meth:`end_batch`, state reads and writes go through the cache.
        An open scope is closed first."""
        self._check_open()
        if self._scope is not None:
            self.end_batch()
        scope = self._scope_spare
        scope.parts.clear()
        self._scope = scope
        if not self.cache_entries:  # a cache for this batch only
            scope.add_keys(keys)
            for table in self._tables.values():
                table.open_batch_cache()
                if table.used:
                    table.cache.prefetch(list(scope.parts), scope.parts)
            return
        used = [table.cache for table in self._tables.values() if table.used]
        if not used or not keys:
            return
        by_ck: dict[Any, Any] | None = None
        if set(map(type, keys)) <= _SELF_KEYED:  # int and str keys are their cache key
            distinct: dict[Any, Any] = dict.fromkeys(keys)
        else:
            distinct = by_ck = {}
            for key in keys:
                try:
                    by_ck.setdefault(cache_key(key), key)
                except Exception:  # noqa: BLE001 - surfaces on first use, as per call
                    continue
        if len(used) == 1:
            cache = used[0].entries
            missing = [ck for ck in distinct if ck not in cache]
        else:
            caches = [store.entries for store in used]
            missing = [ck for ck in distinct if any(ck not in c for c in caches)]
        if not missing:
            return
        scope.add_keys(missing if by_ck is None else [by_ck[ck] for ck in missing])
        odd = self._odd
        for ck, p in scope.parts.items():
            if type(ck) is tuple:
                odd[ck] = p
        for store in used:
            cache = store.entries
            store.prefetch([ck for ck in scope.parts if ck not in cache], scope.parts)

    def end_batch(self) -> None:
        """Close the batch scope (nothing happens without an open scope). Without a
        cache across batches its writes are written as one write batch and its cache
        dropped; with one, the cache is trimmed to its bound (evicted entries written
        back first)."""
        scope = self._scope
        if scope is None:
            return
        if self.cache_entries:
            self._scope = None
            scope.parts.clear()
            self.make_room(0)
            return
        try:
            self._flush_pending()
        finally:
            self._scope = None
            for table in self._tables.values():
                table.close_batch_cache()
            scope.parts.clear()

    def flush(self) -> None:
        """Write every dirty cached entry to the database (one write batch); the cache
        keeps its entries, now clean. Snapshots, ``keys()``, ``entries()`` and restores
        do this themselves."""
        self._check_open()
        self._flush_pending()

    def _flush_pending(self) -> None:
        """Write the dirty cached entries, per key and columns, to the database (one write
        batch); the cache stays valid. Called before anything reads the database
        directly. A failed write leaves them dirty."""
        batch: WriteBatch | None = None
        written: list[Callable[[], None]] = []
        for table in self._tables.values():
            for store in (table.cache, table.columns):
                if store is not None and store.has_dirty():
                    if batch is None:
                        batch = WriteBatch(raw_mode=True)
                    written.append(store.write_dirty(batch))
        if batch is not None:
            self._db.write(batch)
            for mark_clean in written:
                mark_clean()

    def cached_entries(self) -> int:
        """How many (state, key) entries the cache holds (dirty or clean)."""
        return self._dict_entries() + sum(
            len(t.columns) for t in self._tables.values() if t.columns is not None
        )

    def _dict_entries(self) -> int:
        return sum(len(t.cache) for t in self._tables.values())

    def _evict(self, size: int) -> None:
        """Drop the oldest entries of every state's cache (by insertion order, each state
        in proportion to its size) down to three quarters of the bound; the dirty ones
        are written back first (one write batch)."""
        keep = self.cache_entries * 3 // 4
        batch: WriteBatch | None = None
        victims: list[tuple[WriteBackStore, list[Any]]] = []
        for table in self._tables.values():
            store = table.cache
            n = len(store)
            if not n:
                continue
            drop = n - n * keep // size
            if drop <= 0:
                continue
            old = store.oldest(drop)
            written = store.dirty_among(old)
            if written:
                if batch is None:
                    batch = WriteBatch(raw_mode=True)
                store.write_entries(batch, written)
            victims.append((store, old))
        if batch is not None:
            self._db.write(batch)  # before the entries leave the cache
        odd: list[Any] = []
        for store, old in victims:
            odd.extend(store.forget(old))
        if odd:
            self.forget_odd(odd)

    def _drop_cache(self) -> None:
        """Forget every cached entry (after a write-back, or with the database)."""
        for table in self._tables.values():
            table.drop_cache()
        self._odd.clear()

    # -- state handles ----------------------------------------------------------------------
    def get_state(self, descriptor: StateDescriptor[Any]) -> Any:
        """The handle of ``descriptor``'s state (its kind's handle class). Asking again
        with the same name and kind gives another handle on the same values; another
        kind, or another TTL config, under the same name is a ConfigurationError."""
        self._check_open()
        where = f"operator '{self.operator_name}'"
        if not isinstance(descriptor, StateDescriptor):
            raise ConfigurationError(
                f"{where}: get_state needs a state descriptor such as "
                f"lg.ValueStateDescriptor('name'), got {descriptor!r}"
            )
        name = descriptor.name
        known = self._states.get(name)
        if known is not None and known.kind != descriptor.kind:
            how = "registered" if name in self._ttl else "restored from a snapshot"
            raise ConfigurationError(
                f"{where}: state '{name}' is already {how} as {known.kind} state; give the "
                f"{descriptor.kind} state another name"
            )
        ttl = descriptor.ttl_config
        if ttl is not None and not isinstance(ttl, StateTtlConfig):
            raise ConfigurationError(
                f"{where}: {descriptor!r} has ttl_config {ttl!r}; set it with "
                "descriptor.enable_time_to_live(lg.StateTtlConfig(...))"
            )
        if name in self._ttl and self._ttl[name] != ttl:
            raise ConfigurationError(
                f"{where}: state '{name}' is already registered with TTL {self._ttl[name]!r}, "
                f"now asked for with TTL {ttl!r}; use the same descriptor settings for every "
                "handle of one state"
            )
        loaded = self.typed.register(descriptor, ttl is not None)
        restored = known is not None and name not in self._ttl
        info = known if known is not None else self._register(name, descriptor.kind, where)
        if loaded is not None:
            self._load_entries(info, loaded)
        table = self._table(name, info)
        handle: KeyedStateHandle = create_handle(self, table, descriptor, where)
        if name not in self._ttl:
            if restored:
                self._check_ttl_form(name, ttl, where)
            self._ttl[name] = ttl
        return handle

    def _load_entries(self, info: StateInfo, entries: Iterable[tuple[Any, Any]]) -> None:
        """Write restored ``(key, stored)`` entries of one state (typed state, when the
        job asks for it) into the database."""
        self.end_batch()
        self._flush_pending()
        self._drop_cache()
        batch = _Batch(self._db)
        mp = self.max_parallelism
        sid = U16.pack(info.state_id)
        for key, stored in entries:
            batch.put(U16.pack(key_group_of(key, mp)) + sid + encode_key(key), dumps(stored))
        batch.flush()

    def _register(self, name: str, kind: str, where: str) -> StateInfo:
        if self._next_id > MAX_STATE_ID:
            raise ConfigurationError(
                f"{where}: more than {MAX_STATE_ID} keyed states; use fewer state names"
            )
        info = StateInfo(kind, self._next_id)
        self._next_id += 1
        self._states[name] = info
        return info

    def _table(self, name: str, info: StateInfo) -> RocksDBStateTable:
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = RocksDBStateTable(
                self, name, U16.pack(info.state_id), self._dirty_limit
            )
            if self._scope is not None:  # created inside a scope: cached from now on
                table.open_batch_cache()
        return table

    def _check_ttl_form(self, name: str, ttl: StateTtlConfig | None, where: str) -> None:
        """Refuse a descriptor whose TTL setting does not match how the state's restored
        values are stored (judged from one stored entry)."""
        info = self._states[name]
        for _key, stored in self._scan(info.state_id, limit=1):
            wrapped = has_ttl_wrapper(info.kind, stored)
            if wrapped != (ttl is not None):
                had, has = ("with", "disables") if wrapped else ("without", "enables")
                raise ConfigurationError(
                    f"{where}: state '{name}' holds values stored {had} TTL (restored from a "
                    f"snapshot) but its descriptor {has} TTL; changing the TTL setting of "
                    "existing state is not supported: keep the setting the state was written "
                    "with, or give the state a new name"
                )

    # -- reading the live state ---------------------------------------------------------------
    def _scan(self, state_id: int, limit: int | None = None) -> Iterable[tuple[Any, Any]]:
        """``(key, stored)`` of the rows of ``state_id`` (a scan of the database)."""
        self._flush_pending()
        found = 0
        for row, raw in rows(self._db):
            if split_row(row)[1] == state_id:
                yield decode_key(row[ROW_PREFIX:]), loads(raw)
                found += 1
                if limit is not None and found >= limit:
                    return

    def keys(self, state_name: str) -> list[Any]:
        """The keys that have a value of ``state_name`` (live view; a scan)."""
        self._check_open()
        info = self._states.get(state_name)
        if info is None:
            return []
        return [key for key, _ in self._scan(info.state_id)]

    def entries(self) -> dict[str, dict[Any, Any]]:
        """The live ``key -> stored`` tables by state name (copies; a scan)."""
        self._check_open()
        self._flush_pending()
        by_id = {info.state_id: name for name, info in self._states.items()}
        out: dict[str, dict[Any, Any]] = {name: {} for name in self._states}
        for row, raw in rows(self._db):
            name = by_id.get(split_row(row)[1])
            if name is not None:
                out[name][decode_key(row[ROW_PREFIX:])] = loads(raw)
        return out

    # -- snapshots (M-T3, M-T4, M-R4) ---------------------------------------------------------
    def snapshot(self) -> RocksDBSnapshot:
        """The synchronous part: flush and make a RocksDB checkpoint (hard links) of the
        database; processing continues at once. The TTL "now" of each TTL state with
        ``cleanup_on_snapshot`` is captured here."""
        self._check_open()
        self._flush_pending()  # the snapshot sees every write made before it
        self._snapshots += 1
        path = os.path.join(self.working_dir, "snapshots", str(self._snapshots))
        create_checkpoint(self._db, path)
        expiry = snapshot_expiry(self._states, self._ttl, self)
        cls = IncrementalRocksDBSnapshot if self.incremental else RocksDBSnapshot
        view = cls(
            operator_name=self.operator_name,
            max_parallelism=self.max_parallelism,
            path=path,
            db_id=self.db_id,
            states=self._states,
            expiry=expiry,
            on_release=self._snapshot_released,
            typed=self.typed.freeze(),
            local_copies=self.local_copies if self.local_recovery else None,
            transfer_threads=self.transfer_threads,
        )
        with self._lock:
            self._outstanding.add(view)
        return view

    def local_copies(self, storage_url: str) -> LocalCopies | None:
        """The task-local copies of this subtask's SST files for the checkpoint storage
        ``storage_url`` (None without local recovery, or when the folder cannot be
        made: checkpoints and restores then use the storage alone)."""
        if not self.local_recovery:
            return None
        copies = self._local_copies
        if copies is None or copies.storage_url != storage_url:
            try:
                copies = LocalCopies(
                    self._local_base, storage_url, self.operator_name, self.subtask_index
                )
            except OSError as e:
                log.warning(
                    "operator '%s': no task-local recovery (cannot make its folder in %s: %s)",
                    self.operator_name,
                    self._local_base,
                    e,
                )
                return None
            self._local_copies = copies
        return copies

    def outstanding_snapshots(self) -> int:
        with self._lock:
            return len(self._outstanding)

    def _snapshot_released(self, view: RocksDBSnapshot) -> None:
        with self._lock:
            self._outstanding.discard(view)

    # -- restore (M-R1, M-R3, M-R4, M-T4) -----------------------------------------------------
    def restore(
        self,
        snapshots: Iterable[Mapping[str, Any]],
        key_groups: range,
        *,
        storage: CheckpointStorage | None = None,
    ) -> None:
        """Load the entries of ``key_groups`` from canonical snapshots (either backend's)
        and this backend's checkpoint payloads; entries of other key groups are ignored.
        ``storage``: where the payloads' shared files are (default: the storage each
        payload names). Call before processing starts."""
        self._check_open()
        where = f"operator '{self.operator_name}'"
        if not isinstance(key_groups, range):
            raise ConfigurationError(
                f"{where}: restore needs the subtask's key groups as a range, got {key_groups!r}"
            )
        if self.outstanding_snapshots():
            raise ConfigurationError(
                f"{where}: cannot restore keyed state while a snapshot is outstanding; "
                "restore before processing starts"
            )
        self.end_batch()
        self._flush_pending()  # the database is about to change under the cache:
        self._drop_cache()  # write back, then start with an empty cache
        snaps = list(snapshots)
        kinds = [
            snapshot_kind(s, f"{where}: keyed state snapshot #{i}", self.max_parallelism)
            for i, s in enumerate(snaps)
        ]
        # the database gets a new identity: the first checkpoint after it uploads everything
        self.db_id = uuid.uuid4().hex
        if kinds == ["native"] and not self._states and first_and_last_row(self._db) is None:
            self._adopt(snaps[0], key_groups, storage, f"{where}: keyed state snapshot #0")
        else:
            for i, (snap, kind) in enumerate(zip(snaps, kinds)):
                label = f"{where}: keyed state snapshot #{i}"
                if kind == "canonical":
                    self._load_canonical(snap, key_groups, label)
                elif overlaps(snap, key_groups):
                    self._copy_native(snap, key_groups, storage, label)
                else:
                    self._merge_catalogue(native_states(snap, label), label)
        for i, (snap, kind) in enumerate(zip(snaps, kinds)):
            if kind == "native":
                self.typed.restore_native(snap, key_groups, f"{where}: keyed state snapshot #{i}")
        for name, ttl in self._ttl.items():
            self._check_ttl_form(name, ttl, where)

    def _adopt(
        self,
        payload: Mapping[str, Any],
        key_groups: range,
        storage: CheckpointStorage | None,
        where: str,
    ) -> None:
        """Download the payload's database and make it the working one, clipped to
        ``key_groups``."""
        states = native_states(payload, where)
        folder = self._download(payload, storage, where)
        copies = self._local_copies
        sst = payload.get("sst")
        if copies is not None and isinstance(sst, Mapping):
            copies.restored([h for h in sst.values() if isinstance(h, StateHandle)])
            log.info(
                "operator '%s' subtask %d restored %d of %d SST files from its task-local "
                "copies, %d from the checkpoint storage",
                self.operator_name,
                self.subtask_index,
                copies.restored_locally,
                len(sst),
                copies.restored_remotely,
            )
        self._db.close()
        shutil.rmtree(self._db_path)
        os.rename(folder, self._db_path)
        self._db = open_db(self._db_path)
        self._last_key = _MISSING
        start, stop = key_groups.start, key_groups.stop
        if start > 0:
            self._db.delete_range(b"", key_group_bound(start))
        self._db.delete_range(key_group_bound(stop), b"\xff\xff\xff")
        for name, (kind, state_id) in states.items():
            self._states[name] = StateInfo(kind, state_id)
        self._next_id = max((i for _, i in states.values()), default=0) + 1

    def _download(
        self, payload: Mapping[str, Any], storage: CheckpointStorage | None, where: str
    ) -> str:
        folder = os.path.join(self.working_dir, f"restore-{uuid.uuid4().hex}")
        source = payload_storage(payload, storage, where)
        copies = self.local_copies(source.url) if self.local_recovery else None
        try:
            download(payload, source, folder, where, copies, self.transfer_threads)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder

    def _merge_catalogue(
        self, states: Mapping[str, tuple[str, int]], where: str
    ) -> dict[int, bytes]:
        """Register the states of a snapshot (checking kinds); their old id -> our id bytes."""
        mapping: dict[int, bytes] = {}
        for name, (kind, old_id) in states.items():
            mapping[old_id] = U16.pack(self._state_for_restore(name, kind, where).state_id)
        return mapping

    def _state_for_restore(self, name: str, kind: str, where: str) -> StateInfo:
        known = self._states.get(name)
        if known is None:
            return self._register(name, kind, where)
        if known.kind != kind:
            raise ConfigurationError(
                f"{where}: state '{name}' is {kind} state in the snapshot but is registered "
                f"as {known.kind} state"
            )
        return known

    def _copy_native(
        self,
        payload: Mapping[str, Any],
        key_groups: range,
        storage: CheckpointStorage | None,
        where: str,
    ) -> None:
        """Copy the rows of ``key_groups`` from a payload's database into ours."""
        ids = self._merge_catalogue(native_states(payload, where), where)
        folder = self._download(payload, storage, where)
        try:
            source = open_read_only(folder)
            try:
                end = key_group_bound(key_groups.stop)
                batch = _Batch(self._db)
                for row, raw in rows(source, key_group_bound(key_groups.start)):
                    if row >= end:
                        break
                    sid = ids.get(split_row(row)[1])
                    if sid is not None:
                        batch.put(row[:2] + sid + row[ROW_PREFIX:], raw)
                batch.flush()
            finally:
                source.close()
                del source
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _load_canonical(self, snap: Mapping[str, Any], key_groups: range, where: str) -> None:
        batch = _Batch(self._db)
        mp = self.max_parallelism
        for name, kind, entries in canonical_states(snap, where, key_groups, self.typed):
            sid = U16.pack(self._state_for_restore(name, kind, where).state_id)
            for key, stored in entries:
                row = U16.pack(key_group_of(key, mp)) + sid + encode_key(key)
                batch.put(row, dumps(stored))
        batch.flush()

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release every outstanding snapshot, close the database and delete the working
        folder (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._scope = None
        self._drop_cache()  # the working database is deleted: nothing to write back
        with self._lock:
            outstanding = list(self._outstanding)
        for view in outstanding:
            view.release()
        try:
            self._db.close()
        finally:
            shutil.rmtree(self.working_dir, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(
                f"operator '{self.operator_name}': the RocksDB keyed state backend is closed"
            )


class _Batch:
    """Writes rows to a database in write batches of ``_BATCH`` rows."""

    def __init__(self, db: Rdict) -> None:
        self._db = db
        self._batch = WriteBatch(raw_mode=True)
        self._count = 0

    def put(self, row: bytes, raw: bytes) -> None:
        self._batch.put(row, raw)
        self._count += 1
        if self._count >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self._count:
            self._db.write(self._batch)
            self._batch = WriteBatch(raw_mode=True)
            self._count = 0
