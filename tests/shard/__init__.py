"""One shard's micro-batch without Spark (``spark_purgatory.shard``): what a shard keeps."""
