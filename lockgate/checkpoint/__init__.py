"""Checkpoints: configuration, the coordinator, barrier handling, task-side snapshots, storage."""
