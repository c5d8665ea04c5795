"""KafkaSink's commit after a restore when its transaction's markers cannot be read
(issue 37 item 3, review; M-X2, M-X3).

The commit of a pre-committed transaction whose epoch moved on reads the transaction's
marker from the offset recorded at pre-commit. The marker may be impossible to read: the
log cleaner of a compacted topic removed it, the topic was deleted, or the sink's
principal may not read the topic (producer ACLs only). None of these may keep a job from
restoring (before the fix: a 60 s rescan from the start, then an error, on every
restore; and pre-commit failing on every checkpoint without READ), and a transaction
found aborted is never counted committed.
"""

from __future__ import annotations

import copy
import logging
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_fixtures import BOOTSTRAP, read_committed
from lockgate.connectors.kafka.sink import KafkaSink
from lockgate.connectors.kafka.transactions import (
    KafkaTransaction,
    TransactionLostError,
    fence_and_abort,
)
from lockgate.core.batch import RowBatch
from lockgate.runtime.context import RuntimeContext

LOGGER = "lockgate.connectors.kafka.transactions"


def sink_context() -> RuntimeContext:
    return RuntimeContext(
        task_name="sink task",
        operator_name="kafka",
        operator_uid="kafka",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        job_name="lgtest unreadable markers",
    )


def high_watermarks(topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "lgtest-watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def pre_committed(topic: str, prefix: str, commit: bool) -> KafkaTransaction:
    """A transaction of 20 keyed records in ``topic``, pre-committed (and committed when
    ``commit``), by a sink that is then closed."""
    sink = KafkaSink(
        BOOTSTRAP, topic, format="text", key=lambda r: r, transactional_id_prefix=prefix
    )
    sink.open(sink_context())
    try:
        txn = sink.begin_transaction()
        sink.write(txn, RowBatch([f"k{i}" for i in range(20)]))
        sink.pre_commit(txn)
        assert txn.partitions, "pre-commit recorded no offsets"
        checkpointed = copy.deepcopy(txn)
        if commit:
            sink.commit(txn)
        return checkpointed
    finally:
        sink.close()


def commit_another(tid: str, topic: str) -> None:
    """Another producer of ``tid`` writes a keyed record and commits it."""
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"the other producer's", b"other")
    producer.commit_transaction(60)


def past_the_markers(txn: KafkaTransaction, topic: str, partitions: int) -> KafkaTransaction:
    """``txn`` with its recorded offsets moved to the high watermarks now, past its
    markers: what a checkpoint's offsets look like to the scan once a compacted topic's
    log cleaner removed the markers (and the records they ended)."""
    ends = high_watermarks(topic, partitions)
    moved = copy.deepcopy(txn)
    moved.partitions = tuple((t, p, ends[p]) for t, p, _ in txn.partitions)
    return moved


@pytest.mark.hang_guard(240)
def test_review_m_x2_a_compacted_topic_whose_marker_the_cleaner_removed_restores(
    kafka_topic, caplog
) -> None:
    """cleanup.policy=compact, the transaction committed, its id used again since, and
    no marker of its producer id from the recorded offset to the high watermark (as once
    the cleaner removed it): the commit after a restore falls back to the coordinator's
    state and returns at once, with a warning naming the compaction (before the fix: a
    60 s rescan, then RuntimeError, on every restore: the job could never restore). In
    the same compacted topic, a transaction whose ABORT marker is there still raises
    TransactionLostError: an abort found is never counted as a commit."""
    topic = kafka_topic(2, {"cleanup.policy": "compact"})
    prefix = f"lgtest-compacted-{topic[-8:]}"
    txn = pre_committed(topic, prefix, commit=True)
    fence_and_abort(BOOTSTRAP, {}, txn.transactional_id, 60_000)
    commit_another(txn.transactional_id, topic)
    restored = past_the_markers(txn, topic, 2)
    driver_copy = KafkaSink(BOOTSTRAP, topic, format="text")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    began = time.monotonic()
    driver_copy.recover_and_commit(restored)
    took = time.monotonic() - began
    assert took < 30, f"the commit took {took:.0f} s: it rescanned until its deadline"
    warned = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("compacted" in m and "log cleaner" in m for m in warned), warned
    assert sorted(read_committed(topic, raw=True)) == sorted(
        [f"k{i}".encode() for i in range(20)] + [b"the other producer's"]
    )

    # aborted by another producer of its id: its ABORT marker, in reach, still decides
    aborted = pre_committed(topic, f"{prefix}-aborted", commit=False)
    fence_and_abort(BOOTSTRAP, {}, aborted.transactional_id, 60_000)
    with pytest.raises(TransactionLostError) as lost:
        driver_copy.recover_and_commit(aborted)
    assert "ABORT marker" in str(lost.value), str(lost.value)


def delete_topic(topic: str) -> None:
    client = AdminClient({"bootstrap.servers": BOOTSTRAP})
    for future in client.delete_topics([topic]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while topic in client.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed 30 s after deletion"
        time.sleep(0.1)  # bounded polling for the deletion to reach the metadata


@pytest.mark.hang_guard(240)
def test_review_m_x2_a_deleted_output_topic_does_not_keep_a_job_from_restoring(
    kafka_topic, caplog
) -> None:
    """The output topic was deleted after the transaction committed and its id moved on:
    the commit after a restore says in a warning that the topic was deleted and takes the
    coordinator's state (before the fix: UnknownTopicOrPartition retried for 60 s, then
    an error, on every restore)."""
    topic = kafka_topic(2)
    txn = pre_committed(topic, f"lgtest-deleted-{topic[-8:]}", commit=True)
    fence_and_abort(BOOTSTRAP, {}, txn.transactional_id, 60_000)
    delete_topic(topic)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    began = time.monotonic()
    KafkaSink(BOOTSTRAP, topic, format="text").recover_and_commit(txn)
    took = time.monotonic() - began
    assert took < 30, f"the commit took {took:.0f} s: it retried until its deadline"
    warned = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("topic was deleted" in m and topic in m for m in warned), warned


@pytest.mark.hang_guard(180)
def test_review_m_x3_a_principal_without_read_pre_commits_and_warns_once(
    kafka_topic, caplog
) -> None:
    """The sink's principal has producer ACLs only: DescribeProducers is refused with
    TOPIC_AUTHORIZATION_FAILED (29). The broker here runs no authorizer, so the refusal
    is made at the unit level: the real broker's DescribeProducers response has its
    partitions' error code set to 29 before kafka-python reads it. Pre-commit records no
    offsets (the commit after a restore takes the coordinator's state, as before markers
    were read), every checkpoint still commits, and one WARNING (not one per checkpoint)
    names the READ ACL that would enable the verification (before the fix: pre-commit
    raised TopicAuthorizationFailedError on every checkpoint)."""
    topic = kafka_topic(1)
    sink = KafkaSink(
        BOOTSTRAP, topic, format="text", transactional_id_prefix=f"lgtest-acl-{topic[-8:]}"
    )
    sink.open(sink_context())
    client = sink._tx_admin()._admin()
    real = client._describe_producers_process_response

    def refused(response: Any) -> Any:
        for t in response.topics:
            for p in t.partitions:
                p.error_code = 29  # TOPIC_AUTHORIZATION_FAILED, as an authorizer answers
                p.error_message = "Topic authorization failed"
        return real(response)

    client._describe_producers_process_response = refused
    caplog.set_level(logging.WARNING, logger=LOGGER)
    try:
        done = []
        for n in range(3):
            txn = sink.begin_transaction()
            sink.write(txn, RowBatch([f"checkpoint {n} #{i}" for i in range(5)]))
            sink.pre_commit(txn)
            assert txn.partitions == () and txn.producer_id >= 0, txn
            done.append(copy.deepcopy(txn))
            sink.commit(txn)
    finally:
        sink.close()
    warned = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    text = warned[0].getMessage()
    assert topic in text and "READ" in text and "--operation Read" in text, text
    assert "TopicAuthorizationFailedError" in text, text
    # the commit after a restore of a transaction recorded so takes the coordinator's state
    fence_and_abort(BOOTSTRAP, {}, done[-1].transactional_id, 60_000)
    KafkaSink(BOOTSTRAP, topic, format="text").recover_and_commit(done[-1])
    assert len(read_committed(topic, raw=True)) == 15
