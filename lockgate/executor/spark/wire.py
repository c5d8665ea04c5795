"""How stream elements travel between slots.

A data message is three frames: a 9-byte header (kind, generation), the body
and a MAC. Arrow record batches travel as Arrow IPC streams (zero-copy on
receive); row batches (Python objects) and control elements are pickled,
which is safe because the MAC is checked before the body is read.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pyarrow as pa

from ...runtime.batch import RowBatch
from ...runtime.elements import StreamElement

ARROW = 1
ROWS = 2
ELEMENT = 3
_HEADER = struct.Struct("<Bq")


class StaleMessageError(Exception):
    """A message from another attempt (generation)."""


def encode(element: StreamElement, generation: int) -> tuple[bytes, Any]:
    """(header, body) for ``element``; the body supports the buffer protocol."""
    if isinstance(element, pa.RecordBatch):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, element.schema) as writer:
            writer.write_batch(element)
        return _HEADER.pack(ARROW, generation), sink.getvalue()
    if isinstance(element, RowBatch):
        return _HEADER.pack(ROWS, generation), pickle.dumps(element.rows, protocol=5)
    return _HEADER.pack(ELEMENT, generation), pickle.dumps(element, protocol=5)


def decode(header: memoryview, body: memoryview, generation: int) -> StreamElement:
    """The element of an authenticated message; raises ``StaleMessageError`` for another
    generation's message."""
    if header.nbytes != _HEADER.size:
        raise ValueError(f"bad data header of {header.nbytes} bytes")
    kind, gen = _HEADER.unpack(header)
    if gen != generation:
        raise StaleMessageError(f"message of generation {gen}, expected {generation}")
    if kind == ARROW:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        return reader.read_next_batch()
    if kind == ROWS:
        return RowBatch(pickle.loads(body))
    if kind == ELEMENT:
        return pickle.loads(body)
    raise ValueError(f"unknown data message kind {kind}")
