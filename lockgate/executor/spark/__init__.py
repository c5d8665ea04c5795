"""The Spark executor: the dataflow as one barrier-mode Spark job (DESIGN.md §1)."""

from .executor import SparkExecutor

__all__ = ["SparkExecutor"]
