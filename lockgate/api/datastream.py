"""DataStream, KeyedStream and DataStreamSink: the fluent API that builds the logical graph.

Every method returns a new stream backed by a new transformation; nothing
runs until ``env.execute(...)`` or ``stream.execute_and_collect()``.
Problems with the graph (a missing sink, a duplicate uid, a function that is
not callable or cannot be pickled, ...) are reported when the job is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pyarrow.compute as pc

from ..connectors.base import Sink
from ..core.key_groups import check_max_parallelism
from ..core.partitioners import (
    BroadcastPartitioning,
    ForwardPartitioning,
    KeySelector,
    RebalancePartitioning,
)
from ..errors import ConfigurationError
from ..graph.operator_factory import OperatorFactory
from ..graph.transformations import Kind, Transformation
from ..runtime.operators.basic import (
    FilterOperator,
    FlatMapOperator,
    MapBatchesOperator,
    MapOperator,
    ProcessOperator,
)
from ..runtime.operators.changelog import (
    KindsFromFieldOperator,
    KindsToFieldOperator,
    ToUpsertsOperator,
    key_reader,
    kind_codes,
)
from ..runtime.operators.io import SinkOperator
from ..runtime.operators.keyed import KeyedProcessOperator, tag_name
from ..runtime.operators.rolling import RollingAggregate, RollingAggregateOperator
from ..state.broadcast import check_broadcast_descriptors
from ..state.descriptors import MapStateDescriptor
from .changelog_functions import ChangelogAggregate, LatestRowPerKey
from .stream_protocols import EnvironmentLike

if TYPE_CHECKING:
    from datetime import timedelta

    from ..windowing.assigners import WindowAssigner
    from .broadcast import BroadcastConnectedStream, BroadcastStream
    from .connected import ConnectedStreams
    from .interval_join import IntervalJoin
    from .joined_streams import CoGroupedStreams, JoinedStreams
    from .lookup_table import LookupTable
    from .windowed_stream import WindowedStream

S = TypeVar("S", bound="_Configurable")


#: the longest uid, in UTF-8 bytes: it is part of a state file's name (``op-<uid>-<subtask>``
#: plus a random suffix and a temporary name's), which a filesystem limits to 255 bytes
MAX_UID_BYTES = 128


def check_uid(uid: object) -> str:
    """Refuse a uid that cannot name the operator's state files in checkpoints: a
    non-empty str, one plain path segment (no ``/`` or ``\\``, not ``.`` or ``..``),
    printable characters only, at most :data:`MAX_UID_BYTES` bytes in UTF-8."""
    if not isinstance(uid, str) or not uid:
        raise ConfigurationError(f"uid must be a non-empty string, got {uid!r}")
    bad = [c for c in uid if c in "/\\" or not c.isprintable()]
    if bad or uid in (".", ".."):
        what = f"contains {bad[0]!r}" if bad else "is a relative folder name"
        raise ConfigurationError(
            f"uid {uid!r} {what}: a uid names the operator's state files in checkpoints, so "
            f"it must be one plain name without '/', '\\' or unprintable characters, and not "
            f"'.' or '..'; use e.g. letters, digits, '-', '_' and '.' such as 'parse-orders'"
        )
    size = len(uid.encode("utf-8"))
    if size > MAX_UID_BYTES:
        raise ConfigurationError(
            f"uid {uid[:40]!r}... is {size} bytes in UTF-8; a uid names the operator's state "
            f"files in checkpoints and may have at most {MAX_UID_BYTES} bytes: use a shorter one"
        )
    return uid


def check_field(field: object, what: str) -> str:
    """``field`` (a record field name) or a ConfigurationError saying how to fix it."""
    if not isinstance(field, str) or not field:
        raise ConfigurationError(
            f"{what}(field) needs a field name (a non-empty str), got {field!r}"
        )
    return field


def _check_parallelism(p: Any, what: str) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ConfigurationError(f"{what} must be an int >= 1, got {p!r}")
    return p


class _Configurable:
    """Settings of the operator behind a stream or a sink."""

    def __init__(self, env: EnvironmentLike, transformation: Transformation) -> None:
        self._env = env
        self._t = transformation

    @property
    def transformation(self) -> Transformation:
        return self._t

    def _real(self, what: str) -> Transformation:
        if self._t.kind.virtual:
            raise ConfigurationError(
                f"{what}() applies to an operator, but this stream is a {self._t.kind.value} "
                f"of {self._t.inputs[0].describe() if self._t.inputs else 'nothing'}; call it on "
                "the operator before key_by/rebalance/broadcast/union"
            )
        return self._t

    def uid(self: S, uid: str) -> S:
        """A stable id for this operator's state (savepoints map state by uid).

        It names the operator's state files in checkpoints, so it must be one plain
        path segment: a non-empty string of printable characters without ``/`` or
        ``\\``, not ``.`` or ``..``, at most 128 bytes in UTF-8 (a
        ``ConfigurationError`` says what is wrong otherwise).
        """
        check_uid(uid)
        self._real("uid").uid = uid
        return self

    def name(self: S, name: str) -> S:
        """The operator's name in plans, metrics and errors."""
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
        self._real("name").name = name
        return self

    def set_parallelism(self: S, parallelism: int) -> S:
        self._real("set_parallelism").parallelism = _check_parallelism(
            parallelism, f"parallelism of {self._t.describe()}"
        )
        return self

    def set_max_parallelism(self: S, max_parallelism: int) -> S:
        self._real("set_max_parallelism").max_parallelism = check_max_parallelism(
            max_parallelism, f"max_parallelism of {self._t.describe()}"
        )
        return self

    def disable_chaining(self: S) -> S:
        """Run this operator in its own subtask, never chained to its neighbours."""
        self._real("disable_chaining").chainable = False
        return self

    def get_name(self) -> str:
        return self._t.name

    @property
    def parallelism(self) -> int:
        return self._t.parallelism or self._env.parallelism


class DataStream(_Configurable):
    """A stream of records."""

    def _derive(self, transformation: Transformation) -> DataStream:
        """A new stream of this environment on ``transformation``, registered: how the
        streams this one builds (windowed, joined, connected, ...) make their results
        without importing this module (:mod:`.stream_protocols`)."""
        self._env._register(transformation)
        return DataStream(self._env, transformation)

    def _as_keyed(self) -> KeyedStream | None:
        """This stream if it is keyed (a :class:`KeyedStream`), else None."""
        return None

    # -- record functions ------------------------------------------------------
    def _one_input(
        self, name: str, factory: OperatorFactory[Any], *, keyed: bool = False
    ) -> DataStream:
        t = Transformation(Kind.OPERATOR, name, [self._t], factory=factory, keyed=keyed)
        return self._derive(t)

    def map(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """One output record per record: ``fn(record)`` (a callable or a ``MapFunction``).

        ``fn`` must return a record for every record, as Flink's map: a None result fails
        the job at this operator, naming it and the input record. Drop records with
        :meth:`filter`; return zero or more with :meth:`flat_map`."""
        return self._one_input(
            name or "Map", OperatorFactory(MapOperator, {"fn": fn}, {"function:map": fn})
        )

    def filter(
        self, predicate: Callable[[Any], bool] | pc.Expression, name: str | None = None
    ) -> DataStream:
        """Keep records for which ``predicate`` is true. A ``pyarrow.compute.Expression``
        (e.g. ``pc.field("v") > 3``) is evaluated on whole batches."""
        label = "predicate:object" if isinstance(predicate, pc.Expression) else "predicate:filter"
        return self._one_input(
            name or "Filter",
            OperatorFactory(FilterOperator, {"fn": predicate}, {label: predicate}),
        )

    def flat_map(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """Zero or more records per record: ``fn(record)`` returns an iterable."""
        return self._one_input(
            name or "FlatMap",
            OperatorFactory(FlatMapOperator, {"fn": fn}, {"function:flat_map": fn}),
        )

    def map_batches(self, fn: Callable[[Any], Any], name: str | None = None) -> DataStream:
        """``fn(pyarrow.RecordBatch) -> RecordBatch | Table | None`` on whole batches."""
        return self._one_input(
            name or "MapBatches",
            OperatorFactory(MapBatchesOperator, {"fn": fn}, {"function:map_batch": fn}),
        )

    def process(self, fn: Any, name: str | None = None) -> DataStream:
        """Run a ``ProcessFunction``: ``process_element(value, ctx)`` yields outputs."""
        return self._one_input(
            name or "Process",
            OperatorFactory(ProcessOperator, {"fn": fn}, {"function:process_element": fn}),
        )

    def assign_timestamps_and_watermarks(
        self, strategy: Any, name: str | None = None
    ) -> DataStream:
        """Give the records event timestamps from ``strategy``'s assigner and generate
        watermarks (and idleness) from them here (M-W1, M-W2); upstream watermarks are
        dropped except the final one. Prefer ``env.from_source(..., watermark_strategy=)``
        when the source's records already carry the time."""
        from ..runtime.operators.timestamps import TimestampsAndWatermarksOperator
        from ..time.watermark_strategy import check_watermark_strategy

        strategy = check_watermark_strategy(strategy)
        return self._one_input(
            name or "Timestamps/Watermarks",
            OperatorFactory(
                TimestampsAndWatermarksOperator,
                {"strategy": strategy},
                {"strategy:object": strategy},
            ),
        )

    # -- partitioning ----------------------------------------------------------
    def _partition(self, partitioning: Any, name: str) -> Transformation:
        t = Transformation(Kind.PARTITION, name, [self._t], partitioning=partitioning)
        self._env._register(t)
        return t

    def key_by(self, key: str | Sequence[str] | Callable[[Any], Any]) -> KeyedStream:
        """Partition by key: a column name, a list of column names (a tuple key) or a
        function of the record. Each key goes to the subtask owning its key group."""
        if (
            not (isinstance(key, str) and key)
            and not callable(key)
            and not (
                isinstance(key, (list, tuple)) and key and all(isinstance(k, str) for k in key)
            )
        ):
            raise ConfigurationError(
                f"key_by needs a column name, a list of column names or a function, got {key!r}"
            )
        selector = KeySelector(key)
        t = Transformation(
            Kind.PARTITION, f"key_by({selector.describe()})", [self._t], key_selector=selector
        )
        self._env._register(t)
        return KeyedStream(self._env, t)

    def rebalance(self) -> DataStream:
        """Spread batches round-robin over the next operator's subtasks."""
        return DataStream(self._env, self._partition(RebalancePartitioning(), "rebalance"))

    @overload
    def broadcast(self) -> DataStream: ...

    @overload
    def broadcast(
        self, descriptor: MapStateDescriptor[Any], /, *descriptors: MapStateDescriptor[Any]
    ) -> BroadcastStream: ...

    def broadcast(self, *descriptors: MapStateDescriptor[Any]) -> DataStream | BroadcastStream:
        """Send every record to every subtask of the next operator.

        With one or more ``lg.MapStateDescriptor``: a ``BroadcastStream`` declaring
        those broadcast states, to pass to ``other.connect(...)`` (the broadcast state
        pattern). Each descriptor needs its own name and no TTL."""
        if not descriptors:
            return DataStream(self._env, self._partition(BroadcastPartitioning(), "broadcast"))
        from .broadcast import BroadcastStream

        checked = check_broadcast_descriptors(descriptors, "broadcast(...)")
        names = ", ".join(repr(d.name) for d in checked)
        t = self._partition(BroadcastPartitioning(), f"broadcast({names})")
        return BroadcastStream(self._env, t, checked)

    @overload
    def connect(self, other: BroadcastStream) -> BroadcastConnectedStream[DataStream]: ...

    @overload
    def connect(self, other: DataStream) -> ConnectedStreams[DataStream]: ...

    def connect(
        self, other: Any
    ) -> BroadcastConnectedStream[DataStream] | ConnectedStreams[DataStream]:
        """Connect this stream to ``other``.

        A DataStream: ``lg.ConnectedStreams`` (Flink's), processed by one two-input
        operator: ``.map(lg.CoMapFunction)``, ``.flat_map(lg.CoFlatMapFunction)``,
        ``.process(lg.CoProcessFunction)``; ``a.key_by(ka).connect(b.key_by(kb))`` (or
        ``.key_by(ka, kb)`` on the result) and ``.process(lg.KeyedCoProcessFunction)``
        for keyed state shared by both inputs and timers.

        A broadcast stream (``rules.broadcast(descriptor)``): call ``.process(fn)`` on
        the result with an ``lg.BroadcastProcessFunction`` (an
        ``lg.KeyedBroadcastProcessFunction`` after ``key_by``)."""
        from .broadcast import BroadcastConnectedStream, BroadcastStream

        if not isinstance(other, BroadcastStream):
            from .connected import ConnectedStreams

            if not isinstance(other, DataStream):
                raise ConfigurationError(
                    f"connect() takes a DataStream or a broadcast stream, got {other!r}: pass "
                    "another stream of the job (connected streams may have different types), "
                    "or other.broadcast(lg.MapStateDescriptor('name')) for the broadcast state "
                    "pattern"
                )
            self._same_env(other, "connect() needs a stream of the same StreamEnvironment")
            return ConnectedStreams(self._env, self, other)
        if other._env is not self._env:
            raise ConfigurationError(
                "connect() needs a broadcast stream of the same StreamEnvironment"
            )
        return BroadcastConnectedStream(self._env, self, other)

    def forward(self) -> DataStream:
        """Subtask i feeds subtask i of the next operator (same parallelism)."""
        return DataStream(self._env, self._partition(ForwardPartitioning(), "forward"))

    def union(self, *others: DataStream) -> DataStream:
        """One stream with the records of this and ``others`` (no order between them)."""
        for o in others:
            if not isinstance(o, DataStream):
                raise ConfigurationError(f"union takes DataStreams, got {o!r}")
            if o._env is not self._env:
                raise ConfigurationError("union needs streams of the same StreamEnvironment")
        t = Transformation(Kind.UNION, "union", [self._t, *(o._t for o in others)])
        self._env._register(t)
        return DataStream(self._env, t)

    def lookup_join(
        self,
        table: LookupTable,
        on: str | int = "key",
        table_key: str = "x",
        *,
        refresh: timedelta | None = None,
        how: str = "inner",
        table_suffix: str = "_table",
        name: str | None = None,
    ) -> DataStream:
        """Join each record with the rows of the bounded ``table`` whose column
        ``table_key`` equals the record's field ``on`` (Flink's lookup join, Spark's
        stream-static join); see docs/lookup-join.md.

        Output: the record's fields followed by the table's columns (a column named like
        a field of the record gets ``table_suffix``); one output record per matching row
        (a key with two rows gives two), none for a record without one (``how="inner"``)
        or the record with nulls for the table's columns (``how="left"``); a null key
        matches nothing. Arrow and dict records are joined by field name, tuple records
        by position (``on`` an int; the table's values are appended).

        Each subtask loads the table once as a hash index and probes it per batch
        (vectorized). ``refresh`` reloads it every interval of processing time; a batch
        is always joined against one version. The version and the time to the next
        refresh are checkpointed: a restore joins against the same version where the
        table keeps versions (Delta, Iceberg), else against the table as it is then.
        Bad arguments raise ``ConfigurationError`` here; a missing key column or key
        types that can never match fail the job at the first batch, naming both."""
        from .lookup_join import lookup_join_factory

        factory = lookup_join_factory(
            table, on, table_key, refresh=refresh, how=how, table_suffix=table_suffix
        )
        return self._one_input(name or "LookupJoin", factory)

    def join(self, other: DataStream) -> JoinedStreams[DataStream]:
        """Window join with ``other``: ``.where(key).equal_to(other_key)
        .window(assigner).apply(fn=None)`` (see :mod:`lockgate.api.joined_streams`)."""
        from .joined_streams import JoinedStreams

        return JoinedStreams(self, self._other_stream(other, "join"))

    def co_group(self, other: DataStream) -> CoGroupedStreams[DataStream]:
        """Window co-group with ``other``: ``.where(key).equal_to(other_key)
        .window(assigner).apply(co_group_function)``."""
        from .joined_streams import CoGroupedStreams

        return CoGroupedStreams(self, self._other_stream(other, "co_group"))

    def _other_stream(self, other: Any, operation: str) -> DataStream:
        """``other`` if it is a stream of this environment, else a ConfigurationError
        naming ``operation``."""
        if not isinstance(other, DataStream):
            raise ConfigurationError(f"{operation}() takes the other DataStream, got {other!r}")
        self._same_env(other, f"{operation}() needs two streams of the same StreamEnvironment")
        return other

    def _same_env(self, other: DataStream, message: str) -> None:
        if other._env is not self._env:
            raise ConfigurationError(message)

    # -- changelogs (lockgate.core.row_kind) --------------------------------------------
    def kinds_from_field(
        self, field: str = "op", codes: Mapping[Any, Any] | None = None, name: str | None = None
    ) -> DataStream:
        """A changelog: each record's row kind read from its field ``field``, which is
        removed (Flink's ``FROM_CHANGELOG``). The field holds ``+I``/``-U``/``+U``/``-D``,
        the kinds' names or byte values, or codes mapped by ``codes`` (e.g. Debezium's
        ``{"c": "+I", "r": "+I", "u": "+U", "d": "-D"}``). A record whose field is missing
        or unknown fails the job naming it."""
        check_field(field, "kinds_from_field")
        kind_codes(codes)  # checked now, not in a task
        return self._one_input(
            name or f"KindsFromField({field})",
            OperatorFactory(KindsFromFieldOperator, {"field": field, "codes": codes}),
        )

    def kinds_to_field(self, field: str = "op", name: str | None = None) -> DataStream:
        """An append-only stream: each record with its row kind's short string
        (``+I``, ``-U``, ``+U``, ``-D``) in field ``field`` (Flink's ``TO_CHANGELOG``); any
        operator and sink takes it. Records must be dicts (or Arrow rows)."""
        check_field(field, "kinds_to_field")
        return self._one_input(
            name or f"KindsToField({field})",
            OperatorFactory(KindsToFieldOperator, {"field": field}),
        )

    def to_upserts(self, key: str | Sequence[str], name: str | None = None) -> DataStream:
        """This changelog as an upsert stream keyed by ``key`` (``+I``, ``+U``, ``-D``
        only): an ``-U`` followed by its ``+U`` is dropped, any other ``-U`` becomes a
        ``-D`` of its key. What compacted Kafka topics and key-value stores take."""
        key_reader(key)  # checked now
        return self._one_input(
            name or "ToUpserts", OperatorFactory(ToUpsertsOperator, {"key": key})
        )

    def to_table(self, key: str | Sequence[str], name: str | None = None) -> DataStream:
        """Maintain a table from this changelog: each key's latest row in keyed state
        (a delete removes it), and the normalized changelog of that table out: ``+I``
        for a new key, ``-U`` old / ``+U`` new for a changed row, ``-D`` with the whole
        old row; a change that changes nothing emits nothing. See
        :mod:`lockgate.api.changelog_functions`."""
        return self.key_by(key).process(LatestRowPerKey(), name=name or "ToTable")

    def to_changelog(self, key: str | Sequence[str], name: str | None = None) -> DataStream:
        """An upsert stream (``+I``/``+U`` rows by ``key``, ``-D`` possibly holding only the
        key) as a full changelog, with ``-U`` rows and whole deleted rows: the same
        operator as :meth:`to_table` (Flink's ``ChangelogNormalize``)."""
        return self.key_by(key).process(LatestRowPerKey(), name=name or "ToChangelog")

    def get_side_output(self, tag: Any) -> DataStream:
        """The records this operator emitted to side output ``tag`` (an ``lg.OutputTag``)."""
        name = tag_name(tag)
        self._real("get_side_output")
        t = Transformation(Kind.SIDE_OUTPUT, f"side output '{name}'", [self._t], side_tag=name)
        self._env._register(t)
        return DataStream(self._env, t)

    # -- sinks -----------------------------------------------------------------
    def sink_to(self, sink: Sink, name: str | None = None) -> DataStreamSink:
        """Write the stream to ``sink`` (e.g. ``lg.connectors.FileSink``)."""
        if not isinstance(sink, Sink):
            raise ConfigurationError(
                f"sink_to needs a lockgate sink (e.g. lg.connectors.FileSink(...)), got {sink!r}"
            )
        t = Transformation(
            Kind.SINK,
            name or f"Sink: {sink.default_name}",
            [self._t],
            factory=OperatorFactory(SinkOperator, {"sink": sink}, {"sink:object": sink}),
        )
        self._env._register(t)
        return DataStreamSink(self._env, t)

    def print(self, prefix: str | None = None) -> DataStreamSink:
        """Print every record (prefixed with the subtask number when parallel)."""
        from ..connectors.builtin.print_sink import PrintSink

        return self.sink_to(PrintSink(prefix))

    def execute_and_collect(
        self, job_name: str = "collect", *, executor: Any = None, limit: int | None = None
    ) -> list[Any]:
        """Run the job and return this stream's records as a list (in arrival order at one
        collecting subtask; use for tests and notebooks on bounded input)."""
        from ..connectors.builtin.collect_sink import CollectSink

        sink = self.sink_to(CollectSink(), name="Sink: collect").set_parallelism(1)
        sink_t = sink.transformation
        try:
            result = self._env.execute(job_name, executor=executor)
        finally:
            self._env._unregister(sink_t)
        records: list[Any] = []
        for part in result.sink_results.get(sink_t.uid or "", []):
            records.extend(part)
        return records[:limit] if limit is not None else records


class KeyedStream(DataStream):
    """A stream partitioned by key: keyed operators see per-key state."""

    @property
    def key_selector(self) -> KeySelector:
        assert self._t.key_selector is not None
        return self._t.key_selector

    def process(self, fn: Any, name: str | None = None) -> DataStream:
        """Run a ``KeyedProcessFunction`` with keyed state and ``ctx.current_key``."""
        return self._one_input(
            name or "KeyedProcess",
            OperatorFactory(
                KeyedProcessOperator,
                {"fn": fn, "key_selector": self.key_selector},
                {"function:process_element": fn, **self._key_functions()},
            ),
            keyed=True,
        )

    def sum(self, field: str, name: str | None = None) -> DataStream:
        """Each record with ``field`` replaced by its key's running sum of ``field`` (this
        record included): Flink's rolling ``sum``, a batch at a time. The running sum is
        keyed state (``sum(field)``), checkpointed and rescaled with its key; ints stay
        exact ints, floats add as one record at a time would. Records are dicts or Arrow
        rows; a record whose field is missing, null or not a number fails the job naming
        it. See :mod:`lockgate.runtime.operators.rolling`."""
        return self._rolling("sum", field, name)

    def min(self, field: str, name: str | None = None) -> DataStream:
        """Each record with ``field`` replaced by its key's running minimum of ``field``
        (NaN once a NaN was seen); otherwise as :meth:`sum`."""
        return self._rolling("min", field, name)

    def max(self, field: str, name: str | None = None) -> DataStream:
        """Each record with ``field`` replaced by its key's running maximum of ``field``
        (NaN once a NaN was seen); otherwise as :meth:`sum`."""
        return self._rolling("max", field, name)

    def _rolling(self, kind: str, field: str, name: str | None) -> DataStream:
        fn = RollingAggregate(kind, field)
        return self._one_input(
            name or f"{kind.capitalize()}({field})",
            OperatorFactory(
                RollingAggregateOperator,
                {"fn": fn, "key_selector": self.key_selector},
                self._key_functions(),
            ),
            keyed=True,
        )

    def aggregate(self, *aggregates: Any, name: str | None = None) -> DataStream:
        """A group aggregate per key over this stream, which may be a changelog:
        ``lg.agg.count()``, ``sum``, ``mean``, ``min``, ``max``, ``count_distinct``, each
        taking back what an update (``-U``) or delete (``-D``) retracts. Its output is the
        changelog of one row per key (the key's fields and one column per aggregate):
        ``+I`` first, ``-U`` old / ``+U`` new at each change, ``-D`` when the key has no
        row left. The key must be one or more field names. See
        :mod:`lockgate.api.changelog_functions`."""
        fields = self.key_selector.columns
        if fields is None:
            raise ConfigurationError(
                "aggregate() over a keyed stream needs key_by with field names (they name "
                "the output's key columns), e.g. key_by('status'), not a function"
            )
        fn = ChangelogAggregate(list(aggregates), fields)
        return self.process(fn, name=name or "Aggregate")

    def window(self, assigner: WindowAssigner) -> WindowedStream[DataStream]:
        """Cut each key's records into windows (``lg.TumblingEventTimeWindows.of(...)``,
        sliding and session windows, in event or processing time); finish with
        ``.aggregate(...)``, ``.reduce(...)`` or ``.process(...)``."""
        from .windowed_stream import WindowedStream

        return WindowedStream(self, assigner)

    @overload
    def connect(self, other: BroadcastStream) -> BroadcastConnectedStream[DataStream]: ...

    @overload
    def connect(self, other: DataStream) -> ConnectedStreams[DataStream]: ...

    def connect(
        self, other: Any
    ) -> BroadcastConnectedStream[DataStream] | ConnectedStreams[DataStream]:
        """Connect this keyed stream to another keyed stream (``ConnectedStreams``; run an
        ``lg.KeyedCoProcessFunction`` with ``.process(fn)``: keyed state shared by both
        inputs, timers, ``ctx.current_key``), or to a broadcast stream (``.process(fn)``
        with an ``lg.KeyedBroadcastProcessFunction``: keyed state and
        ``ctx.current_key`` in ``process_element``, ``ctx.apply_to_keyed_state`` in
        ``process_broadcast_element``)."""
        return super().connect(other)

    def interval_join(self, other: KeyedStream) -> IntervalJoin[DataStream]:
        """Join this keyed stream's records with ``other``'s (keyed too) of the same key
        whose event times are within an interval: finish with
        ``.between(lower, upper).process(...)`` (see ``lg.IntervalJoin``)."""
        from .interval_join import IntervalJoin

        if not isinstance(other, KeyedStream):
            what = (
                "a DataStream that is not keyed" if isinstance(other, DataStream) else repr(other)
            )
            raise ConfigurationError(
                f"interval_join() needs a keyed stream, got {what}: key the other side too, "
                "e.g. a.key_by('k').interval_join(b.key_by('k'))"
            )
        self._same_env(other, "interval_join() needs two streams of the same StreamEnvironment")
        return IntervalJoin(self, other)

    def _as_keyed(self) -> KeyedStream:
        return self

    def _key_functions(self) -> dict[str, Any]:
        sel = self.key_selector
        return {"key selector:__call__": sel.fn} if sel.fn is not None else {}


class DataStreamSink(_Configurable):
    """The end of a stream; configure the sink operator with uid/name/set_parallelism."""
