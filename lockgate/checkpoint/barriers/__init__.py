"""Barrier handling at a subtask's inputs (M-B1 to M-B10)."""
