"""Delta Lake: :class:`DeltaSink` (exactly-once appends and merges through delta-rs).

``sink`` is the sink and its transactions, ``files`` the Parquet data files a
transaction writes, ``log`` committing them to the Delta log exactly once, ``merge``
applying a changelog with a Delta ``MERGE``, ``records`` fitting records to the table's
schema. See docs/delta.md."""

from .sink import DeltaSink, DeltaTransaction

__all__ = ["DeltaSink", "DeltaTransaction"]
