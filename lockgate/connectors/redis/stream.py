"""RedisStreamSource: records from Redis Streams, replayable by entry id.

Each stream is one split whose read position is the id of the last entry emitted;
checkpoints store it (M-T4) and a restored job resumes right after it (M-R1), so
with a transactional or idempotent sink the pipeline is exactly-once end to end
(M-X1). Reading uses non-blocking ``XRANGE (<last id> <end> COUNT n``, so a poll
never waits on Redis for new entries.

A malformed entry fails the job with its stream and id (``MalformedRecordError``),
unless ``on_error="dead_letter"``: then it goes to the side output
``lg.DEAD_LETTER`` as a dict with ``location``, ``stream``, ``id``, ``raw`` and
``error``. Nothing is dropped; either way the position moves past the entry.

``redis`` (redis-py) is needed only where a reader runs: the package imports it
lazily, so ``import lockgate`` works without it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from ...core.batch import RowBatch
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import (
    DECODE_ERRORS,
    DEFAULT_MAX_RECORD_BYTES,
    OVERSIZED_PREFIX_BYTES,
    InputStatus,
    ReaderOutput,
    Source,
    SourceReader,
    check_bool,
    check_int,
    check_max_record_bytes,
    check_on_error,
    check_positive,
    decode_error,
    oversized,
    report_malformed,
)

if TYPE_CHECKING:
    import redis

FORMATS = ("fields", "json")
URL_SCHEMES = ("redis://", "rediss://", "unix://")
_ENTRY_ID = re.compile(r"(0|\d+-\d+)")
#: seconds a Redis command may take before the reader gives up (a poll never waits
#: for new entries, so only a sick server or network gets near this)
SOCKET_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0

Entry = tuple[bytes, dict[bytes, bytes]]


def parse_entry_id(entry_id: str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` (or ``"0"``) as a tuple that orders like Redis orders ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@state_record("redis.split")
@dataclass
class RedisStreamSplit:
    """One stream. ``position`` is the id of the last entry emitted (exclusive: reading
    resumes after it); ``end`` is, for a bounded source, the id of the stream's last
    entry when the split was created (inclusive), None when unbounded."""

    split_id: str
    stream: str
    position: str
    end: str | None = None

    @property
    def finished(self) -> bool:
        """Bounded and nothing left up to ``end``."""
        return self.end is not None and parse_entry_id(self.position) >= parse_entry_id(self.end)


class RedisStreamSource(Source):
    """Reads the Redis Streams ``stream`` (one name or several) at ``url``.

    ``format``: ``"fields"`` gives each entry as a dict of its fields (names and values
    decoded as UTF-8 str); ``"json"`` gives ``json.loads`` of the entry's ``field``
    field (any JSON value). With ``id_field``, the entry id (a str) is added to each
    dict record under that name.

    ``start_id``: read the entries *after* this id (``"0-0"``, the default, reads the
    whole stream), like ``XREAD``. ``bounded=True``: each stream is read up to its last
    entry at the moment its split is created, then the split ends (an empty or missing
    stream ends at once); a restored reader keeps the same end; a split restored from an
    unbounded run's state (no end) gets its stream's last entry id of the restore, so
    the job catches up and ends (:meth:`restore_splits`). ``bounded=False``:
    never ends; with nothing new the reader asks to be polled again after
    ``poll_interval_ms``. A missing stream is read as empty (Redis creates a stream on
    its first ``XADD``).

    Guarantees: entries of one stream are emitted in id order, each once per run;
    checkpoints record the last id emitted per stream and a restore rewinds to it
    (M-X1, M-R1). Entries of different streams interleave in no defined order.
    One subtask reads each stream; with more subtasks than streams the others idle.

    Decoding never fails the job with ``on_error="dead_letter"``: every entry that
    cannot be decoded (bad UTF-8 or JSON, an integer of more than 4,300 digits, nesting
    deeper than Python's recursion limit, a missing ``field``) goes to the dead-letter
    output with its stream and id. An entry larger than ``max_record_bytes`` (default
    32 MiB; ``"fields"``: its names and values together, ``"json"``: the ``field``
    value) is not decoded; its dead letter keeps the first 1 KiB as ``raw``.
    """

    default_name = "redis streams"

    def __init__(
        self,
        url: str,
        stream: str | Sequence[str],
        *,
        format: str = "fields",
        field: str = "data",
        start_id: str = "0-0",
        bounded: bool = False,
        batch_size: int = 1000,
        on_error: str = "fail",
        id_field: str | None = None,
        poll_interval_ms: float = 50,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self.url = _check_url(url)
        self.streams = _check_streams(stream)
        if format not in FORMATS:
            raise ConfigurationError(
                f"RedisStreamSource format must be one of {', '.join(FORMATS)} ('fields': a "
                f"dict of the entry's fields; 'json': the JSON in field {field!r}), got {format!r}"
            )
        if not isinstance(field, str) or not field:
            raise ConfigurationError(
                f"RedisStreamSource field must be a non-empty str (the entry field holding the "
                f"JSON of format='json'), got {field!r}"
            )
        self.format = format
        self.field = field
        self.start_id = _check_start_id(start_id)
        self.bounded = check_bool("RedisStreamSource", "bounded", bounded)
        self.batch_size = check_int(
            "RedisStreamSource", "batch_size", batch_size, 1, "entries per XRANGE"
        )
        self.on_error = check_on_error("RedisStreamSource", on_error)
        if id_field is not None and (not isinstance(id_field, str) or not id_field):
            raise ConfigurationError(
                f"RedisStreamSource id_field must be None or a non-empty str (the record key "
                f"that receives the entry id), got {id_field!r}"
            )
        self.id_field = id_field
        self.max_record_bytes = check_max_record_bytes("RedisStreamSource", max_record_bytes)
        self.poll_interval_ms = check_positive(
            "RedisStreamSource",
            "poll_interval_ms",
            poll_interval_ms,
            "how long to wait before asking Redis again when a stream has nothing new",
        )

    def max_parallelism(self) -> int | None:
        """None: subtasks beyond the number of streams get no split and idle."""
        return None

    def create_splits(self, parallelism: int) -> list[RedisStreamSplit]:
        """One split per stream, in the order given, starting after ``start_id``; bounded,
        each ends at the stream's last entry id now (so entries added later are not read)."""
        if not self.bounded:
            return [RedisStreamSplit(s, s, self.start_id) for s in self.streams]
        client = connect(self.url)
        try:
            return [
                RedisStreamSplit(s, s, self.start_id, self._last_id(client, s))
                for s in self.streams
            ]
        finally:
            client.close()

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        """Restored splits reconciled with ``bounded`` (M-R3): bounded, a split without
        an end (an unbounded run's) ends at its stream's last entry id now, as a fresh
        start's split would, so the job catches up and ends; a split with an end (a
        bounded run's) keeps it. Unbounded: the splits as restored."""
        out = [replace(s) if isinstance(s, RedisStreamSplit) else s for s in splits]
        open_ended = [s for s in out if isinstance(s, RedisStreamSplit) and s.end is None]
        if self.bounded and open_ended:
            client = connect(self.url)
            try:
                for split in open_ended:
                    split.end = self._last_id(client, split.stream)
            finally:
                client.close()
        return out

    def _last_id(self, client: redis.Redis, stream: str) -> str:
        """The id of the last entry of ``stream`` (the start position when it is empty)."""
        try:
            last = cast("list[Entry]", client.xrevrange(stream, "+", "-", count=1))
        except Exception as e:
            raise _command_error(self.url, stream, "XREVRANGE", e) from e
        return last[0][0].decode("ascii") if last else self.start_id

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        """A reader with its own client, connected now (ConfigurationError if Redis does
        not answer)."""
        return _RedisStreamReader(self, connect(self.url))


def connect(url: str) -> redis.Redis:
    """A redis-py client for ``url`` (bytes responses), checked with PING."""
    import redis

    client = redis.Redis.from_url(
        url,
        decode_responses=False,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=SOCKET_TIMEOUT_S,
    )
    try:
        client.ping()
    except redis.RedisError as e:
        client.close()
        raise ConfigurationError(
            f"RedisStreamSource cannot reach Redis at {url!r}: {e}; start Redis there, or fix "
            "the url (redis://host:port/db, rediss:// for TLS, unix:///path/to/socket)"
        ) from e
    return client


def _command_error(url: str, stream: str, command: str, error: Exception) -> Exception:
    """``error`` of ``command`` on ``stream`` turned into an error with its context: a
    key of another type is a configuration error, a lost connection a ConnectionError
    (the job restarts from its last checkpoint)."""
    import redis

    if isinstance(error, redis.ResponseError) and "WRONGTYPE" in str(error):
        return ConfigurationError(
            f"RedisStreamSource: key {stream!r} at {url!r} is not a stream ({error}); "
            "name a Redis Stream (one written with XADD)"
        )
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError)):
        return ConnectionError(
            f"RedisStreamSource lost Redis at {url!r} during {command} on stream {stream!r}: "
            f"{error}; the job restarts from its last checkpoint if a restart strategy allows"
        )
    return RuntimeError(
        f"RedisStreamSource: {command} on stream {stream!r} at {url!r} failed: {error}"
    )


class _RedisStreamReader(SourceReader):
    """Reads its splits round-robin, one XRANGE per poll, so every stream progresses.

    ``poll`` never blocks on Redis waiting for entries: with nothing new it returns
    NOTHING_AVAILABLE and ``wait_hint_ms`` says when to try again."""

    def __init__(self, source: RedisStreamSource, client: redis.Redis) -> None:
        self.source = source
        self.client: redis.Redis | None = client
        self.splits: list[RedisStreamSplit] = []
        self._next = 0
        #: split id -> whether its last read caught up with the stream's end (source lag
        #: metric: 0 when every split caught up, else unknown: XRANGE does not count)
        self._caught_up: dict[str, bool] = {}

    def add_splits(self, splits: list[RedisStreamSplit]) -> None:
        """Take over ``splits`` (copies); reading resumes after each one's position."""
        self.splits.extend(replace(s) for s in splits if not s.finished)

    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit the entries of the next split (round-robin) that has some, as one batch.

        Each split is asked at most once per poll. A bounded split ends when a read
        returns fewer entries than ``batch_size`` or reaches its end id: entries added
        later get larger ids, so nothing up to the end can appear any more."""
        bounded = self.source.bounded
        for _ in range(len(self.splits)):
            i = self._next % len(self.splits)
            split = self.splits[i]
            entries = self._read(split)
            if entries:
                self._emit(split, entries, output)
            self._caught_up[split.split_id] = len(entries) < self.source.batch_size
            self.pending_records = (
                0 if all(self._caught_up.get(s.split_id) for s in self.splits) else None
            )
            if bounded and (len(entries) < self.source.batch_size or split.finished):
                self.splits.pop(i)
                output.split_finished(split.split_id)
                self._next = i
            else:
                self._next = i + 1
            if entries:
                break
        else:
            if bounded and not self.splits:
                return InputStatus.END_OF_INPUT
            return InputStatus.NOTHING_AVAILABLE
        if bounded and not self.splits:
            return InputStatus.END_OF_INPUT
        return InputStatus.MORE_AVAILABLE

    def _read(self, split: RedisStreamSplit) -> list[Entry]:
        assert self.client is not None, "poll after close"
        try:
            entries = cast(
                "list[Entry]",
                self.client.xrange(
                    split.stream,
                    f"({split.position}",
                    split.end or "+",
                    count=self.source.batch_size,
                ),
            )
        except Exception as e:
            raise _command_error(self.source.url, split.stream, "XRANGE", e) from e
        return entries

    def _emit(self, split: RedisStreamSplit, entries: list[Entry], output: ReaderOutput) -> None:
        """Emit the records of ``entries``; the position moves past every entry, malformed
        ones included (they went to the dead-letter output). If a malformed entry fails
        the read, nothing is emitted and the position stays."""
        records: list[Any] = []
        position = split.position
        for raw_id, fields in entries:
            position = raw_id.decode("ascii")
            record = self._record(split.stream, position, fields, output)
            if record is not _MALFORMED:
                records.append(record)
        split.position = position
        if records:
            output.emit_from_split(split.split_id, RowBatch(records))

    def _record(
        self, stream: str, entry_id: str, fields: dict[bytes, bytes], output: ReaderOutput
    ) -> Any:
        """The record of one entry, or ``_MALFORMED`` after reporting it."""
        source = self.source
        limit = source.max_record_bytes
        size = _entry_size(fields, source.format, source.field)
        if size > limit:
            raw, error = oversized(size, limit, _entry_prefix(fields, source.format, source.field))
            self._malformed(stream, entry_id, raw, error, output)
            return _MALFORMED
        try:
            if source.format == "fields":
                record: Any = {k.decode("utf-8"): v.decode("utf-8") for k, v in fields.items()}
            else:
                record = _json_field(fields, source.field)
        except _Malformed as e:
            self._malformed(stream, entry_id, e.raw, str(e), output)
            return _MALFORMED
        except UnicodeDecodeError as e:
            self._malformed(stream, entry_id, _text_fields(fields), f"not valid UTF-8: {e}", output)
            return _MALFORMED
        if source.id_field is not None and isinstance(record, dict):
            record[source.id_field] = entry_id
        return record

    def _malformed(
        self, stream: str, entry_id: str, raw: Any, error: str, output: ReaderOutput
    ) -> None:
        report_malformed(
            self.source.on_error,
            output,
            what="redis stream entry",
            location=f"redis stream {stream!r} id {entry_id}",
            raw=raw,
            error=error,
            stream=stream,
            id=entry_id,
        )

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: ``poll_interval_ms``."""
        return self.source.poll_interval_ms

    def snapshot_positions(self) -> list[RedisStreamSplit]:
        """Copies of the unfinished splits with the last id emitted of each."""
        return [replace(s) for s in self.splits]

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


class _Malformed(Exception):
    def __init__(self, message: str, raw: Any) -> None:
        super().__init__(message)
        self.raw = raw


_MALFORMED = object()


def _text_fields(fields: dict[bytes, bytes]) -> dict[str, str]:
    """The fields as text, undecodable bytes replaced: the ``raw`` of a dead letter."""
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in fields.items()}


def _json_field(fields: dict[bytes, bytes], field: str) -> Any:
    value = fields.get(field.encode("utf-8"))
    if value is None:
        raise _Malformed(
            f"the entry has no field {field!r} (its fields: "
            f"{sorted(k.decode('utf-8', 'replace') for k in fields)})",
            _text_fields(fields),
        )
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Malformed(
            f"field {field!r} is not valid UTF-8: {e}", value.decode("utf-8", "replace")
        ) from e
    try:
        return json.loads(text)
    except DECODE_ERRORS as e:
        raise _Malformed(
            f"field {field!r} is not valid {decode_error('JSON', e).removeprefix('invalid ')}", text
        ) from e


def _entry_size(fields: dict[bytes, bytes], format: str, field: str) -> int:
    """The size in bytes of what an entry's record is decoded from: ``"json"``, the
    ``field`` value; ``"fields"``, every name and value."""
    if format == "json":
        return len(fields.get(field.encode("utf-8"), b""))
    return sum(len(k) + len(v) for k, v in fields.items())


def _entry_prefix(fields: dict[bytes, bytes], format: str, field: str) -> bytes:
    """The first :data:`OVERSIZED_PREFIX_BYTES` bytes of what :func:`_entry_size`
    measures (``"fields"``: ``name=value`` pairs separated by spaces)."""
    if format == "json":
        return fields.get(field.encode("utf-8"), b"")[:OVERSIZED_PREFIX_BYTES]
    prefix = bytearray()
    for k, v in fields.items():
        if len(prefix) >= OVERSIZED_PREFIX_BYTES:
            break
        prefix += k[:OVERSIZED_PREFIX_BYTES] + b"=" + v[:OVERSIZED_PREFIX_BYTES] + b" "
    return bytes(prefix[:OVERSIZED_PREFIX_BYTES])


def _check_url(url: object) -> str:
    if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
        raise ConfigurationError(
            f"RedisStreamSource url must start with {', '.join(URL_SCHEMES)}, got {url!r}; "
            "e.g. 'redis://localhost:6379/0'"
        )
    return url


def _check_streams(stream: object) -> tuple[str, ...]:
    names = (stream,) if isinstance(stream, str) else stream
    if not isinstance(names, Sequence) or isinstance(names, (bytes, bytearray)):
        raise ConfigurationError(
            f"RedisStreamSource stream must be a stream name or a sequence of names, got {stream!r}"
        )
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigurationError(
            f"RedisStreamSource stream names must be non-empty strs (at least one), got {stream!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(
            f"RedisStreamSource stream names must be distinct (each would be read once per "
            f"mention), got {list(names)!r}"
        )
    return tuple(names)


def _check_start_id(start_id: object) -> str:
    if not isinstance(start_id, str) or not _ENTRY_ID.fullmatch(start_id):
        raise ConfigurationError(
            f"RedisStreamSource start_id must be a stream entry id '<ms>-<seq>' (e.g. "
            f"'1700000000000-0') or '0'; reading starts after it; got {start_id!r}"
        )
    return "0-0" if start_id == "0" else start_id
