"""Argument checks of the timer service: timestamps are int64 epoch milliseconds
(ints or numpy integers, never bools or floats); bulk arguments may be lists, numpy
or Arrow arrays. Bad input raises :class:`~lockgate.errors.ConfigurationError`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..core.elements import MAX_WATERMARK, MIN_WATERMARK
from ..errors import ConfigurationError


def check_timestamp(value: Any, what: str) -> int:
    """``value`` as an int of epoch milliseconds in the int64 range, or a
    ConfigurationError naming ``what``."""
    if type(value) is int:
        if MIN_WATERMARK <= value <= MAX_WATERMARK:
            return value
    elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return check_timestamp(int(value), what)
    else:
        hint = " (round it, e.g. int(ts))" if isinstance(value, (float, np.floating)) else ""
        raise ConfigurationError(
            f"{what} needs a timestamp in epoch milliseconds as an int, got {value!r} "
            f"({type(value).__name__}){hint}"
        )
    raise ConfigurationError(
        f"{what} needs a timestamp between {MIN_WATERMARK} and {MAX_WATERMARK} "
        f"(int64 milliseconds), got {value}"
    )


def timestamp_array(timestamps: Any, what: str) -> np.ndarray:
    """Timestamps (a list of ints, a numpy or an Arrow integer array) as a 1-d int64
    array, or a ConfigurationError naming ``what``."""
    if isinstance(timestamps, (pa.Array, pa.ChunkedArray)):
        if not pa.types.is_integer(timestamps.type) or timestamps.null_count:
            raise ConfigurationError(
                f"{what} needs integer timestamps without nulls, got an Arrow column of "
                f"type {timestamps.type} with {timestamps.null_count} nulls"
            )
        timestamps = timestamps.to_numpy(zero_copy_only=False)
    arr = np.asarray(timestamps) if not isinstance(timestamps, np.ndarray) else timestamps
    if arr.ndim != 1:
        raise ConfigurationError(
            f"{what} needs a flat sequence of timestamps, got shape {arr.shape}"
        )
    if arr.dtype.kind == "u":
        if len(arr) and arr.max() > MAX_WATERMARK:
            raise ConfigurationError(f"{what}: timestamp {arr.max()} is above {MAX_WATERMARK}")
        return arr.astype(np.int64)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64, copy=False)
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == object:  # Python ints beyond int64, or mixed types: check one by one
        return np.array([check_timestamp(v, what) for v in arr], dtype=np.int64)
    raise ConfigurationError(
        f"{what} needs integer timestamps (epoch milliseconds), got {arr.dtype} values"
    )


def key_column(keys: Any, where: str) -> list[Any] | np.ndarray:
    """Keys as a list, or a 1-d numpy array of numbers (reordered natively, stored as
    Python values)."""
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        if keys.null_count or not (
            pa.types.is_integer(keys.type) or pa.types.is_floating(keys.type)
        ):
            return keys.to_pylist()
        keys = keys.to_numpy(zero_copy_only=False)
    if isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ConfigurationError(
                f"{where} needs a flat sequence of keys, got shape {keys.shape}"
            )
        return keys if keys.dtype.kind in "iuf" else keys.tolist()
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__len__"):
        raise ConfigurationError(
            f"{where} needs a sequence of keys (a list, numpy or Arrow array), got {keys!r}"
        )
    return keys if isinstance(keys, list) else list(keys)


def as_list(values: Any) -> list[Any]:
    """Values (a list, numpy or Arrow array, any iterable) as a list of Python values."""
    if isinstance(values, list):
        return values
    if isinstance(values, np.ndarray):
        return values.tolist()  # numpy scalars become Python values (stable, picklable keys)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    return list(values)
