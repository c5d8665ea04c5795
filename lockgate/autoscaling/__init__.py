"""The autoscaler: sizes each vertex of a running job to its input rate and rescales the
job from a savepoint when that changes (``env.autoscaling(...)``).

* :mod:`.config` - the settings, checked;
* :mod:`.policy` - the parallelism each vertex needs (Flink's autoscaler rule), as pure
  functions of the job's shape and its averaged metrics;
* :mod:`.window` - the plan's shape and the live metrics, averaged over the window;
* :mod:`.autoscaler` - the driver loop: stabilization, scale-down delay, decisions;
* :mod:`.decisions` - what ``JobClient.rescales()`` returns.

Carrying a decision out (savepoint, stop, restore at the new parallelism, roll back)
is the API layer's (:mod:`lockgate.api.rescaling`) and the failover loop's
(:mod:`lockgate.recovery.failover`).
"""

from .config import AutoscalingConfig
from .decisions import APPLIED, FAILED, IN_PROGRESS, ROLLED_BACK, RescaleDecision

__all__ = [
    "APPLIED",
    "FAILED",
    "IN_PROGRESS",
    "ROLLED_BACK",
    "AutoscalingConfig",
    "RescaleDecision",
]
