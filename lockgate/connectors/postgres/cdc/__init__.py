"""The native PostgreSQL change-data-capture source (logical replication, ``pgoutput``);
see :class:`~.source.PostgresCdcSource` and ``docs/postgres_cdc.md``."""

from .reader import LostSlotError, SchemaChangedError
from .source import PostgresCdcSource

__all__ = ["LostSlotError", "PostgresCdcSource", "SchemaChangedError"]
