"""Compiled loops over bytes, with numba (the ``kafka`` extra installs it).

A loop over each record of a fetch costs about a microsecond a record in Python; the same
loop compiled runs at a few nanoseconds a byte. :func:`kernel` compiles a function once
per process, the first time it is called, and keeps the machine code in numba's cache
(``__pycache__`` beside the module, or numba's cache folder when that is not writable),
so later processes load it in milliseconds. Compiled functions release the GIL
(``nogil``): a source thread decoding a fetch lets the job's other threads run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def numba_module() -> Any:
    """numba, imported on first use; an error saying how to install it when missing."""
    try:
        import numba
    except ImportError as e:  # pragma: no cover - the kafka extra installs it
        raise ImportError(
            "lockgate's compiled Kafka decoding needs numba: pip install 'lockgate[kafka]' "
            f"(or pip install numba); importing it failed: {e}"
        ) from e
    return numba


#: numba's options for lockgate's kernels. ``_nrt=False``: no reference counting of the
#: arrays a kernel passes to its helpers. Kernels only read and write arrays their
#: caller made (they allocate none), and numba's counting costs an atomic increment
#: and decrement per array per helper call: with it, decoding a flat JSON object took
#: 220-330 ns, without it 105 (measured on this project's 2-core machine).
_OPTIONS = {"nogil": True, "_nrt": False}


def kernel(fn: F) -> F:
    """``fn`` compiled with numba in nopython mode: cached on disk, GIL released."""
    compiled: F = numba_module().njit(cache=True, **_OPTIONS)(fn)
    return compiled


def inline(fn: F) -> F:
    """A helper of kernels, compiled into each kernel that calls it (numba inlines it
    before optimizing: a call per byte or field would cost more than its work)."""
    compiled: F = numba_module().njit(inline="always", **_OPTIONS)(fn)
    return compiled
