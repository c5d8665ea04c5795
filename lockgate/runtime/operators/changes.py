"""The row kinds of a row function's outputs (:mod:`lockgate.core.row_kind`).

An output keeps the kind of the input record it came from, unless it is a
:class:`~lockgate.core.row_kind.Change`, which sets its own kind (and is unwrapped).
Append-only input whose function made no Change costs nothing here: the operator
calls :func:`output_kinds` only when its input carries kinds or
:func:`~lockgate.core.row_kind.changes_made` moved during the batch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.row_kind import Change, changes_made


def output_kinds(
    out: list[Any],
    in_kinds: np.ndarray | None,
    counts: list[int] | None,
    made_before: int,
) -> np.ndarray | None:
    """The kinds of ``out`` (the outputs of a batch, in order), unwrapping its Change
    values in place. ``in_kinds`` are the input records' kinds (None: all inserts);
    ``counts`` how many outputs each input record produced (None: one each, ``map``)."""
    kinds = None
    if in_kinds is not None:
        kinds = in_kinds if counts is None else np.repeat(in_kinds, counts)
        kinds = np.asarray(kinds, dtype=np.int8)
    if changes_made() == made_before:
        return kinds
    at = [i for i, v in enumerate(out) if type(v) is Change]
    if not at:
        return kinds
    kinds = np.zeros(len(out), dtype=np.int8) if kinds is None else kinds.copy()
    for i in at:
        change = out[i]
        kinds[i] = change.kind
        out[i] = change.value
    return kinds


def needs_kinds(in_kinds: np.ndarray | None, made_before: int) -> bool:
    """Whether a batch's outputs need :func:`output_kinds`."""
    return in_kinds is not None or changes_made() != made_before
