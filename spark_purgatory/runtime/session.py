"""A local SparkSession with defaults that work out of the box for this project.

* the Python workers run the driver's interpreter, over Unix domain sockets;
* a local master binds loopback: nothing listens beyond the machine;
* no DataFrame call-site capture (``settings.library_plan`` says why);
* a small file open cost (``FILE_OPEN_COST``): a file source reads it from the session, so
  in your own session, set it yourself;
* the driver JVM compiles with C1 only (``C1_ONLY``): C2 competes with the first micro-batch
  for the CPU; with it, the class-data archive (``runtime.class_data``);
* the project's JARs and those ``make jars`` fetched, with the local checkpoint file
  manager and Delta's extension and catalog, recorded in ``EXTRAS_KEY`` so ``writer=auto``
  keeps delta-rs where Delta's classes are there only because of this function.

On a cluster or Databricks, use the session you are given; nothing else needs this module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from ..config import ConfigError
from .class_data import session_options
from .jars import SPARK_SETS, jar_paths, jars_root, spark_jars
from .settings import CHECKPOINT_FILES, LOCAL_CHECKPOINT_FILES
from .spark_logs import quiet_spark_logs

#: HotSpot's tiered compilation stopped at C1, with the code cache tiered compilation would
#: have: C1's own is too small for Spark's classes (the JVM then stops compiling)
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

#: what a session needs for Delta's SQL besides the JARs
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: what Spark counts for opening a file when it cuts a scan into splits: below Spark's 4 MB, so
#: that a micro-batch's file bigger than this is split across the cores
FILE_OPEN_COST = ("spark.sql.files.openCostInBytes", str(256 * 1024))

#: Unix domain sockets between the JVM and its Python workers (a SparkContext setting, Spark
#: 4.1+): on TCP a task's small writes wait on the peer's delayed acknowledgement
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"

#: where a local session's JVM binds (``SPARK_LOCAL_IP``)
LOOPBACK = "127.0.0.1"

#: the session setting naming the JAR sets ``local_session`` put on the class path ("" for none)
EXTRAS_KEY = "spark.purgatory.jars"


#: a class each JAR set puts on the class path: what ``session(require=...)`` looks for
PROVIDED_BY = {
    "kafka": "org.apache.spark.sql.kafka010.KafkaSourceProvider",
    "delta": "io.delta.sql.DeltaSparkSessionExtension",
    "s3a": "org.apache.hadoop.fs.s3a.S3AFileSystem",
}


def session(
    app_name: str = "spark-purgatory",
    *,
    master: str = "local[*]",
    require: Sequence[str] = (),
    shuffle_partitions: int = 9,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A local Spark session for the purgatory, with the JVM extras on its class path: Spark's
    Kafka source (``source_format="kafka"``, resolved on first use), Delta's connector (Spark's
    Delta writer, catalog tables) and S3A of ``make jars``; the defaults of ``local_session``.

    A plain ``SparkSession.builder`` session has none of them: a JVM's class path is fixed
    when it starts, so build this one before any other in the process.

    Args:
        app_name: the application's name.
        master: a local master (``local[*]``, ``local[2]``).
        require: the sets the caller needs (``"kafka"``, ``"delta"``, ``"s3a"``): each
            missing one fails here, in one line saying what is missing and what to do.
        shuffle_partitions: ``spark.sql.shuffle.partitions`` (``start`` sets its own).
        conf: more Spark settings.

    Raises:
        ConfigError: a required set was never fetched (or cannot be resolved), or a session
            already running in this process lacks it.

    Example::

        import spark_purgatory
        from spark_purgatory import start

        spark = spark_purgatory.session(require=["kafka"])
        start("operations", "events", source_format="kafka", spark=spark,
              kafka_options={"kafka.bootstrap.servers": "127.0.0.1:9092"}, ...)
    """
    unknown = [name for name in require if name not in PROVIDED_BY]
    if unknown:
        raise ConfigError(f"session(require=...): unknown {unknown}; one of {', '.join(PROVIDED_BY)}")
    unfetched = [name for name in require if not jar_paths(name, resolve=True)]
    if unfetched:
        raise ConfigError(
            f"the JARs of {', '.join(unfetched)} are not in {jars_root()}: run `make jars` in a "
            "checkout (it needs mvn)"
        )
    running = SparkContext._active_spark_context is not None
    spark = local_session(app_name, master=master, shuffle_partitions=shuffle_partitions, conf=conf)
    absent = [name for name in require if running and not loadable(spark, PROVIDED_BY[name])]
    if absent:
        raise ConfigError(
            f"a Spark session already runs in this process without {', '.join(absent)} on its class "
            "path (a JVM's class path is fixed when it starts): call spark_purgatory.session() "
            "before any other session is built, or stop that one first (spark.stop())"
        )
    return spark


def loadable(spark: SparkSession, cls: str) -> bool:
    """Does the driver's class loader find ``cls`` (``PROVIDED_BY``)?"""
    jvm = spark.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(cls, False, jvm.Thread.currentThread().getContextClassLoader())
    except Exception:  # noqa: BLE001 - py4j's ClassNotFoundException
        return False
    return True


def local_session(
    app_name: str = "spark-purgatory",
    *,
    master: str = "local[*]",
    shuffle_partitions: int = 9,
    conf: dict[str, str] | None = None,
    c1_only: bool = True,
    jars: bool = True,
) -> SparkSession:
    """Build (or get) a local session; ``conf`` entries override the defaults.

    ``c1_only``: start the JVM with ``C1_ONLY`` (C1 + C2 otherwise); ignored when ``conf`` sets
    ``spark.driver.extraJavaOptions`` or a session already runs.  ``jars``: put the fetched
    JARs on the class path; ignored when a session already runs.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):  # the JVM binds loopback, not the host's first interface
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    settings = {
        "spark.pyspark.python": sys.executable,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.driver.memory": "4g",
        # each state version holds whole shard blobs: keep 20 versions on disk, not Spark's 100
        "spark.sql.streaming.minBatchesToRetain": "20",
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        UNIX_SOCKETS: "true",
        FILE_OPEN_COST[0]: FILE_OPEN_COST[1],
    }
    fresh = SparkContext._active_spark_context is None  # a running JVM's class path is fixed
    first_use = None
    if not fresh:  # what getOrCreate would apply, without its WARN that static settings are not
        spark = SparkSession.builder.getOrCreate()
        for key, value in {**settings, **(conf or {})}.items():
            if spark.conf.isModifiable(key):
                spark.conf.set(key, value)
    else:
        settings.update(_extras(jars))
        if c1_only and "spark.driver.extraJavaOptions" not in (conf or {}):
            classpath = [p for p in settings.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
            options, first_use = session_options(C1_ONLY, classpath)  # the class-data archive's too
            settings["spark.driver.extraJavaOptions"] = options
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in {**settings, **(conf or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if first_use is not None:
        first_use.started(spark)  # its JVM dumps the archive when it exits
    spark.sparkContext.setLogLevel("ERROR")
    quiet_spark_logs(spark)
    return spark


def _extras(jars: bool) -> dict[str, str]:
    """The settings that put the fetched JAR sets on the class path (none without ``jars``)."""
    classpath = spark_jars() if jars else []
    present = [name for name in SPARK_SETS if classpath and jar_paths(name)]
    settings = {EXTRAS_KEY: ",".join(present)}
    if not classpath:
        return settings
    settings["spark.driver.extraClassPath"] = os.pathsep.join(classpath)
    settings["spark.executor.extraClassPath"] = os.pathsep.join(classpath)  # local-cluster masters
    if "checks" in present:  # Spark's logs under a local checkpoint renamed in the JVM
        settings[CHECKPOINT_FILES] = LOCAL_CHECKPOINT_FILES
    if "delta" in present:
        settings.update(DELTA_CONF)
        # Delta replays the log before every append with txnAppId, in 50 tasks by default;
        # one suffices for a local session's small tables
        settings["spark.databricks.delta.snapshotPartitions"] = "1"
    return settings


def delta_classes_available(spark: Any) -> bool:
    """Is Spark's Delta data source on this session's classpath?  A Spark Connect session (no
    JVM handle) looks for the extension in ``spark.sql.extensions`` or a Databricks runtime."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        try:
            jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
            return True
        except Exception:
            return False
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        runtime = spark.conf.get("spark.databricks.clusterUsageTags.sparkVersion", "") or ""
    except Exception:
        return False
    return "DeltaSparkSessionExtension" in extensions or bool(runtime)


def delta_added_locally(spark: Any) -> bool:
    """Did ``local_session`` put Delta's JARs on this session's class path, rather than the
    cluster, Databricks or the user?"""
    try:
        return "delta" in (spark.conf.get(EXTRAS_KEY, "") or "").split(",")
    except Exception:  # a session without that key, or a stand-in without a conf
        return False
