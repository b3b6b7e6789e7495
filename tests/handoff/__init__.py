"""The cross-shard hand-off (``spark_purgatory.handoff``): multi-key, op_id registry, end of input."""
