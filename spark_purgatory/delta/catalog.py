"""Output tables named in the session's catalog (``schema.table``, ``catalog.schema.table``).

``CatalogTables`` names the four output tables ``<schema>.<prefix><table>``; the job's
``--output-tables`` takes the same as text (``main.purgatory``, ``main.ops.payments_{table}``).
``CatalogDeltaWriter`` writes by name (``saveAsTable`` with ``txnAppId``/``txnVersion``) and
reads the last recorded version from the table's location.  delta-rs has no catalog, and
writing at the location would skip its permissions, so ``writer_for`` refuses it.

Invariant: a table is only ever written through its name; its location is only read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError
from ..contract import TABLES
from ..storage import Storage
from .writers import (
    DeltaRsWriter,
    SparkDeltaWriter,
    WriterChoice,
    choose_writer,
    delta_classes_available,
    spark_schema,
    with_options,
)

#: a part of a name: letters, digits, ``_`` and ``-`` (Unity Catalog allows ``-`` when quoted)
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
_TABLE = "{table}"


@dataclass(frozen=True)
class CatalogTables:
    """The output tables as names in the session's catalog: ``<schema>.<prefix><table>``.

    Args:
        schema: ``schema`` (the session's current catalog) or ``catalog.schema``.
        prefix: put before each table's name (``payments_`` -> ``payments_outcomes``).

    >>> CatalogTables("main.purgatory").name("outcomes")
    'main.purgatory.outcomes'
    >>> CatalogTables("ops", prefix="payments_").name("metrics")
    'ops.payments_metrics'
    >>> CatalogTables.parse("main.ops.payments_{table}")
    CatalogTables(schema='main.ops', prefix='payments_')
    """

    schema: str
    prefix: str = ""

    def __post_init__(self) -> None:
        parts = self.schema.split(".")
        if not 1 <= len(parts) <= 2 or not all(_PART.match(p) for p in parts):
            raise ConfigError(
                f"output tables: {self.schema!r} is not a schema; expected schema or catalog.schema "
                "(letters, digits, _ and -), e.g. main.purgatory"
            )
        if self.prefix and not _PART.match(self.prefix):
            raise ConfigError(f"output tables: prefix {self.prefix!r} may hold letters, digits, _ and -")

    @classmethod
    def parse(cls, text: str) -> CatalogTables:
        """``schema``, ``catalog.schema``, or either followed by ``.<prefix>{table}``."""
        text = text.strip()
        if text.endswith(_TABLE):
            schema, _, last = text.rpartition(".")
            return cls(schema, prefix=last[: -len(_TABLE)])
        if _TABLE in text:
            raise ConfigError(f"output tables: {_TABLE} must end the name, got {text!r}")
        return cls(text)

    def name(self, table: str) -> str:
        """The table's name as Spark SQL reads it (``spark.table(...)``)."""
        return f"{self.schema}.{self.prefix}{table}"

    def quoted(self, table: str) -> str:
        """The name with each part quoted (for SQL text)."""
        return ".".join(f"`{p}`" for p in self.name(table).split("."))

    def __str__(self) -> str:
        return self.name(_TABLE)


class CatalogDeltaWriter(SparkDeltaWriter):
    """Spark's Delta writer into catalog tables: ``saveAsTable`` with ``txnAppId``/``txnVersion``.

    Args:
        spark: a session whose catalog holds Delta tables (Delta's ``DeltaCatalog``,
            Databricks' Unity Catalog or Hive metastore).
        tables: the tables' names.
        storage: the ``storage.*`` settings, to read a table's log at its location.
    """

    def __init__(self, spark: Any, tables: CatalogTables, *, storage: Storage | None = None) -> None:
        super().__init__(spark, str(tables), storage=storage)
        self.tables = tables
        self.storage = storage or Storage()
        self._locations: dict[str, str] = {}

    def path(self, table: str) -> str:
        """Where the table's files are (its catalog entry's ``location``): read, never written."""
        if table not in self._locations:
            detail = self.spark.sql(f"DESCRIBE DETAIL {self.tables.quoted(table)}").first()
            self._locations[table] = detail["location"]
            self.storage_options = self.storage.delta_options(detail["location"])
        return self._locations[table]

    def create_tables(self) -> None:
        """The schema when missing, then each missing table, empty, with its schema and
        partitioning (a managed table: the catalog picks its location)."""
        schema = self.tables.schema
        if not self.spark.catalog.databaseExists(schema):
            quoted = ".".join(f"`{p}`" for p in schema.split("."))
            self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        for name, contract in TABLES.items():
            if self.spark.catalog.tableExists(self.tables.name(name)):
                continue
            empty = self.spark.createDataFrame([], spark_schema(name))
            (
                with_options(empty.write, self.options)  # the version in the commit (writers.user_metadata)
                .format("delta")
                .partitionBy(contract.partition_by)
                .mode("ignore")  # created meanwhile by another start: keep it
                .saveAsTable(self.tables.name(name))
            )

    def _save(self, frame: Any, table: str, app_id: str, version: int) -> None:
        (
            with_options(frame.write, self.options)
            .format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", version)
            .option("mergeSchema", "true")  # a table made by an older contract gains new columns
            .saveAsTable(self.tables.name(table))
        )


def writer_for(
    spark: Any, output: str | CatalogTables, *, prefer: WriterChoice = "auto", storage: Storage | None = None
) -> DeltaRsWriter | SparkDeltaWriter:
    """The writer for ``output``: ``choose_writer`` for a path; for catalog tables Spark's
    Delta writer by name, or one line saying why not (delta-rs has no catalog).

    Raises:
        ConfigError: catalog tables with ``prefer="delta-rs"``, or without Delta's classes.
    """
    if not isinstance(output, CatalogTables):
        return choose_writer(spark, output, prefer=prefer, storage=storage)
    if prefer == "delta-rs":
        raise ConfigError(
            f"output tables {output}: delta-rs cannot write catalog tables (it has no catalog); "
            "use writer auto or spark (Spark's Delta connector), or give an output path"
        )
    if prefer not in ("auto", "spark"):
        raise ConfigError(f"writer must be auto, spark or delta-rs, got {prefer!r}")
    if not delta_classes_available(spark):
        from ..runtime.jars import DELTA_COORDINATES

        raise ConfigError(
            f"output tables {output}: catalog tables need Spark's Delta connector, not on this "
            f"session's classpath: add {DELTA_COORDINATES} (--packages or a cluster library) with "
            "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension, or give an output path"
        )
    return CatalogDeltaWriter(spark, output, storage=storage)


def local_catalog(warehouse: str) -> dict[str, str]:
    """A local session's settings for a catalog that outlives it: Spark's Hive metastore in
    an embedded Derby database and the managed tables, all under ``warehouse`` (never the
    working directory).  A local session's own catalog is in memory: a restarted job would
    find its tables' directories but not their names (``job.warehouse``, tests)."""
    import os

    from ..runtime.class_data import java_options
    from ..runtime.jars import spark_jars
    from ..runtime.session import C1_ONLY

    root = os.path.abspath(warehouse)
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": root,
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={root}/metastore_db;create=true"
        ),
        # derby.log goes to derby.system.home (else the working directory)
        "spark.driver.extraJavaOptions": f"{java_options(C1_ONLY, spark_jars())} -Dderby.system.home={root}",
    }
