"""Where lockgate's modules went: pickles in state written by an earlier lockgate name
classes by the module they lived in then (a user's window kept in state names
``lockgate.time.windows.TimeWindow``; a window join's frozen buffers name
``lockgate.runtime.operators.window_join.JoinState``). :func:`loads` and
:class:`MovedModulesUnpickler` unpickle such state: a class not found where the pickle
says is looked up in the modules that took over its old module (:data:`MOVED_MODULES`),
so savepoints and checkpoints written before a move restore after it (M-R3).

Only lockgate's own former modules are mapped; nothing else is redirected, and an
unpickle that fails for another reason fails as before. Like
:data:`~lockgate.core.state_records.RECORD_MODULES`, the table names upper modules as
strings: nothing here imports them until an old pickle asks for one."""

from __future__ import annotations

import importlib
import io
import pickle
from typing import Any

#: a former module -> the modules its classes and functions live in now, in the order
#: to look (the first that has the name wins)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    # windowing (issue 41)
    "lockgate.time.windows": ("lockgate.windowing.assigners",),
    "lockgate.time.window_aggregates": (
        "lockgate.windowing.aggregates",
        "lockgate.windowing.aggregate_specs",
        "lockgate.windowing.aggregate_kinds",
        "lockgate.windowing.window_groups",
    ),
    "lockgate.time.session_merge": ("lockgate.windowing.session_merge",),
    "lockgate.time.distinct_values": ("lockgate.windowing.distinct_values",),
    "lockgate.runtime.operators.window": ("lockgate.runtime.operators.window.operator",),
    "lockgate.runtime.operators.window_contents": ("lockgate.runtime.operators.window.contents",),
    "lockgate.runtime.operators.window_keys": ("lockgate.runtime.operators.window.keys",),
    "lockgate.runtime.operators.window_store": ("lockgate.runtime.operators.window.store",),
    "lockgate.runtime.operators.interval_join": ("lockgate.runtime.operators.join.interval_join",),
    "lockgate.runtime.operators.window_join": ("lockgate.runtime.operators.join.window_join",),
    # connectors (issue 41)
    "lockgate.connectors.kafka_source": (
        "lockgate.connectors.kafka.source",
        "lockgate.connectors.kafka.split",
        "lockgate.connectors.kafka.reader",
        "lockgate.connectors.kafka.arrow_decoder",
        "lockgate.connectors.kafka.source_options",
    ),
    "lockgate.connectors.kafka_sink": (
        "lockgate.connectors.kafka.sink",
        "lockgate.connectors.kafka.record_encoder",
        "lockgate.connectors.kafka.sink_options",
    ),
    "lockgate.connectors.kafka_transactions": ("lockgate.connectors.kafka.transactions",),
    "lockgate.connectors.kafka_changelog": ("lockgate.connectors.kafka.changelog",),
    "lockgate.connectors.kafka_common": (
        "lockgate.connectors.kafka.common",
        "lockgate.connectors.schema_registry.format_names",
        "lockgate.connectors.formats.message_keys",
    ),
    "lockgate.connectors.kafka_record_batches": ("lockgate.connectors.kafka.record_batches",),
    "lockgate.connectors.iceberg_sink": ("lockgate.connectors.iceberg.sink",),
    "lockgate.connectors.nats_jetstream": ("lockgate.connectors.nats.jetstream",),
    "lockgate.connectors.redis_stream": ("lockgate.connectors.redis.stream",),
    "lockgate.connectors.sequence": ("lockgate.connectors.builtin.sequence",),
    "lockgate.connectors.collection": ("lockgate.connectors.builtin.collection",),
    "lockgate.connectors.collect_sink": ("lockgate.connectors.builtin.collect_sink",),
    "lockgate.connectors.print_sink": ("lockgate.connectors.builtin.print_sink",),
    "lockgate.connectors.discarding_sink": ("lockgate.connectors.builtin.discarding_sink",),
    "lockgate.connectors.rate_limit": ("lockgate.connectors.builtin.rate_limit",),
    "lockgate.connectors.debezium": ("lockgate.connectors.formats.debezium",),
    "lockgate.connectors.flat_json": ("lockgate.connectors.formats.flat_json",),
    "lockgate.connectors.json_columns": ("lockgate.connectors.formats.json_columns",),
    "lockgate.connectors.file_sink": (
        "lockgate.connectors.files.sink",
        "lockgate.connectors.formats.json_values",
    ),
    "lockgate.connectors.file_source": ("lockgate.connectors.files.source",),
    "lockgate.connectors.file_locations": ("lockgate.connectors.files.locations",),
    "lockgate.connectors.delta_sink": ("lockgate.connectors.delta.sink",),
    "lockgate.connectors.delta_files": ("lockgate.connectors.delta.files",),
    "lockgate.connectors.delta_log": ("lockgate.connectors.delta.log",),
    "lockgate.connectors.delta_merge": ("lockgate.connectors.delta.merge",),
    "lockgate.connectors.delta_records": ("lockgate.connectors.delta.records",),
    "lockgate.connectors.postgres_sink": ("lockgate.connectors.postgres.sink",),
    "lockgate.connectors.postgres_changes": ("lockgate.connectors.postgres.changes",),
    "lockgate.connectors.postgres_table": ("lockgate.connectors.postgres.table",),
    "lockgate.connectors.postgres_transactions": ("lockgate.connectors.postgres.transactions",),
}
for _name in (
    "backend",
    "batch",
    "cache",
    "codec",
    "columns",
    "files",
    "restore",
    "rows",
    "snapshot",
):
    MOVED_MODULES[f"lockgate.state.rocksdb_{_name}"] = (f"lockgate.state.rocksdb.{_name}",)
for _name in (
    "change_columns",
    "change_kernels",
    "connection",
    "pgoutput",
    "reader",
    "slot",
    "snapshot",
    "source",
    "splits",
    "tables",
    "types",
    "xids",
):
    MOVED_MODULES[f"lockgate.connectors.postgres_cdc.{_name}"] = (
        f"lockgate.connectors.postgres.cdc.{_name}",
    )
MOVED_MODULES["lockgate.connectors.postgres_cdc"] = ("lockgate.connectors.postgres.cdc",)


def find_moved(module: str, name: str) -> Any:
    """The object ``name`` of the former module ``module`` where it lives now; raises
    AttributeError when ``module`` is not a former lockgate module or none of its
    successors has ``name``."""
    for successor in MOVED_MODULES.get(module, ()):
        found = getattr(importlib.import_module(successor), name, None)
        if found is not None:
            return found
    raise AttributeError(f"{module}.{name} is not in this lockgate (nor where it moved)")


class MovedModulesUnpickler(pickle.Unpickler):
    """An unpickler that finds the classes of lockgate's former modules where they
    live now (see the module docstring); everything else as :class:`pickle.Unpickler`."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ModuleNotFoundError, AttributeError):
            if module not in MOVED_MODULES:
                raise
        return find_moved(module, name)


def loads(data: bytes) -> Any:
    """``pickle.loads(data)`` (which ``cloudpickle.loads`` is), former lockgate modules
    found where they moved."""
    return MovedModulesUnpickler(io.BytesIO(data)).load()
