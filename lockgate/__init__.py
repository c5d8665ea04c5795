"""lockgate: Flink-grade, exactly-once stream processing for Python, on Apache Spark.

Public names only; everything else is internal and may change.
"""

from . import connectors, savepoint
from .api.async_stream import AsyncDataStream
from .api.broadcast import BroadcastConnectedStream, BroadcastStream
from .api.connected import ConnectedStreams
from .api.datastream import DataStream, DataStreamSink, KeyedStream
from .api.environment import StreamEnvironment
from .api.functions import (
    AggregateFunction,
    AsyncFunction,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoGroupFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatJoinFunction,
    FlatMapFunction,
    Function,
    JoinFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ProcessJoinFunction,
    ProcessWindowFunction,
    ReduceFunction,
)
from .api.interval_join import IntervalJoin, IntervalJoined
from .api.job_client import JobClient
from .api.joined_streams import CoGroupedStreams, JoinedStreams
from .api.lookup_table import LookupTable
from .api.output_tag import DEAD_LETTER, OutputTag
from .api.windowed_stream import WindowedStream
from .autoscaling import AutoscalingConfig, RescaleDecision
from .checkpoint.config import CheckpointConfig, CheckpointingMode, ExternalizedRetention
from .checkpoint.types import CheckpointStats, SubtaskCheckpointMetrics
from .core.clock import Clock, ManualClock, SystemClock
from .core.execution_config import ExecutionConfig
from .core.key_groups import (
    key_group_for,
    key_group_range,
    subtask_for_key,
    subtask_for_key_group,
)
from .core.row_kind import Change, RowKind
from .core.version import __version__ as __version__
from .errors import (
    ChangelogError,
    CheckpointFailedError,
    ConfigurationError,
    CorruptStreamError,
    FailureReason,
    InvalidGraphError,
    JobFailedError,
    LockgateError,
    MalformedRecordError,
    NonRestartableError,
    UnsupportedKeyError,
    UserFunctionError,
)
from .executor.local import LocalExecutor
from .job.result import JobExecutionResult, JobStatus
from .recovery.restart_strategy import RestartStrategy
from .recovery.restore import RestoreError
from .runtime.async_runner import AsyncTimeoutError
from .runtime.context import RuntimeContext
from .runtime.operators.async_io import AsyncRequestError
from .runtime.watermark_report import OperatorWatermark
from .state.backends import HashMapStateBackend, RocksDBStateBackend, StateBackend
from .state.broadcast import BroadcastState, ReadOnlyBroadcastState
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
from .state.typed.evolution import IncompatibleStateError
from .state.typed.types import StateTypeError
from .time.watermark_generators import (
    AscendingTimestampsWatermarks,
    BoundedOutOfOrdernessWatermarks,
    PunctuatedWatermarks,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarksWithIdleness,
)
from .time.watermark_strategy import InvalidTimestampError, WatermarkStrategy
from .windowing.aggregate_specs import WindowAggregate, agg
from .windowing.assigners import (
    EventTimeSessionWindows,
    ProcessingTimeSessionWindows,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)

__all__ = [
    "Change",
    "RowKind",
    "ChangelogError",
    "IncompatibleStateError",
    "StateTypeError",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AscendingTimestampsWatermarks",
    "AsyncDataStream",
    "AutoscalingConfig",
    "RescaleDecision",
    "AsyncFunction",
    "AsyncRequestError",
    "AsyncTimeoutError",
    "BoundedOutOfOrdernessWatermarks",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastState",
    "BroadcastStream",
    "CheckpointConfig",
    "CheckpointFailedError",
    "CheckpointStats",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "Clock",
    "CoGroupFunction",
    "CoGroupedStreams",
    "ConfigurationError",
    "CorruptStreamError",
    "DEAD_LETTER",
    "DataStream",
    "DataStreamSink",
    "LookupTable",
    "EventTimeSessionWindows",
    "ExecutionConfig",
    "ExternalizedRetention",
    "FailureReason",
    "FilterFunction",
    "FlatJoinFunction",
    "FlatMapFunction",
    "Function",
    "HashMapStateBackend",
    "IntervalJoin",
    "IntervalJoined",
    "InvalidGraphError",
    "InvalidTimestampError",
    "JobClient",
    "JobExecutionResult",
    "JobFailedError",
    "JobStatus",
    "JoinFunction",
    "JoinedStreams",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
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
    "NonRestartableError",
    "OperatorListState",
    "OperatorWatermark",
    "OutputTag",
    "ProcessFunction",
    "ProcessJoinFunction",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "PunctuatedWatermarks",
    "ReadOnlyBroadcastState",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RestartStrategy",
    "RestoreError",
    "RocksDBStateBackend",
    "RuntimeContext",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "StateBackend",
    "StateDescriptor",
    "StateTtlConfig",
    "StreamEnvironment",
    "SubtaskCheckpointMetrics",
    "SystemClock",
    "TimeWindow",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "UnsupportedKeyError",
    "UserFunctionError",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkGenerator",
    "WatermarkOutput",
    "WatermarkStrategy",
    "WatermarksWithIdleness",
    "WindowAggregate",
    "WindowedStream",
    "agg",
    "connectors",
    "key_group_for",
    "key_group_range",
    "savepoint",
    "subtask_for_key",
    "subtask_for_key_group",
]
