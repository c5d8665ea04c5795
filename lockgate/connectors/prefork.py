"""Connectors' pre-fork hooks: work a connector does once in a process that later forks
its workers (Spark's Python worker daemon), so that every forked worker starts with it
done (imports shared copy-on-write, compiled kernels loaded) instead of doing it in its
job's time. A connector package registers its hooks when it is imported
(:func:`register_prefork_hook`); the daemon imports :mod:`lockgate.connectors` and runs
them all (:func:`run_prefork_hooks`) without naming any connector.

A hook must be safe before a fork: it starts no Python thread, opens no socket and
installs no log handler. It runs once per process. Its failure is contained: the
connector that needs the work does it (or reports why it cannot) in its own slot."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreforkHook:
    """One registered hook: ``name`` (``"<connector>.<what>"``), the function, and
    whether it compiles code (``compiles``: such hooks take seconds on a first start,
    and a daemon may be told to skip them)."""

    name: str
    run: Callable[[], object]
    compiles: bool = False


_HOOKS: dict[str, PreforkHook] = {}


def register_prefork_hook(name: str, run: Callable[[], object], *, compiles: bool = False) -> None:
    """Register ``run`` under ``name`` (a name registered again replaces its hook, so a
    module imported twice registers once). Hooks run in the order first registered."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a pre-fork hook needs a non-empty name, got {name!r}")
    if not callable(run):
        raise TypeError(f"pre-fork hook {name!r} must be callable, got {run!r}")
    _HOOKS[name] = PreforkHook(name, run, compiles)


def prefork_hooks() -> list[PreforkHook]:
    """The registered hooks, in the order they run."""
    return list(_HOOKS.values())


def run_prefork_hooks(*, compile_kernels: bool = True) -> dict[str, str]:
    """Run every registered hook once, in order (``compile_kernels=False``: all but the
    compiling ones); return each hook's outcome: ``"ok"``, ``"skipped"`` or the error
    it raised (logged at debug level, never raised: the connector that needs the work
    reports it in its own slot)."""
    outcomes: dict[str, str] = {}
    for hook in prefork_hooks():
        if hook.compiles and not compile_kernels:
            outcomes[hook.name] = "skipped"
            continue
        try:
            hook.run()
        except Exception as e:  # noqa: BLE001 - left to the slot that needs the work
            log.debug("pre-fork hook %s failed: %r", hook.name, e)
            outcomes[hook.name] = f"failed: {e!r}"
            continue
        outcomes[hook.name] = "ok"
    return outcomes
