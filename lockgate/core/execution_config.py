"""Runtime settings of a job: buffering, channel bounds, chaining."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigurationError

MiB = 1024 * 1024


@dataclass
class ExecutionConfig:
    """Settings every subtask of a job uses.

    * ``buffer_timeout_ms`` - the longest a record waits in an output buffer
      (0: send every batch at once).
    * ``buffer_max_rows`` / ``buffer_max_bytes`` - an output buffer is sent when
      it reaches either; larger batches are cut to ``buffer_max_bytes``.
    * ``channel_capacity_bytes`` - the most data queued in one channel; a
      producer blocks beyond it (backpressure).
    * ``source_batch_rows`` - the rows a built-in source puts in one batch.
    * ``chaining`` - chain forward-connected operators of equal parallelism.
    """

    buffer_timeout_ms: int = 100
    buffer_max_rows: int = 65536
    buffer_max_bytes: int = 1 * MiB
    channel_capacity_bytes: int = 4 * MiB
    source_batch_rows: int = 65536
    chaining: bool = True

    def validate(self) -> None:
        for name in (
            "buffer_max_rows",
            "buffer_max_bytes",
            "channel_capacity_bytes",
            "source_batch_rows",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive int, got {value!r}")
        if (
            isinstance(self.buffer_timeout_ms, bool)
            or not isinstance(self.buffer_timeout_ms, int)
            or self.buffer_timeout_ms < 0
        ):
            raise ConfigurationError(
                f"buffer_timeout_ms must be an int >= 0, got {self.buffer_timeout_ms!r}"
            )
        if self.buffer_max_bytes > self.channel_capacity_bytes:
            raise ConfigurationError(
                f"buffer_max_bytes ({self.buffer_max_bytes}) exceeds channel_capacity_bytes "
                f"({self.channel_capacity_bytes}); a buffer must fit in a channel: raise "
                "channel_capacity_bytes or lower buffer_max_bytes"
            )
