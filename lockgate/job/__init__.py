"""What a running or finished job hands back: its handle, its result, the causes of
its restarts. Used by both executors and by recovery, so it sits below both."""
