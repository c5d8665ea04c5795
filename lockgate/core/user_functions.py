"""How a user function is called: a plain callable as it is, a function object by its
method (``MapFunction.map``, ``AggregateFunction.add``, ...)."""

from __future__ import annotations

import types
from collections.abc import Callable
from functools import partial
from typing import Any

#: callables that are called as they are, never searched for a method
PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, partial)


def bind_function(obj: Any, method: str) -> Callable[..., Any]:
    """The callable to run: ``obj.<method>`` for function objects, else ``obj`` itself.

    Raises :class:`TypeError` when ``obj`` is neither callable nor has ``method``."""
    if not isinstance(obj, PLAIN_CALLABLES):
        bound = getattr(obj, method, None)
        if callable(bound):
            return bound
    if callable(obj):
        return obj
    raise TypeError(f"{obj!r} is neither callable nor has a {method}() method")


def default_method(method: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``method`` as a base class's placeholder, so that :func:`is_default_method`
    tells a subclass that did not override it (e.g. ``AggregateFunction.merge``)."""
    setattr(method, "__lockgate_default__", True)  # noqa: B010 (mypy: Callable has no such attribute)
    return method


def is_default_method(method: object) -> bool:
    """Whether ``method`` is a placeholder marked by :func:`default_method`."""
    return bool(getattr(method, "__lockgate_default__", False))
