"""Kafka transactions seen from outside the producer that began them: what the
exactly-once :class:`~lockgate.connectors.kafka_sink.KafkaSink` needs to commit a
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
  ended a transaction, it describes only that one.) A transaction recorded by a lockgate
  before this check (no offsets in the checkpoint) falls back to the coordinator's state;
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

from ..errors import LockgateError
from .kafka_common import confluent_kafka, kafka_python
from .kafka_logging import librdkafka_config

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

        ends = self._retrying(
            lambda: self._admin().list_partition_offsets({tp: OffsetSpec.LATEST for tp in wrote})
        )
        states = self._retrying(lambda: self._admin().describe_producers(wrote))
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
        the module docstring); anything but a COMMIT marker in every partition it wrote
        raises. A marker still being written is waited for (:data:`RETRY_FOR_S`)."""
        deadline = time.monotonic() + RETRY_FOR_S
        left = list(txn.partitions)
        attempt = 0
        while left:
            topic, partition, start = left[0]
            kind = self.marker(topic, partition, start, txn.producer_id)
            if kind == "commit":
                left.pop(0)
                continue
            if kind == "gone":
                log.warning(
                    "Kafka transaction %s (producer id %d, epoch %d): the records of %s[%d] "
                    "up to offset %d, its own among them, were deleted (retention) before "
                    "its outcome was read; committed or not, no reader can see them any more",
                    txn.transactional_id,
                    txn.producer_id,
                    txn.epoch,
                    topic,
                    partition,
                    start,
                )
                left.pop(0)
                continue
            what = (
                f"Kafka transaction {txn.transactional_id!r} (producer id {txn.producer_id}, "
                f"epoch {txn.epoch}, {txn.records} records, its marker looked for in "
                f"{topic}[{partition}] from offset {start})"
            )
            if kind == "abort":
                raise TransactionLostError(
                    f"{what} was aborted before it could be committed: its partition holds "
                    f"the ABORT marker. Either {fenced_message(txn.transactional_id)}; or "
                    "the broker aborted it when its transaction.timeout.ms expired before the "
                    "checkpoint holding it was committed (raise KafkaSink properties "
                    "{'transaction.timeout.ms': ...} above the checkpoint interval plus "
                    "timeout plus a restart). Its records were not published"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{what} cannot be shown committed: the coordinator says its epoch moved "
                    f"on (EndTxn error {code}) but no COMMIT or ABORT marker of producer id "
                    f"{txn.producer_id} is at or after offset {start} of {topic}[{partition}] within "
                    f"{RETRY_FOR_S:.0f} s, so the commit is not counted as done (retried on "
                    "the next restore)"
                )
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])  # markers being written
            attempt += 1
        log.debug(
            "Kafka transaction %s (producer id %d, epoch %d) was committed before (EndTxn "
            "error %d; its COMMIT markers are in the log)",
            txn.transactional_id,
            txn.producer_id,
            txn.epoch,
            code,
        )

    def marker(self, topic: str, partition: int, start: int, producer_id: int) -> str | None:
        """``"commit"`` or ``"abort"``: the first transaction marker (control batch) of
        ``producer_id`` at or after offset ``start`` of ``topic[partition]``; None when
        there is none up to the partition's high watermark; ``"gone"`` when retention
        deleted the records up to ``start``. Reads batch headers only (records of other
        producers are skipped by their batch's length)."""
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
            response = self._retrying(lambda o=offset: admin._manager.run(fetch, o))
            data = response.responses[0].partitions[0]
            if int(data.error_code) == _OFFSET_OUT_OF_RANGE and offset == start:
                return "gone"
            if int(data.error_code) != _NONE:
                raise RuntimeError(
                    f"reading the transaction markers of {topic}[{partition}] from offset "
                    f"{offset} failed: Fetch error code {data.error_code} (the records may be "
                    "gone: retention deleted them before the commit could be verified)"
                )
            records = MemoryRecords(bytes(data.records or b""))
            moved = False
            while (batch := records.next_batch()) is not None:
                moved = True
                offset = batch.next_offset
                if getattr(batch, "is_control_batch", False) and batch.producer_id == producer_id:
                    if batch.base_offset < start:
                        continue
                    return "abort" if next(iter(batch)).abort else "commit"
            if not moved or offset >= int(data.high_watermark):
                return None

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

    def _retrying(self, request: Any) -> Any:
        """``request()`` retried while kafka-python says the failure is retriable."""
        deadline = time.monotonic() + RETRY_FOR_S
        attempt = 0
        while True:
            try:
                return request()
            except Exception as e:
                if not getattr(e, "retriable", False) or time.monotonic() > deadline:
                    raise
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])  # broker backoff
            attempt += 1


def producer_config(
    bootstrap_servers: str, properties: dict[str, Any], tid: str, timeout_ms: int
) -> dict[str, Any]:
    """librdkafka settings of a transactional producer for ``tid``."""
    return {
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
