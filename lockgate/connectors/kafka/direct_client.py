"""Direct fetching: Kafka's Fetch request (API key 1, version 4) sent by the source
itself over plain sockets, its record batches decoded a fetch at a time
(:mod:`.record_batches`), so that no Python object is made per record.

Why: librdkafka hands records to Python one ``Message`` object at a time; at a few
hundred nanoseconds each that alone held a reader to well under a million small records
a second. Fetch v4 is the oldest version Kafka 4 still serves and the first with
``read_committed`` (its responses carry the last stable offset and the aborted
transactions), so one request shape serves every broker since Kafka 0.11.

Scope, and what happens outside it: the source fetches directly only over plaintext
connections (no ``security.*``, ``sasl.*`` or ``ssl.*`` property), and hands a reader
back to librdkafka for good (:class:`FetchUnavailable`) when a broker cannot be reached
or answers with anything but records or a leader change (an offset out of range, an
authorization error), or when a batch is compressed with a codec other than gzip. The
positions then continue where the direct reader stopped, so nothing is lost or read
twice.

Bounds: one request in flight per broker; a response larger than
``MAX_RESPONSE_BYTES`` or slower than ``REQUEST_TIMEOUT_S`` ends direct fetching.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .record_batches import (
    DEFAULT_MAX_BATCH_BYTES,
    CorruptBatch,
    PartitionRecords,
    UnsupportedBatch,
    batch_headers,
    decode_partition,
    next_offset_after,
)

log = logging.getLogger(__name__)

FETCH_API_KEY = 1
FETCH_VERSION = 4
CLIENT_ID = b"lockgate"
#: bytes one response may hold for one partition, and in all
PARTITION_MAX_BYTES = 8 << 20
RESPONSE_MAX_BYTES = 32 << 20
#: a response announcing more than this is refused (a broker honours the limits above,
#: but returns a first batch larger than them whole)
MAX_RESPONSE_BYTES = 256 << 20
#: how long the broker may hold a fetch that has nothing to return yet
MAX_WAIT_MS = 100
REQUEST_TIMEOUT_S = 30.0
#: how long a partition may be without a usable leader (a new partition, an election)
#: before the reader goes back to librdkafka (which keeps retrying, and reports a topic
#: that went away); the metadata is asked again at most every LEADER_RETRY_S meanwhile
LEADER_WAIT_S = 10.0
LEADER_RETRY_S = 0.1
CONNECT_TIMEOUT_S = 10.0
#: per-partition error codes that mean "ask for the leader again"
_LEADER_MOVED = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION (a new partition not known to this broker yet)
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
}
#: properties that mean the connection is not plain TCP without authentication
_SECURE_PREFIXES = ("sasl.", "ssl.", "security.")

Address = tuple[str, int]
TopicPartition = tuple[str, int]


class FetchUnavailable(RuntimeError):
    """Direct fetching cannot go on; the reader continues through librdkafka."""


def direct_fetch_possible(properties: dict[str, object]) -> bool:
    """True when ``properties`` leave the connection plaintext without authentication
    (the only connections the direct fetcher makes)."""
    for name, value in properties.items():
        if name == "security.protocol" and str(value).lower() == "plaintext":
            continue
        if name.startswith(_SECURE_PREFIXES):
            return False
    return True


def fetch_request(
    correlation_id: int,
    partitions: Iterable[tuple[str, list[tuple[int, int]]]],
    committed_only: bool,
    max_wait_ms: int = MAX_WAIT_MS,
) -> bytes:
    """A size-prefixed Fetch v4 request for ``(topic, [(partition, offset), ...])``."""
    parts = [
        struct.pack(">hhih", FETCH_API_KEY, FETCH_VERSION, correlation_id, len(CLIENT_ID)),
        CLIENT_ID,
        struct.pack(">iiiib", -1, max_wait_ms, 1, RESPONSE_MAX_BYTES, int(committed_only)),
    ]
    topics = list(partitions)
    parts.append(struct.pack(">i", len(topics)))
    for topic, offsets in topics:
        name = topic.encode("utf-8")
        parts.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(offsets)))
        for partition, offset in offsets:
            parts.append(struct.pack(">iqi", partition, offset, PARTITION_MAX_BYTES))
    body = b"".join(parts)
    return struct.pack(">i", len(body)) + body


@dataclass
class FetchedPartition:
    """One partition of a Fetch response, its records still raw."""

    topic: str
    partition: int
    error: int
    high_watermark: int
    last_stable_offset: int
    aborted: list[tuple[int, int]] | None
    records: memoryview


def parse_fetch_response(data: bytes, correlation_id: int) -> list[FetchedPartition]:
    """The partitions of a Fetch v4 response (``data`` without its size prefix)."""
    view = memoryview(data)
    try:
        (got,) = struct.unpack_from(">i", data, 0)
        if got != correlation_id:
            raise CorruptBatch(f"response to request {got}, expected {correlation_id}")
        pos = 8  # correlation id, throttle time
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[FetchedPartition] = []
        for _ in range(topics):
            (name_len,) = struct.unpack_from(">h", data, pos)
            topic = bytes(view[pos + 2 : pos + 2 + name_len]).decode("utf-8")
            pos += 2 + name_len
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(count):
                partition, error, high, stable, n_aborted = struct.unpack_from(">ihqqi", data, pos)
                pos += 26
                aborted: list[tuple[int, int]] | None = None
                if n_aborted >= 0:
                    aborted = [
                        struct.unpack_from(">qq", data, pos + 16 * i) for i in range(n_aborted)
                    ]
                    pos += 16 * n_aborted
                (size,) = struct.unpack_from(">i", data, pos)
                pos += 4
                size = max(size, 0)
                if pos + size > len(data):
                    raise CorruptBatch("a partition's records run past the response")
                out.append(
                    FetchedPartition(
                        topic, partition, error, high, stable, aborted, view[pos : pos + size]
                    )
                )
                pos += size
        return out
    except struct.error as e:
        raise CorruptBatch(f"a Fetch response cut short: {e}") from e


class _Connection:
    """One non-blocking socket to a broker with at most one request in flight."""

    def __init__(self, address: Address) -> None:
        self.address = address
        try:
            self.sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise FetchUnavailable(
                f"cannot connect to broker {address[0]}:{address[1]}: {e}"
            ) from e
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.in_flight: int | None = None
        self.sent_at = 0.0
        self._outgoing = memoryview(b"")
        self._size = bytearray(4)
        self._size_got = 0
        self._body: bytearray | None = None
        self._body_got = 0

    def send(self, request: bytes, correlation_id: int, now: float) -> None:
        self.in_flight = correlation_id
        self.sent_at = now
        self._outgoing = memoryview(request)
        self._flush()

    def _flush(self) -> None:
        while self._outgoing:
            try:
                sent = self.sock.send(self._outgoing)
            except BlockingIOError:
                return
            except OSError as e:
                raise FetchUnavailable(f"broker {self.address[0]}:{self.address[1]}: {e}") from e
            self._outgoing = self._outgoing[sent:]

    def receive(self) -> bytes | None:
        """The response, once all of it has arrived (None before)."""
        self._flush()
        try:
            while self._size_got < 4:
                got = self.sock.recv_into(memoryview(self._size)[self._size_got :])
                if not got:
                    raise FetchUnavailable(f"broker {self.address} closed the connection")
                self._size_got += got
            if self._body is None:
                (size,) = struct.unpack(">i", self._size)
                if not 0 < size <= MAX_RESPONSE_BYTES:
                    raise FetchUnavailable(
                        f"broker {self.address} announced a response of {size} bytes"
                    )
                self._body = bytearray(size)
                self._body_got = 0
            view = memoryview(self._body)
            while self._body_got < len(self._body):
                got = self.sock.recv_into(view[self._body_got :])
                if not got:
                    raise FetchUnavailable(f"broker {self.address} closed the connection")
                self._body_got += got
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                return None
            raise FetchUnavailable(f"broker {self.address[0]}:{self.address[1]}: {e}") from e
        body = bytes(self._body)
        self._body = None
        self._size_got = 0
        self.in_flight = None
        return body

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class DirectFetcher:
    """Fetches the assigned partitions from their leaders, one request in flight per
    broker, the next sent as soon as a response is in (before its records are decoded).

    ``leaders(topic_partitions)`` gives each partition's leader address (the caller's
    metadata client); ``clock`` is injectable. ``max_batch_bytes``: the most one
    compressed batch may expand to (a larger one is refused,
    :attr:`PartitionRecords.refused`); a response's batches of one partition expand to
    at most twice it, the rest is fetched again next."""

    def __init__(
        self,
        leaders: Callable[[list[TopicPartition]], dict[TopicPartition, Address]],
        committed_only: bool,
        clock: Callable[[], float] = time.monotonic,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        self._leaders_of = leaders
        self.committed_only = committed_only
        self.max_batch_bytes = max_batch_bytes
        self.clock = clock
        #: next offset to fetch, and the (exclusive) end of a bounded partition
        self.offsets: dict[TopicPartition, int] = {}
        self.ends: dict[TopicPartition, int | None] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._leader: dict[TopicPartition, Address] = {}
        self._connections: dict[Address, _Connection] = {}
        #: the partitions (and offsets) of each connection's request in flight
        self._asked: dict[Address, dict[TopicPartition, int]] = {}
        self._correlation = 0
        self._stale = True
        #: since when a partition has been without a usable leader (None: none is)
        self._trouble_since: float | None = None
        self._next_refresh = 0.0
        #: where the partition order of each broker's next request starts
        self._turn: dict[Address, int] = {}

    def assign(self, tp: TopicPartition, offset: int, end: int | None) -> None:
        self.offsets[tp] = offset
        self.ends[tp] = end
        self._stale = True

    def remove(self, tp: TopicPartition) -> None:
        self.offsets.pop(tp, None)
        self.ends.pop(tp, None)
        self._leader.pop(tp, None)

    def poll(self) -> list[PartitionRecords]:
        """The records of every response that has arrived (possibly none); never
        blocks. Raises :class:`FetchUnavailable` when direct fetching cannot go on."""
        now = self.clock()
        if self._stale:
            if now < self._next_refresh:
                return []
            self._refresh_leaders(now)
        out: list[PartitionRecords] = []
        for address in sorted(set(self._leader.values())):
            conn = self._connection(address)
            if conn.in_flight is None:
                self._send(address, conn, now)
                continue
            expected = conn.in_flight
            body = conn.receive()
            if body is None:
                if now - conn.sent_at > REQUEST_TIMEOUT_S:
                    raise FetchUnavailable(
                        f"broker {address[0]}:{address[1]} did not answer a fetch within "
                        f"{REQUEST_TIMEOUT_S:.0f} s"
                    )
                continue
            out.extend(self._handle(address, conn, body, expected, now))
        return out

    def sockets_in_flight(self) -> list[socket.socket]:
        """The sockets of the connections with a request in flight: one of them turns
        readable when its broker answers (data arrived, or its wait ran out)."""
        return [c.sock for c in self._connections.values() if c.in_flight is not None]

    def _connection(self, address: Address) -> _Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = _Connection(address)
        return conn

    def _leader_trouble(self, now: float, what: str) -> None:
        """A partition without a usable leader: ask again soon, for a while."""
        self._stale = True
        self._next_refresh = now + LEADER_RETRY_S
        if self._trouble_since is None:
            self._trouble_since = now
        elif now - self._trouble_since > LEADER_WAIT_S:
            raise FetchUnavailable(f"{what} for over {LEADER_WAIT_S:.0f} s")

    def _refresh_leaders(self, now: float) -> None:
        wanted = sorted(self.offsets)
        found = self._leaders_of(wanted) if wanted else {}
        missing = [tp for tp in wanted if tp not in found]
        self._stale = False
        if missing:  # a new partition, an election under way: ask again soon
            self._leader_trouble(now, f"no leader known for {missing[:3]}")
        self._leader = dict(found)
        for address in set(self._connections) - set(found.values()):
            self._connections.pop(address).close()
            self._asked.pop(address, None)

    def _send(self, address: Address, conn: _Connection, now: float) -> None:
        asked = {
            tp: off
            for tp, off in self.offsets.items()
            if self._leader.get(tp) == address
            and off >= 0
            and (self.ends[tp] is None or off < self.ends[tp])  # type: ignore[operator]
        }
        if not asked:
            return
        # Fetch v4 fills the response in request order (and returns a batch larger than
        # the partition limit only for the first partition with data): the order turns
        # by one partition per request, so that none waits behind the others for long
        order = sorted(asked)
        turn = self._turn.get(address, 0) % len(order)
        self._turn[address] = turn + 1
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for topic, partition in order[turn:] + order[:turn]:
            by_topic.setdefault(topic, []).append((partition, asked[(topic, partition)]))
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        conn.send(
            fetch_request(self._correlation, by_topic.items(), self.committed_only, MAX_WAIT_MS),
            self._correlation,
            now,
        )
        self._asked[address] = asked

    def _handle(
        self, address: Address, conn: _Connection, body: bytes, expected: int, now: float
    ) -> list[PartitionRecords]:
        asked = self._asked.pop(address, {})
        try:
            fetched = parse_fetch_response(body, expected)
            ready = []
            moved = False
            for part in fetched:
                tp = (part.topic, part.partition)
                offset = asked.get(tp)
                if offset is None or self.offsets.get(tp) != offset:
                    continue  # removed or moved meanwhile: its data is not wanted
                if part.error in _LEADER_MOVED:
                    if not moved:
                        moved = True
                        self._leader_trouble(
                            now, f"fetching {tp[0]}[{tp[1]}]: Kafka error code {part.error}"
                        )
                    continue
                if part.error != 0:
                    raise FetchUnavailable(
                        f"fetching {tp[0]}[{tp[1]}] at offset {offset}: Kafka error code "
                        f"{part.error}"
                    )
                self.high_watermarks[tp] = part.high_watermark
                batches = batch_headers(part.records)
                self.offsets[tp] = next_offset_after(batches, offset)
                ready.append((part, offset, batches))
            if not moved and not self._stale:
                self._trouble_since = None
            if not self._stale:
                self._send(address, conn, now)  # the broker works while we decode
            out = []
            for part, offset, batches in ready:
                tp = (part.topic, part.partition)
                records = decode_partition(
                    part.topic,
                    part.partition,
                    part.records,
                    offset,
                    self.ends.get(tp),
                    part.aborted,
                    self.committed_only,
                    batches,
                    self.max_batch_bytes,
                )
                if tp in self.offsets and records.next_offset < self.offsets[tp]:
                    # the expanded batches' budget cut the fetch short: the request
                    # already sent for the partition is answered for nothing (its offset
                    # no longer matches), and the next one starts at the cut
                    self.offsets[tp] = records.next_offset
                out.append(records)
            return out
        except (CorruptBatch, UnsupportedBatch) as e:
            raise FetchUnavailable(str(e)) from e

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._asked.clear()
