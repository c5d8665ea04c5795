"""Which channel ends a subtask gets: the one wiring both executors share.

A channel is named by its key ``(edge id, producer subtask, consumer subtask)``. For
subtask ``i`` of a vertex, :func:`wire_subtask` asks the executor for the output
channel of every consumer of every out-edge (in the edge's consumer order) and for the
input channel of every producer of every in-edge (with the edge's input index); the
executor decides what a channel is (a local queue, a zmq socket). The order is the one
:func:`lockgate.graph.channel_identity.subtask_channels` names the channels in, which
channel state relies on (M-B7).
"""

from __future__ import annotations

from collections.abc import Callable

from ..graph.execution_plan import ExecutionPlan, VertexPlan
from ..runtime.channels import InputChannel, OutputChannel

#: (edge id, producer subtask, consumer subtask)
ChannelKey = tuple[int, int, int]


def wire_subtask(
    plan: ExecutionPlan,
    vertex: VertexPlan,
    subtask: int,
    out_channel: Callable[[ChannelKey], OutputChannel],
    in_channel: Callable[[ChannelKey], InputChannel],
) -> tuple[dict[int, list[OutputChannel]], list[tuple[InputChannel, int]]]:
    """(output channels by out-edge id, [(input channel, input index)]) of subtask
    ``subtask`` of ``vertex``, each channel made by the executor's callback."""
    outputs: dict[int, list[OutputChannel]] = {}
    for eid in vertex.out_edges:
        edge = plan.edges[eid]
        outputs[eid] = [out_channel((eid, subtask, c)) for c in edge.consumers_of(subtask)]
    inputs: list[tuple[InputChannel, int]] = []
    for eid in vertex.in_edges:
        edge = plan.edges[eid]
        inputs.extend(
            (in_channel((eid, p, subtask)), edge.input_index) for p in edge.producers_of(subtask)
        )
    return outputs, inputs
