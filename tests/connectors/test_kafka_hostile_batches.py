"""Hostile record batches that the broker stores as they are (issue 37 items 2 and 7),
written with raw Produce requests (``kafka_raw``) to the real broker, read by
KafkaSource through both fetch paths (``fetch="auto"``: the direct fetch;
``"librdkafka"``):

* forged offset deltas: an uncompressed batch whose records claim offsets that are not
  strictly increasing inside its header's range (the broker checks only the count and
  the last delta). Read as they claim, one record claiming a later offset moved the
  split's position past another producer's records before they were emitted (lost on a
  restore), and a bounded read ended early. The source must refuse the batch (fail
  naming ``topic[partition]@offset``, or dead-letter) and never position a split past
  a record it has not emitted (M-X1).
* gzip bombs: 65 KiB batches expanding to 64 MiB each drove the direct fetch out of
  memory, again at every restart. The direct fetch decompresses with a bound and
  refuses a batch over it; librdkafka's own decompression has no bound of its own
  (documented in docs/security.md, measured by ``bench/hostile_kafka_batches.py``), and
  the source refuses what it hands over that is larger than ``max_record_bytes``.
"""

from __future__ import annotations

import json
import logging
import time
import tracemalloc
import uuid
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Producer
from test_kafka_direct_fetch import Batches, ctx

import lockgate as lg
from kafka_fixtures import BOOTSTRAP, produce, wait_stable
from kafka_raw import forged_batch, gzip_bomb_batch, produce_raw
from lockgate.connectors import RateLimitedSource
from lockgate.connectors.base import InputStatus, assign_splits
from lockgate.connectors.kafka.source import KafkaSource
from lockgate.connectors.kafka.source_limits import MAX_BATCH
from lockgate.errors import MalformedRecordError
from lockgate.testing import FailAtRecord, inject_faults

FETCHES = ["auto", "librdkafka"]
VICTIMS = 3_000
#: the forged batch's last record is the last of a MAX_BATCH part of the direct fetch
ATTACK = 7_000
#: how far past its batch's end the forged batch's last record claims to be: inside
#: the victim's next records, or past the partition's end
JUMPS = [2_000, 1_000_000]


def forged_topic(kafka_topic: Any, jump: int, trailing: int = VICTIMS) -> tuple[str, int, int]:
    """A topic holding a victim's records 0..2999, then a forged batch of 7,000
    attacker records whose last one claims an offset ``jump`` past the batch, then the
    victim's ``trailing`` records 3000.. (3000..5999 by default). Returns the topic,
    the forged batch's base offset and the offset its last record claims."""
    topic = kafka_topic(1)
    produce(topic, [{"p": "victim", "i": i} for i in range(VICTIMS)], partition=0)
    values = [json.dumps({"p": "attacker", "i": i}).encode() for i in range(ATTACK)]
    deltas = [*range(ATTACK - 1), ATTACK - 1 + jump]
    (base,) = produce_raw(BOOTSTRAP, topic, 0, [forged_batch(values, deltas)])
    produce(
        topic, [{"p": "victim", "i": i} for i in range(VICTIMS, VICTIMS + trailing)], partition=0
    )
    return topic, base, base + ATTACK - 1 + jump


def victim_offset(i: int, base: int) -> int:
    return i if i < VICTIMS else base + ATTACK + (i - VICTIMS)


def read_checking_positions(source: KafkaSource, base: int, victims: int = 2 * VICTIMS) -> Batches:
    """Read ``source`` (bounded) to its end, checking after every poll that the split's
    position has not passed one of the ``victims`` records that was not emitted yet: a
    checkpoint taken then would lose it on a restore."""
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        out = Batches()
        deadline = time.monotonic() + 60
        status = None
        while status is not InputStatus.END_OF_INPUT:
            assert time.monotonic() < deadline, f"not at the end in 60 s: {len(out.records)}"
            status = reader.poll(out)
            emitted = {r["i"] for r in out.records if r.get("p") == "victim"}
            for split in reader.snapshot_positions():
                skipped = [
                    i
                    for i in range(victims)
                    if victim_offset(i, base) < split.offset and i not in emitted
                ]
                assert not skipped, (
                    f"position {split.offset} is past {len(skipped)} victim records never "
                    f"emitted (first: {skipped[0]} at offset {victim_offset(skipped[0], base)})"
                )
            if status is InputStatus.NOTHING_AVAILABLE:
                time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait
        return out
    finally:
        reader.close()


@pytest.mark.parametrize("jump", JUMPS)
@pytest.mark.parametrize("fetch", FETCHES)
def test_a_forged_batch_is_dead_lettered_and_no_victim_record_is_skipped_M_X1(
    kafka_topic, fetch, jump
) -> None:
    topic, base, claimed = forged_topic(kafka_topic, jump)
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch, on_error="dead_letter")
    out = read_checking_positions(source, base)
    victims = [r["i"] for r in out.records if r["p"] == "victim"]
    assert victims == list(range(2 * VICTIMS)), "every victim record, once, in order"
    assert out.dead, "the forged batch is refused"
    assert all(d["topic"] == topic and d["partition"] == 0 for d in out.dead)
    if fetch == "auto":
        # the direct fetch reads the batch header: the whole batch is refused
        assert [(d["offset"], d["last_offset"]) for d in out.dead] == [(base, base + ATTACK - 1)]
        assert f"claims offset {claimed}" in out.dead[0]["error"]
        assert not [r for r in out.records if r["p"] == "attacker"]
    else:
        # librdkafka hands over records, not batches: the record out of order
        assert [d["offset"] for d in out.dead] == [claimed]
        attackers = [r["i"] for r in out.records if r["p"] == "attacker"]
        assert attackers == list(range(ATTACK - 1))


def test_through_librdkafka_no_poll_ends_with_the_position_past_victims_before_a_refused_record_M_X1(
    kafka_topic,
) -> None:
    """The forged record claims an offset more than a poll (MAX_BATCH records) past its
    batch's end, inside the victim's later records. librdkafka hands it over before
    them, and its position (which only moves forward) is past it from then on; the
    record is refused, and whichever way the polls are cut (a loaded machine hands over
    fewer records a poll), the polls that follow end on victims below it. The split's
    position must stay after the last record emitted until an emitted record passes
    the refused one: a checkpoint taken at any of those polls would otherwise hold a
    position past victim records never emitted, and a restore would skip them."""
    jump = MAX_BATCH + 1_000
    trailing = jump + 1_000
    topic, base, claimed = forged_topic(kafka_topic, jump, trailing)
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch="librdkafka", on_error="dead_letter")
    out = read_checking_positions(source, base, VICTIMS + trailing)
    victims = [r["i"] for r in out.records if r["p"] == "victim"]
    assert victims == list(range(VICTIMS + trailing)), "every victim record, once, in order"
    assert [d["offset"] for d in out.dead] == [claimed]


def test_through_librdkafka_a_bounded_read_ends_when_markers_follow_a_record_claiming_past_the_end_M_X1(
    kafka_topic,
) -> None:
    """A forged record claiming an offset far past the partition's end, then a
    transaction's records and its commit marker, the partition's last offset. The
    split's position stays after the last record emitted while the refused record's
    offset is above it; the client's end-of-partition event (its fetch position, not
    the forged offset) shows that only the marker lay between, so the bounded read
    ends, with every record read, instead of waiting for ever one offset short."""
    topic = kafka_topic(1)
    produce(topic, [{"p": "victim", "i": i} for i in range(100)], partition=0)
    values = [json.dumps({"p": "attacker", "i": i}).encode() for i in range(10)]
    (base,) = produce_raw(BOOTSTRAP, topic, 0, [forged_batch(values, [*range(9), 1_000_009])])
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "transactional.id": f"lgt-{uuid.uuid4()}"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(100, 150):
        producer.produce(topic, json.dumps({"p": "victim", "i": i}).encode(), partition=0)
    producer.commit_transaction()
    # the bounded end is the last stable offset at the start: past the commit marker
    wait_stable(topic)
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch="librdkafka", on_error="dead_letter")
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        (split,) = reader.snapshot_positions()
        end = split.end
        out = Batches()
        deadline = time.monotonic() + 30
        status = None
        while status is not InputStatus.END_OF_INPUT:
            assert time.monotonic() < deadline, (
                f"the bounded read has not ended in 30 s: {len(out.records)} records, "
                f"positions {[s.offset for s in reader.snapshot_positions()]}, end {end}"
            )
            status = reader.poll(out)
            if status is InputStatus.NOTHING_AVAILABLE:
                time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait
    finally:
        reader.close()
    assert [r["i"] for r in out.records if r["p"] == "victim"] == list(range(150))
    assert [d["offset"] for d in out.dead] == [base + 1_000_009]


@pytest.mark.parametrize("fetch", FETCHES)
def test_a_forged_batch_fails_the_read_naming_topic_partition_and_offset(
    kafka_topic, fetch
) -> None:
    topic, base, claimed = forged_topic(kafka_topic, JUMPS[0])
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch)
    with pytest.raises(MalformedRecordError) as err:
        read_checking_positions(source, base)
    where = f"{topic}[0]@{base}" if fetch == "auto" else f"{topic}[0]@{claimed}"
    assert err.value.location == where
    assert "forged" in str(err.value) and "on_error='dead_letter'" in str(err.value)


@pytest.mark.hang_guard(300)
@pytest.mark.parametrize("fetch", FETCHES)
@pytest.mark.parametrize(
    "executor",
    [pytest.param("local"), pytest.param("spark", marks=pytest.mark.spark)],
    indirect=True,
)
def test_a_job_restored_after_a_forged_batch_loses_no_victim_record_M_X1_M_R1(
    executor, kafka_topic, fetch, caplog
) -> None:
    """A job (checkpoints, one failure after a completed checkpoint, a restore) over a
    partition holding a forged batch: every victim record reaches the output once, the
    forged batch goes to the dead-letter output."""
    topic, _, _ = forged_topic(kafka_topic, JUMPS[0])
    env = lg.StreamEnvironment(parallelism=1, executor=executor)
    env.enable_checkpointing(timedelta(milliseconds=100))
    env.set_restart_strategy(lg.RestartStrategy.fixed_delay(attempts=2, delay=0))
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, fetch=fetch, on_error="dead_letter")
    # paced (at least 3 s of input), so that the fault's checkpoint completes before
    # the input ends even on a loaded machine
    records = env.from_source(RateLimitedSource(source, 2_000), name="kafka").uid("kafka")
    dead = records.get_side_output(lg.DEAD_LETTER).map(lambda d: ("dead", d["offset"]))
    tagged = records.map(lambda r: (r["p"], r["i"]), name="tag").uid("tag")
    inject_faults(env, FailAtRecord("tag", record=1_000, attempt=0, subtask=0, after_checkpoints=1))
    with caplog.at_level(logging.INFO, logger="lockgate.recovery.failover"):
        out = tagged.union(dead).execute_and_collect("forged batch", executor=executor)
    assert [r for r in caplog.records if " restores " in r.getMessage()], "a restore ran"
    victims = sorted(i for tag, i in out if tag == "victim")
    assert victims == list(range(2 * VICTIMS)), (
        f"{2 * VICTIMS - len(set(victims))} victim records lost, "
        f"{len(victims) - len(set(victims))} duplicated"
    )
    assert [i for tag, i in out if tag == "dead"], "the forged batch is refused"


# ------------------------------------------------------------------------- gzip bombs

BOMB = 64 << 20  # each 65 KiB batch expands to 64 MiB


def bomb_topic(kafka_topic: Any, bombs: int) -> tuple[str, list[int]]:
    """Ten records, ``bombs`` gzip bombs, ten records; the bombs' offsets."""
    topic = kafka_topic(1)
    produce(topic, [{"i": i} for i in range(10)], partition=0)
    offsets = produce_raw(BOOTSTRAP, topic, 0, [gzip_bomb_batch(BOMB)] * bombs)
    produce(topic, [{"i": i} for i in range(10, 20)], partition=0)
    return topic, offsets


def read_bounded(source: KafkaSource) -> Batches:
    reader: Any = source.create_reader(ctx())
    try:
        reader.add_splits(assign_splits(source.create_splits(1), 0, 1))
        out = Batches()
        deadline = time.monotonic() + 120
        status = None
        while status is not InputStatus.END_OF_INPUT:
            assert time.monotonic() < deadline, f"not at the end in 120 s: {len(out.records)}"
            status = reader.poll(out)
            if status is InputStatus.NOTHING_AVAILABLE:
                time.sleep((reader.wait_hint_ms() or 10) / 1000)  # the task's own idle wait
        return out
    finally:
        reader.close()


def test_the_direct_fetch_refuses_gzip_bombs_with_bounded_memory(kafka_topic) -> None:
    """Each bomb is dead-lettered (the job goes on, and a restart does not meet it
    again), the records around them arrive, and the reader's Python allocations stay
    far below what the bombs expand to (4 x 64 MiB; the old decoding held every
    expanded batch and their join at once)."""
    topic, offsets = bomb_topic(kafka_topic, 4)
    source = KafkaSource(BOOTSTRAP, topic, bounded=True, on_error="dead_letter", key_field="k")
    tracemalloc.start()
    try:
        out = read_bounded(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["i"] for r in out.records] == list(range(20))
    assert [d["offset"] for d in out.dead] == offsets
    assert all("expands to more than" in d["error"] for d in out.dead)
    assert peak < 160 << 20, f"the reader's allocations peaked at {peak >> 20} MiB"


def test_a_gzip_bomb_fails_the_direct_fetch_naming_topic_partition_and_offset(
    kafka_topic,
) -> None:
    topic, offsets = bomb_topic(kafka_topic, 1)
    with pytest.raises(MalformedRecordError) as err:
        read_bounded(KafkaSource(BOOTSTRAP, topic, bounded=True))
    assert err.value.location == f"{topic}[0]@{offsets[0]}"
    assert "decompression bomb" in str(err.value)


def test_through_librdkafka_a_bombs_record_over_max_record_bytes_is_refused(
    kafka_topic,
) -> None:
    """librdkafka expands a batch whole, without a bound of its own (its peak is about
    ``max.partition.fetch.bytes`` times the compression ratio: docs/security.md); the
    source refuses the record it hands over whose key is over ``max_record_bytes``,
    as it refuses such a value."""
    topic, offsets = bomb_topic(kafka_topic, 1)
    source = KafkaSource(
        BOOTSTRAP,
        topic,
        bounded=True,
        fetch="librdkafka",
        on_error="dead_letter",
        key_field="k",
        properties={"max.partition.fetch.bytes": 65536},
    )
    out = read_bounded(source)
    assert [r["i"] for r in out.records] == list(range(20))
    assert [d["offset"] for d in out.dead] == offsets
    assert "key" in out.dead[0]["error"]
