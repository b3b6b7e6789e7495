"""The shard state (``spark_purgatory.state``): saved and loaded, segment files, rescaling."""
