"""Event and processing time: watermark strategies and generators, the watermark valve
that merges a task's inputs (M-W3, M-W4), and timers (queues, services and their
snapshots). Windows build on this layer (:mod:`lockgate.windowing`)."""
