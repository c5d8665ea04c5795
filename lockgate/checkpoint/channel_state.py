"""The channel-state file of an unaligned checkpoint: one per subtask (M-B7).

What a subtask writes is the data in flight on its channels when its snapshot was
taken, in channel order:

* input side: the batches that arrived on an input channel after the subtask's
  snapshot and before that channel's barrier (its state does not hold them; the
  producer's state is past them);
* output side: the batches the barrier overtook in an output channel or in the
  record writer's buffer (the producer's state is past them; the consumer's will
  not hold them).

Each recorded channel is named by its :class:`~lockgate.graph.channel_identity
.ChannelInfo` (the uids at the edge's two ends, side tag, input index, producer and
consumer subtask, both parallelisms, partitioning kind, max parallelism), never by
vertex or edge ids, so the state restores into a job built again, in another process,
at another parallelism (:mod:`lockgate.recovery.channel_state` redistributes it).

The file holds plain data only (dicts, lists, strings, ints, Arrow batches, pickled
row batches), so renaming a class never makes an old checkpoint unreadable. Its key
among the checkpoint's states is ``channels:<uid of the subtask's head operator>``
(:func:`state_key`). A file of the earlier format (``{"vertex", "inputs", "outputs"}``,
channels named by position only) still decodes, with ``channel=None``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, cast

from ..core.batch import Batch, RowBatch, nbytes
from ..core.moved_modules import loads as moved_loads
from ..graph.channel_identity import ChannelInfo, SubtaskChannels

#: the prefix of channel-state keys among a checkpoint's operator states
CHANNEL_STATE_PREFIX = "channels:"
FORMAT = "lockgate channel state"
VERSION = 1
#: which end of the channel recorded the batches
INPUT = "input"
OUTPUT = "output"


def state_key(owner: str) -> str:
    """The key of a subtask's channel state: ``owner`` is its head operator's uid."""
    return f"{CHANNEL_STATE_PREFIX}{owner}"


def freeze(batch: Batch) -> Any:
    """A copy of ``batch`` later processing cannot change: Arrow batches are immutable;
    row batches hold Python objects operators may mutate, so they are pickled now."""
    if isinstance(batch, RowBatch):
        if batch.kinds is None:  # the layout of earlier releases, still read
            return pickle.dumps((batch.rows, batch.timestamps), protocol=5)
        return pickle.dumps((batch.rows, batch.timestamps, batch.kinds), protocol=5)
    return batch


def thaw(frozen: Any) -> Batch:
    """The batch :func:`freeze` stored (channel state replay, M-R1)."""
    if isinstance(frozen, bytes):
        return RowBatch(*moved_loads(frozen))  # (rows, timestamps[, kinds])
    return cast(Batch, frozen)


def frozen_size(frozen: Any) -> int:
    """The bytes a frozen batch counts for (``persisted_inflight_bytes``)."""
    return len(frozen) if isinstance(frozen, bytes) else nbytes(frozen)


@dataclass(frozen=True)
class RecordedChannel:
    """The in-flight batches one end of one channel recorded, oldest first."""

    side: str
    #: the channel; None when the file does not name it (earlier format)
    channel: ChannelInfo | None
    #: frozen batches (:func:`thaw` them)
    batches: tuple[Any, ...]

    @property
    def num_bytes(self) -> int:
        return sum(frozen_size(b) for b in self.batches)


@dataclass(frozen=True)
class RecordedSummary:
    """What a restore needs to know of one recorded channel before reading its batches:
    where it is (the state key and subtask of its file, its position in the file), which
    channel and side it is, and how much it holds."""

    state_key: str
    file_subtask: int
    position: int
    side: str
    channel: ChannelInfo | None
    num_batches: int
    num_bytes: int


def summarize(state_key_: str, file_subtask: int, payload: Any) -> list[RecordedSummary]:
    """The summaries of the recorded channels of one channel-state file."""
    return [
        RecordedSummary(
            state_key_, file_subtask, position, r.side, r.channel, len(r.batches), r.num_bytes
        )
        for position, r in enumerate(decode(payload))
    ]


def encode(
    subtask: int,
    layout: SubtaskChannels | None,
    inputs: dict[int, list[Any]],
    outputs: list[tuple[int, int, Any]],
) -> dict[str, Any]:
    """The payload of a channel-state file. ``inputs``: input channel index -> frozen
    batches; ``outputs``: (record writer index, channel index, frozen batch) in the
    order the barrier overtook them. ``layout`` names the channels (None: unnamed)."""
    channels: list[dict[str, Any]] = []
    for index in sorted(inputs):
        if inputs[index]:
            info = layout.inputs[index] if layout and index < len(layout.inputs) else None
            channels.append(_entry(INPUT, info, inputs[index]))
    grouped: dict[tuple[int, int], list[Any]] = {}
    for writer, target, frozen in outputs:
        grouped.setdefault((writer, target), []).append(frozen)
    for (writer, target), batches in grouped.items():
        info = None
        if layout and writer < len(layout.outputs) and target < len(layout.outputs[writer]):
            info = layout.outputs[writer][target]
        channels.append(_entry(OUTPUT, info, batches))
    return {
        "format": FORMAT,
        "version": VERSION,
        "owner": layout.owner if layout else None,
        "subtask": subtask,
        "channels": channels,
    }


def _entry(side: str, info: ChannelInfo | None, batches: list[Any]) -> dict[str, Any]:
    return {"side": side, "channel": info.to_json() if info else None, "batches": list(batches)}


def decode(payload: Any) -> list[RecordedChannel]:
    """The recorded channels of a channel-state file's payload (either format)."""
    if not isinstance(payload, dict):
        raise ValueError(f"a channel-state file holds a dict, not {type(payload).__name__}")
    if payload.get("format") == FORMAT:
        if payload.get("version") != VERSION:
            raise ValueError(
                f"channel-state format version {payload.get('version')!r} is not supported "
                f"(this lockgate reads version {VERSION})"
            )
        return [
            RecordedChannel(
                e["side"],
                ChannelInfo.from_json(e["channel"]) if e["channel"] else None,
                tuple(e["batches"]),
            )
            for e in payload["channels"]
        ]
    # the earlier format: channels named by their position in one job's wiring only
    inputs = payload.get("inputs") or {}
    by_channel = sorted(inputs.items()) if isinstance(inputs, dict) else enumerate(inputs)
    out = [RecordedChannel(INPUT, None, tuple(batches)) for _, batches in by_channel if batches]
    out.extend(
        RecordedChannel(OUTPUT, None, (frozen,)) for _, _, frozen in payload.get("outputs", [])
    )
    return out
