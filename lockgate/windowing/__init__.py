"""Windowing: window assigners (``assigners``), the built-in window aggregates
(``aggregate_specs`` declares them, ``window_groups`` groups rows by key and window,
``aggregate_kinds`` computes each kind, ``aggregates`` holds the accumulators;
distinct counts in ``distinct_values``) and session merging (``session_merge``). The
window operator that uses them is in ``lockgate/runtime/operators/window/``. See
docs/window-aggregates.md."""
