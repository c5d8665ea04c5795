"""Job recovery: restart strategies and failover."""
