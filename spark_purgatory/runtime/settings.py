"""The session settings a purgatory query starts with, restored for the user's other queries.

``start`` starts its query inside these context managers: each sets what the query needs for
the moment Spark clones the session, then puts the session's own values back.  A user's own
value always wins where it may (``unset``); the shuffle partitions never, since each shard
group needs its own partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
_HDFS_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
_ROCKSDB_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
_ARROW_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
#: rows per Arrow batch handed to a shard unless the session says otherwise (``arrow_records``)
_SHARD_CHUNK_ROWS = 50_000


@contextmanager
def started_with(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Start the query with ``settings``, then restore the session's values (or their absence):
    a streaming query runs on a clone of the session taken when it starts, so the restored
    values never reach it."""
    previous = {key: spark.conf.get(key, None) for key in settings}  # None: not set explicitly
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def shuffle_partitions(spark: Any, partitions: int) -> Any:
    """Start the query with ``partitions`` shuffle partitions."""
    previous = spark.conf.get(_SHUFFLE_PARTITIONS, None)
    if previous is not None and previous != str(partitions):
        log.info(
            "%s=%s in this session; this query uses a partition per shard group: %s",
            _SHUFFLE_PARTITIONS,
            previous,
            partitions,
        )
    return started_with(spark, {_SHUFFLE_PARTITIONS: str(partitions)})


def state_store(spark: Any) -> Any:
    """Start the query on Spark's HDFS-backed state store unless the session names a provider;
    a session that names RocksDB gets changelog checkpointing unless it says otherwise.

    The operator keeps one small value per shard group, for which HDFS's delta file costs less
    than RocksDB's full checkpoint.  A checkpoint keeps the store it began with.
    """
    provider = spark.conf.get(_STATE_STORE, None)
    if provider is None:
        return started_with(spark, {_STATE_STORE: _HDFS_STATE_STORE})
    if "RocksDB" in provider:
        return started_with(spark, unset(spark, {_ROCKSDB_CHANGELOG: "true"}))
    return started_with(spark, {})


def arrow_records(spark: Any) -> Any:
    """Start the query with Arrow batches of ``_SHARD_CHUNK_ROWS`` rows unless the session sets
    ``spark.sql.execution.arrow.maxRecordsPerBatch``: a shard step takes its whole micro-batch
    at once, so smaller chunks only add work (a session with large payloads may set less).
    """
    return started_with(spark, unset(spark, {_ARROW_RECORDS: str(_SHARD_CHUNK_ROWS)}))


_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
_CATALYST = "org.apache.spark.sql.catalyst.optimizer."
_SOURCES = "org.apache.spark.sql.execution.datasources."
_DELTA = "org.apache.spark.sql.delta."
#: what ``optimizer_rules`` leaves out: ``InferFiltersFromGenerate``, then rules that find nothing
QUERY_EXCLUDED_RULES: tuple[str, ...] = (
    _CATALYST + "InferFiltersFromGenerate",
    _DELTA + "metric.OptimizeConditionalIncrementMetric",
    _DELTA + "optimizer.RangePartitionIdRewrite",
    _DELTA + "stats.PrepareDeltaScan",
    _CATALYST + "OptimizeUpdateFields",
    _CATALYST + "OptimizeOneRowRelationSubquery",
    _SOURCES + "PushVariantIntoScan",
    _SOURCES + "SchemaPruning",
)


def optimizer_rules(spark: Any) -> Any:
    """Start the query without the optimizer rules of ``QUERY_EXCLUDED_RULES`` (the session's
    own ``spark.sql.optimizer.excludedRules`` kept beside them).

    Spark optimizes a streaming query's plan again every micro-batch; for the routing's
    ``posexplode``, ``InferFiltersFromGenerate`` pushes the copies' whole expression into a
    filter every row evaluates, to drop rows the explode drops anyway, and the others walk the
    plan for nothing.  An optimizer rule never changes a result; one a Spark version lacks is
    ignored.
    """
    rules = [r.strip() for r in (spark.conf.get(_EXCLUDED_RULES, None) or "").split(",") if r.strip()]
    missing = [rule for rule in QUERY_EXCLUDED_RULES if rule not in rules]
    if not missing:
        return started_with(spark, {})
    return started_with(spark, {_EXCLUDED_RULES: ",".join([*rules, *missing])})


_CHECKPOINTING = "org.apache.spark.sql.execution.streaming.checkpointing."
#: where Spark reads its checkpoint file manager's class from (``checkpoint_files``)
CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"
#: Spark's manager that renames through Hadoop's ``FileSystem``, in the JVM
FILE_SYSTEM_FILES = _CHECKPOINTING + "FileSystemBasedCheckpointFileManager"
#: Spark's default manager, through Hadoop's ``FileContext``
FILE_CONTEXT_FILES = _CHECKPOINTING + "FileContextBasedCheckpointFileManager"
#: the project's JAR's manager: ``FILE_SYSTEM_FILES`` for local paths, Spark's own choice for
#: any other, so a session may name it for all its queries
LOCAL_CHECKPOINT_FILES = "io.sparkpurgatory.checkpoint.LocalCheckpointFiles"


def checkpoint_files(spark: Any, checkpoint: str) -> Any:
    """Start a query whose checkpoint is on the local file system with Spark's FileSystem-based
    checkpoint file manager, unless the session names a manager.

    The default manager's local file system runs ``readlink`` in a process before each rename
    of a log entry; the FileSystem-based one renames in the JVM.  Scoped to ``start``, this
    reaches the offsets, commits and state store, not the file sources' own logs
    (``local_session`` names ``LOCAL_CHECKPOINT_FILES`` for those).
    """
    if spark.conf.get(CHECKPOINT_FILES, None) is not None or not on_local_files(spark, checkpoint):
        return started_with(spark, {})
    return started_with(spark, {CHECKPOINT_FILES: FILE_SYSTEM_FILES})


def on_local_files(spark: Any, path: str) -> bool:
    """True where ``path`` resolves, with the session's Hadoop settings, to Hadoop's local
    file system (a scheme-less path follows ``fs.defaultFS``); False where that cannot be
    told (Spark Connect, an unknown scheme)."""
    if is_connect(spark):
        return False
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        hadoop = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        return str(jvm.org.apache.hadoop.fs.Path(path).getFileSystem(hadoop).getScheme()) == "file"
    except Exception:  # noqa: BLE001 - py4j wraps the JVM's errors: not known to be local
        return False


def is_connect(spark: Any) -> bool:
    """A Spark Connect session: no SparkContext and no JVM in this process."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def unset(spark: Any, defaults: dict[str, str]) -> dict[str, str]:
    """The ``defaults`` the session does not set itself (a user's own value always wins)."""
    return {key: value for key, value in defaults.items() if spark.conf.get(key, None) is None}


@contextmanager
def library_plan() -> Iterator[None]:
    """Build the library's own query plan without PySpark's call-site capture.

    ``spark.python.sql.dataFrameDebugging.enabled`` costs py4j round trips for each of the
    plan's thousands of ``Column`` calls, whose call sites would name this library's lines
    anyway; the user's own DataFrames keep theirs.
    """
    try:
        from pyspark.errors import utils
    except ImportError:  # pragma: no cover - older PySpark: nothing to switch off
        yield
        return
    if not hasattr(utils, "_enable_debugging_cache"):
        yield
        return
    before = utils._enable_debugging_cache
    utils._enable_debugging_cache = False
    try:
        yield
    finally:
        utils._enable_debugging_cache = before
