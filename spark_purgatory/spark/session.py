"""A local SparkSession with defaults that work out of the box for this project.

* the Python workers run the driver's interpreter (``spark.pyspark.python`` and
  ``PYSPARK_PYTHON`` from ``sys.executable``), so they see the same virtual environment;
* UTC session time zone, small shuffle partition count (state is per shard, so
  ``purgatory.shards + 1`` partitions is plenty), no UI, quiet logs;
* no DataFrame call-site capture (``spark.python.sql.dataFrameDebugging.enabled=false``):
  PySpark otherwise makes 3-4 extra JVM calls around every ``Column`` function, and the
  operator's plan has thousands (its errors then name no Python line of the library);
* no state store provider: ``query.start`` picks one for each new checkpoint (Spark's
  HDFS-backed store, which commits the operator's few small values fastest) unless ``conf``
  names one;
* no Delta extensions: whether Delta's classes are present is detected at run time by
  ``sinks.delta_classes_available``; with ``--packages io.delta:...`` pass the extensions in
  ``conf``.

On a cluster or Databricks, use the session you are given instead; nothing in the library
needs this module.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

__all__ = ["local_session"]


def local_session(
    app_name: str = "spark-purgatory",
    *,
    master: str = "local[*]",
    shuffle_partitions: int = 9,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Build (or get) a local session; ``conf`` entries override the defaults."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "4g")
        # each state version holds whole shard blobs: keep 20 versions on disk, not Spark's 100
        .config("spark.sql.streaming.minBatchesToRetain", "20")
        # no call-site capture around every Column function (3-4 py4j round trips each):
        # building the operator's plan takes 0.8 s instead of 1.4 s, the sink's per batch less
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
