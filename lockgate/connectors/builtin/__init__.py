"""The built-in sources and sinks that need no outside system: bounded sequences and
collections, a rate limiter around any source, and the print, collect and discarding
sinks (for examples, tests and benchmarks)."""
