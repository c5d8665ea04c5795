"""lockgate: Flink-grade, exactly-once stream processing for Python, on Apache Spark.

Public names only; everything else is internal and may change.
"""

from . import connectors, savepoint
from .api.job_client import JobClient
from .checkpoint.config import CheckpointConfig, CheckpointingMode, ExternalizedRetention
from .checkpoint.types import CheckpointStats, SubtaskCheckpointMetrics
from .api.datastream import DataStream, DataStreamSink, KeyedStream
from .api.environment import StreamEnvironment
from .api.broadcast import BroadcastConnectedStream, BroadcastStream
from .api.functions import (
    AggregateFunction,
    BroadcastProcessFunction,
    FilterFunction,
    FlatMapFunction,
    Function,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
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
from .state.broadcast import BroadcastState, ReadOnlyBroadcastState
from .state.backends import HashMapStateBackend, RocksDBStateBackend, StateBackend
from .state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .state.handles import AggregatingState, ListState, MapState, ReducingState, ValueState
from .state.operator_state import OperatorListState
from .state.ttl import StateTtlConfig
from .time.clock import Clock, ManualClock, SystemClock

__version__ = "0.1.0"

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastState",
    "BroadcastStream",
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
    "HashMapStateBackend",
    "InvalidGraphError",
    "JobClient",
    "JobExecutionResult",
    "JobFailedError",
    "JobStatus",
    "KeyedBroadcastProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "LocalExecutor",
    "LockgateError",
    "MalformedRecordError",
    "ManualClock",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "OperatorListState",
    "OutputTag",
    "ProcessFunction",
    "ReadOnlyBroadcastState",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RestartStrategy",
    "RestoreError",
    "RocksDBStateBackend",
    "RuntimeContext",
    "StateBackend",
    "StateDescriptor",
    "StateTtlConfig",
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
    "savepoint",
    "subtask_for_key",
    "subtask_for_key_group",
]
