"""Sources and sinks."""

from .base import InputStatus, ReaderOutput, Sink, SinkWriter, Source, SourceReader
from .builtin.collect_sink import CollectSink
from .builtin.collection import CollectionSource
from .builtin.discarding_sink import DiscardingSink
from .builtin.print_sink import PrintSink
from .builtin.rate_limit import RateLimitedSource
from .builtin.sequence import SequenceSource
from .delta.sink import DeltaSink
from .files.sink import FileSink
from .files.source import FileSource
from .iceberg.sink import IcebergSink  # pyiceberg (optional) is imported when one is made
from .kafka.sink import KafkaSink
from .kafka.source import KafkaSource
from .nats.jetstream import NatsJetStreamSource
from .postgres.cdc import PostgresCdcSource
from .postgres.sink import PostgresSink
from .redis.stream import RedisStreamSource
from .schema_registry import Schema, SchemaRegistry, arrow_to_avro, avro_arrow_schema
from .two_phase_commit import FinalCommit, TwoPhaseCommitSink

__all__ = [
    "CollectSink",
    "CollectionSource",
    "DeltaSink",
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "FinalCommit",
    "IcebergSink",
    "InputStatus",
    "KafkaSink",
    "KafkaSource",
    "NatsJetStreamSource",
    "PostgresCdcSource",
    "PostgresSink",
    "PrintSink",
    "RateLimitedSource",
    "RedisStreamSource",
    "ReaderOutput",
    "Schema",
    "SchemaRegistry",
    "SequenceSource",
    "Sink",
    "SinkWriter",
    "Source",
    "SourceReader",
    "TwoPhaseCommitSink",
    "arrow_to_avro",
    "avro_arrow_schema",
]
