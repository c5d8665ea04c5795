"""DiscardingSink: drops every record (benchmarks, tests of upstream behaviour)."""

from __future__ import annotations

from ...core.batch import Batch
from ...runtime.context import RuntimeContext
from ..base import Sink, SinkWriter


class DiscardingSink(Sink):
    default_name = "discard"

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        return _Discard()


class _Discard(SinkWriter):
    def write(self, batch: Batch) -> None:
        pass
