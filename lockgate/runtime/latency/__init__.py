"""End-to-end latency tracking in the subtasks (issue 42, section 5): sources send a
:class:`~lockgate.core.latency.LatencyMarker` behind a batch at most every
``latency_tracking_interval_ms`` (:mod:`.emitter`), tasks forward each marker once
(:mod:`.forwarding`), and sinks record ``now - stamp`` in a
:class:`~lockgate.core.latency.LatencyHistogram` (``SinkOperator``)."""

from .emitter import MarkerEmitter
from .forwarding import ForwardOnce

__all__ = ["ForwardOnce", "MarkerEmitter"]
