"""Compiling the connectors' numba kernels ahead of use (:func:`warm_up`), in a process
that later forks (Spark's Python worker daemon), so that the forked workers start with
them. Kept apart from :mod:`.compiled`, which the kernels' modules import."""

from __future__ import annotations

from lockgate.connectors.compiled import numba_module


def warm_up() -> bool:
    """Compile (or load from numba's cache) the Kafka source's kernels (JSON and Avro
    columns, read and written) in this process,
    so that processes forked from it start with them; False when numba is not
    installed (the kernels are then never used: the Kafka extra is not installed)."""
    try:
        numba_module()
    except ImportError:
        return False
    import numpy as np
    import pyarrow as pa

    from lockgate.connectors.formats.flat_json import FlatJsonReader
    from lockgate.connectors.kafka.framing import frame

    empty = np.zeros(0, dtype=np.int64)
    data = np.frombuffer(b'\x00{"a": 1, "b": "x", "c": 1.5, "d": true}', dtype=np.uint8)
    frame(data, empty, empty, empty, "warm-up")
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64()),
                        ("d", pa.bool_())])  # fmt: skip
    FlatJsonReader(schema).read(data, np.array([1]), np.array([len(data) - 1]))
    from lockgate.connectors.schema_registry.avro_columns import AvroColumnsReader

    writer = {"type": "record", "name": "WarmUp", "fields": [{"name": "a", "type": "long"}]}
    avro = np.frombuffer(b"\x00\x00\x00\x00\x01\x02", dtype=np.uint8)  # id 1, a = 1
    AvroColumnsReader(writer, ((), ()), False, pa.schema([("a", pa.int64())])).read(
        avro, np.array([0]), np.array([len(avro)])
    )
    from lockgate.connectors.schema_registry.avro_columns_write import AvroColumnsWriter

    AvroColumnsWriter(writer).encode(pa.record_batch({"a": pa.array([1], pa.int64())}), 1)
    return True
