"""The runtime (``spark_purgatory.runtime``): what starting Spark and its Python workers needs."""
