"""State time-to-live (TTL): configuration, the stored wrapper, and the expiry rules.

A descriptor with ``descriptor.enable_time_to_live(lg.StateTtlConfig(ttl))`` makes
its keyed state forget values ``ttl`` after they were last written (or read, with
``update_type="on_read_and_write"``). The semantics are Flink's:

* **Granularity.** TTL is kept per value for value, reducing and aggregating
  state, **per element** for list state and **per entry** (user key) for map
  state: each is stored as a :class:`TtlValue` ``(value, timestamp)``, where
  ``timestamp`` is the time of its last write (or read, per ``update_type``).
  This wrapping is what the backends keep in their tables and what canonical
  snapshots and savepoints hold; :func:`strip_ttl` removes it.
* **Expiry.** An entry stamped ``t`` is expired once ``now >= t + ttl``.
* **Visibility.** ``never_return_expired`` (default): an expired entry is never
  returned, even if it is still stored. ``return_expired_if_not_cleaned_up``: an
  expired entry still stored is returned by the read that finds it (and that
  read deletes it).
* **Cleanup.** On access: a read that finds an expired entry deletes it. On
  snapshot (``cleanup_on_snapshot=True``, default): ``materialize()`` leaves out
  entries expired at the time the synchronous ``snapshot()`` ran; the live state
  is not changed by it. There is no background cleanup: an entry never read
  again stays in the live state (not in snapshots) until its key is accessed.

How a backend supplies time (a :class:`TtlTimeSource`)
------------------------------------------------------
A keyed state backend offering TTL has three attributes, read at every access:

* ``clock`` (a :class:`~lockgate.core.clock.Clock`): processing-time TTL stamps
  and measures with ``clock.time_ms()``;
* ``current_watermark: int`` (starts at :data:`MIN_WATERMARK`; the keyed operator
  sets it as watermarks arrive): event-time TTL measures expiry against it;
* ``current_timestamp: int | None`` (the event time of the record being
  processed, None when unknown or inside a timer without one): event-time TTL
  stamps a write with it, or with ``current_watermark`` when it is None.

:func:`current_time` and :func:`stamp_time` turn these into the ``now`` and the
stamp of a config; :func:`is_expired` and :func:`drop_expired` apply the rule,
so every backend shares one implementation. A snapshot captures ``now`` per
state (:func:`current_time`) in its synchronous part and passes it to
:func:`drop_expired` in its asynchronous part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from ..core.clock import Clock
from ..core.durations import Duration, to_millis
from ..errors import ConfigurationError

#: The watermark before any has arrived (the same value as the runtime's).
MIN_WATERMARK = -(2**63)

ON_CREATE_AND_WRITE = "on_create_and_write"
ON_READ_AND_WRITE = "on_read_and_write"
NEVER_RETURN_EXPIRED = "never_return_expired"
RETURN_EXPIRED_IF_NOT_CLEANED_UP = "return_expired_if_not_cleaned_up"
PROCESSING_TIME = "processing_time"
EVENT_TIME = "event_time"

_UPDATE_TYPES = (ON_CREATE_AND_WRITE, ON_READ_AND_WRITE)
_VISIBILITIES = (NEVER_RETURN_EXPIRED, RETURN_EXPIRED_IF_NOT_CLEANED_UP)
_TIME_CHARACTERISTICS = (PROCESSING_TIME, EVENT_TIME)


class TtlValue(NamedTuple):
    """A stored value with the time (ms) of its last write, or read when reads
    update it. Picklable; what TTL state keeps per value, list element or map entry."""

    value: Any
    timestamp: int


class TtlTimeSource(Protocol):
    """Where TTL reads time: the attributes a keyed state backend offers (see the
    module docstring)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def current_watermark(self) -> int: ...

    @property
    def current_timestamp(self) -> int | None: ...


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        options = ", ".join(repr(a) for a in allowed)
        raise ConfigurationError(f"StateTtlConfig {what} must be one of {options}, got {value!r}")
    return value


@dataclass(frozen=True)
class StateTtlConfig:
    """Time-to-live settings for keyed state; give them to
    ``descriptor.enable_time_to_live(config)``.

    ``ttl``: a ``timedelta`` or an int of milliseconds, more than zero.
    ``update_type``: ``"on_create_and_write"`` (default; reads do not extend the
    lifetime) or ``"on_read_and_write"``. ``visibility``: ``"never_return_expired"``
    (default) or ``"return_expired_if_not_cleaned_up"``. ``time_characteristic``:
    ``"processing_time"`` (default; the backend's clock) or ``"event_time"`` (expiry
    measured against the watermark). ``cleanup_on_snapshot``: leave expired entries
    out of snapshots (default True).

    PyFlink's spellings work too: ``StateTtlConfig.UpdateType.OnReadAndWrite``,
    ``StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp``,
    ``StateTtlConfig.TtlTimeCharacteristic.EventTime`` and the builder
    ``StateTtlConfig.new_builder(ttl)...build()``. Immutable; equal configs compare equal.
    """

    class UpdateType:
        OnCreateAndWrite = ON_CREATE_AND_WRITE
        OnReadAndWrite = ON_READ_AND_WRITE

    class StateVisibility:
        NeverReturnExpired = NEVER_RETURN_EXPIRED
        ReturnExpiredIfNotCleanedUp = RETURN_EXPIRED_IF_NOT_CLEANED_UP

    class TtlTimeCharacteristic:
        ProcessingTime = PROCESSING_TIME
        EventTime = EVENT_TIME

    ttl: Duration = field(compare=False)
    update_type: str = field(default=ON_CREATE_AND_WRITE, kw_only=True)
    visibility: str = field(default=NEVER_RETURN_EXPIRED, kw_only=True)
    time_characteristic: str = field(default=PROCESSING_TIME, kw_only=True)
    cleanup_on_snapshot: bool = field(default=True, kw_only=True)
    #: ``ttl`` in milliseconds
    ttl_ms: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "ttl_ms", to_millis(self.ttl, "StateTtlConfig ttl", allow_zero=False)
        )
        _choice(self.update_type, _UPDATE_TYPES, "update_type")
        _choice(self.visibility, _VISIBILITIES, "visibility")
        _choice(self.time_characteristic, _TIME_CHARACTERISTICS, "time_characteristic")
        if not isinstance(self.cleanup_on_snapshot, bool):
            raise ConfigurationError(
                "StateTtlConfig cleanup_on_snapshot must be True or False, "
                f"got {self.cleanup_on_snapshot!r}"
            )

    @property
    def updates_on_read(self) -> bool:
        """Whether a read restarts an entry's lifetime."""
        return self.update_type == ON_READ_AND_WRITE

    @property
    def returns_expired(self) -> bool:
        """Whether an expired entry still stored may be returned (once)."""
        return self.visibility == RETURN_EXPIRED_IF_NOT_CLEANED_UP

    @property
    def event_time(self) -> bool:
        """Whether expiry is measured against the watermark (else the processing-time clock)."""
        return self.time_characteristic == EVENT_TIME

    @staticmethod
    def new_builder(ttl: Duration) -> StateTtlConfigBuilder:
        """A PyFlink-style builder: ``StateTtlConfig.new_builder(timedelta(hours=1))
        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite).build()``."""
        return StateTtlConfigBuilder(ttl)


class StateTtlConfigBuilder:
    """Builds a :class:`StateTtlConfig` step by step; each setter checks its value
    and returns the builder."""

    def __init__(self, ttl: Duration) -> None:
        to_millis(ttl, "StateTtlConfig ttl", allow_zero=False)
        self._ttl = ttl
        self._update_type = ON_CREATE_AND_WRITE
        self._visibility = NEVER_RETURN_EXPIRED
        self._time_characteristic = PROCESSING_TIME
        self._cleanup_on_snapshot = True

    def set_ttl(self, ttl: Duration) -> StateTtlConfigBuilder:
        to_millis(ttl, "StateTtlConfig ttl", allow_zero=False)
        self._ttl = ttl
        return self

    def set_update_type(self, update_type: str) -> StateTtlConfigBuilder:
        self._update_type = _choice(update_type, _UPDATE_TYPES, "update_type")
        return self

    def update_ttl_on_create_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(ON_CREATE_AND_WRITE)

    def update_ttl_on_read_and_write(self) -> StateTtlConfigBuilder:
        return self.set_update_type(ON_READ_AND_WRITE)

    def set_state_visibility(self, visibility: str) -> StateTtlConfigBuilder:
        self._visibility = _choice(visibility, _VISIBILITIES, "visibility")
        return self

    def never_return_expired(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(NEVER_RETURN_EXPIRED)

    def return_expired_if_not_cleaned_up(self) -> StateTtlConfigBuilder:
        return self.set_state_visibility(RETURN_EXPIRED_IF_NOT_CLEANED_UP)

    def set_ttl_time_characteristic(self, time_characteristic: str) -> StateTtlConfigBuilder:
        self._time_characteristic = _choice(
            time_characteristic, _TIME_CHARACTERISTICS, "time_characteristic"
        )
        return self

    def use_processing_time(self) -> StateTtlConfigBuilder:
        return self.set_ttl_time_characteristic(PROCESSING_TIME)

    def use_event_time(self) -> StateTtlConfigBuilder:
        return self.set_ttl_time_characteristic(EVENT_TIME)

    def cleanup_full_snapshot(self) -> StateTtlConfigBuilder:
        """Leave expired entries out of snapshots (the default)."""
        self._cleanup_on_snapshot = True
        return self

    def disable_cleanup_on_snapshot(self) -> StateTtlConfigBuilder:
        """Keep expired entries that are still stored in snapshots."""
        self._cleanup_on_snapshot = False
        return self

    def build(self) -> StateTtlConfig:
        return StateTtlConfig(
            self._ttl,
            update_type=self._update_type,
            visibility=self._visibility,
            time_characteristic=self._time_characteristic,
            cleanup_on_snapshot=self._cleanup_on_snapshot,
        )


def check_ttl_config(config: Any, what: str) -> StateTtlConfig:
    """``config`` if it is a :class:`StateTtlConfig`, else a ConfigurationError naming ``what``."""
    if not isinstance(config, StateTtlConfig):
        raise ConfigurationError(
            f"{what} needs an lg.StateTtlConfig, e.g. "
            f"lg.StateTtlConfig(timedelta(hours=1)), got {config!r}"
        )
    return config


# -- time --------------------------------------------------------------------------------------


def current_time(config: StateTtlConfig, source: TtlTimeSource) -> int:
    """The ``now`` expiry is measured at: the watermark in event time, else the clock."""
    if config.time_characteristic == EVENT_TIME:
        return source.current_watermark
    return source.clock.time_ms()


def snapshot_expiry(
    names: Iterable[str], configs: Mapping[str, StateTtlConfig | None], source: TtlTimeSource
) -> dict[str, tuple[StateTtlConfig, int]]:
    """For the states among ``names`` cleaned up while snapshotting: their TTL config
    and the ``now`` their expiry is measured at, taken in the synchronous part."""
    expiry: dict[str, tuple[StateTtlConfig, int]] = {}
    for name in names:
        ttl = configs.get(name)
        if ttl is not None and ttl.cleanup_on_snapshot:
            expiry[name] = (ttl, current_time(ttl, source))
    return expiry


def stamp_time(config: StateTtlConfig, source: TtlTimeSource) -> int:
    """The timestamp a write (or a read that updates the lifetime) gives an entry: in
    event time the record's timestamp, or the watermark when there is none; else the clock."""
    if config.time_characteristic == EVENT_TIME:
        ts = source.current_timestamp
        return source.current_watermark if ts is None else ts
    return source.clock.time_ms()


def is_expired(config: StateTtlConfig, entry: TtlValue, now: int) -> bool:
    """Whether ``entry`` is expired at ``now`` (``now >= entry.timestamp + ttl``)."""
    return now >= entry.timestamp + config.ttl_ms


# -- the stored form ----------------------------------------------------------------------------


def _expired(config: StateTtlConfig, entry: Any, now: int) -> bool:
    # An entry without a wrapper (state written before TTL was enabled) never expires.
    return type(entry) is TtlValue and now >= entry.timestamp + config.ttl_ms


def drop_expired(kind: str, stored: Any, config: StateTtlConfig, now: int) -> Any:
    """``stored`` (the stored form of one key of ``kind`` state) without what is expired
    at ``now``: None when nothing is left. Never changes ``stored``; returns it itself
    when nothing expired, else a new list (list state) or dict (map state)."""
    if kind == "list":
        live = [e for e in stored if not _expired(config, e, now)]
        if len(live) == len(stored):
            return stored
        return live or None
    if kind == "map":
        expired = [k for k, e in stored.items() if _expired(config, e, now)]
        if not expired:
            return stored
        out = {k: e for k, e in stored.items() if not _expired(config, e, now)}
        return out or None
    return None if _expired(config, stored, now) else stored


def strip_ttl(kind: str, stored: Any) -> Any:
    """The user-visible value of ``stored`` (the stored form of one key of ``kind``
    state, as snapshots hold it) with every :class:`TtlValue` wrapper removed: the
    value (value, reducing, aggregating state), the list of elements (list state) or
    the ``user key -> value`` dict (map state). Unwrapped input is returned unchanged
    (state without TTL); value objects are shared with ``stored``."""
    if kind == "list":
        if any(type(e) is TtlValue for e in stored):
            return [e.value if type(e) is TtlValue else e for e in stored]
        return stored
    if kind == "map":
        if any(type(e) is TtlValue for e in stored.values()):
            return {k: e.value if type(e) is TtlValue else e for k, e in stored.items()}
        return stored
    if kind in ("value", "reducing", "aggregating"):
        return stored.value if type(stored) is TtlValue else stored
    raise ConfigurationError(
        f"strip_ttl: unknown state kind {kind!r}; expected 'value', 'list', 'map', "
        "'reducing' or 'aggregating'"
    )


def has_ttl_wrapper(kind: str, stored: Any) -> bool:
    """Whether ``stored`` (one key's stored form) was written by TTL state: judged
    from its first element (list) or entry (map), or the value itself."""
    if kind == "list":
        return bool(stored) and type(stored[0]) is TtlValue
    if kind == "map":
        if isinstance(stored, Mapping) and stored:
            return type(next(iter(stored.values()))) is TtlValue
        return False
    return type(stored) is TtlValue


__all__ = [
    "EVENT_TIME",
    "MIN_WATERMARK",
    "NEVER_RETURN_EXPIRED",
    "ON_CREATE_AND_WRITE",
    "ON_READ_AND_WRITE",
    "PROCESSING_TIME",
    "RETURN_EXPIRED_IF_NOT_CLEANED_UP",
    "StateTtlConfig",
    "StateTtlConfigBuilder",
    "TtlTimeSource",
    "TtlValue",
    "check_ttl_config",
    "current_time",
    "drop_expired",
    "has_ttl_wrapper",
    "is_expired",
    "strip_ttl",
]
