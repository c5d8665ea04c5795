"""The autoscaler's settings (``env.autoscaling(...)``), checked once when set."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from ..core.durations import Duration, to_millis
from ..errors import ConfigurationError


@dataclass(frozen=True)
class AutoscalingConfig:
    """How the autoscaler sizes each vertex of a running job (see
    :mod:`lockgate.autoscaling`).

    * ``min_parallelism`` / ``max_parallelism``: the bounds of every vertex's
      parallelism (``max_parallelism=None``: the job's number of key groups; on Spark
      also the task slots the session offers; a source also at most its own limit,
      e.g. its topic's partitions).
    * ``target_utilization``: the busy share each subtask should have at the observed
      input rate (Flink's ``job.autoscaler.target.utilization``); a vertex is rescaled
      when its utilization leaves ``target_utilization ± utilization_boundary``.
    * ``stabilization``: after the start and after each rescale, metrics are not
      collected for this long (the job catches up and warms up).
    * ``metrics_window``: decisions use the averages over this long (collected after
      the stabilization).
    * ``scale_down_delay``: a lower parallelism must be wanted without a break for this
      long before it is applied (the highest wanted meanwhile is taken); a scale-up is
      applied at once.
    * ``catch_up``: a source's backlog (records behind the end of its input, e.g. Kafka
      lag) is to be worked off within this long, so the backlog adds
      ``backlog / catch_up`` to the wanted rate.
    * ``interval``: how often the metrics are read and evaluated.
    """

    min_parallelism: int = 1
    max_parallelism: int | None = None
    target_utilization: float = 0.7
    utilization_boundary: float = 0.3
    stabilization_ms: int = 60_000
    metrics_window_ms: int = 60_000
    scale_down_delay_ms: int = 300_000
    catch_up_ms: int = 300_000
    interval_ms: int = 5_000

    @classmethod
    def of(
        cls,
        *,
        min_parallelism: int,
        max_parallelism: int | None,
        target_utilization: float,
        utilization_boundary: float,
        stabilization: Duration,
        metrics_window: Duration,
        scale_down_delay: Duration,
        catch_up: Duration,
        interval: Duration,
    ) -> AutoscalingConfig:
        """The settings, each checked: a ``ConfigurationError`` says which is wrong."""
        _check_int(min_parallelism, "min_parallelism")
        if max_parallelism is not None:
            _check_int(max_parallelism, "max_parallelism")
            if max_parallelism < min_parallelism:
                raise ConfigurationError(
                    f"autoscaling max_parallelism ({max_parallelism}) is below min_parallelism "
                    f"({min_parallelism}): give max_parallelism >= min_parallelism"
                )
        _check_share(target_utilization, "target_utilization", 0.0, 1.0)
        _check_share(utilization_boundary, "utilization_boundary", 0.0, 1.0, allow_low=True)
        return cls(
            min_parallelism=min_parallelism,
            max_parallelism=max_parallelism,
            target_utilization=float(target_utilization),
            utilization_boundary=float(utilization_boundary),
            stabilization_ms=to_millis(stabilization, "autoscaling stabilization"),
            metrics_window_ms=to_millis(
                metrics_window, "autoscaling metrics_window", allow_zero=False
            ),
            scale_down_delay_ms=to_millis(scale_down_delay, "autoscaling scale_down_delay"),
            catch_up_ms=to_millis(catch_up, "autoscaling catch_up", allow_zero=False),
            interval_ms=to_millis(interval, "autoscaling interval", allow_zero=False),
        )

    def describe(self) -> str:
        bound = "key groups" if self.max_parallelism is None else str(self.max_parallelism)
        return (
            f"parallelism {self.min_parallelism}..{bound}, target utilization "
            f"{self.target_utilization:g} ± {self.utilization_boundary:g}, stabilization "
            f"{timedelta(milliseconds=self.stabilization_ms)}, metrics window "
            f"{timedelta(milliseconds=self.metrics_window_ms)}, scale-down delay "
            f"{timedelta(milliseconds=self.scale_down_delay_ms)}"
        )


def _check_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"autoscaling {name} must be an int >= 1, got {value!r}")


def _check_share(
    value: object, name: str, low: float, high: float, *, allow_low: bool = False
) -> None:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (low <= value if allow_low else low < value)
        and value <= high
    )
    if not ok:
        lower = "[" if allow_low else "("
        raise ConfigurationError(
            f"autoscaling {name} must be a number in {lower}{low:g}, {high:g}], got {value!r}"
        )
