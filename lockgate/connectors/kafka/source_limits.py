"""The Kafka source's timings and sizes, read as module attributes (``source_limits.X``)
where they are used, so that a test can lower one for all of them."""

from __future__ import annotations

#: records asked of the consumer per poll (one batch per partition and poll)
MAX_BATCH = 5000
#: how long a poll with nothing to read asks the task to wait before the next one
IDLE_WAIT_MS = 10.0
#: the same while the direct fetch wakes the task when a broker answers: a bound only
#: (a broker answers a fetch within its long poll, direct_client.MAX_WAIT_MS)
WATCHED_WAIT_MS = 250.0
#: seconds a metadata or offset request may take
REQUEST_TIMEOUT_S = 10.0
#: seconds one poll may wait for a partition's first offset (direct fetching)
EARLIEST_WAIT_S = 1.0
#: how often a reader asks again for first offsets it could not learn
EARLIEST_RETRY_S = 0.1
#: how often a reader refreshes its source lag metric (seconds)
LAG_INTERVAL_S = 1.0
