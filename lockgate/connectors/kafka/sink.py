"""``KafkaSink``: records to an Apache Kafka topic, exactly once through Kafka
transactions (M-X1, M-X2, M-X3), or at least once, or fire and forget.

``delivery="exactly_once"`` (default) is a :class:`TwoPhaseCommitSink`: each subtask
writes each checkpoint interval in one Kafka transaction; the checkpoint barrier flushes
it (pre-commit: every record acknowledged by the brokers, the transaction still open),
and the checkpoint's completion notice commits it. Readers with
``isolation.level=read_committed`` see a checkpoint interval's records once, when its
checkpoint has completed, and never records of an interval that a failure rolled back.

* **Transactional ids.** ``<prefix>-<subtask>-<slot>``: the prefix is
  ``transactional_id_prefix``, by default ``lockgate-<job name>-<sink uid>-<hash>``
  (:func:`default_prefix`; the hash is of the pair, so job ``orders`` with sink
  ``eu-out`` and job ``orders-eu`` with sink ``out`` get different prefixes: two jobs
  with different names, or two sinks of one job, never share one; give two jobs with one
  name different prefixes). A subtask uses a few slots in turn (the transaction being
  written, the ones pre-committed and waiting for their checkpoint's commit) and a fresh
  producer per transaction, so every transaction has its own producer epoch. Two
  producers of one transactional id fence each other (the later one aborts the earlier
  one's open transaction): the error then says that another producer with the same
  transactional id took over, naming the id.
* **Commits are verified.** A commit counts as done only when the broker accepted it
  for the transaction's own producer id and epoch, or the transaction's COMMIT markers
  are in the partitions it wrote (:meth:`.TransactionAdmin.commit`); a transaction that
  someone else aborted fails the job, never passes as committed.
* **After a failure** the restored job commits the pending transactions of the
  checkpoint it restores, by their recorded producer id and epoch (an ``EndTxn`` request
  from any process, see :mod:`.transactions`), then aborts every other transaction
  still open under the prefix (those of the failed attempt, and of checkpoints that
  never completed), which also fences the failed attempt's producers. Subtask ``i``
  handles the ids of old subtasks ``j`` with ``j % parallelism == i``, so a rescaled
  restore covers every old id once. When the job ends (finished, cancelled or failed for
  good) the driver commits what the newest completed checkpoint holds and aborts
  everything else open under the prefix: no ``read_committed`` reader is left waiting
  behind a transaction of the job.
* **Transaction timeout.** A transaction stays open from one checkpoint until the next
  one's commit, so the producers' ``transaction.timeout.ms`` (default: 15 minutes, or the
  brokers' ``transaction.max.timeout.ms`` if smaller) must exceed the checkpoint interval
  plus the checkpoint timeout; the job is refused at start otherwise. A transaction the
  broker aborted anyway (a restart that took longer than the timeout) makes the restore
  fail with :class:`~lockgate.connectors.kafka.transactions.TransactionLostError`, never
  pass silently.
* **Restoring a checkpoint of an older lockgate** (whose default prefix was
  ``lockgate-<job name>-<sink uid>``, :func:`legacy_default_prefix`): its transactions
  are committed or aborted by the ids recorded in it, never by a prefix computed again;
  when those ids carry this job's and sink's old default prefix, the lingering
  transactions of the run that wrote it are looked for under that prefix too; new
  transactions use the current prefix.

``delivery="at_least_once"``: one idempotent producer per subtask; the checkpoint
barrier flushes it and the checkpoint completes only when every record before the
barrier is acknowledged, so a restore may write records again (duplicates) but never
loses one. ``delivery="none"``: records are sent as they come and flushed at the end of
the input only; a failure may lose what was in flight.

Records: ``format="json"`` writes each record as JSON (dicts, lists, numbers, ...);
``"text"`` writes ``str`` records as UTF-8; ``"bytes"`` writes ``bytes`` as they are.
``"avro"``, ``"protobuf"`` and ``"json_schema"`` write each record encoded against
``schema`` (an Avro schema or a pyarrow schema; a Protobuf message class; a JSON
Schema) in the Confluent wire format, framed with the schema's id in
``schema_registry``: the schema is registered (``auto_register=True``, the registry's
compatibility rule deciding) or looked up (``auto_register=False``) under the subject
``subject_strategy`` names (``"topic"``: ``<topic>-value``; ``"record"``: the record
type's fully-qualified name; ``"topic_record"``: ``<topic>-<name>``) on the driver
before the job's first record, so a schema the registry refuses, or a subject that does
not hold it, fails the job at start naming the subject (with a topic function, the
``topic`` and ``topic_record`` subjects are resolved when a topic's first record comes).
Encoding is the only difference: every delivery mode works as with the other formats.
See docs/schema_registry.md.
A changelog (the sink then accepts updates and deletes): ``format="upsert"`` with
``key=`` (a field or a list of fields) writes ``+I``/``+U`` rows as JSON under the JSON
object of their key fields and ``-D`` (and a ``-U`` not followed by its ``+U``) as
tombstones, for compacted topics; ``format="debezium-json"`` writes Debezium envelopes
(``c``, ``u``, ``d``) that ``KafkaSource(format="debezium-json")`` reads back
(:mod:`.changelog`, docs/debezium.md).
``key``: None (no key: the producer spreads records over partitions), a field name of
dict records, or a function of the record returning ``str``, ``bytes`` or None.
``topic``: a name, or a function of the record returning one. A record that cannot be
encoded, or that is larger than the producer's ``message.max.bytes`` or the topic's
``max.message.bytes``, fails the job with its position (subtask, the record's number in
the attempt, its topic, key and size), never dropped: a record larger than the limits
(without compression) is refused before it is sent; one the broker refuses is named by
its delivery report, also when a later record's send is what failed.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from ...core.batch import Batch
from ...errors import ConfigurationError
from ...runtime.context import RuntimeContext
from ..base import SinkWriter
from ..schema_registry.subjects import check_strategy
from ..two_phase_commit import TwoPhaseCommitSink, TwoPhaseCommitWriter
from .changelog import CHANGELOG_FORMATS, check_key
from .client_logging import librdkafka_config
from .common import (
    check_bootstrap_servers,
    check_format,
    check_properties,
    check_schema_registry,
    confluent_kafka,
)
from .record_encoder import RecordEncoder
from .sink_options import check_key_format, ms, registry_writer, topic_name_ok
from .transactions import (
    RETRY_FOR_S,
    KafkaTransaction,
    TransactionAdmin,
    broker_transaction_max_timeout_ms,
    fence_and_abort,
    fenced_message,
    is_fenced,
    parse_transactional_id,
    prefix_of,
    producer_config,
    transactional_id,
)

log = logging.getLogger(__name__)

DELIVERIES = ("exactly_once", "at_least_once", "none")
#: the transaction timeout the sink asks for unless ``properties`` set one (Kafka's
#: default ``transaction.max.timeout.ms``; a smaller broker maximum lowers it)
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
_PREFIX_CHARS = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_RESERVED = {
    "bootstrap.servers": "use the bootstrap_servers argument",
    "transactional.id": "use transactional_id_prefix (ids are <prefix>-<subtask>-<slot>)",
    "enable.idempotence": "delivery='exactly_once' and 'at_least_once' enable it",
    "on_delivery": "the sink reports failed deliveries itself",
}


class KafkaSink(TwoPhaseCommitSink[KafkaTransaction]):
    """Writes records to the Kafka topic ``topic`` (see the module docstring for the
    guarantees of each ``delivery``).

    ``properties``: further librdkafka producer settings (e.g. ``linger.ms``,
    ``compression.type``, security settings; ``transaction.timeout.ms`` in ms).

    ``format`` ``"avro"``, ``"protobuf"`` or ``"json_schema"`` needs
    ``schema_registry`` (a :class:`~lockgate.connectors.schema_registry.client.SchemaRegistry`)
    and ``schema``; ``subject_strategy`` (``"topic"``, ``"record"``,
    ``"topic_record"``) and ``auto_register`` say under which subject the schema is
    registered or looked up at start (see the module docstring). ``key_format`` (one of
    those formats) with ``key_schema`` encodes the keys ``key`` gives the same way,
    under the keys' subject (``<topic>-key`` for ``"topic"``); a None key stays None.
    """

    default_name = "kafka sink"
    #: exactly-once: a checkpoint's flush and the requests that record where the
    #: transaction's marker will be run on the checkpoint's asynchronous thread, so the
    #: task writes the next transaction meanwhile (see ``pre_commit``)
    pre_commits_in_background = True

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        topic: str | Callable[[Any], str],
        *,
        key: str | Callable[[Any], Any] | None = None,
        format: str = "json",
        delivery: str = "exactly_once",
        transactional_id_prefix: str | None = None,
        properties: dict[str, Any] | None = None,
        schema_registry: Any = None,
        schema: Any = None,
        subject_strategy: str = "topic",
        auto_register: bool = True,
        key_format: str | None = None,
        key_schema: Any = None,
    ) -> None:
        owner = "KafkaSink"
        self.bootstrap_servers = check_bootstrap_servers(owner, bootstrap_servers)
        if not (callable(topic) or (isinstance(topic, str) and topic_name_ok(topic))):
            raise ConfigurationError(
                f"KafkaSink topic must be a topic name (letters, digits, '.', '_', '-'; at "
                f"most 249 characters) or a function of the record returning one, got {topic!r}"
            )
        self.topic = topic
        #: the key fields of a changelog format (``"upsert"``, ``"debezium-json"``)
        self.changelog_key: tuple[str, ...] | None = None
        if format in CHANGELOG_FORMATS:
            self.changelog_key = check_key(owner, str(format), key)
            if key_format is not None:
                raise ConfigurationError(
                    f"KafkaSink format={format!r} writes its keys as JSON of the key fields; "
                    "key_format is not supported with it: remove it"
                )
        elif not (key is None or callable(key) or (isinstance(key, str) and key)):
            raise ConfigurationError(
                "KafkaSink key must be None (no key), a field name of dict records, or a "
                f"function of the record returning str, bytes or None, got {key!r}"
            )
        self.key = key
        if format in CHANGELOG_FORMATS:
            self.format = str(format)
        else:
            try:
                self.format = check_format(owner, format)
            except ConfigurationError as e:
                raise ConfigurationError(
                    f"{e}; or, for a changelog, 'upsert' (keyed rows, deletes as tombstones) "
                    "or 'debezium-json' (Debezium change events)"
                ) from None
        key_format = check_key_format(key_format, key, key_schema)
        check_schema_registry(
            owner, schema_registry, {"format": self.format, "key_format": key_format}
        )
        check_strategy(owner, subject_strategy)
        if not isinstance(auto_register, bool):
            raise ConfigurationError(
                "KafkaSink auto_register must be True (register the schema under its subject "
                f"at start) or False (only look it up), got {auto_register!r}"
            )
        #: the writers of a registry format's values and keys (None: not one)
        self.registry_writer = registry_writer(
            self.format, schema_registry, schema, subject_strategy, auto_register
        )
        self.key_writer = registry_writer(
            key_format, schema_registry, key_schema, subject_strategy, auto_register, key=True
        )
        if delivery not in DELIVERIES:
            raise ConfigurationError(
                f"KafkaSink delivery must be one of {', '.join(repr(d) for d in DELIVERIES)} "
                "('exactly_once': Kafka transactions committed with checkpoints; "
                "'at_least_once': flushed on every checkpoint, duplicates after a restore; "
                f"'none': no guarantee), got {delivery!r}"
            )
        self.delivery = delivery
        if transactional_id_prefix is not None and not (
            isinstance(transactional_id_prefix, str)
            and _PREFIX_CHARS.match(transactional_id_prefix)
        ):
            raise ConfigurationError(
                "KafkaSink transactional_id_prefix must be 1 to 200 letters, digits, '.', "
                f"'_' or '-', got {transactional_id_prefix!r}"
            )
        if transactional_id_prefix is not None and delivery != "exactly_once":
            raise ConfigurationError(
                f"KafkaSink transactional_id_prefix is for delivery='exactly_once' only "
                f"(delivery is {delivery!r}): remove it, or choose exactly_once"
            )
        self.transactional_id_prefix = transactional_id_prefix
        self.properties = check_properties(owner, properties, reserved=_RESERVED)
        timeout = self.properties.get("transaction.timeout.ms")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1000
        ):
            raise ConfigurationError(
                "KafkaSink properties['transaction.timeout.ms'] must be an int of "
                f"milliseconds >= 1000, got {timeout!r}"
            )
        self._reset()

    def _reset(self) -> None:
        """The per-subtask runtime fields (never pickled)."""
        self._ctx: RuntimeContext | None = None
        self._admin: TransactionAdmin | None = None
        self._encoder: RecordEncoder | None = None
        self._timeout_ms = int(
            self.properties.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
        )
        #: transactional id -> the producer writing or holding its open transaction
        self._live: dict[str, Any] = {}
        #: slots with a transaction open (written to, or pre-committed and not committed)
        self._busy: set[int] = set()
        #: (slot, future producer) initialized in the background for the next transaction
        self._spare: tuple[int, concurrent.futures.Future[Any]] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_ctx", "_admin", "_encoder", "_live", "_busy", "_spare", "_pool"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    # ---------------------------------------------------------------- configuration

    @property
    def commits_on_checkpoint(self) -> bool:
        return self.delivery == "exactly_once"

    @property
    def accepts_changes(self) -> bool:
        """True for the changelog formats (``"upsert"``, ``"debezium-json"``), which write
        updates and deletes (:mod:`.changelog`); the others take inserts only."""
        return self.format in CHANGELOG_FORMATS

    def check_before_run(self, plan: Any = None) -> None:
        """On the driver: for exactly-once, the producers' transaction timeout must be
        allowed by the brokers and outlast a checkpoint interval plus its timeout; then,
        once every other check passed (a job refused at start adds nothing to a shared
        registry), a registry format's schema is registered or looked up under its
        subject (refused by the registry's compatibility rule, or missing with
        ``auto_register=False``: a ConfigurationError naming the subject)."""
        if self.delivery == "exactly_once":
            self._check_transaction_timeout(plan)
        for writer in (self.registry_writer, self.key_writer):
            if writer is not None:
                writer.check_at_start(None if callable(self.topic) else self.topic)

    def _check_transaction_timeout(self, plan: Any) -> None:
        """The exactly-once producers' transaction timeout, checked against the brokers'
        limit and the checkpoint interval plus timeout of ``plan``."""
        broker_max = broker_transaction_max_timeout_ms(self.bootstrap_servers, self.properties)
        asked = self.properties.get("transaction.timeout.ms")
        if asked is not None and asked > broker_max:
            raise ConfigurationError(
                f"KafkaSink properties['transaction.timeout.ms'] = {asked} ms is over the "
                f"brokers' transaction.max.timeout.ms ({broker_max} ms): lower it, or raise "
                "the brokers' limit"
            )
        timeout_ms = asked if asked is not None else min(DEFAULT_TRANSACTION_TIMEOUT_MS, broker_max)
        checkpoint = getattr(plan, "checkpoint", None)
        interval = ms(getattr(checkpoint, "interval", None))
        if interval is None:
            return
        needed = interval + (ms(getattr(checkpoint, "timeout", None)) or 0)
        if timeout_ms <= needed:
            where = (
                f"properties['transaction.timeout.ms'] = {asked} ms"
                if asked is not None
                else f"the brokers' transaction.max.timeout.ms = {broker_max} ms"
            )
            raise ConfigurationError(
                f"KafkaSink (exactly_once): a transaction stays open from one checkpoint to "
                f"the next one's commit, up to the checkpoint interval ({interval} ms) plus "
                f"the checkpoint timeout, {needed} ms in all, but {where} would let the "
                "broker abort it before that: raise the transaction timeout (and the "
                "brokers' transaction.max.timeout.ms if needed) or lower the checkpoint "
                "interval or timeout (env.get_checkpoint_config())"
            )

    def create_writer(self, ctx: RuntimeContext) -> SinkWriter:
        if self.delivery == "exactly_once":
            return TwoPhaseCommitWriter(self, ctx)
        return _DirectWriter(self, ctx)

    def prefix(self, ctx: RuntimeContext) -> str:
        """The transactional id prefix of this sink in the job ``ctx`` names."""
        if self.transactional_id_prefix is not None:
            return self.transactional_id_prefix
        return default_prefix(ctx.job_name, ctx.operator_uid)

    # ---------------------------------------------------------------- transactions

    def open(self, ctx: RuntimeContext) -> None:
        self._ctx = ctx
        self._encoder = RecordEncoder(self, ctx)
        if self.properties.get("transaction.timeout.ms") is None:
            broker_max = broker_transaction_max_timeout_ms(self.bootstrap_servers, self.properties)
            self._timeout_ms = min(DEFAULT_TRANSACTION_TIMEOUT_MS, broker_max)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"lockgate-kafka-producer-{ctx.subtask_index}"
        )

    def _tx_admin(self) -> TransactionAdmin:
        if self._admin is None:
            self._admin = TransactionAdmin(self.bootstrap_servers, self.properties)
        return self._admin

    def _tid(self, slot: int) -> str:
        assert self._ctx is not None, "open() first"
        return transactional_id(self.prefix(self._ctx), self._ctx.subtask_index, slot)

    def _new_producer(self, slot: int) -> Any:
        """A producer that initialized the transactional id of ``slot`` (which aborts
        anything open under it and fences its older producers)."""
        ck = confluent_kafka()
        assert self._encoder is not None
        config = producer_config(
            self.bootstrap_servers, self.properties, self._tid(slot), self._timeout_ms
        )
        producer = ck.Producer(
            librdkafka_config(
                {
                    **config,
                    "on_delivery": functools.partial(self._encoder.delivered, tid=self._tid(slot)),
                    "delivery.report.only.error": True,
                }
            )
        )
        try:
            producer.init_transactions(RETRY_FOR_S)
        except ck.KafkaException as e:
            raise RuntimeError(
                f"KafkaSink could not initialize transactional id {self._tid(slot)!r} on "
                f"{self.bootstrap_servers}: {e.args[0]}"
            ) from e
        return producer

    def _free_slot(self) -> int:
        slot = 0
        while slot in self._busy:
            slot += 1
        return slot

    def _prepare_spare(self) -> None:
        """Initialize a producer for the next free slot in the background, so that the
        checkpoint barrier does not wait for it."""
        if self._spare is None and self._pool is not None:
            slot = self._free_slot()
            self._spare = (slot, self._pool.submit(self._new_producer, slot))

    def begin_transaction(self) -> KafkaTransaction:
        spare, self._spare = self._spare, None
        if spare is not None and spare[0] not in self._busy:
            slot, producer = spare[0], spare[1].result(RETRY_FOR_S)
        else:
            if spare is not None:  # its slot was taken meanwhile: never the case today
                spare[1].result(RETRY_FOR_S)
            slot = self._free_slot()
            producer = self._new_producer(slot)
        producer.begin_transaction()
        tid = self._tid(slot)
        self._busy.add(slot)
        self._live[tid] = producer
        self._prepare_spare()
        return KafkaTransaction(tid)

    def write(self, transaction: KafkaTransaction, batch: Batch) -> None:
        assert self._encoder is not None, "open() first"
        producer = self._live[transaction.transactional_id]
        self._encoder.tid = transaction.transactional_id
        transaction.records += self._encoder.produce(producer, batch)

    def pre_commit(self, transaction: KafkaTransaction) -> None:
        """Flush: every record of ``transaction`` acknowledged; record its producer id
        and epoch (the transaction stays open). Runs on the checkpoint's asynchronous
        thread (``pre_commits_in_background``) while the task writes the next
        transaction through another producer: it touches only this transaction's
        producer and the transaction admin client (which nothing else of the task uses
        while a subtask runs, but the commit of a restored transaction, before any)."""
        assert self._encoder is not None, "open() first"
        producer = self._live[transaction.transactional_id]
        self._encoder.flush(producer, tid=transaction.transactional_id)
        if transaction.records:
            (
                transaction.producer_id,
                transaction.epoch,
                transaction.partitions,
            ) = self._tx_admin().pre_committed(transaction.transactional_id)

    def commit(self, transaction: KafkaTransaction) -> None:
        producer = self._live.pop(transaction.transactional_id, None)
        if producer is None:
            self._tx_admin().commit(transaction)
        else:
            try:
                _commit_live(producer, transaction)
            except Exception:
                # the open transaction is still committed by its identity on retry
                self._live[transaction.transactional_id] = producer
                raise
        self._release(transaction)

    def abort(self, transaction: KafkaTransaction) -> None:
        self._live.pop(transaction.transactional_id, None)
        fence_and_abort(
            self.bootstrap_servers, self.properties, transaction.transactional_id, self._timeout_ms
        )
        self._release(transaction)

    def recover_and_commit(self, transaction: KafkaTransaction) -> None:
        self._tx_admin().commit(transaction)

    def recover_and_abort(self, transaction: KafkaTransaction) -> None:
        fence_and_abort(
            self.bootstrap_servers, self.properties, transaction.transactional_id, self._timeout_ms
        )

    def abort_lingering(
        self, keep: list[KafkaTransaction], ctx: RuntimeContext, *, job_ended: bool = False
    ) -> None:
        """Abort every transaction open under this sink's prefix that no checkpoint will
        commit: in a subtask, those of the old subtasks it stands for (``j % parallelism
        == subtask``); on the driver at the end of the job, all of them. ``keep`` (the
        restored checkpoint's pending transactions, committed by their owners) is left
        alone, as is anything this subtask has open now."""
        kept = {t.identity for t in keep}
        for prefix, tid, described in self._lingering(keep, ctx):
            parsed = parse_transactional_id(prefix, tid)
            if parsed is None or tid in self._live:
                continue
            if not job_ended and parsed[0] % ctx.parallelism != ctx.subtask_index:
                continue
            if (tid, int(described.producer_id), int(described.producer_epoch)) in kept:
                continue
            log.info(
                "KafkaSink of job %r: aborting transaction %s (state %s), which no "
                "checkpoint will commit",
                ctx.job_name,
                tid,
                described.state.value,
            )
            fence_and_abort(self.bootstrap_servers, self.properties, tid, self._timeout_ms)
        if job_ended:
            self.close()

    def _lingering(
        self, keep: list[KafkaTransaction], ctx: RuntimeContext
    ) -> list[tuple[str, str, Any]]:
        """``(prefix, id, description)`` of the transactions open under this sink's
        prefix, and under this job's and sink's default prefix of older lockgates when
        the restored checkpoint's transactions carry it (the run that wrote it left its
        lingering transactions there). Any other prefix a restored transaction carries
        is not looked under: it may be a running job's (this job forked from its
        savepoint under another name or prefix)."""
        prefixes = [self.prefix(ctx)]
        legacy = legacy_default_prefix(ctx.job_name, ctx.operator_uid)
        if (
            self.transactional_id_prefix is None
            and legacy not in prefixes
            and any(prefix_of(txn.transactional_id) == legacy for txn in keep)
        ):
            prefixes.append(legacy)
        admin = self._tx_admin()
        return [
            (prefix, tid, described)
            for prefix in prefixes
            for tid, described in admin.open_transactions(prefix + "-").items()
        ]

    def _release(self, transaction: KafkaTransaction) -> None:
        parsed = (
            parse_transactional_id(self.prefix(self._ctx), transaction.transactional_id)
            if self._ctx is not None
            else None
        )
        if parsed is not None and parsed[0] == self._ctx.subtask_index:  # type: ignore[union-attr]
            self._busy.discard(parsed[1])
            self._prepare_spare()

    def close(self) -> None:
        """Drop the producers: their open transactions stay open (a restore commits or
        aborts them; the broker's transaction timeout is the last resort). A producer
        being initialized in the background is awaited first, so that nothing of this
        subtask touches its transactional ids after close returns."""
        spare, self._spare = self._spare, None
        if spare is not None and not spare[1].cancel():
            # An initialization under way must end before close returns: finishing after
            # a restarted attempt initialized the same transactional id, it would fence
            # that attempt's producer (bounded by init_transactions' own timeout).
            concurrent.futures.wait([spare[1]], timeout=RETRY_FOR_S + 5.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._live.clear()
        if self._encoder is not None:
            self._encoder.close()
        if self._admin is not None:
            self._admin.close()
            self._admin = None


def default_prefix(job_name: str, sink_uid: str) -> str:
    """``lockgate-<job name>-<sink uid>-<hash>``: distinct for every distinct pair (job
    name, sink uid). The readable part (characters Kafka ids should not hold replaced
    by ``_``, cut at 100) is for people; the 16 hex digits of a SHA-256 of the pair
    (encoded as a JSON list, so no separator can be moved from one name to the other)
    make the prefix unique: job ``orders`` with sink ``eu-out`` and job ``orders-eu``
    with sink ``out`` read alike but differ in their hashes. At most 126 characters."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", f"{job_name}-{sink_uid}")[:100]
    pair = json.dumps([job_name, sink_uid], ensure_ascii=True)
    digest = hashlib.sha256(pair.encode()).hexdigest()[:16]
    return f"lockgate-{readable}-{digest}"


def legacy_default_prefix(job_name: str, sink_uid: str) -> str:
    """The default prefix of lockgate before issue 37 (``lockgate-<job name>-<sink
    uid>``, not unique: job ``orders`` with sink ``eu-out`` and job ``orders-eu`` with
    sink ``out`` shared it), for restoring the checkpoints written under it."""
    raw = f"lockgate-{job_name}-{sink_uid}"
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", raw)
    if len(clean) > 120 or clean != raw:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
        clean = f"{clean[:109]}-{digest}"
    return clean


def _commit_live(producer: Any, transaction: KafkaTransaction) -> None:
    """Commit the open transaction of a live producer (retrying what librdkafka calls
    retriable)."""
    ck = confluent_kafka()
    for _ in range(100):
        try:
            producer.commit_transaction(RETRY_FOR_S)
            return
        except ck.KafkaException as e:
            error = e.args[0]
            if is_fenced(error):
                raise RuntimeError(
                    f"committing Kafka transaction {transaction.transactional_id!r} failed "
                    f"({error}): {fenced_message(transaction.transactional_id)}"
                ) from e
            if not error.retriable():
                raise RuntimeError(
                    f"committing Kafka transaction {transaction.transactional_id!r} failed: {error}"
                ) from e
    raise RuntimeError(f"committing {transaction.transactional_id!r} kept failing")


#: librdkafka's ``linger.ms`` of the sinks without transactions (unless ``properties``
#: set it): send at once. Under load librdkafka still batches what queues while its
#: request is in flight (:data:`DIRECT_MAX_IN_FLIGHT`), so throughput holds; its default
#: (5 ms) would add up to 5 ms to every record's latency at low rates.
DIRECT_LINGER_MS = 0
#: requests in flight per broker connection of the sinks without transactions (unless
#: ``properties`` set ``max.in.flight.requests.per.connection``): one, Nagle's rule. A
#: record goes out at once when nothing is in flight, and what queues meanwhile goes in
#: the next request when the answer comes, so batches grow with the rate by themselves.
#: With librdkafka's 5 in flight and no linger, each ``produce`` call of a task started a
#: request of its own: at 10,000 records/s the broker's request load pushed a 2-core
#: machine into stalls of 100 ms and more (issue 42: local Query A's p99 over the floor
#: went from 32-257 ms to 10-12 ms in paired runs; at-least-once throughput unchanged).
DIRECT_MAX_IN_FLIGHT = 1


def direct_producer_config(sink: KafkaSink, on_delivery: Any) -> dict[str, Any]:
    """The librdkafka settings of an ``at_least_once`` or ``none`` sink's producer:
    :data:`DIRECT_LINGER_MS` and :data:`DIRECT_MAX_IN_FLIGHT` unless ``properties`` set
    them, then ``properties``; ``at_least_once`` adds idempotence and ``acks=all`` over
    them (retries never reorder or duplicate a partition's records)."""
    config: dict[str, Any] = {
        "linger.ms": DIRECT_LINGER_MS,
        "max.in.flight.requests.per.connection": DIRECT_MAX_IN_FLIGHT,
        **sink.properties,
        "bootstrap.servers": sink.bootstrap_servers,
        "on_delivery": on_delivery,
        "delivery.report.only.error": True,
    }
    if sink.delivery == "at_least_once":
        config.update({"enable.idempotence": True, "acks": "all"})
    return librdkafka_config(config)


class _DirectWriter(SinkWriter):
    """``at_least_once`` and ``none``: one producer, no transactions."""

    def __init__(self, sink: KafkaSink, ctx: RuntimeContext) -> None:
        ck = confluent_kafka()
        self.sink = sink
        self.encoder = RecordEncoder(sink, ctx)
        self.producer = ck.Producer(direct_producer_config(sink, self.encoder.delivered))

    def write(self, batch: Batch) -> None:
        self.encoder.produce(self.producer, batch)

    def snapshot_state(self, checkpoint_id: int) -> None:
        """``at_least_once``: the barrier waits until every record before it is
        acknowledged, so the checkpoint covers them (M-X1)."""
        if self.sink.delivery == "at_least_once":
            self.encoder.flush(self.producer)

    def finish(self) -> None:
        self.encoder.flush(self.producer)

    def close(self) -> None:
        self.producer.flush(0)
        self.encoder.close()
