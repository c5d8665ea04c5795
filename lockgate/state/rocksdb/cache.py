"""The write-back state cache of the RocksDB keyed state backend: the most recently
loaded or written ``(state, key) -> value`` entries, kept across input batches and
written back to RocksDB lazily.

One database read (a multi-get, 3.6-4.6 us per random key) and one row write (about
1.8 us) per state update cap RocksDB near 160,000 updates/s whatever Python does; the
cache removes both for the keys it holds:

* a read of a cached entry never touches the database; a miss reads the database
  once (inside a batch scope, the batch's keys that are not cached are fetched with
  one multi-get per state when the scope opens, :mod:`lockgate.state.rocksdb.batch`);
* writes and deletes go to the cache and mark the entry *dirty*;
* dirty entries are written back as one ``WriteBatch`` before anything reads the
  database directly (a snapshot: checkpoint barrier or savepoint; ``keys()``,
  ``entries()``; a restore) and when entries are evicted.

Bound (``cache_entries``): the maximum number of cached (state, key) entries of one
keyed backend (one operator subtask). It is checked before an entry is added outside
a batch scope and when a scope closes (a scope may hold its own batch's keys beyond
the bound while it is open). Over the bound, the oldest entries by insertion order
(no per-access bookkeeping: a first-in, first-out cache) are evicted down to three
quarters of the bound, the dirty ones among them written back first in one write
batch. ``cache_entries=0`` turns the cache off: each input batch has its own scope
cache, written at the end of the batch, and calls outside scopes go to the database.

Guarantees: the database plus the cache is at every moment exactly the state the
per-call path would hold; a snapshot sees every write made before it; a restore
writes back, then starts with an empty cache; ``close()`` drops the cache with the
working database (nothing is written back into a folder about to be deleted).

Values: an entry holds either the value itself, when it is *immutable*
(:func:`is_immutable`: the exact types int, float, str, bytes, bool, None, and
tuples or :class:`~lockgate.state.ttl.TtlValue` of these), or its pickled bytes
(:class:`Serialized`) for anything else, so a mutable value read from state is still
a fresh deserialized copy (mutating it without ``update``/``put`` never changes
state), while a cache hit on an immutable value costs a dict lookup, as on the heap
backend. A row fetched from the database is cached as :class:`Serialized` and
replaced by the value on its first read when that value is immutable.

Memory (measured with ``tracemalloc``, 200,000 entries): with an int key and an int
value about 110 bytes per clean entry and 150 per dirty one (the dict slot, the dirty
set slot, the key and value objects); with a two-element list value (kept pickled)
about 210 per clean entry. The default bound, :data:`DEFAULT_CACHE_ENTRIES`
(100,000), is therefore about 10-20 MB per keyed operator subtask for small values,
and bounds the write-back a snapshot's synchronous part may do: about 1.5 us per dirty
entry with int keys (their rows and int or float values built at once and written in
row order, :mod:`lockgate.state.rocksdb.rows`), about 3.6 us with other keys, so 0.15
to 0.4 s at the default bound. A job whose hot keys fit a larger bound gains most from
raising it (see ``bench/state.py``). Many-keys calls (``ValueState.values_of`` /
``update_all``) with int keys use a columnar cache instead, under the same bound
(:mod:`lockgate.state.rocksdb.columns`).
"""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from ..ttl import TtlValue

#: the default maximum of cached (state, key) entries per keyed backend (see above)
DEFAULT_CACHE_ENTRIES = 100_000

#: the exact types whose values are immutable on their own (cached as the objects)
ATOMS = frozenset({int, float, str, bytes, bool, type(None)})


class Serialized:
    """A cached value kept as its pickled bytes (a mutable value, or a row not read yet)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return f"Serialized({len(self.raw)} bytes)"


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<absent>"


#: the cache entry of a (state, key) that has no value (never written, or deleted)
ABSENT: Any = _Absent()


def is_immutable(value: Any) -> bool:
    """Whether ``value`` may be cached (and handed out) as the object itself: exactly an
    int, float, str, bytes, bool or None, or a tuple / TtlValue of such values
    (subclasses do not count: they may carry mutable attributes)."""
    t = type(value)
    if t in ATOMS:
        return True
    if t is tuple or t is TtlValue:
        return all(is_immutable(v) for v in value)
    return False


def check_cache_entries(value: Any, where: str) -> int:
    """``value`` as a cache bound, or a ConfigurationError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"{where}(cache_entries=...) must be an int >= 0 (the maximum number of "
            f"cached (state, key) entries per keyed operator subtask; 0 turns the cache "
            f"off, default {DEFAULT_CACHE_ENTRIES}), got {value!r}"
        )
    return value
