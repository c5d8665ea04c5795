"""Errors of the multiplexed data plane."""

from __future__ import annotations


class ChannelBrokenError(RuntimeError):
    """A network channel lost a message (a gap in its sequence, or the slot's receiver
    failed): the task fails so the job restores from a checkpoint instead of running on
    without the data."""
