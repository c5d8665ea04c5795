"""How stream elements travel between slots.

A stream element travels as a 25-byte header (kind, generation, a reserved field
that is 0, sequence number) and a body, behind the multiplexed data plane's own
header and followed by a MAC over all of them (:mod:`.mux.frames`, :mod:`.auth`).
The sequence number counts the messages of one channel from 1: the receiver drops
a message whose number it has passed (a replay) and fails the channel when one is
missing. Arrow record batches travel as Arrow IPC
streams (zero-copy on receive); row batches (Python objects) and control elements are pickled,
which is safe because the MAC is checked before the body is read.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import pyarrow as pa

from ...core.batch import RowBatch
from ...core.elements import StreamElement

ARROW = 1
ROWS = 2
ELEMENT = 3
_HEADER = struct.Struct("<Bqqq")


class StaleMessageError(Exception):
    """A message from another attempt (generation)."""


def encode(element: Any, generation: int, mark: int = 0, seq: int = 0) -> tuple[bytes, Any]:
    """(header, body) for ``element``; the body supports the buffer protocol."""
    if isinstance(element, pa.RecordBatch):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, element.schema) as writer:
            writer.write_batch(element)
        return _HEADER.pack(ARROW, generation, mark, seq), sink.getvalue()
    if isinstance(element, RowBatch):
        return _HEADER.pack(ROWS, generation, mark, seq), pickle.dumps(
            (element.rows, element.timestamps)
            if element.kinds is None
            else (element.rows, element.timestamps, element.kinds),
            protocol=5,
        )
    return _HEADER.pack(ELEMENT, generation, mark, seq), pickle.dumps(element, protocol=5)


def parse_header(header: memoryview) -> tuple[int, int]:
    """(generation, sequence number) of an authenticated message's header."""
    if header.nbytes != _HEADER.size:
        raise ValueError(f"bad data header of {header.nbytes} bytes")
    _, generation, _, seq = _HEADER.unpack(header)
    return generation, seq


def decode(header: memoryview, body: memoryview, generation: int) -> StreamElement:
    """The element of an authenticated message; raises ``StaleMessageError`` for another
    generation's message."""
    if header.nbytes != _HEADER.size:
        raise ValueError(f"bad data header of {header.nbytes} bytes")
    kind, gen, _, _ = _HEADER.unpack(header)
    if gen != generation:
        raise StaleMessageError(f"message of generation {gen}, expected {generation}")
    if kind == ARROW:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        return reader.read_next_batch()
    if kind == ROWS:
        return RowBatch(*pickle.loads(body))  # (rows, timestamps[, kinds])
    if kind == ELEMENT:
        return pickle.loads(body)
    raise ValueError(f"unknown data message kind {kind}")
