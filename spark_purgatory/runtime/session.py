"""A local SparkSession with defaults that work out of the box for this project.

* the Python workers run the driver's interpreter (``spark.pyspark.python`` and
  ``PYSPARK_PYTHON`` from ``sys.executable``), so they see the same virtual environment;
* a local master binds loopback (``SPARK_LOCAL_IP=127.0.0.1`` unless set): nothing listens
  beyond the machine, and Spark does not warn that the host name resolves to loopback;
* UTC session time zone, small shuffle partition count (state is per shard, so
  a partition per shard group, ``PurgatoryConfig.groups``, is plenty), no UI, quiet logs;
* no DataFrame call-site capture (``spark.python.sql.dataFrameDebugging.enabled=false``):
  PySpark otherwise makes extra JVM calls around every ``Column`` function, and the
  operator's plan has thousands (its errors then name no Python line of the library);
* the Python workers talk to the JVM over Unix domain sockets
  (``spark.python.unix.domain.socket.enabled``, Spark 4.1+), not TCP on loopback: on TCP a
  task's small writes (the function, the Arrow stream's start, its end mark) wait on the
  peer's delayed acknowledgement (Nagle's algorithm with no ``TCP_NODELAY``), so every
  Python task waited (docs/performance-history.md, "The Python workers' sockets");
* a file of a stream's micro-batch read by both cores (``spark.sql.files.openCostInBytes`` at
  ``FILE_OPEN_COST``, not Spark's 4 MB): Spark cuts a text or JSON file, or a Parquet file of
  several row groups, into one split per core once it is bigger than the open cost, so the
  operations' file of a micro-batch is routed on every core instead of one while the other
  waits (issue 48's idle core; docs/performance-history.md, sixth round).  A file source reads this
  setting from the session the stream was read with, so ``start`` cannot scope it to its
  query: in your own session, set it yourself.  A Parquet file of one row group is read by
  one task whatever the splits;
* with the project's JARs (the wheel's, or ``make checks-jar``'s in a checkout:
  ``runtime.jars.jar_files``), the checkpoint file manager
  ``io.sparkpurgatory.checkpoint.LocalCheckpointFiles`` for the session's queries: Spark's logs
  under a checkpoint on the local file system renamed in the JVM, where Hadoop's local
  ``FileContext`` starts a ``readlink`` process per file (``runtime.settings.checkpoint_files``);
  any other path gets Spark's own manager;
* no state store provider: ``query.start`` picks one for each new checkpoint (Spark's
  HDFS-backed store, which commits the operator's few small values fastest) unless ``conf``
  names one;
* the driver JVM (in local mode the executors' too) compiles with HotSpot's C1 compiler
  only (``-XX:TieredStopAtLevel=1`` in ``spark.driver.extraJavaOptions``, with tiered
  compilation's 240 MB code cache, not C1's 48 MB; ``c1_only=False``
  or your own ``spark.driver.extraJavaOptions`` keeps the default C1 + C2): a local session
  lives seconds to hours, C2's compiler threads compete with its first micro-batch for the
  CPU, and the JVM's share of the job (parsing files, moving Arrow batches) gains little
  from C2's code (docs/troubleshooting.md, "The first micro-batch is slow");
* with C1 only, the class-data archive for this class path (``runtime.class_data``): Spark's
  classes mapped at start instead of loaded one by one; made on first use (the first session
  of a class path dumps it when its JVM exits, into the user's cache) or by ``make class-data``;
* the project's own JARs and the JVM extras ``make jars`` fetched (``runtime.jars.spark_jars``:
  Delta's connector, hadoop-aws for ``s3a://``, Spark's Kafka source) on the JVM's class path
  (``spark.driver.extraClassPath``: in local mode the executors share the driver's JVM; through
  ``spark.jars`` a local session copied them all into its scratch folder at start);
  with the ``delta`` set, Delta's SQL extension and catalog (``DELTA_CONF``) unless ``conf``
  names others, and Delta's log replay in ``shuffle_partitions`` tasks, not 50.  The session
  records the sets in ``spark.purgatory.jars`` (``EXTRAS_KEY``): ``job.writer=auto`` keeps the
  embedded delta-rs writer where Delta's classes are there only because this function put
  them there, so a machine with or without ``mvn`` writes the same way (see
  ``delta.writers.choose_writer``).  ``jars=False`` leaves them out.

On a cluster or Databricks, use the session you are given instead; nothing in the library
needs this module.
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

__all__ = [
    "session",
    "PROVIDED_BY",
    "C1_ONLY",
    "DELTA_CONF",
    "EXTRAS_KEY",
    "UNIX_SOCKETS",
    "FILE_OPEN_COST",
    "delta_added_locally",
    "delta_classes_available",
    "local_session",
]

#: the JVM options that stop HotSpot's tiered compilation at C1 (no C2 compiler threads),
#: with the code cache tiered compilation would have: C1 alone gets 48 MB, which Spark's
#: classes fill (then the JVM stops compiling and interprets everything)
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

#: what a session needs for Delta's SQL (``CREATE TABLE ... USING delta``, catalog tables, time
#: travel) besides the JARs: Delta's session extension and its catalog as the session catalog
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: what Spark counts for opening a file when it cuts a scan's files into splits: below Spark's
#: 4 MB, so that a file of a micro-batch bigger than this is split across the cores
FILE_OPEN_COST = ("spark.sql.files.openCostInBytes", str(256 * 1024))

#: PySpark's switch from TCP on loopback to Unix domain sockets between the JVM and its Python
#: workers (Spark 4.1+; a SparkContext setting: give it when the session is built)
UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"

#: where a local session's JVM binds (``SPARK_LOCAL_IP``): Spark otherwise takes the host's
#: first non-loopback address when the host name resolves to loopback, and says so at WARN
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
    """A local Spark session for the purgatory, with the JVM extras ``make jars`` fetched on
    its class path: Spark's Kafka source (``source_format="kafka"``), Delta's connector
    (Spark's Delta writer, catalog tables) and S3A; the defaults of ``local_session``.

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
        ConfigError: a required set was never fetched, or a session already running in this
            process lacks it.

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
    unfetched = [name for name in require if not jar_paths(name)]
    if unfetched:
        raise ConfigError(
            f"the JARs of {', '.join(unfetched)} are not in {jars_root()}: run `make jars` in the "
            "checkout (it needs mvn), or set SPARK_PURGATORY_JARS to a folder that holds "
            f"{', '.join(name + '/' for name in unfetched)}"
        )
    running = SparkContext._active_spark_context is not None
    spark = local_session(app_name, master=master, shuffle_partitions=shuffle_partitions, conf=conf)
    absent = [name for name in require if running and not _loadable(spark, PROVIDED_BY[name])]
    if absent:
        raise ConfigError(
            f"a Spark session already runs in this process without {', '.join(absent)} on its class "
            "path (a JVM's class path is fixed when it starts): call spark_purgatory.session() "
            "before any other session is built, or stop that one first (spark.stop())"
        )
    return spark


def _loadable(spark: SparkSession, cls: str) -> bool:
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

    ``c1_only``: start the JVM with ``C1_ONLY`` (see the module docstring);
    ignored when ``conf`` sets ``spark.driver.extraJavaOptions`` or a session already runs.
    ``jars``: put the JVM extras ``make jars`` fetched on the class path (the module
    docstring); ignored when a session already runs (a JVM's class path is fixed at start).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):  # the JVM binds loopback, not the host's first interface
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
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
        # no call-site capture around every Column function (extra py4j round trips each):
        # the operator's plan and the sink's per batch build faster (runtime.settings.library_plan)
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        # the workers' sockets: no delayed-ACK stalls per task (module docstring)
        .config(UNIX_SOCKETS, "true")
        .config(*FILE_OPEN_COST)  # a micro-batch's one file on every core (module docstring)
    )
    fresh = SparkContext._active_spark_context is None  # a running JVM's class path is fixed
    extras = _extras(jars) if fresh else {}
    first_use = None
    if c1_only and fresh and "spark.driver.extraJavaOptions" not in (conf or {}):
        classpath = [p for p in extras.get("spark.driver.extraClassPath", "").split(os.pathsep) if p]
        options, first_use = session_options(C1_ONLY, classpath)  # the class-data archive's too
        builder = builder.config("spark.driver.extraJavaOptions", options)
    for key, value in extras.items():
        builder = builder.config(key, value)
    for key, value in (conf or {}).items():
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
        settings[CHECKPOINT_FILES] = LOCAL_CHECKPOINT_FILES  # (runtime.settings.checkpoint_files)
    if "delta" in present:
        settings.update(DELTA_CONF)
        # Delta replays the log before every append with txnAppId (its setTransactions come
        # from a full replay, not the .crc), in 50 tasks by default; one task suffices for a
        # local session's small tables (docs/deployment.md, "Which writer")
        settings["spark.databricks.delta.snapshotPartitions"] = "1"
    return settings


def delta_classes_available(spark: Any) -> bool:
    """Is Spark's Delta data source on this session's classpath?  Checked, never assumed.

    Classic sessions ask the JVM for ``io.delta.sql.DeltaSparkSessionExtension``; Spark
    Connect sessions (no JVM handle) look for the extension in ``spark.sql.extensions`` or
    Databricks' runtime version.
    """
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
    """Did ``local_session`` put Delta's JARs on this session's class path
    (``make jars``), rather than the cluster, Databricks or the user?"""
    try:
        return "delta" in (spark.conf.get(EXTRAS_KEY, "") or "").split(",")
    except Exception:  # a session without that key, or a stand-in without a conf
        return False
