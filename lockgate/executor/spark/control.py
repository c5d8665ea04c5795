"""The control plane: a ROUTER on the driver, a DEALER in every slot.

Messages are ``[header, payload, mac]``: the header is JSON
(``{"type", "gen", "slot", "chan", "seq"}``), the payload a pickle, the MAC an HMAC
of both under the job's secret. ``chan`` names the sender (``slot``: a slot's control
thread, ``watchdog``: its watchdog, ``driver``: the driver) and ``seq`` numbers its
messages from 1. The receiver checks the MAC first, then the header's shape, then
the generation, then that ``seq`` is above the last one of that sender (else the
message is a replay); only then is the payload unpickled. A message failing any
check is dropped, counted in ``rejected`` and logged; the job carries on.

A slot's control socket has a random routing id, and the driver binds the slot to
the connection of its first REGISTER of the generation: replies and triggers go
there, and messages of that slot from any other connection are dropped
(``impersonation``). Both ends disconnect a peer sending a frame over
``limits.CONTROL_MESSAGE_LIMIT``; a slot logs and drops a message over it.

Each end runs one thread that owns its socket; other threads talk to it
through a queue and a wake-up pipe. (zmq sockets are not thread-safe: a socket is
used by the one thread that owns it.) The driver's socket thread only receives, checks
and records (heartbeats, registrations, finished slots) and sends; what the events
then cause runs on a second thread (:attr:`ControlServer.dispatch`, then
:attr:`ControlServer.events`, in arrival order): the checkpoint coordinator completes
a checkpoint there, writing and fsyncing its metadata under its lock, and a slow disk
must never stop the driver from hearing the slots' heartbeats (it made healthy slots
look silent: "slot N sent no heartbeat"). A slot's watchdog sends its STACKS reports on
a socket of its own (:class:`ControlReporter`), because it reports precisely when
the control thread is stuck.
"""

from __future__ import annotations

import json
import logging
import pickle
import queue
import secrets
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import zmq

from .auth import (
    AuthenticationError,
    MalformedMessageError,
    MessageAuth,
    ReplayedMessageError,
    SequenceGuard,
)
from .limits import (
    CONTROL_MESSAGE_LIMIT,
    DisconnectLog,
    MessageTooLargeError,
    bound,
    check_size,
)
from .signals import PipeWaker

log = logging.getLogger(__name__)

REGISTER = "register"
START = "start"
HEARTBEAT = "heartbeat"
FAILED = "failed"
FINISHED = "finished"
CANCEL = "cancel"
# checkpoints: driver -> slot
TRIGGER = "trigger"
CHECKPOINT_COMPLETE = "checkpoint-complete"
CHECKPOINT_ABORTED = "checkpoint-aborted"
# checkpoints: slot -> driver
ACK = "ack"
DECLINE = "decline"
TASK_FINISHED = "task-finished"
#: a task finished its operators and waits for its final checkpoint (FLIP-147)
TASK_END_OF_DATA = "task-end-of-data"
#: a task initialized (opened, restored, replayed): checkpoints may include it
TASK_RUNNING = "task-running"
# diagnostics: slot -> driver, from the slot's watchdog when its heartbeat is silent
STACKS = "stacks"
# senders (the header's "chan")
SLOT_CHANNEL = "slot"
WATCHDOG_CHANNEL = "watchdog"
DRIVER_CHANNEL = "driver"


@dataclass
class ControlEvent:
    type: str
    slot: int
    payload: Any
    received_at: float


def _parse(auth: MessageAuth, frames: list[bytes], generation: int) -> tuple[dict[str, Any], bytes]:
    header_b, payload_b = auth.open(frames, 2)
    try:
        header = json.loads(bytes(header_b))
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedMessageError(f"header is not JSON: {e}") from e
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("type"), str)
        or not isinstance(header.get("gen"), int)
        or not isinstance(header.get("slot"), int)
    ):
        raise MalformedMessageError(f"header lacks type/gen/slot: {header!r}")
    if header["gen"] != generation:
        raise _Stale(f"generation {header['gen']}, current {generation}")
    seq, chan = header.get("seq"), header.get("chan")
    if (
        not isinstance(seq, int)
        or isinstance(seq, bool)
        or seq <= 0
        or chan not in (SLOT_CHANNEL, WATCHDOG_CHANNEL, DRIVER_CHANNEL)
    ):
        raise MalformedMessageError(f"header lacks a sender and sequence number: {header!r}")
    return header, bytes(payload_b)


class _Stale(Exception):
    pass


def _frames(
    auth: MessageAuth, type_: str, generation: int, slot: int, payload: Any, seq: int, chan: str
) -> list[Any]:
    header = json.dumps(
        {"type": type_, "gen": generation, "slot": slot, "chan": chan, "seq": seq}
    ).encode()
    body = pickle.dumps(payload, protocol=5)
    check_size(
        f"a {type_} control message",
        len(body),
        CONTROL_MESSAGE_LIMIT,
        "set LOCKGATE_CONTROL_MAX_MESSAGE_BYTES higher on the driver and the workers",
    )
    return auth.seal(header, body)


def _drain(socket: Any) -> Iterator[list[bytes]]:
    """Every message waiting on ``socket`` now, without blocking."""
    while True:
        try:
            yield socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return


class ControlServer:
    """The driver's end. Events from slots arrive in ``events``."""

    def __init__(self, host: str, auth: MessageAuth, generation: int, num_slots: int) -> None:
        self.auth = auth
        self.generation = generation
        self.num_slots = num_slots
        self.events: queue.Queue[ControlEvent] = queue.Queue()
        #: called in the dispatch thread for every event, in arrival order; returning True
        #: consumes it (checkpoint acknowledgements go to the coordinator), else it goes
        #: to ``events``. Never in the socket thread: a dispatch that blocks (the
        #: coordinator writing a checkpoint's metadata) must not hold up heartbeats.
        self.dispatch: Callable[[ControlEvent], bool] | None = None
        self.rejected: Counter[str] = Counter()
        self.registrations: dict[int, Any] = {}
        self.last_heartbeat: dict[int, float] = {}
        #: the latest diagnostic payload each slot sent with its heartbeat
        self.heartbeat_payloads: dict[int, Any] = {}
        #: slots whose subtasks all finished (they stop sending heartbeats)
        self.finished: set[int] = set()
        #: slots that reported a failed subtask and wait for a CANCEL before they end
        self.failed: set[int] = set()
        #: slots that ended, finished or not, with their subtasks closed
        self.ended: set[int] = set()
        #: the latest STACKS report of each slot's watchdog (its threads' stacks, sent
        #: when its heartbeat thread fell silent)
        self.stack_reports: dict[int, ControlEvent] = {}
        #: monotonic time of the server thread's latest loop turn (a stuck server thread
        #: would make every slot look silent)
        self.last_loop = time.monotonic()
        #: each slot's connection, bound by its first REGISTER of the generation
        self._identities: dict[int, bytes] = {}
        self._sequences = SequenceGuard()
        #: the sequence number of the last message sent to each slot
        self._sent: Counter[int] = Counter()
        self._outgoing: queue.Queue[tuple[int | None, str, Any]] = queue.Queue()
        #: events received, on their way to the dispatch thread (None: stop)
        self._received: queue.Queue[ControlEvent | None] = queue.Queue()
        self._waker = PipeWaker()
        self._stop = threading.Event()
        self._context: Any = zmq.Context.instance()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        # a slot reconnecting under its routing id takes its connection over
        self._socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        bound(self._socket, CONTROL_MESSAGE_LIMIT)
        self._disconnects = DisconnectLog(self._socket, "control server", CONTROL_MESSAGE_LIMIT)
        port = self._socket.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self._thread = threading.Thread(
            target=self._run, name="lockgate control server", daemon=True
        )
        self._dispatcher = threading.Thread(
            target=self._dispatch_events, name="lockgate control dispatch", daemon=True
        )
        self._thread.start()
        self._dispatcher.start()

    def send(self, slot: int | None, type_: str, payload: Any = None) -> None:
        """Send to one slot, or to every registered slot when ``slot`` is None."""
        self._outgoing.put((slot, type_, payload))
        self._waker.wake()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        poller.register(self._disconnects.monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                self.last_loop = time.monotonic()
                ready = dict(poller.poll(200))
                if self._socket in ready:
                    for frames in _drain(self._socket):
                        try:
                            self._handle(frames)
                        except Exception:
                            self.rejected["malformed"] += 1
                            log.exception("control: failed to handle a message")
                if self._waker.fd in ready:
                    self._waker.drain()
                if self._disconnects.monitor in ready:
                    self._disconnects.drain()
                self._flush_outgoing()
        finally:
            self._disconnects.close()
            self._socket.close(linger=0)

    def _flush_outgoing(self) -> None:
        while True:
            try:
                slot, type_, payload = self._outgoing.get_nowait()
            except queue.Empty:
                return
            targets = list(self._identities) if slot is None else [slot]
            for s in targets:
                ident = self._identities.get(s)
                if ident is None:
                    continue
                try:
                    frames = _frames(
                        self.auth,
                        type_,
                        self.generation,
                        s,
                        payload,
                        self._sent[s] + 1,
                        DRIVER_CHANNEL,
                    )
                    self._socket.send_multipart([ident, *frames], zmq.NOBLOCK)
                    self._sent[s] += 1
                except (zmq.ZMQError, MessageTooLargeError) as e:
                    log.warning("control: could not send %s to slot %s: %s", type_, s, e)

    def _handle(self, frames: list[bytes]) -> None:  # noqa: C901 (one branch per control message kind)
        if len(frames) < 2:
            self.rejected["malformed"] += 1
            log.warning("control: dropped a malformed message (%d frames)", len(frames))
            return
        identity, body = frames[0], frames[1:]
        try:
            header, payload_b = _parse(self.auth, body, self.generation)
        except AuthenticationError:
            self.rejected["unauthenticated"] += 1
            log.warning("control: dropped a message that failed authentication")
            return
        except MalformedMessageError as e:
            self.rejected["malformed"] += 1
            log.warning("control: dropped a malformed message: %s", e)
            return
        except _Stale as e:
            self.rejected["stale"] += 1
            log.info("control: dropped a stale message: %s", e)
            return
        slot, chan, type_ = header["slot"], header["chan"], header["type"]
        if not 0 <= slot < self.num_slots or chan == DRIVER_CHANNEL:
            self.rejected["malformed"] += 1
            log.warning("control: dropped a message from unknown sender %s of slot %s", chan, slot)
            return
        bound_to = self._identities.get(slot)
        if chan == SLOT_CHANNEL and bound_to is not None and identity != bound_to:
            self.rejected["impersonation"] += 1
            log.warning(
                "control: dropped a %s message of slot %s from a connection other "
                "than the one it registered on",
                type_,
                slot,
            )
            return
        try:
            self._sequences.check((slot, chan), header["seq"])
        except ReplayedMessageError as e:
            self.rejected["replayed"] += 1
            log.warning("control: dropped a replayed %s message of slot %s: %s", type_, slot, e)
            return
        try:
            payload = pickle.loads(payload_b)
        except Exception as e:  # noqa: BLE001 - authenticated but undecodable
            self.rejected["malformed"] += 1
            log.warning("control: dropped an undecodable payload from slot %s: %s", slot, e)
            return
        now = time.monotonic()
        if type_ == STACKS:
            # from the slot's watchdog socket: not a sign of life of its control thread,
            # and not the identity to answer to
            self.stack_reports[slot] = ControlEvent(type_, slot, payload, now)
            log.warning(
                "slot %s: no heartbeat for %ss (%s); its threads:\n%s",
                slot,
                _field(payload, "silent_s"),
                _field(payload, "kind"),
                _field(payload, "stacks"),
            )
            return
        if chan == WATCHDOG_CHANNEL:  # a watchdog sends STACKS only
            self.rejected["malformed"] += 1
            log.warning("control: dropped a %s message from slot %s's watchdog", type_, slot)
            return
        self.last_heartbeat[slot] = now
        if type_ == REGISTER and bound_to is None:
            # the slot's connection for the rest of the generation (its DEALER keeps its
            # routing id when it reconnects)
            self._identities[slot] = identity
        if type_ == REGISTER:
            self.registrations[slot] = payload
            if len(self.registrations) == self.num_slots:
                addresses: dict[Any, str] = {}
                for reg in self.registrations.values():
                    addresses.update(reg["endpoints"])
                self._outgoing.put((None, START, addresses))
        if type_ == FINISHED:
            self.finished.add(slot)
            self.ended.add(slot)
        if type_ == FAILED:
            ended = isinstance(payload, dict) and payload.get("slot_ended") is True
            (self.ended if ended else self.failed).add(slot)
        if type_ == HEARTBEAT and payload is not None:
            self.heartbeat_payloads[slot] = payload
        if type_ != HEARTBEAT:
            # handled on the dispatch thread: this one must stay free to hear heartbeats
            self._received.put(ControlEvent(type_, slot, payload, now))

    def _dispatch_events(self) -> None:
        """The dispatch thread: each received event, in arrival order, to :attr:`dispatch`
        (the checkpoint coordinator, which may block on storage) or else to
        :attr:`events`, until :meth:`close`."""
        while True:
            event = self._received.get()
            if event is None:
                return
            try:
                dispatch = self.dispatch
                if dispatch is not None and dispatch(event):
                    continue
            except Exception:
                log.exception(
                    "control: failed to handle a %s event of slot %s", event.type, event.slot
                )
                continue
            self.events.put(event)

    def thread_stack(self) -> str:
        """The server thread's current stack (diagnostics), or '' when it is not running."""
        frame = sys._current_frames().get(self._thread.ident or -1)
        return "".join(traceback.format_stack(frame)) if frame is not None else ""

    def close(self) -> None:
        self._stop.set()
        self._waker.wake()
        self._thread.join(5)
        self._received.put(None)  # after the server thread: it queues no event any more
        self._dispatcher.join(5)
        if self._dispatcher.is_alive():
            log.warning("control: the dispatch thread did not stop within 5s")
        if self._thread.is_alive():
            log.warning("control: the server thread did not stop within 5s")
            return  # it still polls the waker: leave its pipe open
        self._waker.close()


def _field(payload: Any, key: str) -> Any:
    return payload.get(key) if isinstance(payload, dict) else None


class ControlClient:
    """A slot's end. ``on_message(type, payload)`` runs in the client thread."""

    def __init__(
        self,
        endpoint: str,
        auth: MessageAuth,
        generation: int,
        slot: int,
        on_message: Callable[[str, Any], None],
        heartbeat_s: float = 1.0,
    ) -> None:
        self.auth = auth
        self.generation = generation
        self.slot = slot
        self.on_message = on_message
        self.heartbeat_s = heartbeat_s
        #: what each heartbeat carries (diagnostics; None: nothing), read in this thread
        self.heartbeat_payload: Callable[[], Any] | None = None
        #: monotonic time of the latest heartbeat sent (the slot's watchdog reads it)
        self.last_beat = time.monotonic()
        #: messages that could not be sent (logged; the thread goes on heartbeating)
        self.send_errors = 0
        self._outgoing: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._waker = PipeWaker()
        self._stop = threading.Event()
        self._flushed = threading.Event()
        #: the sequence number of the last message sent
        self._seq = 0
        self._sequences = SequenceGuard()
        self._context: Any = zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 2000)
        # a routing id of its own, kept across reconnections: the driver binds the slot
        # to it at REGISTER (a leading zero byte is reserved by ZeroMQ)
        self._socket.setsockopt(zmq.ROUTING_ID, b"lg" + secrets.token_bytes(14))
        bound(self._socket, CONTROL_MESSAGE_LIMIT)
        self._socket.connect(endpoint)
        self._thread = threading.Thread(
            target=self._run, name=f"lockgate control slot {slot}", daemon=True
        )
        self._thread.start()

    def send(self, type_: str, payload: Any = None) -> None:
        self._outgoing.put((type_, payload))
        self._waker.wake()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._waker.fd, zmq.POLLIN)
        next_beat = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if now >= next_beat:
                    self._send_one(HEARTBEAT, self._beat_payload())
                    self.last_beat = now
                    next_beat = now + self.heartbeat_s
                self._send_pending()
                if self._stop.is_set():
                    return
                ready = dict(poller.poll(max(1, int((next_beat - time.monotonic()) * 1000))))
                if self._waker.fd in ready:
                    self._waker.drain()
                if self._socket in ready:
                    for frames in _drain(self._socket):
                        try:
                            header, payload_b = self._check(frames)
                        except (
                            AuthenticationError,
                            MalformedMessageError,
                            _Stale,
                            ReplayedMessageError,
                        ) as e:
                            log.warning("slot %s: dropped a control message: %s", self.slot, e)
                            continue
                        try:
                            self.on_message(header["type"], pickle.loads(payload_b))
                        except Exception:
                            log.exception("slot %s: failed to handle a control message", self.slot)
        finally:
            self._send_pending()
            self._socket.close()

    def _check(self, frames: list[bytes]) -> tuple[dict[str, Any], bytes]:
        header, payload_b = _parse(self.auth, frames, self.generation)
        if header["chan"] != DRIVER_CHANNEL or header["slot"] != self.slot:
            raise MalformedMessageError(
                f"a message from {header['chan']} for slot {header['slot']}"
            )
        self._sequences.check(DRIVER_CHANNEL, header["seq"])
        return header, payload_b

    def _beat_payload(self) -> Any:
        provider = self.heartbeat_payload
        if provider is None:
            return None
        try:
            return provider()
        except Exception:
            log.debug("slot %s: heartbeat diagnostics failed", self.slot, exc_info=True)
            return None

    def _send_pending(self) -> None:
        while True:
            try:
                type_, payload = self._outgoing.get_nowait()
            except queue.Empty:
                return
            self._send_one(type_, payload)

    def _send_one(self, type_: str, payload: Any) -> None:
        """Send one message; a payload that cannot be pickled (or a zmq error) is logged
        and dropped, never allowed to end the thread: that would stop the heartbeats."""
        try:
            frames = _frames(
                self.auth, type_, self.generation, self.slot, payload, self._seq + 1, SLOT_CHANNEL
            )
            self._socket.send_multipart(frames)
            self._seq += 1
        except Exception:
            self.send_errors += 1
            log.exception("slot %s: could not send a %s message to the driver", self.slot, type_)

    def close(self) -> None:
        """Send what is queued, then stop (bounded: 5 s)."""
        self._stop.set()
        self._waker.wake()
        self._thread.join(5)
        if self._thread.is_alive():
            log.warning("slot %s: the control thread did not stop within 5s", self.slot)
            return  # it still polls the waker: leave its pipe open
        self._waker.close()


class ControlReporter:
    """A one-way channel to the driver for a thread other than the control thread (the
    slot's watchdog): its own DEALER socket, created, used and closed by the thread that
    calls :meth:`send` and :meth:`close`. Sends never block (a message that cannot
    leave at once is dropped)."""

    def __init__(self, endpoint: str, auth: MessageAuth, generation: int, slot: int) -> None:
        self.endpoint = endpoint
        self.auth = auth
        self.generation = generation
        self.slot = slot
        self._socket: Any = None
        #: the sequence number of the last message sent
        self._seq = 0

    def send(self, type_: str, payload: Any) -> None:
        if self._socket is None:
            self._socket = zmq.Context.instance().socket(zmq.DEALER)
            self._socket.setsockopt(zmq.LINGER, 1000)
            bound(self._socket, CONTROL_MESSAGE_LIMIT)
            self._socket.connect(self.endpoint)
        self._socket.send_multipart(
            _frames(
                self.auth,
                type_,
                self.generation,
                self.slot,
                payload,
                self._seq + 1,
                WATCHDOG_CHANNEL,
            ),
            zmq.NOBLOCK,
        )
        self._seq += 1

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
