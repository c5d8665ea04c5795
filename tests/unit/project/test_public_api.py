"""The public surface (DESIGN §4, §5): what `import lockgate as lg` offers is deliberate."""

from __future__ import annotations

import lockgate as lg
from lockgate import connectors

FOUNDATION_NAMES = {
    "StreamEnvironment",
    "DataStream",
    "KeyedStream",
    "DataStreamSink",
    "ExecutionConfig",
    "MapFunction",
    "FilterFunction",
    "FlatMapFunction",
    "ProcessFunction",
    "KeyedProcessFunction",
    "RuntimeContext",
    "ValueState",
    "ValueStateDescriptor",
    "OutputTag",
    "DEAD_LETTER",
    "LocalExecutor",
    "JobExecutionResult",
    "JobStatus",
    "ManualClock",
    "SystemClock",
    "key_group_for",
    "key_group_range",
    "subtask_for_key",
    "subtask_for_key_group",
    "LockgateError",
    "ConfigurationError",
    "InvalidGraphError",
    "JobFailedError",
    "MalformedRecordError",
    "UnsupportedKeyError",
    "UserFunctionError",
    "FailureReason",
    "connectors",
}


def test_every_name_in_all_exists() -> None:
    missing = [n for n in lg.__all__ if not hasattr(lg, n)]
    assert not missing
    assert len(set(lg.__all__)) == len(lg.__all__)


def test_the_names_the_foundation_promises_are_public() -> None:
    assert set(lg.__all__) >= FOUNDATION_NAMES, FOUNDATION_NAMES - set(lg.__all__)


def test_the_connectors_package_exports_its_sources_and_sinks() -> None:
    for name in (
        "SequenceSource",
        "CollectionSource",
        "FileSource",
        "FileSink",
        "PrintSink",
        "DiscardingSink",
        "Source",
        "Sink",
        "SourceReader",
        "SinkWriter",
    ):
        assert name in connectors.__all__ and hasattr(connectors, name), name


def test_every_lockgate_error_derives_from_lockgate_error() -> None:
    for name in (
        "ConfigurationError",
        "InvalidGraphError",
        "JobFailedError",
        "MalformedRecordError",
        "UnsupportedKeyError",
        "UserFunctionError",
        "CorruptStreamError",
    ):
        assert issubclass(getattr(lg, name), lg.LockgateError), name


def test_the_dead_letter_tag_is_an_output_tag() -> None:
    assert isinstance(lg.DEAD_LETTER, lg.OutputTag)
    assert lg.OutputTag(lg.DEAD_LETTER.name) == lg.DEAD_LETTER
    assert hash(lg.DEAD_LETTER) == hash(lg.OutputTag(lg.DEAD_LETTER.name))


def test_the_version_is_a_string() -> None:
    assert isinstance(lg.__version__, str) and lg.__version__.count(".") == 2
