"""Delta writers: commit Arrow rows to the output tables, idempotently per app transaction.

Two writers, one contract (``accumulator.TableWriter``): commit in one Delta commit that
records an app transaction ``(app_id, version)``, and say which version an app id last
recorded, so a replayed micro-batch adds nothing twice.

* ``DeltaRsWriter`` (the embedded default): the executors write the data files and
  ``commit_files`` commits their add actions; ``commit`` writes rows given in this process.
  Both skip a version the table already recorded (delta-rs itself does not).
* ``SparkDeltaWriter`` (clusters, Databricks): ``df.write.format("delta")`` with
  ``txnAppId``/``txnVersion``, chosen when Delta's classes are on the session's classpath.

Every commit records the package's version as its ``userMetadata``, unless the session sets
its own.
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any, Literal

import pyarrow as pa

from ..config import ConfigError
from ..contract import TABLES, TableContract
from ..runtime.jars import DELTA_COORDINATES
from ..runtime.session import delta_added_locally, delta_classes_available
from ..storage import Storage, join, location
from ..version import USER_METADATA
from .staging import absolute_uri

log = logging.getLogger(__name__)

#: which writer ``choose_writer`` returns: Spark's Delta source when present, or the one named
WriterChoice = Literal["auto", "delta-rs", "spark"]

#: the session setting that names a Spark Delta commit's ``userMetadata`` (Delta's own key)
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


def commit_properties(**given: Any) -> Any:
    """delta-rs's ``CommitProperties``: ``given`` and the package's version as ``userMetadata``."""
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": USER_METADATA}, **given)


def with_options(write: Any, options: dict[str, str]) -> Any:
    """``write`` (a ``DataFrameWriter``) with each of ``options`` set."""
    for key, value in options.items():
        write = write.option(key, value)
    return write


def user_metadata(spark: Any) -> dict[str, str]:
    """Spark's Delta write options that record the package's version in a commit's info;
    none where the session names its own (the option would override it)."""
    try:
        own = spark.conf.get(USER_METADATA_CONF, None)
    except Exception:  # noqa: BLE001 - a stand-in session without a conf: record the version
        own = None
    return {} if own else {"userMetadata": USER_METADATA}


class DeltaRsWriter:
    """Writes with delta-rs (no JVM Delta needed); idempotent through app transactions.

    Args:
        root: where the tables live (a path or a URI).
        storage_options: delta-rs storage options, over those ``storage`` gives.
        storage: the ``storage.*`` settings (the environment's when None).
    """

    def __init__(
        self, root: str, *, storage_options: dict[str, str] | None = None, storage: Storage | None = None
    ) -> None:
        self.root = absolute_uri(root)  # the executors write data files there
        self.storage = storage or Storage()
        self.storage_options = _options(root, storage, storage_options)
        self.opened = OpenTables(self.storage)

    def path(self, table: str) -> str:
        return join(self.root, table)

    def committed_version(self, table: str, app_id: str) -> int | None:
        return self.opened.recorded_version(self.path(table), app_id, self.storage_options)

    def create_tables(self) -> None:
        """Create every table that is not there yet, empty, with its schema and partitioning;
        a table made by an older contract gets the columns it lacks (null in its old rows)."""
        for name in TABLES:
            _add_missing_columns(self._table(name), TABLES[name])

    def _table(self, name: str, *, fresh: bool = True) -> Any:
        """Table ``name``, created if it is not there yet; ``fresh=False``: as last read."""
        from deltalake import DeltaTable

        path = self.path(name)
        table = self.opened.get(path, self.storage_options, fresh=fresh)
        if table is not None:
            return table
        contract = TABLES[name]
        DeltaTable.create(
            location(path),
            contract.schema,
            mode="ignore",
            partition_by=[contract.partition_by],
            storage_options=self.storage_options,
            commit_properties=commit_properties(),
        )
        return self.opened.get(path, self.storage_options)

    def commit_files(self, table: str, adds: pa.Table, *, app_id: str, version: int) -> None:
        """Commit data files already written (``sender.ADDS`` rows) in one commit with
        ``(app_id, version)``: metadata only, the rows never pass through this process."""
        from deltalake import Transaction
        from deltalake.transaction import AddAction

        done = self.committed_version(table, app_id)
        if done is not None and done >= version:
            log.info("skip %s version %s: already recorded (%s)", table, version, done)
            return
        actions = [
            AddAction(
                a["path"],
                a["size"],
                json.loads(a["partition_values"]),
                a["modification_time"],
                True,
                a["stats"],
            )
            for a in adds.to_pylist()
        ]
        contract = TABLES[table]
        self._table(table, fresh=False).create_write_transaction(
            actions,
            mode="append",
            schema=contract.schema,
            partition_by=[contract.partition_by],
            commit_properties=commit_properties(app_transactions=[Transaction(app_id, version)]),
        )

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        from deltalake import Transaction, write_deltalake

        done = self.committed_version(table, app_id)
        if done is not None and done >= version:
            log.info("skip %s version %s: already recorded (%s)", table, version, done)
            return
        contract = TABLES[table]
        write_deltalake(
            location(self.path(table)),
            rows.select(contract.schema.names).cast(contract.schema),
            mode="append",
            partition_by=[contract.partition_by],
            target_file_size=max(int(target_file_size), 1 << 20),
            storage_options=self.storage_options,
            commit_properties=commit_properties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            ),
        )


class SparkDeltaWriter:
    """Writes with Spark's Delta data source (``txnAppId``/``txnVersion``): clusters, Databricks."""

    def __init__(self, spark: Any, root: str, *, storage: Storage | None = None) -> None:
        self.spark = spark
        self.root = root
        self.storage_options = _options(root, storage, None)  # for reading the log with delta-rs
        self.options = user_metadata(spark)  # the version in each commit (module docstring)
        self.opened = OpenTables(storage or Storage())

    def path(self, table: str) -> str:
        return join(self.root, table)

    def committed_version(self, table: str, app_id: str) -> int | None:
        return self.opened.recorded_version(self.path(table), app_id, self.storage_options)

    def create_tables(self) -> None:
        """``DeltaRsWriter.create_tables``, by an empty append (merging the schema)."""
        for name, contract in TABLES.items():
            table = open_table(self.path(name), self.storage_options)
            have = set() if table is None else set(table.schema().to_arrow().names)
            if set(contract.schema.names) - have:
                empty = self.spark.createDataFrame(contract.schema.empty_table())
                self._write(empty, name).save(self.path(name))

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        """Append rows given in this process (backfills) in one commit with ``(app_id, version)``;
        Delta itself skips a version the table already recorded for ``app_id``."""
        contract = TABLES[table]
        frame = self.spark.createDataFrame(rows.select(contract.schema.names).cast(contract.schema))
        self._save(frame, table, app_id, version)

    def commit_staged(
        self, table: str, staged: list[str], *, app_id: str, version: int, target_file_size: int
    ) -> None:
        """Append the staged Parquet files' rows: Spark reads them on the executors, with the
        contract's schema (inferring it from the footers costs a Spark job)."""
        self._save(self.spark.read.schema(spark_schema(table)).parquet(*staged), table, app_id, version)

    def _save(self, frame: Any, table: str, app_id: str, version: int) -> None:
        # Delta's idempotent write: a (txnAppId, txnVersion) the table's log already holds for
        # that app id (or a lower version) is skipped by Delta, not written again
        self._write(frame, table).option("txnAppId", app_id).option("txnVersion", version).save(
            self.path(table)
        )

    def _write(self, frame: Any, table: str) -> Any:
        write = (
            frame.write.format("delta")
            .mode("append")
            .partitionBy(TABLES[table].partition_by)
            .option("mergeSchema", "true")  # a table made by an older contract gains new columns
        )
        return with_options(write, self.options)


@functools.cache
def spark_schema(table: str) -> Any:
    """The output table's contract as Spark's ``StructType`` (``table``: a name of ``TABLES``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(TABLES[table].schema)


def _options(root: str, storage: Storage | None, given: dict[str, str] | None) -> dict[str, str] | None:
    return {**((storage or Storage()).delta_options(root) or {}), **(given or {})} or None


def open_table(path: str, storage_options: dict[str, str] | None) -> Any:
    """The Delta table at ``path`` (None if there is none yet)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(location(path), storage_options=storage_options)
    except TableNotFoundError:
        return None


def _add_missing_columns(table: Any, contract: TableContract) -> None:
    """The contract's columns the table lacks, added (a metadata-only commit)."""
    from deltalake import Schema

    have = set(table.schema().to_arrow().names)
    missing = [f for f in contract.schema if f.name not in have]
    if missing:
        log.info("%s: adding columns %s", contract.name, [f.name for f in missing])
        table.alter.add_columns(
            Schema.from_arrow(pa.schema(missing)).fields, commit_properties=commit_properties()
        )


class OpenTables:
    """The Delta tables a writer opened, by path, each brought up to date (one look at two files
    of its log) before it is used.  Not shared between threads; pickled empty."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._open: dict[str, Any] = {}
        self._logs: dict[str, tuple[Any, str]] = {}  # each table's log: its filesystem and path

    def __getstate__(self) -> dict:
        return {"storage": self.storage, "_open": {}, "_logs": {}}

    def _look(self, path: str, table: Any) -> str:
        """``current``, ``behind`` or ``gone`` (the version ``table`` holds is not there)."""
        import pyarrow.fs as pafs

        if path not in self._logs:  # made once: on AWS without a region, making it asks for one
            fs, root = self.storage.filesystem(path)
            self._logs[path] = fs, f"{root}/_delta_log"
        fs, log_path = self._logs[path]
        version = table.version()
        held, following = fs.get_file_info([f"{log_path}/{v:020d}.json" for v in (version, version + 1)])
        if held.type == pafs.FileType.NotFound:
            return "gone"
        return "current" if following.type == pafs.FileType.NotFound else "behind"

    def get(self, path: str, storage_options: dict[str, str] | None, *, fresh: bool = True) -> Any:
        """The table at ``path`` up to date (None if there is none); ``fresh=False``: as last read."""
        table = self._open.get(path)
        if table is not None:
            if not fresh:
                return table
            try:
                look = self._look(path, table)
                if look != "gone":
                    if look == "behind":
                        table.update_incremental()
                    return table
            except Exception:  # noqa: BLE001 - a log it cannot bring forward: open it afresh
                log.debug("%s: opened afresh", path, exc_info=True)
            del self._open[path]
        table = open_table(path, storage_options)
        if table is not None:
            self._open[path] = table
        return table

    def recorded_version(self, path: str, app_id: str, storage_options: dict[str, str] | None) -> int | None:
        """The version ``app_id`` last recorded in the table at ``path`` (None: none, or no table)."""
        table = self.get(path, storage_options)
        return None if table is None else table.transaction_version(app_id)


def choose_writer(
    spark: Any, root: str, *, prefer: WriterChoice = "auto", storage: Storage | None = None
) -> DeltaRsWriter | SparkDeltaWriter:
    """The writer ``prefer`` names; for ``"auto"``, Spark's when the environment provides Delta.

    ``"auto"`` picks ``SparkDeltaWriter`` when Delta's classes are on the session's class path
    and ``DeltaRsWriter`` otherwise, also for a local session with ``make jars``'s Delta JARs.

    Args:
        spark: the session.
        root: where the tables live (a path or a URI).
        prefer: ``auto``, ``delta-rs`` or ``spark``.
        storage: the ``storage.*`` settings (the environment's when None).

    Raises:
        ConfigError: ``prefer="spark"`` in a session without Delta's classes (one line naming
            the Maven coordinates to add), or an unknown ``prefer``.
    """
    if prefer not in ("auto", "spark", "delta-rs"):
        raise ConfigError(f"writer must be auto, spark or delta-rs, got {prefer!r}")
    present = delta_classes_available(spark)
    if prefer == "spark" and not present:
        raise ConfigError(
            "job.writer=spark: Spark's Delta data source is not on this session's classpath; add "
            f"{DELTA_COORDINATES} (spark-submit --packages {DELTA_COORDINATES}, a cluster library, "
            "or `make jars` and spark_purgatory.session(require=['delta']) for local sessions) "
            "or use job.writer=delta-rs"
        )
    if prefer == "spark" or (prefer == "auto" and present and not delta_added_locally(spark)):
        return SparkDeltaWriter(spark, root, storage=storage)
    return DeltaRsWriter(root, storage=storage)


def maintain_tables(
    root: str, *, compact: bool = True, checkpoint: bool = True, storage: Storage | None = None
) -> dict[str, dict]:
    """Optional upkeep through delta-rs: compact small files and write a log checkpoint."""
    report = {}
    for name in TABLES:
        table = open_table(join(root, name), _options(root, storage, None))
        if table is None:
            continue
        entry: dict[str, Any] = {}
        if compact:
            entry["compact"] = table.optimize.compact(commit_properties=commit_properties())
        if checkpoint:
            table.create_checkpoint()
            entry["checkpoint_version"] = table.version()
        report[name] = entry
    return report
