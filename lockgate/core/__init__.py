"""The bottom layer: stream elements and batches, key groups and key hashing,
record partitioning, clocks and durations, the execution config.

Modules here import nothing of lockgate but :mod:`lockgate.errors` and each other
(``docs/architecture.md``, "Layers"; checked by ``tests/unit/project/test_layers.py``).
"""
