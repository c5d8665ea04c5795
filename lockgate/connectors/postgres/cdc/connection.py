"""The source's two kinds of connection: ordinary SQL sessions (psycopg 3) and the
replication session that streams a slot's changes (psycopg 3's low-level ``pq``
connection driving the ``COPY BOTH`` stream of ``START_REPLICATION``; psycopg 3 has no
replication API of its own, and this avoids a second driver).

Every connection gets :data:`~.types.SESSION_OPTIONS` (ISO dates, UTC) so values have
the same text whichever way they come. Messages name the server by the DSN without its
password (:func:`~lockgate.connectors.postgres.table.redacted`).
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any

from ....errors import ConfigurationError
from ..table import psycopg_module, redacted
from .pgoutput import Keepalive, XLogData, decode_frame, format_lsn, status_update
from .types import SESSION_OPTIONS

OWNER = "PostgresCdcSource"

#: how long :meth:`ReplicationStream.close` waits for the server to end the stream
END_TIMEOUT_S = 5.0

log = logging.getLogger(__name__)


def conninfo(dsn: str, **extra: str) -> str:
    """``dsn`` with the session options (and ``extra`` parameters) added."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    options = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(
        dsn,
        options=f"{options} {SESSION_OPTIONS}".strip(),
        application_name="lockgate-cdc",
        **extra,
    )


def connect(dsn: str, *, timeout_s: float, autocommit: bool = True, fatal: bool = False) -> Any:
    """A psycopg connection to ``dsn`` with the source's session settings. A failure is a
    ``ConnectionError`` (a restart may succeed), or a ``ConfigurationError`` with
    ``fatal`` (the driver's checks before a job starts)."""
    psycopg = psycopg_module()
    try:
        return psycopg.connect(
            conninfo(dsn), autocommit=autocommit, connect_timeout=max(1, int(timeout_s))
        )
    except psycopg.Error as e:
        error = ConfigurationError if fatal else ConnectionError
        raise error(
            f"{OWNER}: cannot connect to PostgreSQL ({redacted(dsn)}): "
            f"{' '.join(str(e).split())}; start the server or fix the dsn"
        ) from e


def connect_replication(
    dsn: str, timeout_s: float, error: type[Exception] = ConnectionError
) -> Any:
    """A low-level libpq replication connection (``replication=database``) to ``dsn``,
    opened without blocking the process; ``error`` (naming the server, without its
    password, and what to check) when it cannot be opened. ``PQconnectdb`` holds the
    GIL for the whole handshake (psycopg's binary build), so a slow server froze every
    thread of the task (its checkpoints and heartbeats) for up to the connect timeout;
    this polls the handshake and waits in ``poll``. As libpq's own ``connect_timeout``,
    ``timeout_s`` applies to each host of a multi-host DSN (``host=a,b``), tried in
    turn."""
    info = conninfo(dsn, replication="database").encode()
    failures = []
    for attempt in _host_attempts(info):
        conn, message = _connect_one(attempt, timeout_s)
        if conn is not None:
            return conn
        failures.append(" ".join(message.split()))
    raise error(
        f"{OWNER}: cannot open a replication connection to PostgreSQL ({redacted(dsn)}): "
        f"{'; '.join(failures)}; check that the server is reachable, the role has the "
        "REPLICATION attribute (or is a superuser) and pg_hba.conf has a 'replication' "
        "line for it"
    )


def _host_attempts(info: bytes) -> list[bytes]:
    """``info`` once per host (with its port and hostaddr) when it names several."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(info.decode())
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        return [info]
    out = []
    for i, host in enumerate(hosts):
        one = dict(params, host=host)
        for key in ("port", "hostaddr"):
            values = str(params.get(key) or "").split(",")
            if len(values) > 1:
                one[key] = values[i] if i < len(values) else values[-1]
        out.append(make_conninfo("", **one).encode())
    return out


def _connect_one(info: bytes, timeout_s: float) -> tuple[Any, str]:
    from psycopg import pq

    conn = pq.PGconn.connect_start(info)
    try:
        deadline = time.monotonic() + timeout_s
        status = pq.PollingStatus.WRITING
        while status != pq.PollingStatus.OK:
            if status == pq.PollingStatus.FAILED or conn.status == pq.ConnStatus.BAD:
                message = conn.get_error_message()
                conn.finish()
                return None, message
            if not _wait(conn, deadline, write=status == pq.PollingStatus.WRITING):
                conn.finish()
                return None, f"no connection within {timeout_s:g} s (connect timeout)"
            status = pq.PollingStatus(conn.connect_poll())
    except BaseException:
        conn.finish()
        raise
    return conn, ""


class ReplicationStream:
    """One replication session reading a slot from an LSN (``START_REPLICATION``).

    :meth:`read` never blocks: it returns the frames that have arrived. :meth:`confirm`
    sends a standby status update with an LSN whose changes are safely processed: the
    server then moves the slot's ``confirmed_flush_lsn`` there and may free the WAL
    before it. The stream only ever confirms what its owner passes to :meth:`confirm`,
    also in the periodic status updates that keep the session alive."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        publication: str,
        start_lsn: int,
        confirmed_lsn: int,
        *,
        timeout_s: float,
    ) -> None:
        from psycopg import pq

        self.dsn = dsn
        self.slot = slot
        self._confirmed = confirmed_lsn
        self._last_status = 0.0
        conn = connect_replication(dsn, timeout_s)
        self.conn: Any = conn
        publication_names = publication.replace("'", "''").replace('"', '""')
        command = (
            f'START_REPLICATION SLOT "{slot}" LOGICAL {format_lsn(start_lsn)} '
            f"(proto_version '1', publication_names '\"{publication_names}\"', "
            "messages 'true')"
        )
        result = conn.exec_(command.encode())
        if result.status != pq.ExecStatus.COPY_BOTH:
            message = conn.get_error_message()
            self.close()
            raise ConnectionError(
                f"{OWNER}: START_REPLICATION of slot {slot!r} failed: {' '.join(message.split())}"
            )
        conn.nonblocking = 1
        #: the ``COPY BOTH`` of START_REPLICATION is on (close ends it first)
        self._streaming = True

    def read(self, limit: int) -> list[XLogData | Keepalive]:
        """Up to ``limit`` frames that have arrived (none: nothing new now)."""
        return [decode_frame(data) for data in self.read_raw(limit)]

    def read_raw(self, limit: int) -> list[Any]:
        """Up to ``limit`` CopyData frames that have arrived, undecoded (bytes-like, as
        libpq gives them: no copy), in order (none: nothing new now)."""
        conn = self.conn
        frames: list[Any] = []
        append = frames.append
        get = conn.get_copy_data
        try:
            conn.consume_input()
            for _ in range(limit):
                size, data = get(1)
                if size == 0:
                    conn.consume_input()  # what arrived meanwhile (the socket, not waited for)
                    size, data = get(1)
                    if size == 0:
                        break
                if size < 0:
                    self._streaming = False
                    result = conn.get_result()
                    detail = conn.get_error_message()
                    status = result.status if result is not None else None
                    raise ConnectionError(
                        f"{OWNER}: the replication stream of slot {self.slot!r} ended "
                        f"({status}): {' '.join(detail.split()) or 'no reason given'}"
                    )
                append(data)
        except psycopg_module().Error as e:
            self._streaming = False
            raise ConnectionError(
                f"{OWNER}: lost the replication connection of slot {self.slot!r}: {e}"
            ) from e
        return frames

    def confirm(self, lsn: int) -> None:
        """Confirm ``lsn`` (never moves back) and tell the server now."""
        self._confirmed = max(self._confirmed, lsn)
        self.send_status()

    def send_status(self) -> None:
        now = time.time()
        self.conn.put_copy_data(status_update(self._confirmed, int(now * 1_000_000)))
        self.conn.flush()
        self._last_status = now

    def keep_alive(self, interval_s: float) -> None:
        """A status update if none went out for ``interval_s`` (the server ends a session
        silent for ``wal_sender_timeout``)."""
        if time.time() - self._last_status >= interval_s:
            self.send_status()

    @property
    def confirmed(self) -> int:
        return self._confirmed

    def close(self, timeout_s: float = END_TIMEOUT_S) -> None:
        """End the stream as the protocol does (``CopyDone``, then read up to the server's
        own), then close the connection. The server handles a session's messages in
        order, so once it answers the end it has applied every status update sent
        before it: the slot's ``confirmed_flush_lsn`` is the last :meth:`confirm` when
        this returns. Closing the socket at once instead can lose that last update (the
        server may fail a write on the reset connection before it reads it).

        Bounded by ``timeout_s``: past it, or on a broken connection, the connection is
        closed anyway and the slot may keep an older confirmed LSN, never a newer one
        (a restart reads from its checkpointed position: nothing is lost or repeated,
        the server only keeps more WAL until the next confirm). Frames that arrive
        after the end are dropped: none of them was confirmed."""
        conn, self.conn = getattr(self, "conn", None), None
        if conn is None:
            return
        try:
            if getattr(self, "_streaming", False):
                self._streaming = False
                if not end_copy(conn, time.monotonic() + timeout_s):
                    log.info(
                        "%s: the replication stream of slot %r did not end within %.1f s; "
                        "closed it (the slot may confirm its last position later)",
                        OWNER,
                        self.slot,
                        timeout_s,
                    )
        except Exception as e:  # noqa: BLE001 - closing anyway; the slot never runs ahead
            log.info("%s: ending the replication stream of slot %r: %s", OWNER, self.slot, e)
        finally:
            conn.finish()


def end_copy(conn: Any, deadline: float) -> bool:
    """Send ``CopyDone`` on a nonblocking ``COPY BOTH`` connection and read until the
    server ended the copy and the command (what arrives meanwhile is dropped). False
    when ``deadline`` (monotonic seconds) passed or the connection broke first."""
    return (
        _send_copy_end(conn, deadline)
        and _drop_to_copy_end(conn, deadline)
        and _command_ended(conn, deadline)
    )


def _send_copy_end(conn: Any, deadline: float) -> bool:
    while conn.put_copy_end() == 0:  # the output buffer is full: send some first
        if conn.flush() < 0 or not _wait(conn, deadline, write=True):
            return False
    while (flushed := conn.flush()) != 0:
        if flushed < 0 or not _wait(conn, deadline, write=True):
            return False
    return True


def _drop_to_copy_end(conn: Any, deadline: float) -> bool:
    """Read the server's CopyData (dropped) until its CopyDone; False past ``deadline``,
    also while data keeps arriving (a server still streaming a large transaction)."""
    while time.monotonic() < deadline:
        conn.consume_input()
        size, _ = conn.get_copy_data(1)
        if size == -1:
            return True
        if size == -2 or (size == 0 and not _wait(conn, deadline)):
            return False
    return False


def _command_ended(conn: Any, deadline: float) -> bool:
    """Take the command's results until none is left; False on an error result."""
    from psycopg import pq

    while True:
        conn.consume_input()
        if conn.is_busy():
            if not _wait(conn, deadline):
                return False
            continue
        result = conn.get_result()
        if result is None:
            return True
        if result.status == pq.ExecStatus.FATAL_ERROR:
            log.info("%s: the server ended the replication stream with an error: %s", OWNER,
                     " ".join(conn.get_error_message().split()))  # fmt: skip
            return False


def _wait(conn: Any, deadline: float, *, write: bool = False) -> bool:
    """Wait until the connection's socket can be read (or written), or reports an
    error; False past ``deadline``. ``poll``, not ``select``: a task with many open
    files (RocksDB's) has descriptors past select's limit of 1024."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    poller = select.poll()
    poller.register(conn.socket, select.POLLOUT if write else select.POLLIN)
    return bool(poller.poll(remaining * 1000))
