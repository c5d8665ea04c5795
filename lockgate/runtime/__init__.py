"""The runtime: stream elements, batches, channels, operators and the subtask mailbox loop."""
