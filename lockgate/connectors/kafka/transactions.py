"""Kafka transactions seen from outside the producer that began them: what the
exactly-once :class:`~lockgate.connectors.kafka.sink.KafkaSink` needs to commit a
pre-committed transaction after a crash, and to abort the ones no checkpoint will commit.

A Kafka transaction belongs to a *transactional id*; the broker's transaction
coordinator knows it by the id's current producer id and epoch. lockgate's sink writes
each checkpoint interval in a transaction of its own, under an id
``<prefix>-<subtask>-<slot>`` (:func:`transactional_id`), with a fresh producer (so a
fresh epoch: ``InitProducerId`` bumps it) per transaction, and records the transaction's
``(transactional id, producer id, epoch)`` in the checkpoint once it is flushed
(:class:`KafkaTransaction`). Then:

* **commit after a crash** (:meth:`TransactionAdmin.commit`): an ``EndTxn(commit)``
  request with the recorded producer id and epoch, sent to the id's coordinator from any
  process, commits the transaction if it is still open (Flink's sink does the same by
  resuming the producer). Committing is idempotent, and its outcome is verified: when the
  coordinator answers that the id's epoch has moved on (the transaction ended before:
  committed by an earlier attempt, or aborted by whoever initialized the id since), the
  transaction's own markers decide. At pre-commit (its records flushed) the sink
  records, for each partition it wrote, the partition's high watermark, read while the
  transaction was still open (``ListOffsets``, then ``DescribeProducers`` shows it open
  with its epoch): every record of it lies below that offset, and its marker above, and
  no other control batch of its producer id can come between (a producer id has one
  transaction open per partition; the marker ending it comes first). So the first
  control batch of its producer id from that offset on is its marker, COMMIT or ABORT
  (:meth:`TransactionAdmin.marker`, reading batch headers only: what was written after
  the pre-commit, not the transaction's records). An ABORT (another producer with the same
  transactional id took over, or the broker's ``transaction.timeout.ms`` expired) raises
  :class:`TransactionLostError`; no marker found raises too: a commit is counted as done
  only when the broker accepted it or its COMMIT markers are in the log. (The
  coordinator's state alone cannot tell: once another producer of the id has begun and
  ended a transaction, it describes only that one.) The scan is bounded by
  :data:`RETRY_FOR_S` and never starts again from the recorded offset within a commit.
  Where the markers cannot be read, the commit falls back to the coordinator's state
  (:meth:`TransactionAdmin._check_completed`, as before markers were read), with a
  warning saying why: the topic was deleted, retention deleted (or a truncation
  removed) the records up to the recorded offset, the brokers refuse reading the topic,
  or a compacted topic's log cleaner removed the marker (none of the producer id up to
  the high watermark although the coordinator has moved past the transaction). The
  same fallback serves a transaction recorded without offsets: by a lockgate before
  this check, or by a sink whose principal may not ``DescribeProducers`` (no ``READ``
  on the topic; one warning names the ACL);
* **abort** (:func:`fence_and_abort`): a producer that initializes the transactional id
  aborts whatever transaction is open under it and fences every older producer of the
  id (a zombie of an earlier attempt can no longer write);
* **find the open ones** (:meth:`TransactionAdmin.open_transactions`): the broker's
  ``ListTransactions`` and ``DescribeTransactions`` (KIP-664).

The requests go through kafka-python's admin client; librdkafka has no API for them.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from ...core.state_records import state_record
from ...errors import LockgateError
from .client_logging import librdkafka_config
from .common import confluent_kafka, kafka_python

log = logging.getLogger(__name__)

#: how long a commit, an abort or an admin request keeps retrying what the broker says
#: is temporary (coordinator moving or loading, markers still being written)
RETRY_FOR_S = 60.0
_BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5)
#: the bytes a Fetch asks for while looking for a transaction marker
_MARKER_FETCH_BYTES = 1 << 20

# Kafka protocol error codes (org.apache.kafka.common.protocol.Errors)
_NONE = 0
_OFFSET_OUT_OF_RANGE = 1
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_INVALID_PRODUCER_EPOCH = 47
_INVALID_TXN_STATE = 48
_INVALID_PRODUCER_ID_MAPPING = 49
_CONCURRENT_TRANSACTIONS = 51
_PRODUCER_FENCED = 90
_UNKNOWN_TOPIC_OR_PARTITION = 3
_UNKNOWN_TOPIC_ID = 100
_TOPIC_AUTHORIZATION_FAILED = 29
_CLUSTER_AUTHORIZATION_FAILED = 31
#: a refusal by the brokers' authorizer (the principal lacks an ACL)
_REFUSED = {_TOPIC_AUTHORIZATION_FAILED, _CLUSTER_AUTHORIZATION_FAILED}
#: the topic is not there (deleted)
_NO_TOPIC = {_UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC_ID}
#: the states in which a transaction's markers are being written
_ENDING = ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")
#: why a transaction's marker cannot be read, as the warning says it
_UNREADABLE = {
    "deleted": "the topic was deleted (or its partition is gone)",
    "retention": "retention (or DeleteRecords) deleted the partition's records up to "
    "that offset, its own among them; committed or not, no reader can see them any more",
    "truncated": "the partition's log ends below that offset: it was truncated (an unclean "
    "leader election, or the topic deleted and created again)",
    "refused": "the brokers refuse reading the topic (the principal lacks READ on it; "
    "see docs/security.md)",
    "compacted": "the topic is compacted and no marker of its producer id is left up to "
    "the high watermark, although the coordinator has moved past it: the log cleaner "
    "removed the marker (delete.retention.ms after its records were superseded)",
}
_RETRIABLE = {
    _COORDINATOR_LOAD_IN_PROGRESS,
    _COORDINATOR_NOT_AVAILABLE,
    _NOT_COORDINATOR,
    _CONCURRENT_TRANSACTIONS,
}
#: transaction states of a transactional id with nothing open
_SETTLED = {"Empty", "CompleteCommit", "CompleteAbort", "Dead"}
#: the states of an open transaction (begun, or ending and not yet ended)
_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


class TransactionLostError(LockgateError, RuntimeError):
    """A pre-committed Kafka transaction can no longer be committed: the broker aborted it
    (its ``transaction.timeout.ms`` expired before the checkpoint that holds it was
    committed) or forgot its transactional id. Its records are not in the topic."""


@state_record("kafka.transaction")
@dataclass
class KafkaTransaction:
    """One checkpoint interval's transaction of one sink subtask (picklable; stored in
    checkpoints). ``producer_id`` and ``epoch`` are -1 until the transaction is
    pre-committed with records in it; ``records`` counts what was written."""

    transactional_id: str
    producer_id: int = -1
    epoch: int = -1
    records: int = 0
    #: ``(topic, partition, offset)`` of every partition it wrote: the partition's high
    #: watermark at pre-commit, past its records and before its marker (see the module
    #: docstring); a commit's outcome is read from the first marker of its producer id
    #: from there. Empty in transactions checkpointed by an older lockgate (a class
    #: default, so that those unpickle).
    partitions: tuple[tuple[str, int, int], ...] = ()

    @property
    def identity(self) -> tuple[str, int, int]:
        return (self.transactional_id, self.producer_id, self.epoch)


def transactional_id(prefix: str, subtask: int, slot: int) -> str:
    """The transactional id of slot ``slot`` of sink subtask ``subtask``."""
    return f"{prefix}-{subtask}-{slot}"


def prefix_of(tid: str) -> str | None:
    """The prefix of an id made by :func:`transactional_id` (what comes before
    ``-<subtask>-<slot>``), or None for any other id."""
    m = re.fullmatch(r"(.+)-(\d+)-(\d+)", tid)
    return m.group(1) if m else None


def fenced_message(tid: str) -> str:
    """What an error caused by fencing says: who took the id over, and why that happens."""
    prefix = prefix_of(tid)
    shared = (
        f"another job or sink uses the transactional id prefix {prefix!r} (give each "
        "KafkaSink its own transactional_id_prefix, or leave the default one, which is "
        "unique per job name and sink uid)"
        if prefix is not None
        else "another producer uses this transactional id"
    )
    return (
        f"another producer with the same transactional id {tid!r} took over: it "
        "initialized the id, which fenced this one and aborted the transaction it had "
        f"open. Most likely {shared}, or a zombie of an earlier attempt of this job is "
        "still running"
    )


_FENCED_CODES = {90, 47, -144}  # PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, librdkafka's _FENCED


def is_fenced(error: Any) -> bool:
    """Whether librdkafka's ``KafkaError`` says another producer of the id took over."""
    try:
        return int(error.code()) in _FENCED_CODES
    except (AttributeError, TypeError, ValueError):
        return False


def parse_transactional_id(prefix: str, tid: str) -> tuple[int, int] | None:
    """``(subtask, slot)`` of an id made by :func:`transactional_id` with ``prefix``; None
    for any other id."""
    m = re.fullmatch(re.escape(prefix) + r"-(\d+)-(\d+)", tid)
    return (int(m.group(1)), int(m.group(2))) if m else None


def admin_config(bootstrap_servers: str, properties: dict[str, Any]) -> dict[str, Any]:
    """kafka-python's settings for the librdkafka ``properties`` that matter to an admin
    connection (security); the rest are producer and consumer settings."""
    names = {
        "security.protocol": "security_protocol",
        "sasl.mechanism": "sasl_mechanism",
        "sasl.mechanisms": "sasl_mechanism",
        "sasl.username": "sasl_plain_username",
        "sasl.password": "sasl_plain_password",
        "ssl.ca.location": "ssl_cafile",
        "ssl.certificate.location": "ssl_certfile",
        "ssl.key.location": "ssl_keyfile",
        "ssl.key.password": "ssl_password",
    }
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers.split(","),
        "client_id": "lockgate-transactions",
        "request_timeout_ms": 30_000,
    }
    for name, value in properties.items():
        if name in names:
            config[names[name]] = value
    return config


class TransactionAdmin:
    """The transaction requests of one process, over one kafka-python admin client
    (opened on first use; :meth:`close` it)."""

    def __init__(self, bootstrap_servers: str, properties: dict[str, Any]) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.properties = properties
        self._client: Any = None
        #: topic -> whether it is compacted (None: unknown)
        self._policies: dict[str, bool | None] = {}

    def _admin(self) -> Any:
        if self._client is None:
            kafka = kafka_python()
            try:
                self._client = kafka.KafkaAdminClient(
                    **admin_config(self.bootstrap_servers, self.properties)
                )
            except Exception as e:
                raise ConnectionError(
                    f"cannot reach the Kafka brokers {self.bootstrap_servers} for transaction "
                    f"requests: {type(e).__name__}: {e}"
                ) from e
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    # ---------------------------------------------------------------- queries

    def describe(self, tids: list[str]) -> dict[str, Any]:
        """transactional id -> kafka-python's ``TransactionDescription`` (state, producer
        id and epoch, start time); ids the coordinator does not know are left out."""
        out: dict[str, Any] = {}
        for tid in tids:
            try:
                out.update(self._retrying(lambda t=tid: self._admin().describe_transactions([t])))
            except Exception as e:
                if type(e).__name__ == "TransactionalIdNotFoundError":
                    continue
                raise
        return out

    def current(self, tid: str) -> tuple[int, int]:
        """``(producer id, epoch)`` of the transaction open under ``tid`` now."""
        described = self.describe([tid]).get(tid)
        if described is None or described.state.value != "Ongoing":
            state = described.state.value if described is not None else "unknown id"
            raise RuntimeError(
                f"Kafka transaction {tid!r} should be open after its records were flushed, "
                f"but the coordinator reports {state}"
            )
        return int(described.producer_id), int(described.producer_epoch)

    def pre_committed(self, tid: str) -> tuple[int, int, tuple[tuple[str, int, int], ...]]:
        """``(producer id, epoch, partitions)`` of the transaction open under ``tid`` now,
        its records flushed: ``partitions`` holds ``(topic, partition, high watermark)``
        for each partition it wrote, the watermark read before ``DescribeProducers``
        shows the transaction still open there with its epoch (so its marker, still to
        come, lies past it): what :meth:`commit` needs to read its outcome later."""
        described = self.describe([tid]).get(tid)
        if described is None or described.state.value != "Ongoing":
            state = described.state.value if described is not None else "unknown id"
            raise RuntimeError(
                f"Kafka transaction {tid!r} should be open after its records were flushed, "
                f"but the coordinator reports {state}: {fenced_message(tid)}"
            )
        pid, epoch = int(described.producer_id), int(described.producer_epoch)
        wrote = sorted(described.topic_partitions)
        if not wrote:
            return pid, epoch, ()
        from kafka.admin import OffsetSpec

        try:
            ends = self._retrying(
                lambda: self._admin().list_partition_offsets(
                    {tp: OffsetSpec.LATEST for tp in wrote}
                )
            )
            states = self._retrying(lambda: self._admin().describe_producers(wrote))
        except Exception as e:
            if error_code(e) not in _REFUSED:
                raise
            # a principal with producer ACLs only: the commit after a restore falls back
            # to the coordinator's state (what lockgate did before it read markers)
            _warn_unverifiable(self.bootstrap_servers, sorted({tp.topic for tp in wrote}), e)
            return pid, epoch, ()
        partitions = []
        for tp in wrote:
            mine = [p for p in states[tp].active_producers if int(p.producer_id) == pid]
            start = int(mine[0].current_transaction_start_offset) if mine else -1
            if not mine or int(mine[0].producer_epoch) != epoch or start < 0:
                raise RuntimeError(
                    f"Kafka transaction {tid!r} (producer id {pid}, epoch {epoch}) has no open "
                    f"records in {tp.topic}[{tp.partition}] although the coordinator lists "
                    f"that partition (the partition's leader reports {mine}): "
                    f"{fenced_message(tid)}"
                )
            end = int(ends[tp].offset)
            if end <= start:
                raise RuntimeError(
                    f"Kafka transaction {tid!r}: the high watermark of {tp.topic}"
                    f"[{tp.partition}] ({end}) is not past its first record ({start}) after "
                    "its records were acknowledged; cannot record where its marker will be"
                )
            partitions.append((tp.topic, int(tp.partition), end))
        return pid, epoch, tuple(partitions)

    def open_transactions(self, prefix: str) -> dict[str, Any]:
        """The transactions open now (not Empty, CompleteCommit or CompleteAbort) under a
        transactional id starting with ``prefix``: id -> description."""
        # the brokers filter by state; by id client-side (KIP-1152's id pattern is not
        # honoured by every broker and client pair: Kafka 4.3 with kafka-python 3.0 ignores it)
        listings = self._retrying(
            lambda: self._admin().list_transactions(state_filters=list(_OPEN))
        )
        tids = sorted(
            t.transactional_id
            for per_broker in listings.values()
            for t in per_broker
            if t.transactional_id.startswith(prefix)
        )
        described = self.describe(tids)
        return {t: d for t, d in described.items() if d.state.value not in _SETTLED}

    # ---------------------------------------------------------------- commit

    def commit(self, txn: KafkaTransaction) -> None:
        """Commit pre-committed ``txn`` by its producer id and epoch (idempotent; see the
        module docstring). Raises :class:`TransactionLostError` when the broker aborted it."""
        if txn.records == 0:
            return  # nothing was written: there is no transaction on the broker
        if txn.producer_id < 0:
            raise ValueError(f"{txn!r} was never pre-committed: it has no producer id")
        code = self._end_txn(txn)
        if code == _NONE:
            return
        if code in (_PRODUCER_FENCED, _INVALID_PRODUCER_EPOCH, _INVALID_TXN_STATE):
            if txn.partitions:
                self._check_markers(txn, code)
            else:
                self._check_completed(txn, code)
            return
        if code == _INVALID_PRODUCER_ID_MAPPING:
            raise TransactionLostError(
                f"Kafka transaction {txn.transactional_id!r} (producer id {txn.producer_id}, "
                f"epoch {txn.epoch}, {txn.records} records) cannot be committed: the broker "
                "no longer knows its transactional id (transactional.id.expiration.ms passed "
                "since it was last used); its records were not published"
            )
        raise RuntimeError(
            f"committing Kafka transaction {txn.transactional_id!r} (producer id "
            f"{txn.producer_id}, epoch {txn.epoch}) failed: EndTxn error code {code}"
        )

    def _check_markers(self, txn: KafkaTransaction, code: int) -> None:
        """After EndTxn said the epoch moved on: did ``txn`` commit? Its markers say (see
        the module docstring). A COMMIT marker in a partition it wrote shows it committed
        (the coordinator decides once for all its partitions); an ABORT marker raises
        :class:`TransactionLostError`, whatever else is found. A marker still being
        written is waited for, up to :data:`RETRY_FOR_S` in all: each partition is read
        once, from its recorded offset on, each retry going on from where the last read
        stopped (never from the start again).

        When no marker can be read in any partition, the coordinator's state decides as it
        did before markers were read (:meth:`_check_completed`), with a warning saying
        why: the topic was deleted; retention deleted the records up to the recorded
        offset, or the log was truncated below it; the log cleaner of a compacted topic
        removed the marker (no marker of the producer id up to the high watermark,
        although the coordinator has moved past the transaction, so that its markers were
        all written); or the brokers refuse reading the topic (no READ ACL). In a topic
        that is not compacted, a marker missing once the coordinator moved past the
        transaction is not explained: that raises."""
        deadline = time.monotonic() + RETRY_FOR_S
        starts = {(t, p): start for t, p, start in txn.partitions}
        position = dict(starts)
        #: (topic, partition) -> why its marker cannot be read
        unreadable: dict[tuple[str, int], str] = {}
        committed: list[tuple[str, int]] = []
        pending = [(t, p) for t, p, _ in txn.partitions]
        attempt = 0
        while pending:
            waiting: list[tuple[str, int]] = []  # scanned to the high watermark, no marker
            for topic, partition in pending:
                start = position[(topic, partition)]
                kind, reached = self._scan(topic, partition, start, txn.producer_id, deadline)
                position[(topic, partition)] = reached
                if kind == "commit":
                    committed.append((topic, partition))
                elif kind == "abort":
                    raise TransactionLostError(
                        f"{self._what(txn, topic, partition)} was aborted before it could be "
                        "committed: its partition holds the ABORT marker. Either "
                        f"{fenced_message(txn.transactional_id)}; or the broker aborted it "
                        "when its transaction.timeout.ms expired before the checkpoint "
                        "holding it was committed (raise KafkaSink properties "
                        "{'transaction.timeout.ms': ...} above the checkpoint interval plus "
                        "timeout plus a restart). Its records were not published"
                    )
                elif kind in ("none", "timeout"):
                    waiting.append((topic, partition))
                else:
                    unreadable[(topic, partition)] = kind
            if not waiting or committed:
                break
            if self._markers_written(txn):
                for topic, partition in waiting:
                    if self._compacted(topic) is not True:
                        raise RuntimeError(
                            f"{self._what(txn, topic, partition)} cannot be shown committed: "
                            f"the coordinator says its epoch moved on (EndTxn error {code}) "
                            "and has written its markers, but no COMMIT or ABORT marker of "
                            f"producer id {txn.producer_id} is in {topic}[{partition}] from "
                            f"offset {starts[(topic, partition)]} "
                            f"up to its high watermark ({position[(topic, partition)]}), and "
                            "the topic is not compacted (cleanup.policy), so no log cleaner "
                            "removed it: the log was changed under it. The commit is not "
                            "counted as done (retried on the next restore)"
                        )
                    unreadable[(topic, partition)] = "compacted"
                break
            if time.monotonic() > deadline:
                for topic, partition in waiting:
                    if self._compacted(topic) is True:
                        unreadable[(topic, partition)] = "compacted"
                        continue
                    raise RuntimeError(
                        f"{self._what(txn, topic, partition)} cannot be shown committed: the "
                        f"coordinator says its epoch moved on (EndTxn error {code}) but no "
                        f"COMMIT or ABORT marker of producer id {txn.producer_id} was found "
                        f"in {topic}[{partition}] (read up to offset "
                        f"{position[(topic, partition)]}) within {RETRY_FOR_S:.0f} s, so "
                        "the commit is not counted as done (retried on the next restore)"
                    )
                break
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])  # markers being written
            attempt += 1
            pending = waiting
        if committed:
            log.debug(
                "Kafka transaction %s (producer id %d, epoch %d) was committed before (EndTxn "
                "error %d; its COMMIT marker is in %s)",
                txn.transactional_id,
                txn.producer_id,
                txn.epoch,
                code,
                ", ".join(f"{t}[{p}]" for t, p in committed),
            )
            return
        for (topic, partition), why in sorted(unreadable.items()):
            log.warning(
                "Kafka transaction %s (producer id %d, epoch %d): its marker in %s[%d] (from "
                "offset %d) cannot be read: %s. Its outcome is taken from the transaction "
                "coordinator's state instead, as before lockgate read markers (an abort "
                "followed by another transaction of the id is not seen)",
                txn.transactional_id,
                txn.producer_id,
                txn.epoch,
                topic,
                partition,
                starts[(topic, partition)],
                _UNREADABLE.get(why, why),
            )
        self._check_completed(txn, code)

    @staticmethod
    def _what(txn: KafkaTransaction, topic: str, partition: int) -> str:
        start = {(t, p): s for t, p, s in txn.partitions}.get((topic, partition), -1)
        return (
            f"Kafka transaction {txn.transactional_id!r} (producer id {txn.producer_id}, "
            f"epoch {txn.epoch}, {txn.records} records, its marker looked for in "
            f"{topic}[{partition}] from offset {start})"
        )

    def _markers_written(self, txn: KafkaTransaction) -> bool:
        """Whether the coordinator has moved past ``txn`` with its markers all written: the
        id is described with another producer id or a later epoch and is not in the middle
        of ending a transaction (the markers of the one before are written before another
        can begin), or the id is forgotten."""
        described = self.describe([txn.transactional_id]).get(txn.transactional_id)
        if described is None:
            return True
        state = described.state.value
        moved = (int(described.producer_id), int(described.producer_epoch)) != (
            txn.producer_id,
            txn.epoch,
        )
        return state not in _ENDING and (moved or state in _SETTLED)

    def _compacted(self, topic: str) -> bool | None:
        """Whether ``topic``'s cleanup.policy holds ``compact`` (its log cleaner removes
        transaction markers delete.retention.ms after the records they end are
        superseded); None when it cannot be read."""
        if topic not in self._policies:
            from kafka.admin import ConfigResource, ConfigResourceType

            policy: str | None = None
            try:
                described = self._retrying(
                    lambda: self._admin().describe_configs(
                        [ConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": None})],
                        config_filter="all",
                    ),
                    final=frozenset(_REFUSED | _NO_TOPIC),
                )
                entry = described.get("topic", {}).get(topic, {}).get("cleanup.policy")
                policy = None if entry is None else entry.get("value")
            except Exception as e:  # noqa: BLE001 - unknown policy: the check is skipped
                log.debug("cannot read the cleanup.policy of topic %s: %s", topic, e)
            self._policies[topic] = (
                None if policy is None else "compact" in [p.strip() for p in policy.split(",")]
            )
        return self._policies[topic]

    def marker(self, topic: str, partition: int, start: int, producer_id: int) -> str | None:
        """``"commit"`` or ``"abort"``: the first transaction marker (control batch) of
        ``producer_id`` at or after offset ``start`` of ``topic[partition]``; None when
        there is none up to the partition's high watermark (or none was found within
        :data:`RETRY_FOR_S`); ``"gone"`` when its records up to ``start`` cannot be read
        any more (the topic deleted, retention, truncation) or reading is refused."""
        kind, _ = self._scan(topic, partition, start, producer_id, time.monotonic() + RETRY_FOR_S)
        return (
            kind if kind in ("commit", "abort") else None if kind in ("none", "timeout") else "gone"
        )

    def _scan(
        self, topic: str, partition: int, start: int, producer_id: int, deadline: float
    ) -> tuple[str, int]:
        """Read the batch headers of ``topic[partition]`` from offset ``start`` for the
        first control batch of ``producer_id``, until the high watermark or ``deadline``.
        Returns ``(kind, offset reached)``, kind one of ``"commit"``, ``"abort"``,
        ``"none"`` (the high watermark reached), ``"timeout"`` (``deadline`` passed
        first), ``"deleted"`` (no such topic), ``"retention"`` (records up to ``start``
        deleted), ``"truncated"`` (the log ends below ``start``) or ``"refused"`` (no READ
        ACL). Records of other producers are skipped by their batch's length; what is
        fetched is bounded by :data:`_MARKER_FETCH_BYTES` a request."""
        from kafka.protocol.consumer.fetch import FetchRequest
        from kafka.record import MemoryRecords
        from kafka.structs import TopicPartition

        admin = self._admin()
        tp = TopicPartition(topic, partition)
        part = FetchRequest.FetchTopic.FetchPartition

        async def fetch(offset: int) -> Any:
            leaders = await admin._async_get_leader_for_partitions([tp])
            request = FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=_MARKER_FETCH_BYTES,
                isolation_level=0,  # read_uncommitted: markers up to the high watermark
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            part(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=_MARKER_FETCH_BYTES,
                            )
                        ],
                    )
                ],
                max_version=12,  # topics by name
            )
            return await admin._manager.send(request, node_id=next(iter(leaders)))

        offset = start
        while True:
            try:
                response = self._retrying(
                    lambda o=offset: admin._manager.run(fetch, o),
                    deadline=deadline,
                    final=frozenset(_NO_TOPIC | _REFUSED),
                )
            except Exception as e:
                if error_code(e) in _NO_TOPIC:
                    return "deleted", offset
                if error_code(e) in _REFUSED:
                    return "refused", offset
                raise
            data = response.responses[0].partitions[0]
            error = int(data.error_code)
            if error in _NO_TOPIC:
                return "deleted", offset
            if error in _REFUSED:
                return "refused", offset
            if error == _OFFSET_OUT_OF_RANGE:
                return self._out_of_range(tp, offset), offset
            if error != _NONE:
                raise RuntimeError(
                    f"reading the transaction markers of {topic}[{partition}] from offset "
                    f"{offset} failed: Fetch error code {error}"
                )
            records = MemoryRecords(bytes(data.records or b""))
            moved = False
            while (batch := records.next_batch()) is not None:
                moved = True
                offset = batch.next_offset
                if getattr(batch, "is_control_batch", False) and batch.producer_id == producer_id:
                    if batch.base_offset < start:
                        continue
                    return ("abort" if next(iter(batch)).abort else "commit"), offset
            if not moved or offset >= int(data.high_watermark):
                return "none", offset
            if time.monotonic() > deadline:
                return "timeout", offset

    def _out_of_range(self, tp: Any, offset: int) -> str:
        """Why ``offset`` of ``tp`` cannot be fetched: ``"retention"`` (the log starts
        past it) or ``"truncated"`` (the log ends below it)."""
        from kafka.admin import OffsetSpec

        try:
            first = self._retrying(
                lambda: self._admin().list_partition_offsets({tp: OffsetSpec.EARLIEST}),
                final=frozenset(_NO_TOPIC | _REFUSED),
            )
            return "retention" if int(first[tp].offset) > offset else "truncated"
        except Exception as e:  # noqa: BLE001 - unknown: the cautious answer
            log.debug("cannot read the log start offset of %s: %s", tp, e)
            return "retention"

    def _check_completed(self, txn: KafkaTransaction, code: int) -> None:
        """After EndTxn said the epoch moved on, for a transaction checkpointed without
        its offsets (by an older lockgate): was ``txn`` committed, or aborted by the
        broker? An abort by timeout leaves the id's state CompleteAbort (or PrepareAbort)
        one epoch on, with nothing begun since: that is a lost transaction. (Weaker than
        :meth:`_check_markers`: an abort followed by another transaction of the id is not
        seen.)"""
        described = self.describe([txn.transactional_id]).get(txn.transactional_id)
        state = described.state.value if described is not None else "unknown id"
        if (
            described is not None
            and state in ("CompleteAbort", "PrepareAbort", "PrepareEpochFence")
            and int(described.producer_id) == txn.producer_id
            and int(described.producer_epoch) <= txn.epoch + 1
        ):
            raise TransactionLostError(
                f"Kafka transaction {txn.transactional_id!r} (producer id {txn.producer_id}, "
                f"epoch {txn.epoch}, {txn.records} records) was aborted by the broker before "
                "it could be committed (state "
                f"{state}): most likely its transaction.timeout.ms expired before the "
                "checkpoint holding it completed and was committed. Its records were not "
                "published; raise the timeout (KafkaSink properties "
                "{'transaction.timeout.ms': ...}, at most the broker's "
                "transaction.max.timeout.ms) above the checkpoint interval plus timeout plus "
                "the time a restart takes"
            )
        log.debug(
            "Kafka transaction %s (producer id %d, epoch %d) was completed before (EndTxn "
            "error %d, state now %s, epoch %s): nothing to commit again",
            txn.transactional_id,
            txn.producer_id,
            txn.epoch,
            code,
            state,
            getattr(described, "producer_epoch", None),
        )

    def _end_txn(self, txn: KafkaTransaction) -> int:
        """Send EndTxn(commit) for ``txn`` to its coordinator until the answer is not a
        temporary one (or :data:`RETRY_FOR_S` passed); returns the error code."""
        from kafka.protocol.metadata.find_coordinator import CoordinatorType
        from kafka.protocol.producer.transaction import EndTxnRequest

        admin = self._admin()
        tid = txn.transactional_id

        async def end() -> int:
            ids = await admin._find_coordinator_ids([tid], key_type=CoordinatorType.TRANSACTION)
            request = EndTxnRequest(
                transactional_id=tid,
                producer_id=txn.producer_id,
                producer_epoch=txn.epoch,
                committed=True,
            )
            response = await admin._manager.send(request, node_id=ids[tid])
            return int(response.error_code)

        deadline = time.monotonic() + RETRY_FOR_S
        for attempt in range(10_000):
            code = int(admin._manager.run(end))
            if code not in _RETRIABLE or time.monotonic() > deadline:
                return code
            if code in (_NOT_COORDINATOR, _COORDINATOR_NOT_AVAILABLE):
                admin._manager.cluster._coordinators.pop((CoordinatorType.TRANSACTION, tid), None)
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])  # broker backoff
        return code  # pragma: no cover - the deadline ends the loop first

    def _retrying(
        self, request: Any, *, deadline: float | None = None, final: frozenset[int] = frozenset()
    ) -> Any:
        """``request()`` retried while kafka-python says the failure is retriable (until
        ``deadline``, :data:`RETRY_FOR_S` from now by default), except for the error
        codes in ``final``, raised at once."""
        if deadline is None:
            deadline = time.monotonic() + RETRY_FOR_S
        attempt = 0
        while True:
            try:
                return request()
            except Exception as e:
                if (
                    not getattr(e, "retriable", False)
                    or error_code(e) in final
                    or time.monotonic() > deadline
                ):
                    raise
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])  # broker backoff
            attempt += 1


def error_code(error: BaseException) -> int | None:
    """The Kafka protocol error code of a kafka-python ``BrokerResponseError`` (None for
    any other exception)."""
    code = getattr(error, "errno", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


#: (brokers, topics) whose commits cannot be verified, warned about once per process
_UNVERIFIABLE_WARNED: set[tuple[str, tuple[str, ...]]] = set()


def _warn_unverifiable(bootstrap_servers: str, topics: list[str], error: BaseException) -> None:
    """Log once per process and topics at WARNING that the brokers refused what verifying
    a commit's outcome needs, and which ACL would allow it."""
    key = (bootstrap_servers, tuple(topics))
    if key in _UNVERIFIABLE_WARNED:
        return
    _UNVERIFIABLE_WARNED.add(key)
    log.warning(
        "KafkaSink cannot record where the markers of its transactions in topic(s) %s will "
        "be: the brokers %s refused it (%s: %s). The sink's principal lacks READ on those "
        "topics (DescribeProducers and reading transaction markers need READ; producer ACLs "
        "give WRITE and DESCRIBE only). Commits after a restore fall back to the "
        "transaction coordinator's state, which cannot tell a transaction aborted by another "
        "producer of its transactional id that has committed one of its own since. To have "
        "every commit verified, allow READ on the output topic(s) (kafka-acls --add "
        "--allow-principal User:<sink principal> --operation Read --topic <topic>; see "
        "docs/security.md). Logged once per process",
        ", ".join(topics),
        bootstrap_servers,
        type(error).__name__,
        error,
    )


def producer_config(
    bootstrap_servers: str, properties: dict[str, Any], tid: str, timeout_ms: int
) -> dict[str, Any]:
    """librdkafka settings of a transactional producer for ``tid``.

    ``enable.sparse.connections`` is off unless ``properties`` set it: a transactional
    producer's first request (FindCoordinator, then InitProducerId) cannot go over the
    bootstrap connection, and with sparse connections librdkafka connects to a broker it
    learned from the metadata only when its coordinator query timer fires again, 500 ms
    later. The exactly-once sink initializes a producer per checkpoint, so that wait was
    most of a checkpoint at short intervals (measured: init_transactions p50 67 ms, max
    525 ms with it; p50 9 ms, max 142 ms without, on a 2-core machine under load)."""
    return {
        "enable.sparse.connections": False,
        **properties,
        "bootstrap.servers": bootstrap_servers,
        "transactional.id": tid,
        "transaction.timeout.ms": timeout_ms,
        "enable.idempotence": True,
        "acks": "all",
    }


def fence_and_abort(
    bootstrap_servers: str, properties: dict[str, Any], tid: str, timeout_ms: int
) -> None:
    """Abort the transaction open under ``tid`` (if any) and fence its older producers,
    by initializing a producer for ``tid`` (Kafka's ``InitProducerId``)."""
    ck = confluent_kafka()
    producer = ck.Producer(
        librdkafka_config(producer_config(bootstrap_servers, properties, tid, timeout_ms))
    )
    try:
        producer.init_transactions(RETRY_FOR_S)
    except ck.KafkaException as e:
        raise RuntimeError(
            f"aborting the Kafka transaction open under {tid!r} failed: {e.args[0]}"
        ) from e
    finally:
        del producer


def broker_transaction_max_timeout_ms(
    bootstrap_servers: str, properties: dict[str, Any], timeout_s: float = 30.0
) -> int:
    """The smallest ``transaction.max.timeout.ms`` of the cluster's brokers."""
    ck = confluent_kafka()
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(librdkafka_config({**properties, "bootstrap.servers": bootstrap_servers}))
    try:
        brokers = admin.list_topics(timeout=timeout_s).brokers
        resources = [ConfigResource(ConfigResource.Type.BROKER, str(b)) for b in brokers]
        values = []
        for future in admin.describe_configs(resources).values():
            entry = future.result(timeout_s).get("transaction.max.timeout.ms")
            if entry is not None and entry.value is not None:
                values.append(int(entry.value))
    except ck.KafkaException as e:
        raise ConnectionError(
            f"cannot read the brokers' transaction.max.timeout.ms from {bootstrap_servers}: "
            f"{e.args[0]}"
        ) from e
    return min(values) if values else 900_000
