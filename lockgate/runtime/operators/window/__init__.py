"""The window operator: ``operator`` (WindowOperator: assigning, firing, snapshots and
restores), ``contents`` (what a window keeps and emits: built-in aggregates, an
AggregateFunction, reduce, process, and the window join's buffers build on it),
``keys`` (keys as int codes) and ``store`` (the rows of aligned and session windows).
Assigners and the built-in aggregates are in :mod:`lockgate.windowing`."""
