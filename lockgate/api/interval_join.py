"""IntervalJoin and IntervalJoined: the fluent API of the interval join.

::

    joined = (orders.key_by("user")
              .interval_join(payments.key_by("user"))
              .between(timedelta(seconds=-5), timedelta(minutes=10))
              .process())                      # vectorized: merged columns
    matched = (...).process(MatchOrders())     # or an lg.ProcessJoinFunction per pair

A left record at ``tl`` and a right record with the same key at ``tr`` join when
``tl + lower <= tr <= tl + upper`` (``lower_bound_exclusive()`` /
``upper_bound_exclusive()`` leave a bound out). Semantics, state and checkpoints are
described in :mod:`lockgate.runtime.operators.join.interval_join`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Generic

from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Kind, Transformation
from ..runtime.operators.join.interval_join import IntervalJoinOperator
from ..runtime.operators.keyed import tag_name
from .stream_protocols import DS, KeyedLike

#: the widest bound, in ms (record times plus bounds must stay within int64)
MAX_BOUND_MS = 2**62


def _bound_ms(value: Any, what: str) -> int:
    """A bound as int ms: a timedelta or an int of ms, negative allowed."""
    if isinstance(value, bool) or not isinstance(value, (timedelta, int)):
        raise ConfigurationError(
            f"between(lower, upper): {what} must be a datetime.timedelta or an int of "
            f"milliseconds (negative for before the left record), got {value!r}"
        )
    ms = value // timedelta(milliseconds=1) if isinstance(value, timedelta) else value
    if abs(ms) > MAX_BOUND_MS:
        raise ConfigurationError(
            f"between(lower, upper): {what} must be within +-{MAX_BOUND_MS} ms, got {value!r}"
        )
    return int(ms)


class IntervalJoin(Generic[DS]):
    """``left.interval_join(right)`` of two keyed streams; call :meth:`between`."""

    def __init__(self, left: KeyedLike[DS], right: KeyedLike[DS]) -> None:
        """``left`` and ``right``: keyed streams of one environment (checked by
        ``KeyedStream.interval_join``)."""
        self._left = left
        self._right = right

    def between(self, lower: Any, upper: Any) -> IntervalJoined[DS]:
        """Join a left record at ``tl`` with the right records at ``tr`` in
        ``[tl + lower, tl + upper]`` (timedelta or int ms; negative: before ``tl``)."""
        lo = _bound_ms(lower, "lower")
        hi = _bound_ms(upper, "upper")
        if lo > hi:
            raise ConfigurationError(
                f"between(lower, upper): lower ({lower!r}) is above upper ({upper!r}), so no "
                "pair could ever join; swap them (lower <= upper)"
            )
        return IntervalJoined(self._left, self._right, lo, hi)


class IntervalJoined(Generic[DS]):
    """An interval join with its bounds; finish it with :meth:`process`."""

    def __init__(self, left: KeyedLike[DS], right: KeyedLike[DS], lower: int, upper: int) -> None:
        self._left = left
        self._right = right
        self._lower = lower
        self._upper = upper
        self._lower_exclusive = False
        self._upper_exclusive = False
        self._late_tags: tuple[str | None, str | None] = (None, None)

    def lower_bound_exclusive(self) -> IntervalJoined[DS]:
        """Leave the lower bound out: ``tl + lower < tr``."""
        self._lower_exclusive = True
        return self

    def upper_bound_exclusive(self) -> IntervalJoined[DS]:
        """Leave the upper bound out: ``tr < tl + upper``."""
        self._upper_exclusive = True
        return self

    def side_output_late_data(self, left_tag: Any, right_tag: Any) -> IntervalJoined[DS]:
        """Send late records (behind the join's watermark on arrival) of the left input
        to side output ``left_tag`` and of the right input to ``right_tag`` (two
        different ``lg.OutputTag``) instead of dropping them; read them with
        ``result.get_side_output(tag)``."""
        left, right = tag_name(left_tag), tag_name(right_tag)
        if left == right:
            raise ConfigurationError(
                f"side_output_late_data(left_tag, right_tag): both tags are named {left!r}; "
                "give the late records of each input their own OutputTag"
            )
        self._late_tags = (left, right)
        return self

    def bounds(self) -> tuple[int, int]:
        """The inclusive bounds in ms, after the exclusive settings."""
        lo = self._lower + (1 if self._lower_exclusive else 0)
        hi = self._upper - (1 if self._upper_exclusive else 0)
        return lo, hi

    def process(
        self,
        fn: Any = None,
        *,
        suffixes: tuple[str, str] = ("_left", "_right"),
        name: str | None = None,
    ) -> DS:
        """Run the join: with ``fn`` (an ``lg.ProcessJoinFunction`` instance),
        ``fn.process_element(left, right, ctx)`` per pair; without, the vectorized join
        on Arrow batches, whose rows are the left's columns and the right's (a key
        column named the same on both sides once; other names both sides have get
        ``suffixes``). The vectorized join needs column keys on both sides."""
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        if (
            not isinstance(suffixes, tuple)
            or len(suffixes) != 2
            or not all(isinstance(s, str) for s in suffixes)
            or suffixes[0] == suffixes[1]
        ):
            raise ConfigurationError(
                f"suffixes must be two different strings, e.g. ('_left', '_right'), got "
                f"{suffixes!r}"
            )
        lo, hi = self.bounds()
        if lo > hi:
            raise ConfigurationError(
                f"the interval join's bounds are empty after leaving the exclusive bound(s) "
                f"out ({lo} ms > {hi} ms): widen between(lower, upper) or keep the bounds "
                "inclusive"
            )
        left, right = self._left, self._right
        if fn is None:
            for side, keyed in (("left", left), ("right", right)):
                if keyed.key_selector.columns is None:
                    raise ConfigurationError(
                        f"interval join: the {side} stream is keyed by a function "
                        f"({keyed.key_selector.describe()}), but the vectorized join (process() "
                        "without a function) joins on columns: key both sides by column "
                        "name(s), e.g. key_by('user'), or pass an lg.ProcessJoinFunction to "
                        "process(...)"
                    )
            lcols = left.key_selector.columns or ()
            rcols = right.key_selector.columns or ()
            if len(lcols) != len(rcols):
                raise ConfigurationError(
                    f"interval join: the left stream is keyed by {len(lcols)} column(s) "
                    f"{list(lcols)}, the right by {len(rcols)} {list(rcols)}; key both by "
                    "the same number of columns"
                )
        else:
            _check_join_function(fn)
        functions: dict[str, Any] = {**left._key_functions()}
        if right.key_selector.fn is not None:
            functions["right key selector:__call__"] = right.key_selector.fn
        if fn is not None:
            functions["function:process_element"] = fn
        factory = OperatorFactory(
            IntervalJoinOperator,
            {
                "left_key": left.key_selector,
                "right_key": right.key_selector,
                "lower": lo,
                "upper": hi,
                "fn": fn,
                "suffixes": suffixes,
                "late_tags": self._late_tags,
            },
            functions,
        )
        t = Transformation(
            Kind.OPERATOR,
            name or "IntervalJoin",
            [left.transformation, right.transformation],
            factory=factory,
            keyed=True,
        )
        stream = left._derive(t)
        tags = tuple(tag for tag in self._late_tags if tag is not None)
        if tags:
            # the late records were asked for: they must be read (and reach a sink)
            t.required_side_outputs = tags
        return stream

    def __repr__(self) -> str:
        lo, hi = self.bounds()
        return f"IntervalJoined(between {lo} ms and {hi} ms)"


def _check_join_function(fn: Any) -> None:
    if isinstance(fn, type):
        raise ConfigurationError(
            f"process() needs a ProcessJoinFunction instance, got the class {fn.__name__}; "
            f"pass {fn.__name__}(...)"
        )
    from .functions import ProcessJoinFunction

    method = getattr(fn, "process_element", None)
    overridden = not (
        isinstance(fn, ProcessJoinFunction)
        and getattr(type(fn), "process_element", None) is ProcessJoinFunction.process_element
    )
    if not callable(method) or not overridden:
        raise ConfigurationError(
            f"process() of an interval join needs an lg.ProcessJoinFunction with "
            f"process_element(left, right, ctx) (subclass it and override the method), or "
            f"no argument for the vectorized join; {fn!r} has no process_element"
        )
