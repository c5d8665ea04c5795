"""Checkpoint configuration: ``env.enable_checkpointing(...)`` and ``env.checkpoint_config``.

Durations are milliseconds (ints) or ``timedelta``. ``validate()`` rejects
invalid combinations with an error saying which setting to change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..time.durations import to_millis


class CheckpointingMode(enum.Enum):
    """What a checkpoint guarantees for operator state (M-B1, M-B9)."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class ExternalizedRetention(enum.Enum):
    """What happens to completed checkpoints when the job is cancelled (M-S3)."""

    DELETE_ON_CANCELLATION = "delete_on_cancellation"
    RETAIN_ON_CANCELLATION = "retain_on_cancellation"


_DURATIONS = ("interval", "min_pause", "timeout", "aligned_timeout")


@dataclass
class CheckpointConfig:
    """Settings of periodic checkpoints.

    * ``interval`` - time between checkpoint triggers (ms); ``None``: disabled.
    * ``mode`` - exactly-once (aligned barriers) or at-least-once (tracked barriers).
    * ``storage`` - a filesystem URL or path (``/data/ckpt``, ``file:///data/ckpt``,
      ``s3://bucket/prefix``): the job's checkpoint directory. It holds
      ``chk-<id>/`` folders and the durable pointer to the newest completed one.
    * ``min_pause`` - least time between the end of one checkpoint and the next trigger.
    * ``timeout`` - a checkpoint not complete after this is aborted (M-C4).
    * ``max_concurrent`` - most checkpoints in progress at once (M-C1).
    * ``tolerable_failures`` - consecutive failed checkpoints tolerated before the job
      fails (M-C6).
    * ``unaligned`` - exactly-once with unaligned barriers (M-B7, M-B8).
    * ``aligned_timeout`` - with ``unaligned``: start aligned, switch to unaligned when
      alignment takes longer than this (0: always unaligned).
    * ``retained`` - completed checkpoints kept in storage (M-C8).
    * ``externalized`` - keep or delete the retained checkpoints on cancellation (M-S3).
    """

    interval: Any = None
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE
    storage: str | None = None
    min_pause: Any = 0
    timeout: Any = 600_000
    max_concurrent: int = 1
    tolerable_failures: int = 0
    unaligned: bool = False
    aligned_timeout: Any = 0
    retained: int = 1
    externalized: ExternalizedRetention = ExternalizedRetention.DELETE_ON_CANCELLATION

    @property
    def enabled(self) -> bool:
        return self.interval is not None

    # durations in ms, validated -------------------------------------------------
    @property
    def interval_ms(self) -> int:
        if self.interval is None:
            raise ConfigurationError("checkpointing is not enabled: call env.enable_checkpointing")
        return to_millis(self.interval, "checkpoint interval")

    @property
    def min_pause_ms(self) -> int:
        return to_millis(self.min_pause, "checkpoint min_pause")

    @property
    def timeout_ms(self) -> int:
        return to_millis(self.timeout, "checkpoint timeout")

    @property
    def aligned_timeout_ms(self) -> int:
        return to_millis(self.aligned_timeout, "checkpoint aligned_timeout")

    def validate(self) -> None:
        """Raise ``ConfigurationError`` naming the first invalid setting."""
        if not self.enabled:
            return
        for name in _DURATIONS:
            to_millis(getattr(self, name), f"checkpoint {name}")  # type and sign
        if self.interval_ms <= 0:
            raise ConfigurationError(
                f"checkpoint interval must be positive, got {self.interval!r} "
                "(e.g. env.enable_checkpointing(timedelta(seconds=1)))"
            )
        if self.timeout_ms <= 0:
            raise ConfigurationError(f"checkpoint timeout must be positive, got {self.timeout!r}")
        if not isinstance(self.mode, CheckpointingMode):
            raise ConfigurationError(
                f"checkpointing mode must be lg.CheckpointingMode.EXACTLY_ONCE or "
                f"AT_LEAST_ONCE, got {self.mode!r}"
            )
        for name, low in (("max_concurrent", 1), ("tolerable_failures", 0), ("retained", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigurationError(
                    f"checkpoint {name} must be an int >= {low}, got {value!r}"
                )
        if not isinstance(self.unaligned, bool):
            raise ConfigurationError(f"checkpoint unaligned must be True or False, got "
                                     f"{self.unaligned!r}")
        if self.unaligned and self.mode is CheckpointingMode.AT_LEAST_ONCE:
            raise ConfigurationError(
                "unaligned checkpoints need mode EXACTLY_ONCE (M-B1): set "
                "checkpoint_config.unaligned = False or use CheckpointingMode.EXACTLY_ONCE"
            )
        if self.unaligned and self.max_concurrent > 1:
            raise ConfigurationError(
                f"unaligned checkpoints allow one checkpoint at a time: set "
                f"checkpoint_config.max_concurrent = 1 (got {self.max_concurrent})"
            )
        if self.aligned_timeout_ms > 0 and not self.unaligned:
            raise ConfigurationError(
                "checkpoint aligned_timeout switches aligned checkpoints to unaligned: it "
                "needs checkpoint_config.unaligned = True"
            )
        if self.storage is not None and (not isinstance(self.storage, str) or not self.storage):
            raise ConfigurationError(
                f"checkpoint storage must be a filesystem URL or path, got {self.storage!r}"
            )
        if not isinstance(self.externalized, ExternalizedRetention):
            raise ConfigurationError(
                f"checkpoint externalized must be an lg.ExternalizedRetention, got "
                f"{self.externalized!r}"
            )
