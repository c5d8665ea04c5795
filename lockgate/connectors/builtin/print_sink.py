"""PrintSink: prints records to standard output (or standard error)."""

from __future__ import annotations

import sys
import threading

from ...core.batch import Batch, kinds_of, to_rows
from ...core.row_kind import RowKind
from ...runtime.context import RuntimeContext
from ..base import Sink, SinkWriter

_print_lock = threading.Lock()


class PrintSink(Sink):
    """Prints each record on its own line; with parallelism > 1 each line starts with the
    subtask number (``2> ...``), and with a prefix with ``prefix:``, as Flink does. A
    changelog's records start with their kind (``+I``, ``-U``, ``+U``, ``-D``)."""

    default_name = "print"

    @property
    def accepts_changes(self) -> bool:
        return True

    def __init__(self, prefix: str | None = None, *, stderr: bool = False) -> None:
        self.prefix = prefix
        self.stderr = stderr

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        parts = []
        if self.prefix:
            parts.append(self.prefix)
        if ctx.parallelism > 1:
            parts.append(f"{ctx.subtask_index + 1}")
        lead = (":".join(parts) + "> ") if parts else ""
        return _Print(lead, self.stderr)


class _Print(SinkWriter):
    def __init__(self, lead: str, stderr: bool) -> None:
        self.lead = lead
        self.stderr = stderr

    def write(self, batch: Batch) -> None:
        stream = sys.stderr if self.stderr else sys.stdout
        kinds = kinds_of(batch)
        if kinds is None:
            text = "".join(f"{self.lead}{r}\n" for r in to_rows(batch))
        else:
            shorts = [k.short for k in RowKind]
            text = "".join(
                f"{self.lead}{shorts[k]}{r}\n" for k, r in zip(kinds.tolist(), to_rows(batch))
            )
        with _print_lock:
            stream.write(text)

    def finish(self) -> None:
        (sys.stderr if self.stderr else sys.stdout).flush()
