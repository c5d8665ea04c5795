"""NatsJetStreamSource: records from a NATS JetStream stream, replayable by sequence.

Each subject filter is one split whose read position is the stream sequence of the
last message emitted; checkpoints store it (M-T4) and a restored job resumes at the
next sequence (M-R1), so with a transactional or idempotent sink the pipeline is
exactly-once end to end (M-X1). The messages come from an ephemeral pull consumer
(deliver policy "by start sequence", ack policy none, the split's filter subject)
that the reader creates whenever a split is added, so JetStream keeps no state of
ours: the checkpoint is the only record of how far the job has read.

A malformed message fails the job with its stream, sequence and subject
(``MalformedRecordError``), unless ``on_error="dead_letter"``: then it goes to the
side output ``lg.DEAD_LETTER`` as a dict with ``location``, ``stream``,
``sequence``, ``subject``, ``raw`` and ``error``. Nothing is dropped; either way the
position moves past the message.

nats-py is asyncio-only: each reader runs a private event loop in a daemon thread
named ``"lockgate nats <stream>"`` and ``close`` stops and joins it. ``nats-py`` is
imported lazily, so ``import lockgate`` works without it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ...core.batch import RowBatch
from ...core.state_records import state_record
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import (
    DECODE_ERRORS,
    DEFAULT_MAX_RECORD_BYTES,
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
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

FORMATS = ("json", "text", "bytes")
URL_SCHEMES = ("nats://", "tls://")
#: the JetStream API subject prefix (the default domain)
API_PREFIX = "$JS.API"
CONNECT_TIMEOUT_S = 5.0
#: seconds a control request (connect, stream or consumer info, create, delete) may take
CONTROL_TIMEOUT_S = 10.0
#: seconds a consumer nobody pulls from lives on the server (a crashed reader's consumer
#: goes away by itself; a live reader that was not polled for longer recreates it)
CONSUMER_INACTIVE_S = 300.0
#: status codes that end the answer to a pull request: no messages (now), request done
_END_OF_ANSWER = ("404", "408")
#: status codes saying the consumer is gone (deleted, no responders)
_CONSUMER_GONE = ("409", "503")
_STREAM_NAME_FORBIDDEN = (" ", "\t", "\r", "\n", ".", "*", ">", "/", "\\")

T = TypeVar("T")
log = logging.getLogger(__name__)


@state_record("nats.split")
@dataclass
class NatsJetStreamSplit:
    """One subject filter of the stream (None: every subject). ``position`` is the
    stream sequence of the last message emitted (0: none); reading resumes at
    ``position + 1``. ``end`` is, for a bounded source, the stream's last sequence
    when the split was created (inclusive), None when unbounded."""

    split_id: str
    subject: str | None
    position: int
    end: int | None = None

    @property
    def finished(self) -> bool:
        """Bounded and everything up to ``end`` emitted."""
        return self.end is not None and self.position >= self.end


class NatsJetStreamSource(Source):
    """Reads JetStream stream ``stream`` at ``url``, one split per subject filter.

    ``subject``: a subject (wildcards allowed) or several, each read as its own split
    by its own subtask; None reads the whole stream as one split. ``format``:
    ``"json"`` gives ``json.loads`` of each message's data; ``"text"`` gives
    ``{"subject", "sequence", "data"}`` with the data decoded as UTF-8; ``"bytes"``
    the same with the data as bytes. ``start_sequence``: the first stream sequence
    to read (1: the whole stream).

    ``bounded=True``: each split is read up to the stream's last sequence at the
    moment the split is created, then ends (an empty stream or subject ends at
    once); a restored reader keeps the same end; a split restored from an unbounded
    run's state (no end) gets the stream's last sequence of the restore, so the job
    catches up and ends (:meth:`restore_splits`). ``bounded=False``: never ends; with
    nothing new a poll returns within about ``poll_timeout_ms`` and the reader asks
    to be polled again after ``poll_timeout_ms``.

    Guarantees: the messages of one split are emitted in sequence order, each once
    per run; checkpoints record the last sequence emitted per split and a restore
    rewinds to it (M-X1, M-R1). Splits interleave in no defined order; subject
    filters that overlap read the shared messages once per split. A lost connection
    fails the job (which restarts from its last checkpoint) rather than reconnect:
    with ack policy none, messages in flight during a reconnect could be lost.

    Decoding never fails the job with ``on_error="dead_letter"``: every message that
    cannot be decoded (bad UTF-8 or JSON, an integer of more than 4,300 digits,
    nesting deeper than Python's recursion limit) goes to the dead-letter output with
    its stream, sequence and subject. A message whose data is larger than
    ``max_record_bytes`` (default 32 MiB; any format) is not decoded; its dead letter
    keeps the first 1 KiB as ``raw``.
    """

    default_name = "nats jetstream"

    def __init__(
        self,
        url: str,
        stream: str,
        subject: str | Sequence[str] | None = None,
        *,
        format: str = "json",
        start_sequence: int = 1,
        bounded: bool = False,
        batch_size: int = 1000,
        on_error: str = "fail",
        poll_timeout_ms: float = 50,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self.url = _check_url(url)
        self.stream = _check_stream(stream)
        self.subjects = _check_subjects(subject)
        if format not in FORMATS:
            raise ConfigurationError(
                f"NatsJetStreamSource format must be one of {', '.join(FORMATS)} ('json': the "
                "parsed JSON of each message; 'text'/'bytes': a dict with subject, sequence and "
                f"data), got {format!r}"
            )
        self.format = format
        self.start_sequence = check_int(
            "NatsJetStreamSource",
            "start_sequence",
            start_sequence,
            1,
            "the first stream sequence to read; 1 reads the whole stream",
        )
        self.bounded = check_bool("NatsJetStreamSource", "bounded", bounded)
        self.batch_size = check_int(
            "NatsJetStreamSource", "batch_size", batch_size, 1, "messages per pull request"
        )
        self.on_error = check_on_error("NatsJetStreamSource", on_error)
        self.max_record_bytes = check_max_record_bytes("NatsJetStreamSource", max_record_bytes)
        self.poll_timeout_ms = check_positive(
            "NatsJetStreamSource",
            "poll_timeout_ms",
            poll_timeout_ms,
            "how long a poll may wait for the server",
        )

    def max_parallelism(self) -> int | None:
        """None: subtasks beyond the number of splits get none and idle."""
        return None

    def create_splits(self, parallelism: int) -> list[NatsJetStreamSplit]:
        """One split per subject filter, starting at ``start_sequence``; bounded, each ends
        at the stream's last sequence now. Fails if the stream does not exist."""
        last_seq = self._last_sequence()
        end = last_seq if self.bounded else None
        position = self.start_sequence - 1
        return [NatsJetStreamSplit(_split_id(s), s, position, end) for s in self.subjects]

    def restore_splits(self, splits: list[Any], ctx: RuntimeContext) -> list[Any]:
        """Restored splits reconciled with ``bounded`` (M-R3): bounded, a split without
        an end (an unbounded run's) ends at the stream's last sequence now, as a fresh
        start's split would, so the job catches up and ends; a split with an end (a
        bounded run's) keeps it. Unbounded: the splits as restored."""
        out = [replace(s) if isinstance(s, NatsJetStreamSplit) else s for s in splits]
        open_ended = [s for s in out if isinstance(s, NatsJetStreamSplit) and s.end is None]
        if self.bounded and open_ended:
            last_seq = self._last_sequence()
            for split in open_ended:
                split.end = last_seq
        return out

    def _last_sequence(self) -> int:
        """The stream's last sequence now (fails if the stream does not exist)."""
        session = _Session(self.url, self.stream)
        try:
            last_seq: int = session.call(
                _stream_last_seq(session.nc, self.url, self.stream),
                CONTROL_TIMEOUT_S,
                "reading the stream info",
            )
        finally:
            session.close()
        return last_seq

    def create_reader(self, ctx: RuntimeContext) -> SourceReader:
        """A reader with its own connection and event-loop thread, connected now
        (ConfigurationError if NATS does not answer)."""
        return _NatsReader(self, _Session(self.url, self.stream))


def _split_id(subject: str | None) -> str:
    return subject if subject is not None else ">"


# --------------------------------------------------------------------------- event loop


class _LoopThread:
    """A private asyncio event loop running in daemon thread ``name``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the loop; its result, or its exception re-raised here.
        Raises ``concurrent.futures.TimeoutError`` (after cancelling it) past ``timeout_s``."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def stop(self, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """Stop the loop (cancelling what still runs on it) and join the thread."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout_s)


class _Session:
    """A NATS connection with the loop thread that runs it."""

    def __init__(self, url: str, stream: str) -> None:
        self.url = url
        self.stream = stream
        self.thread = _LoopThread(f"lockgate nats {stream}")
        try:
            # nats-py tries a server twice before it gives up
            self.nc: Client = self.call(
                _connect(url), 2 * CONNECT_TIMEOUT_S + CONTROL_TIMEOUT_S, "connecting"
            )
        except ConnectionError as e:
            self.thread.stop()
            raise _unreachable(url, e) from e
        except BaseException:
            self.thread.stop()
            raise

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float, doing: str) -> T:
        """``coro``'s result; a ConnectionError naming the server and ``doing`` if it
        takes longer than ``timeout_s``."""
        try:
            return self.thread.call(coro, timeout_s)
        except concurrent.futures.TimeoutError as e:
            raise ConnectionError(
                f"NatsJetStreamSource: NATS at {self.url!r} did not answer within "
                f"{timeout_s:g}s while {doing} (stream {self.stream!r})"
            ) from e

    def close(self) -> None:
        """Close the connection (best effort) and stop the loop thread."""
        try:
            self.thread.call(self.nc.close(), CONTROL_TIMEOUT_S)
        except Exception:  # closing a broken connection must not fail close
            log.debug("closing the NATS connection to %s failed", self.url, exc_info=True)
        finally:
            self.thread.stop()


async def _connect(url: str) -> Client:
    import nats

    async def quiet(error: Exception) -> None:
        """Connection errors surface as exceptions of the calls that meet them."""

    try:
        # allow_reconnect=False: a lost connection fails the job (see the class docstring);
        # max_reconnect_attempts bounds the tries of the first connect
        return await nats.connect(
            url,
            connect_timeout=CONNECT_TIMEOUT_S,
            allow_reconnect=False,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.1,
            error_cb=quiet,
            name="lockgate source",
        )
    except (OSError, asyncio.TimeoutError, nats.errors.Error) as e:
        raise _unreachable(url, e) from e


def _unreachable(url: str, error: BaseException) -> ConfigurationError:
    return ConfigurationError(
        f"NatsJetStreamSource cannot reach NATS at {url!r}: {type(error).__name__}: {error}; "
        "start a NATS server with JetStream there (nats-server -js), or fix the url "
        "(nats://host:4222, tls:// for TLS)"
    )


async def _stream_last_seq(nc: Client, url: str, stream: str) -> int:
    """The last sequence of ``stream`` (0 when it is empty); ConfigurationError when it
    does not exist or JetStream is off."""
    from nats.errors import NoRespondersError
    from nats.js.errors import NotFoundError, ServiceUnavailableError

    try:
        info = await nc.jsm().stream_info(stream)
    except NotFoundError as e:
        raise ConfigurationError(
            f"NatsJetStreamSource: JetStream stream {stream!r} does not exist at {url!r}; "
            f"create it first, e.g. `nats stream add {stream} --subjects '<subject>'` or "
            f"`await nc.jetstream().add_stream(name={stream!r}, subjects=[...])`"
        ) from e
    except (NoRespondersError, ServiceUnavailableError) as e:
        raise ConfigurationError(
            f"NatsJetStreamSource: the NATS server at {url!r} does not answer JetStream "
            f"requests ({e}); enable JetStream (nats-server -js)"
        ) from e
    return int(info.state.last_seq or 0)


# --------------------------------------------------------------------------- consumer


@dataclass
class _Message:
    sequence: int
    consumer_sequence: int
    #: messages of the filter after this one in the stream when it was delivered
    pending: int
    subject: str
    data: bytes


@dataclass
class _Fetched:
    messages: list[_Message]
    #: the server said there is nothing more (now) for this request
    drained: bool


class _ConsumerGone(Exception):
    """The server no longer has the consumer: recreate it from the split's position."""


class _Consumer:
    """An ephemeral pull consumer of one split and the inbox its messages arrive in.

    Pull requests are ``no_wait``: the server answers at once with the messages
    available (up to the batch) and, when they are fewer, a 404/408 status. Runs on
    the session's loop only."""

    def __init__(self, nc: Client, stream: str, subject: str | None) -> None:
        self.nc = nc
        self.stream = stream
        self.subject = subject
        self.name = ""
        self.sub: Subscription | None = None
        self.inbox = ""
        #: the consumer sequence of the last message received (its messages count 1, 2, ...)
        self.received = 0
        self._queue: collections.deque[Msg] = collections.deque()
        self._arrived = asyncio.Event()

    async def open(self, start_sequence: int) -> None:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            description="lockgate NatsJetStreamSource reader",
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_sequence,
            ack_policy=AckPolicy.NONE,
            filter_subject=self.subject,
            inactive_threshold=CONSUMER_INACTIVE_S,
            mem_storage=True,
        )
        info = await self.nc.jsm().add_consumer(
            self.stream, config=config, timeout=CONTROL_TIMEOUT_S
        )
        self.name = info.name
        self.inbox = self.nc.new_inbox()
        self.sub = await self.nc.subscribe(self.inbox, cb=self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        self._queue.append(msg)
        self._arrived.set()

    async def fetch(self, n: int, timeout_s: float) -> _Fetched:
        """Up to ``n`` messages, waiting at most ``timeout_s`` for the server's answer.

        Messages of an earlier request answered after its fetch gave up come first
        (the consumer delivers in order, so the order holds)."""
        got: list[_Message] = []
        while self._queue and len(got) < n:  # leftovers: their end statuses are stale
            self._take(self._queue.popleft(), got)
        if len(got) >= n:
            return _Fetched(got, False)
        request = json.dumps({"batch": n - len(got), "no_wait": True}).encode()
        self._arrived.clear()
        await self.nc.publish(
            f"{API_PREFIX}.CONSUMER.MSG.NEXT.{self.stream}.{self.name}", request, reply=self.inbox
        )
        deadline = time.monotonic() + timeout_s
        while len(got) < n:
            if not self._queue:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except asyncio.TimeoutError:
                    break
                continue
            if self._take(self._queue.popleft(), got):
                return _Fetched(got, True)
        return _Fetched(got, False)

    def _take(self, msg: Msg, got: list[_Message]) -> bool:
        """Add ``msg`` to ``got`` if it is a message; True if it ends the answer."""
        status = msg.headers.get("Status") if msg.headers else None
        if not status:
            meta = msg.metadata
            self.received = meta.sequence.consumer
            got.append(
                _Message(
                    meta.sequence.stream,
                    meta.sequence.consumer,
                    meta.num_pending,
                    msg.subject,
                    msg.data,
                )
            )
            return False
        if status in _END_OF_ANSWER:
            return True
        if status == "100":  # idle heartbeat / flow control
            return False
        description = msg.headers.get("Description", "") if msg.headers else ""
        if status in _CONSUMER_GONE:
            raise _ConsumerGone(f"{status} {description}")
        raise RuntimeError(
            f"JetStream answered a pull request on stream {self.stream!r} with status "
            f"{status} {description}"
        )

    async def caught_up(self) -> bool:
        """Nothing pending for the filter and every message delivered was received."""
        from nats.js.errors import NotFoundError

        try:
            info = await self.nc.jsm().consumer_info(
                self.stream, self.name, timeout=CONTROL_TIMEOUT_S
            )
        except NotFoundError as e:
            raise _ConsumerGone(str(e)) from e
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        return info.num_pending == 0 and (delivered or 0) <= self.received

    async def close(self) -> None:
        """Unsubscribe and delete the consumer (best effort: the server deletes an
        inactive one by itself)."""
        try:
            if self.sub is not None:
                await self.sub.unsubscribe()
            if self.name:
                await self.nc.jsm().delete_consumer(self.stream, self.name)
        except Exception:  # cleanup of a consumer that may be gone already
            log.debug(
                "deleting consumer %s of stream %s failed", self.name, self.stream, exc_info=True
            )


async def _open_consumer(
    nc: Client, url: str, stream: str, subject: str | None, start_sequence: int
) -> _Consumer:
    """A new consumer reading ``subject`` of ``stream`` from ``start_sequence``."""
    from nats.js.errors import APIError, NotFoundError

    consumer = _Consumer(nc, stream, subject)
    try:
        await consumer.open(start_sequence)
    except NotFoundError as e:
        await _stream_last_seq(nc, url, stream)  # names a missing stream
        raise ConfigurationError(
            f"NatsJetStreamSource cannot create a consumer on stream {stream!r} at {url!r}: {e}"
        ) from e
    except APIError as e:
        raise ConfigurationError(
            f"NatsJetStreamSource cannot read subject {subject!r} of stream {stream!r} at "
            f"{url!r}: {e}; a subject must lie within the stream's subjects"
        ) from e
    return consumer


# --------------------------------------------------------------------------- reader


class _NatsReader(SourceReader):
    """Reads its splits round-robin, one pull request per split and poll.

    ``poll`` returns within about ``poll_timeout_ms`` (normally at once: pull requests
    do not wait for new messages); with nothing new it returns NOTHING_AVAILABLE and
    ``wait_hint_ms`` says when to try again."""

    def __init__(self, source: NatsJetStreamSource, session: _Session) -> None:
        self.source = source
        self.session: _Session | None = session
        self.splits: list[NatsJetStreamSplit] = []
        self.consumers: dict[str, _Consumer] = {}
        self._next = 0
        #: split id -> messages after its position when last read (source lag metric)
        self._pending: dict[str, int] = {}

    def add_splits(self, splits: list[NatsJetStreamSplit]) -> None:
        """Take over ``splits`` (copies); each gets a new consumer that starts at its
        position + 1 when it is first read."""
        for split in splits:
            old = self.consumers.pop(split.split_id, None)
            if old is not None:
                self._call(old.close(), CONTROL_TIMEOUT_S, "deleting a consumer")
            self.splits = [s for s in self.splits if s.split_id != split.split_id]
            if not split.finished:
                self.splits.append(replace(split))

    def poll(self, output: ReaderOutput) -> InputStatus:
        """Emit the messages of the next split (round-robin) that has some, as one batch.

        A bounded split ends at the first message beyond its end, at a message that
        is its end or leaves nothing pending, or when the server has nothing more and
        the consumer has nothing pending (an empty subject)."""
        deadline = time.monotonic() + self.source.poll_timeout_ms / 1000.0
        emitted = False
        for _ in range(len(self.splits)):
            i = self._next % len(self.splits)
            split = self.splits[i]
            fetched = self._fetch(split, max(deadline - time.monotonic(), 0.001))
            finished = self._emit(split, fetched.messages, output) if fetched.messages else False
            if fetched.messages:
                self._pending[split.split_id] = fetched.messages[-1].pending
            elif fetched.drained:
                self._pending[split.split_id] = 0
            if (
                split.end is not None
                and not fetched.messages
                and fetched.drained
                and self._caught_up(split)
            ):
                finished = True
            if finished or split.finished:
                self._finish(i, split, output)
            else:
                self._next = i + 1
            emitted = bool(fetched.messages)
            if emitted or time.monotonic() >= deadline:
                break
        live = {s.split_id for s in self.splits}
        known = [n for sid, n in self._pending.items() if sid in live]
        self.pending_records = sum(known) if known or not live else None
        if self.source.bounded and not self.splits:
            return InputStatus.END_OF_INPUT
        return InputStatus.MORE_AVAILABLE if emitted else InputStatus.NOTHING_AVAILABLE

    def _fetch(self, split: NatsJetStreamSplit, timeout_s: float) -> _Fetched:
        consumer = self._consumer(split)
        try:
            return self._call(
                consumer.fetch(self.source.batch_size, timeout_s),
                timeout_s + CONTROL_TIMEOUT_S,
                "pulling messages",
            )
        except _ConsumerGone:
            self._drop_consumer(split)
            return _Fetched([], False)

    def _caught_up(self, split: NatsJetStreamSplit) -> bool:
        try:
            return self._call(
                self._consumer(split).caught_up(), CONTROL_TIMEOUT_S, "reading the consumer info"
            )
        except _ConsumerGone:
            self._drop_consumer(split)
            return False

    def _consumer(self, split: NatsJetStreamSplit) -> _Consumer:
        consumer = self.consumers.get(split.split_id)
        if consumer is None:
            session = self._session()
            consumer = self._call(
                _open_consumer(
                    session.nc,
                    self.source.url,
                    self.source.stream,
                    split.subject,
                    split.position + 1,
                ),
                CONTROL_TIMEOUT_S,
                "creating a consumer",
            )
            self.consumers[split.split_id] = consumer
        return consumer

    def _drop_consumer(self, split: NatsJetStreamSplit) -> None:
        """Forget a consumer the server lost; the next read recreates it at the position."""
        consumer = self.consumers.pop(split.split_id, None)
        if consumer is not None:
            self._call(consumer.close(), CONTROL_TIMEOUT_S, "deleting a consumer")

    def _finish(self, i: int, split: NatsJetStreamSplit, output: ReaderOutput) -> None:
        self.splits.pop(i)
        self._next = i
        self._drop_consumer(split)
        output.split_finished(split.split_id)

    def _emit(
        self, split: NatsJetStreamSplit, messages: list[_Message], output: ReaderOutput
    ) -> bool:
        """Emit the records of ``messages`` up to the split's end; True if the split is
        finished. The position moves past every message emitted, malformed ones
        included; if a malformed one fails the read, the position stays."""
        records: list[Any] = []
        position = split.position
        finished = False
        end = split.end
        for m in messages:
            if end is not None and m.sequence > end:
                finished = True
                break
            if m.sequence <= position:  # never expected: one consumer delivers each once
                continue
            record = self._record(m, output)
            if record is not _MALFORMED:
                records.append(record)
            position = m.sequence
            if end is not None and (m.sequence >= end or m.pending == 0):
                finished = True  # everything up to end existed when the split was made
                break
        split.position = position
        if records:
            output.emit_from_split(split.split_id, RowBatch(records))
        return finished

    def _record(self, m: _Message, output: ReaderOutput) -> Any:
        """The record of one message, or ``_MALFORMED`` after reporting it."""
        fmt = self.source.format
        limit = self.source.max_record_bytes
        if len(m.data) > limit:
            raw, error = oversized(len(m.data), limit, m.data)
            self._malformed(m, raw, error, output)
            return _MALFORMED
        if fmt == "bytes":
            return {"subject": m.subject, "sequence": m.sequence, "data": m.data}
        try:
            text = m.data.decode("utf-8")
        except UnicodeDecodeError as e:
            self._malformed(m, m.data.decode("utf-8", "replace"), f"not valid UTF-8: {e}", output)
            return _MALFORMED
        if fmt == "text":
            return {"subject": m.subject, "sequence": m.sequence, "data": text}
        try:
            return json.loads(text)
        except DECODE_ERRORS as e:
            error = decode_error("JSON", e)
        self._malformed(m, text, error, output)
        return _MALFORMED

    def _malformed(self, m: _Message, raw: str, error: str, output: ReaderOutput) -> None:
        stream = self.source.stream
        report_malformed(
            self.source.on_error,
            output,
            what="nats message",
            location=f"nats stream {stream!r} sequence {m.sequence} (subject {m.subject})",
            raw=raw,
            error=error,
            stream=stream,
            sequence=m.sequence,
            subject=m.subject,
        )

    def wait_hint_ms(self) -> float | None:
        """After NOTHING_AVAILABLE: ``poll_timeout_ms``."""
        return self.source.poll_timeout_ms

    def snapshot_positions(self) -> list[NatsJetStreamSplit]:
        """Copies of the unfinished splits with the last sequence emitted of each."""
        return [replace(s) for s in self.splits]

    def _session(self) -> _Session:
        if self.session is None:
            raise RuntimeError("NatsJetStreamSource reader used after close()")
        return self.session

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float, doing: str) -> T:
        session = self._session()
        try:
            return session.call(coro, timeout_s, doing)
        except (ConfigurationError, _ConsumerGone, ConnectionError):
            raise
        except Exception as e:
            from nats.errors import ConnectionClosedError

            if isinstance(e, ConnectionClosedError):
                raise ConnectionError(
                    f"NatsJetStreamSource lost NATS at {self.source.url!r} while {doing} "
                    f"(stream {self.source.stream!r}); the job restarts from its last "
                    "checkpoint if a restart strategy allows"
                ) from e
            raise

    def close(self) -> None:
        """Delete the consumers, close the connection, stop and join the loop thread."""
        session, self.session = self.session, None
        if session is None:
            return
        consumers, self.consumers = list(self.consumers.values()), {}
        try:
            for consumer in consumers:
                session.thread.call(consumer.close(), CONTROL_TIMEOUT_S)
        except Exception:  # best effort; the server expires them anyway
            log.debug(
                "deleting the consumers of stream %s failed", self.source.stream, exc_info=True
            )
        finally:
            session.close()


_MALFORMED = object()


# --------------------------------------------------------------------------- arguments


def _check_url(url: object) -> str:
    if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
        raise ConfigurationError(
            f"NatsJetStreamSource url must start with {' or '.join(URL_SCHEMES)}, got {url!r}; "
            "e.g. 'nats://localhost:4222'"
        )
    return url


def _check_stream(stream: object) -> str:
    if (
        not isinstance(stream, str)
        or not stream
        or any(c in stream for c in _STREAM_NAME_FORBIDDEN)
    ):
        raise ConfigurationError(
            f"NatsJetStreamSource stream must be a JetStream stream name (non-empty, without "
            f"spaces, '.', '*', '>', '/' or '\\\\'), got {stream!r}"
        )
    return stream


def _check_subjects(subject: object) -> tuple[str | None, ...]:
    if subject is None:
        return (None,)
    names = (subject,) if isinstance(subject, str) else subject
    if not isinstance(names, Sequence) or isinstance(names, (bytes, bytearray)):
        raise ConfigurationError(
            f"NatsJetStreamSource subject must be None (the whole stream), a subject or a "
            f"sequence of subjects, got {subject!r}"
        )
    if not names or not all(
        isinstance(n, str) and n and not any(c.isspace() for c in n) for n in names
    ):
        raise ConfigurationError(
            f"NatsJetStreamSource subjects must be non-empty strs without whitespace (at "
            f"least one; None reads the whole stream), got {subject!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigurationError(
            f"NatsJetStreamSource subjects must be distinct (each is read as its own split), "
            f"got {list(names)!r}"
        )
    return tuple(names)
