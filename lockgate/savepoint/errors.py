"""Errors of the savepoint reader (each is a :class:`~lockgate.errors.LockgateError`)."""

from __future__ import annotations

from ..errors import LockgateError


class SavepointFormatError(LockgateError, ValueError):
    """A checkpoint holds state in a form the offline reader cannot read (for example the
    backend-native files of an incremental RocksDB checkpoint)."""


class StateConversionError(LockgateError, TypeError):
    """The values of a state cannot be typed as Arrow (or Spark) columns; ``to_pandas()``
    gives them back as the Python objects they are."""


class MissingDependencyError(LockgateError, ImportError):
    """An optional library a conversion needs (pandas) is not installed."""


class PickledStateError(LockgateError, PermissionError):
    """A state holds pickled values and the savepoint was read without
    ``allow_pickle=True``: unpickling runs code named by the files, so the reader does it
    only when told that the storage is trusted."""
