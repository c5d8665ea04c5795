"""Operators: the units of processing a subtask chains together."""
