"""Executors: where an execution plan runs (threads in this process, or Spark)."""
