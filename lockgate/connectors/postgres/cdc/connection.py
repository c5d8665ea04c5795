"""The source's two kinds of connection: ordinary SQL sessions (psycopg 3) and the
replication session that streams a slot's changes (psycopg 3's low-level ``pq``
connection driving the ``COPY BOTH`` stream of ``START_REPLICATION``; psycopg 3 has no
replication API of its own, and this avoids a second driver).

Every connection gets :data:`~.types.SESSION_OPTIONS` (ISO dates, UTC) so values have
the same text whichever way they come. Messages name the server by the DSN without its
password (:func:`~lockgate.connectors.postgres.table.redacted`).
"""

from __future__ import annotations

import time
from typing import Any

from ....errors import ConfigurationError
from ..table import psycopg_module, redacted
from .pgoutput import Keepalive, XLogData, decode_frame, format_lsn, status_update
from .types import SESSION_OPTIONS

OWNER = "PostgresCdcSource"


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
        info = conninfo(dsn, replication="database", connect_timeout=str(max(1, int(timeout_s))))
        conn = pq.PGconn.connect(info.encode())
        if conn.status != pq.ConnStatus.OK:
            message = conn.get_error_message()
            conn.finish()
            raise ConnectionError(
                f"{OWNER}: cannot open a replication connection to PostgreSQL "
                f"({redacted(dsn)}): {' '.join(message.split())}; the role needs the "
                "REPLICATION attribute and pg_hba.conf must allow it"
            )
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
                    result = conn.get_result()
                    detail = conn.get_error_message()
                    status = result.status if result is not None else None
                    raise ConnectionError(
                        f"{OWNER}: the replication stream of slot {self.slot!r} ended "
                        f"({status}): {' '.join(detail.split()) or 'no reason given'}"
                    )
                append(data)
        except psycopg_module().Error as e:
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

    def close(self) -> None:
        conn, self.conn = getattr(self, "conn", None), None
        if conn is not None:
            conn.finish()
