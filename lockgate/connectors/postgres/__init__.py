"""PostgreSQL: :class:`PostgresSink` (exactly-once through prepared transactions, upserts
of a changelog, or plain appends) and :class:`PostgresCdcSource` (change data capture over
logical replication, ``cdc/``). ``table`` holds what both share (connections, redacted
DSNs, identifiers), ``transactions`` the sink's prepared transactions and run locks,
``changes`` applying a changelog. See docs/connectors.md and docs/postgres_cdc.md."""

from .cdc import PostgresCdcSource
from .sink import PostgresSink

__all__ = ["PostgresCdcSource", "PostgresSink"]
