"""lockgate: Flink-grade, exactly-once stream processing for Python, on Apache Spark.

Public names only; everything else is internal and may change.
"""

from . import connectors
from .api.job_client import JobClient
from .checkpoint.config import CheckpointConfig, CheckpointingMode, ExternalizedRetention
from .checkpoint.types import CheckpointStats, SubtaskCheckpointMetrics
from .api.datastream import DataStream, DataStreamSink, KeyedStream
from .api.environment import StreamEnvironment
from .api.functions import (
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
)
from .api.output_tag import DEAD_LETTER, OutputTag
from .errors import (
    CheckpointFailedError,
    ConfigurationError,
    CorruptStreamError,
    FailureReason,
    InvalidGraphError,
    JobFailedError,
    LockgateError,
    MalformedRecordError,
    UnsupportedKeyError,
    UserFunctionError,
)
from .executor.local import LocalExecutor
from .executor.result import JobExecutionResult, JobStatus
from .recovery.restart_strategy import RestartStrategy
from .recovery.restore import RestoreError
from .graph.key_groups import (
    key_group_for,
    key_group_range,
    subtask_for_key,
    subtask_for_key_group,
)
from .runtime.config import ExecutionConfig
from .runtime.context import RuntimeContext
from .state.descriptors import StateDescriptor, ValueStateDescriptor
from .state.keyed import ValueState
from .time.clock import Clock, ManualClock, SystemClock

__version__ = "0.1.0"

__all__ = [
    "CheckpointConfig",
    "CheckpointFailedError",
    "CheckpointStats",
    "CheckpointingMode",
    "Clock",
    "ConfigurationError",
    "CorruptStreamError",
    "DEAD_LETTER",
    "DataStream",
    "DataStreamSink",
    "ExecutionConfig",
    "ExternalizedRetention",
    "FailureReason",
    "FilterFunction",
    "FlatMapFunction",
    "Function",
    "InvalidGraphError",
    "JobClient",
    "JobExecutionResult",
    "JobFailedError",
    "JobStatus",
    "KeyedProcessFunction",
    "KeyedStream",
    "LocalExecutor",
    "LockgateError",
    "MalformedRecordError",
    "ManualClock",
    "MapFunction",
    "OutputTag",
    "ProcessFunction",
    "RestartStrategy",
    "RestoreError",
    "RuntimeContext",
    "StateDescriptor",
    "StreamEnvironment",
    "SubtaskCheckpointMetrics",
    "SystemClock",
    "UnsupportedKeyError",
    "UserFunctionError",
    "ValueState",
    "ValueStateDescriptor",
    "connectors",
    "key_group_for",
    "key_group_range",
    "subtask_for_key",
    "subtask_for_key_group",
]
