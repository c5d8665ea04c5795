"""What a lookup join reads its table from: a :class:`LookupSource` loads a bounded
table whole, as one Arrow table, and says which version it read.

Guarantees every implementation keeps:

* :meth:`LookupSource.load` returns the complete contents of one version of the table
  (never a mix of two), with that version's id when the table keeps versions (a Delta
  table's version, an Iceberg snapshot id) and None otherwise (files, a query);
* ``load(version)`` with an id an earlier load returned reads that same version again
  (the join's restore pins it, M-R1), or raises :class:`~lockgate.errors.ConfigurationError`
  saying that the version is gone and how to go on; a source without versions
  (``versioned = False``) ignores ``version`` and reads the current contents;
* a source is picklable, so it travels with the job to every subtask; it opens its
  connections in :meth:`load` and closes them before returning.

The lookup join (``DataStream.lookup_join``) holds what a load returned as a hash index
(:mod:`lockgate.runtime.operators.lookup`); the public constructors are
``lockgate.LookupTable``'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class LoadedTable:
    """One version of a lookup table: its rows, and its version id (None: the table keeps
    no versions, a reload reads whatever it holds then)."""

    table: pa.Table
    version: int | None = None


class LookupSource(ABC):
    """A bounded table a lookup join loads whole (see the module docstring)."""

    #: the table keeps versions and :meth:`load` can read an earlier one again
    versioned: bool = False

    @abstractmethod
    def load(self, version: int | None = None) -> LoadedTable:
        """The table's rows: the newest version (``version`` None), or ``version``."""

    @abstractmethod
    def describe(self) -> str:
        """What the table is, for messages (no secrets: passwords are left out)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"
