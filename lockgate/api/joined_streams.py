"""Window join and co-group of two streams, as Flink's DataStream API has them.

::

    pairs = (orders.join(payments)
             .where("order_id").equal_to("order_id")
             .window(lg.TumblingEventTimeWindows.of(timedelta(seconds=10)))
             .allowed_lateness(timedelta(seconds=5))      # optional
             .apply())                                    # built-in, vectorized

    groups = (orders.co_group(payments)
              .where("order_id").equal_to("order_id")
              .window(lg.EventTimeSessionWindows.with_gap(timedelta(minutes=1)))
              .apply(MyCoGroup()))                        # an lg.CoGroupFunction

``apply()`` without a function is the built-in join: Arrow batches, pairs found and
gathered vectorized per fired batch of windows; the output records have the left's
columns, then the right's (a key column with the same name on both sides once, other
names both sides have with ``suffixes``, pandas ``merge`` style). ``apply(fn)`` with
an ``lg.JoinFunction`` (``join(left, right)`` -> one output), an
``lg.FlatJoinFunction`` (``join(left, right)`` yields outputs) or a plain
``fn(left, right)`` runs per pair on Python records. Co-group takes an
``lg.CoGroupFunction`` (``co_group(lefts, rights)`` yields outputs, once per key and
window, one list possibly empty).

Guarantees: both inputs share one window operator (tagged by side, unioned, keyed by
the key), so windows - including merged sessions, which merge over both sides'
records - fire, take late records, checkpoint, restore and rescale exactly as
``key_by(...).window(...)`` does (:mod:`lockgate.runtime.operators.window.operator`); every
output's event timestamp is its window's ``end - 1``. A window firing again within
its allowed lateness emits the join of its whole updated contents (as Flink). Late
records beyond the lateness are dropped and counted (``side_out["late records
dropped"]`` of the window operator). See :mod:`lockgate.runtime.operators.join.window_join`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

from ..core.durations import Duration
from ..errors import ConfigurationError
from ..runtime.operators.join.window_join import (
    ARROW_JOIN,
    CO_GROUP,
    FLAT_JOIN,
    FUNCTION_JOIN,
    KEY_FIELD,
    LEFT,
    RIGHT,
    JoinContents,
    TagBatch,
    TagRecord,
    key_fields,
)
from ..windowing.assigners import WindowAssigner
from .functions import CoGroupFunction, FlatJoinFunction, JoinFunction
from .stream_protocols import DS, StreamLike
from .windowed_stream import WindowedStream, check_assigner, lateness_ms

Key = str | Sequence[str] | Callable[[Any], Any]


def _check_key(key: Any, what: str) -> Key:
    if isinstance(key, type):
        raise ConfigurationError(
            f"{what}() needs a column name, a list of column names or a key function, got "
            f"the class {key.__name__}; pass an instance or a function"
        )
    if isinstance(key, str) and key:
        return key
    if isinstance(key, (list, tuple)) and key and all(isinstance(k, str) and k for k in key):
        return tuple(key)
    if callable(key) and not isinstance(key, (str, list, tuple)):
        return key
    raise ConfigurationError(
        f"{what}() needs a column name, a list of column names or a key function "
        f"(e.g. {what}('user_id')), got {key!r}"
    )


def _width(key: Key) -> int | None:
    """The number of key columns (None: a key function)."""
    if isinstance(key, str):
        return 1
    if isinstance(key, tuple):
        return len(key)
    return None


class JoinedStreams(Generic[DS]):
    """``a.join(b)``: finish with ``.where(ka).equal_to(kb).window(assigner)
    [.allowed_lateness(d)].apply(fn=None)`` (see the module docstring)."""

    _operation = "join"

    def __init__(self, left: StreamLike[DS], right: StreamLike[DS]) -> None:
        """``left`` and ``right``: streams of one environment (checked by
        ``DataStream.join`` / ``co_group``)."""
        self._left = left
        self._right = right
        self._left_key: Key | None = None
        self._right_key: Key | None = None
        self._assigner: WindowAssigner | None = None
        self._lateness = 0

    # -- builder --------------------------------------------------------------------
    def where(self, key: Any) -> JoinedStreams[DS]:
        """The left input's key: a column name, a list of column names or a function
        of the record."""
        self._left_key = _check_key(key, "where")
        return self

    def equal_to(self, key: Any) -> JoinedStreams[DS]:
        """The right input's key (as ``where``; the same number of columns)."""
        if self._left_key is None:
            raise ConfigurationError(
                f"{self._operation}(...).equal_to(...) comes after where(...): call "
                f".where(left_key).equal_to(right_key)"
            )
        right = _check_key(key, "equal_to")
        lw, rw = _width(self._left_key), _width(right)
        if lw is not None and rw is not None and lw != rw:
            raise ConfigurationError(
                f"where(...) has {lw} key column(s) but equal_to(...) has {rw}; give both "
                "sides the same number of key columns"
            )
        self._right_key = right
        return self

    def window(self, assigner: Any) -> JoinedStreams[DS]:
        """The windows both inputs are cut into, e.g.
        ``lg.TumblingEventTimeWindows.of(timedelta(seconds=10))``."""
        if self._right_key is None:
            raise ConfigurationError(
                f"{self._operation}(...).window(...) comes after the keys: call "
                ".where(left_key).equal_to(right_key).window(assigner)"
            )
        check_assigner(assigner)
        self._assigner = assigner
        return self

    def allowed_lateness(self, lateness: Duration) -> JoinedStreams[DS]:
        """Keep each window until the watermark passes ``end - 1 + lateness``; a record
        arriving meanwhile makes the window fire again (event-time windows only)."""
        if self._assigner is None:
            raise ConfigurationError(
                "allowed_lateness(...) comes after window(...): call "
                ".window(assigner).allowed_lateness(d)"
            )
        self._lateness = lateness_ms(lateness, self._assigner)
        return self

    # -- finish ---------------------------------------------------------------------
    def apply(
        self,
        fn: Any = None,
        *,
        suffixes: tuple[str, str] = ("_left", "_right"),
        name: str | None = None,
    ) -> DS:
        """The joined stream: ``fn=None`` is the built-in vectorized join (column keys
        only); ``fn`` an ``lg.JoinFunction``, ``lg.FlatJoinFunction`` or ``fn(left,
        right)`` runs per pair."""
        self._check_ready()
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
        if fn is None:
            if _width(self._left_key) is None or _width(self._right_key) is None:  # type: ignore[arg-type]
                raise ConfigurationError(
                    "the built-in join (apply() without a function) needs column keys: "
                    "use where('col').equal_to('col') with column names (add a key column "
                    "upstream with map_batches), or pass a join function, e.g. "
                    "apply(lambda left, right: {**left, **right})"
                )
            return self._build_arrow(suffixes, name)
        if isinstance(fn, type):
            raise ConfigurationError(
                f"apply() needs a JoinFunction instance, got the class {fn.__name__}; "
                f"pass {fn.__name__}()"
            )
        if isinstance(fn, CoGroupFunction):
            raise ConfigurationError(
                "join(...).apply() got a CoGroupFunction; use a.co_group(b) for it, or "
                "pass an lg.JoinFunction / lg.FlatJoinFunction"
            )
        if not isinstance(fn, (JoinFunction, FlatJoinFunction)) and not callable(fn):
            raise ConfigurationError(
                "apply() needs an lg.JoinFunction, an lg.FlatJoinFunction or a function "
                f"fn(left, right), got {fn!r}"
            )
        mode = FLAT_JOIN if isinstance(fn, FlatJoinFunction) else FUNCTION_JOIN
        return self._build_rows(JoinContents(mode, fn), name or "Window(join)", fn)

    def _check_ready(self) -> None:
        if self._left_key is None or self._right_key is None or self._assigner is None:
            raise ConfigurationError(
                f"{self._operation}(...) needs its keys and windows before apply(): call "
                f"a.{self._operation}(b).where(left_key).equal_to(right_key)"
                ".window(assigner).apply(...)"
            )

    # -- building -------------------------------------------------------------------
    def _windowed(
        self, left: StreamLike[DS], right: StreamLike[DS], key: Any
    ) -> WindowedStream[DS]:
        assert self._assigner is not None
        windowed = WindowedStream(left.union(right).key_by(key), self._assigner)
        if self._lateness:
            windowed.allowed_lateness(self._lateness)
        return windowed

    def _build_arrow(self, suffixes: tuple[str, str], name: str | None) -> DS:
        lk, rk = self._left_key, self._right_key
        assert isinstance(lk, (str, tuple)) and isinstance(rk, (str, tuple))
        lcols = (lk,) if isinstance(lk, str) else lk
        rcols = (rk,) if isinstance(rk, str) else rk
        left = self._left.map_batches(TagBatch(LEFT, lcols), name="WindowJoin(tag left)")
        right = self._right.map_batches(TagBatch(RIGHT, rcols), name="WindowJoin(tag right)")
        contents = JoinContents(ARROW_JOIN, None, lcols, rcols, suffixes)
        windowed = self._windowed(left, right, list(key_fields(len(lcols))))
        return _owning_tags(windowed._build(contents, name or "Window(join)", {}), left, right)

    def _build_rows(self, contents: JoinContents, name: str, fn: Any) -> DS:
        method = "co_group" if contents.mode == CO_GROUP else "join"
        left = self._left.map(TagRecord(LEFT, self._left_key), name="WindowJoin(tag left)")  # type: ignore[arg-type]
        right = self._right.map(TagRecord(RIGHT, self._right_key), name="WindowJoin(tag right)")  # type: ignore[arg-type]
        windowed = self._windowed(left, right, KEY_FIELD)
        return _owning_tags(
            windowed._build(contents, name, {f"function:{method}": fn}), left, right
        )


def _owning_tags(joined: DS, left: StreamLike[DS], right: StreamLike[DS]) -> DS:
    """The side-tagging steps take their uids from the join's (``"<uid>.tag-left"``,
    ``"<uid>.tag-right"``) once the user gives it one, so a job whose joins have uids
    has no generated uid to warn about (M-S2); the steps are stateless."""
    left.transformation.uid_of = (joined.transformation, "tag-left")
    right.transformation.uid_of = (joined.transformation, "tag-right")
    return joined


class CoGroupedStreams(JoinedStreams[DS]):
    """``a.co_group(b)``: finish with ``.where(ka).equal_to(kb).window(assigner)
    [.allowed_lateness(d)].apply(fn)`` with an ``lg.CoGroupFunction``."""

    _operation = "co_group"

    def apply(  # type: ignore[override]
        self, fn: Any = None, *, name: str | None = None
    ) -> DS:
        """The co-grouped stream: ``fn.co_group(lefts, rights)`` (or ``fn(lefts,
        rights)``) yields outputs, once per key and window."""
        self._check_ready()
        if fn is None:
            raise ConfigurationError(
                "co_group(...).apply(fn) needs an lg.CoGroupFunction (co_group(lefts, "
                "rights) yielding outputs); for pairs use a.join(b)"
            )
        if isinstance(fn, type):
            raise ConfigurationError(
                f"apply() needs a CoGroupFunction instance, got the class {fn.__name__}; "
                f"pass {fn.__name__}()"
            )
        if isinstance(fn, (JoinFunction, FlatJoinFunction)):
            raise ConfigurationError(
                "co_group(...).apply() got a JoinFunction; use a.join(b) for it, or pass "
                "an lg.CoGroupFunction"
            )
        if not isinstance(fn, CoGroupFunction) and not callable(fn):
            raise ConfigurationError(
                f"apply() needs an lg.CoGroupFunction or a function fn(lefts, rights), got {fn!r}"
            )
        return self._build_rows(JoinContents(CO_GROUP, fn), name or "Window(co_group)", fn)
