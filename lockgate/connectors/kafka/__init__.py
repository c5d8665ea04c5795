"""Apache Kafka: :class:`~lockgate.connectors.kafka.source.KafkaSource` (offsets in
checkpoints, a direct or librdkafka fetch, JSON, Arrow and Schema Registry decoding)
and :class:`~lockgate.connectors.kafka.sink.KafkaSink` (transactional, exactly-once).

Importing the package registers its pre-fork hooks (:mod:`lockgate.connectors.prefork`):
the Kafka clients imported, and the compiled decoding kernels loaded, in Spark's worker
daemon before it forks."""

from __future__ import annotations

import importlib

from ..prefork import register_prefork_hook


def _import_clients() -> None:
    """The Kafka clients of the ``kafka`` extra, when installed: a Kafka sink's subtask
    would otherwise import kafka-python (0.3-0.4 s on a small machine) while its job
    runs. Importing them starts no thread (librdkafka starts its threads per client)."""
    for module in ("confluent_kafka", "confluent_kafka.admin", "kafka"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass


def _load_kernels() -> None:
    """The compiled Kafka decoding (numba, also of the ``kafka`` extra), loaded from
    numba's cache (compiled on the very first start) rather than in each slot's first
    poll (about 1 s of a Kafka job's start on a small machine). numba starts no thread
    unless a parallel function runs, and lockgate has none."""
    from .warm_up import warm_up

    warm_up()


register_prefork_hook("kafka.clients", _import_clients)
register_prefork_hook("kafka.kernels", _load_kernels, compiles=True)
