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
    * ``flush_when_idle`` - a task also sends its part-filled output buffers whenever
      its input runs dry, before it waits (default): at low rates a record then never
      waits for the buffer timeout; under load the input never runs dry and buffers
      fill as before. False: only a full buffer or the timeout sends (Flink's way).
    * ``buffer_max_rows`` / ``buffer_max_bytes`` - an output buffer is sent when
      it reaches either; larger batches are cut to ``buffer_max_bytes``.
    * ``channel_capacity_bytes`` - the most data queued in one channel; a
      producer blocks beyond it (backpressure).
    * ``source_batch_rows`` - the rows a built-in source puts in one batch.
    * ``chaining`` - chain forward-connected operators of equal parallelism.
    * ``rest_enabled`` - serve the job's REST API, Prometheus metrics and dashboard
      from the driver while it runs.
    * ``rest_bind`` / ``rest_port`` - where (default ``127.0.0.1``, any free port:
      ``JobClient.rest_url`` tells which). Binding another address exposes the job to
      that network; every request still needs the job's token.
    * ``metrics_enabled`` - subtasks count bytes and idle / backpressured time for the
      live metrics (records are always counted); off only to measure what they cost.
    * ``progress_interval_ms`` - how often the driver logs a progress line per job
      (0: never).
    * ``latency_tracking_interval_ms`` - end-to-end latency per sink: each source
      subtask sends a latency marker behind a batch at most this often, and sinks
      record how long it took to reach them (0: off, the default; as Flink's
      ``metrics.latency.interval``). See docs/operations.md, "End-to-end latency".
    """

    buffer_timeout_ms: int = 100
    flush_when_idle: bool = True
    buffer_max_rows: int = 65536
    buffer_max_bytes: int = 1 * MiB
    channel_capacity_bytes: int = 4 * MiB
    source_batch_rows: int = 65536
    chaining: bool = True
    rest_enabled: bool = True
    rest_bind: str = "127.0.0.1"
    rest_port: int = 0
    progress_interval_ms: int = 30_000
    metrics_enabled: bool = True
    latency_tracking_interval_ms: int = 0

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
        if not isinstance(self.flush_when_idle, bool):
            raise ConfigurationError(
                f"flush_when_idle must be a bool, got {self.flush_when_idle!r}"
            )
        if not isinstance(self.metrics_enabled, bool):
            raise ConfigurationError(
                f"metrics_enabled must be a bool, got {self.metrics_enabled!r}"
            )
        if not isinstance(self.rest_enabled, bool):
            raise ConfigurationError(f"rest_enabled must be a bool, got {self.rest_enabled!r}")
        if not isinstance(self.rest_bind, str) or not self.rest_bind.strip():
            raise ConfigurationError(
                f"rest_bind must be a host name or address to listen on (e.g. '127.0.0.1' "
                f"or '0.0.0.0'), got {self.rest_bind!r}"
            )
        port = self.rest_port
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigurationError(
                f"rest_port must be an int from 0 (any free port) to 65535, got {port!r}"
            )
        interval = self.progress_interval_ms
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
            raise ConfigurationError(
                f"progress_interval_ms must be an int >= 0 (0: no progress lines), got {interval!r}"
            )
        latency = self.latency_tracking_interval_ms
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 0:
            raise ConfigurationError(
                "latency_tracking_interval_ms must be an int >= 0 (milliseconds between "
                f"two latency markers of a source subtask; 0: off), got {latency!r}"
            )
        if self.buffer_max_bytes > self.channel_capacity_bytes:
            raise ConfigurationError(
                f"buffer_max_bytes ({self.buffer_max_bytes}) exceeds channel_capacity_bytes "
                f"({self.channel_capacity_bytes}); a buffer must fit in a channel: raise "
                "channel_capacity_bytes or lower buffer_max_bytes"
            )
