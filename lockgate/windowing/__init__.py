"""Windowing: window assigners (``assigners``), the built-in window aggregates
(``aggregates``, distinct counts in ``distinct_values``) and session merging
(``session_merge``). The window operator that uses them is in
``lockgate/runtime/operators/``. See docs/window-aggregates.md."""
