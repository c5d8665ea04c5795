"""Checkpoint configuration: ``env.enable_checkpointing(...)`` and ``env.checkpoint_config``.

Durations are milliseconds (ints) or ``timedelta``. ``validate()`` rejects
invalid combinations with an error saying which setting to change.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import Any

from ..core.durations import to_millis
from ..errors import ConfigurationError
from .storage_options import StorageOptions, register, signing_key_bytes


class CheckpointingMode(enum.Enum):
    """What a checkpoint guarantees for operator state (M-B1, M-B9)."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


class ExternalizedRetention(enum.Enum):
    """What happens to completed checkpoints when the job is cancelled (M-S3)."""

    DELETE_ON_CANCELLATION = "delete_on_cancellation"
    RETAIN_ON_CANCELLATION = "retain_on_cancellation"


#: the default savepoint folder when ``CheckpointConfig.savepoint_dir`` is not set
SAVEPOINT_DIR_ENV = "LOCKGATE_SAVEPOINT_DIR"

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
      Without ``storage``, checkpoints go to a new temporary folder that is deleted when
      the job ends, unless ``externalized`` is ``RETAIN_ON_CANCELLATION`` (then it is
      kept and its path logged as a warning).
    * ``allow_replaying_committed_output`` - a restore that must fall back past a
      damaged checkpoint which completed (so its two-phase-commit sinks may already
      have committed its output) fails with a ``RestoreError`` naming the checkpoint
      and the sinks; ``True`` restores the older checkpoint anyway (logged as a
      warning) and that output is written again.
    * ``signing_key`` - ``bytes`` (or ``str``, UTF-8 encoded), at least 16 bytes, or
      ``None``. A checkpoint is code: state files are pickles, and restoring one runs
      it. With a key, every checkpoint and savepoint file (state files, ``_metadata``,
      the ``_latest`` pointer, shared files of incremental checkpoints) carries an
      HMAC-SHA256 made with it, and a restore refuses unsigned or wrongly signed files
      before unpickling anything. Without a key, restore only from storage that only
      trusted parties can write. See ``docs/security.md``.
    * ``file_mode`` / ``dir_mode`` - permissions of the files and folders the storage
      creates on a local filesystem (default ``0o600`` / ``0o700``: owner only).
    * ``savepoint_dir`` - the default folder of savepoints (a path or URL, as
      ``storage``), as Flink's ``state.savepoints.dir``: ``stop_with_savepoint()`` and
      ``lockgate stop JOB`` without a folder write a new ``savepoint-<job>-<time>-<hex>``
      folder in it. ``None``: the environment variable ``LOCKGATE_SAVEPOINT_DIR`` of the
      job's process, if set; else a stop must name its folder (or cancel the job).
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
    allow_replaying_committed_output: bool = False
    signing_key: bytes | str | None = field(default=None, repr=False)
    file_mode: int = 0o600
    dir_mode: int = 0o700
    savepoint_dir: str | None = None

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickled in a worker process (a plan shipped to a slot): register the storage
        # options there, so that every storage the worker opens at this URL signs and
        # checks files with the job's key (see lockgate.checkpoint.storage_options)
        self.__dict__.update(state)
        if isinstance(self.storage, str) and self.storage:
            try:
                register(self.storage, self.storage_options())
            except ConfigurationError:
                pass  # invalid settings fail validate() where they are used

    def _check_savepoint_dir(self) -> None:
        folder = self.savepoint_dir
        if folder is not None and (not isinstance(folder, str) or not folder.strip()):
            raise ConfigurationError(
                f"checkpoint savepoint_dir must be a folder path or URL (e.g. '/data/savepoints' "
                f"or 's3://bucket/savepoints') or None, got {folder!r}"
            )

    def default_savepoint_dir(self) -> str | None:
        """Where a savepoint goes when its folder is not given: ``savepoint_dir``, else
        the environment variable ``LOCKGATE_SAVEPOINT_DIR`` (read now, in the job's
        process), else None."""
        if self.savepoint_dir is not None:
            return self.savepoint_dir
        return os.environ.get(SAVEPOINT_DIR_ENV) or None

    def storage_options(self) -> StorageOptions:
        """How the checkpoint storage writes and checks files (key and permissions)."""
        return StorageOptions(
            signing_key=signing_key_bytes(self.signing_key),
            file_mode=self.file_mode,
            dir_mode=self.dir_mode,
        )

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
            raise ConfigurationError(
                f"checkpoint unaligned must be True or False, got {self.unaligned!r}"
            )
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
        if not isinstance(self.allow_replaying_committed_output, bool):
            raise ConfigurationError(
                f"checkpoint allow_replaying_committed_output must be True or False, got "
                f"{self.allow_replaying_committed_output!r}"
            )
        self.storage_options()  # checks the key and the modes
        self._check_savepoint_dir()
        if not isinstance(self.externalized, ExternalizedRetention):
            raise ConfigurationError(
                f"checkpoint externalized must be an lg.ExternalizedRetention, got "
                f"{self.externalized!r}"
            )
