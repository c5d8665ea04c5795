"""A Kafka source's partitions and their start (and bounded end) offsets, asked of the
broker through a consumer: on the driver when a run starts (``prepare_run``), and by a
reader discovering partitions."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigurationError
from . import source_limits
from .common import confluent_kafka
from .source_options import OWNER
from .source_settings import SourceSettings
from .split import EARLIEST, KafkaSplit


def partitions_of(consumer: Any, source: SourceSettings) -> list[tuple[str, int]]:
    """``(topic, partition)`` of every partition of the source's topics now, sorted;
    ConfigurationError naming the broker when it does not answer, and the topic when a
    named one does not exist."""
    ck = confluent_kafka()
    try:
        meta = consumer.list_topics(timeout=source_limits.REQUEST_TIMEOUT_S)
    except ck.KafkaException as e:
        raise ConfigurationError(
            f"{OWNER} cannot reach Kafka at {source.bootstrap_servers!r} (reading "
            f"{source.topic_description}): {e}; start the broker there, or fix "
            "bootstrap_servers"
        ) from e
    out: list[tuple[str, int]] = []
    if source.pattern is not None:
        for name, topic in meta.topics.items():
            if not name.startswith("__") and source.pattern.fullmatch(name) and not topic.error:
                out.extend((name, p) for p in topic.partitions)
        return sorted(out)
    for name in source.topics:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ConfigurationError(
                f"{OWNER}: Kafka topic {name!r} does not exist at {source.bootstrap_servers!r}"
                f"{f' ({topic.error})' if topic is not None and topic.error else ''}; create it "
                f"first (kafka-topics.sh --create --topic {name}) or fix topics"
            )
        out.extend((name, p) for p in topic.partitions)
    return sorted(out)


def resolve_offsets(
    consumer: Any,
    source: SourceSettings,
    parts: list[tuple[str, int]],
    lows: dict[tuple[str, int], int] | None = None,
) -> list[KafkaSplit]:
    """The splits of ``parts`` with their start offsets (and end offsets when bounded);
    ``lows`` (when given) receives the partitions' first offsets as they are read."""
    ck = confluent_kafka()
    tp = ck.TopicPartition
    if lows is None:
        lows = {}
    ends: dict[tuple[str, int], int] = {}
    start = source.start
    try:
        if source.bounded or start == "latest" or isinstance(start, int):
            for t, p in parts:
                low, high = consumer.get_watermark_offsets(
                    tp(t, p), timeout=source_limits.REQUEST_TIMEOUT_S
                )
                lows[(t, p)], ends[(t, p)] = int(low), int(high)
        starts: dict[tuple[str, int], int] = {}
        if start == "latest":
            starts = dict(ends)
        elif start == "committed" and parts:
            committed = consumer.committed(
                [tp(t, p) for t, p in parts], timeout=source_limits.REQUEST_TIMEOUT_S
            )
            starts = {(c.topic, c.partition): c.offset for c in committed if c.offset >= 0}
        elif isinstance(start, int) and parts:
            found = consumer.offsets_for_times(
                [tp(t, p, start) for t, p in parts], timeout=source_limits.REQUEST_TIMEOUT_S
            )
            starts = {
                (f.topic, f.partition): f.offset if f.offset >= 0 else ends[(f.topic, f.partition)]
                for f in found
            }
        elif isinstance(start, dict):
            starts = dict(start)
    except ck.KafkaException as e:
        raise ConfigurationError(
            f"{OWNER} cannot read the offsets of {source.topic_description} at "
            f"{source.bootstrap_servers!r}: {e}"
        ) from e
    splits = []
    for t, p in parts:
        # bounded: a concrete start, so an empty partition (start == end) ends at once
        offset = starts.get((t, p), lows[(t, p)] if source.bounded else EARLIEST)
        end = ends[(t, p)] if source.bounded else None
        if end is not None and offset > end:
            offset = end
        splits.append(KafkaSplit(t, p, offset, end))
    return splits
