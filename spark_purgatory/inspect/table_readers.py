"""Reading rows of the output tables for a question: by column value, or by raw text.

Two readers, one interface (``TableReader``): delta-rs (no JVM, file skipping for the handful
of rows a question needs) and Spark's Delta source, which ``table_reader`` picks when a
session with Delta's classes is given (on Databricks the tables may need its credentials).

Invariant: a table that does not exist yet reads as no rows (``exists`` tells the caller).
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from ..delta.reading import table_dataset
from ..delta.writers import open_table
from ..storage import Storage, join


class TableReader(Protocol):
    """Rows of the tables under one output path, as Arrow tables."""

    def exists(self, table: str) -> bool: ...

    def columns(self, table: str) -> list[str]: ...

    def rows_with(self, table: str, column: str, values: list[str]) -> pa.Table:
        """Rows whose ``column`` is one of ``values``."""
        ...

    def rows_containing(self, table: str, column: str, needles: list[str], where: dict[str, str]) -> pa.Table:
        """Rows whose ``column`` contains one of ``needles`` and whose ``where`` columns equal
        the given values."""
        ...

    def row_count(self, table: str) -> int | None: ...


class DeltaRsReader:
    """delta-rs: in this process, filtered with Arrow expressions (file skipping by stats)."""

    def __init__(self, output: str, storage: Storage | None = None) -> None:
        self.output = output
        self.storage = storage or Storage()
        self._tables: dict[str, Any] = {}

    def _table(self, name: str) -> Any:
        if name not in self._tables:
            path = join(self.output, name)
            self._tables[name] = open_table(path, self.storage.delta_options(path))  # None: not there
        return self._tables[name]

    def exists(self, table: str) -> bool:
        return self._table(table) is not None

    def columns(self, table: str) -> list[str]:
        t = self._table(table)
        return [] if t is None else list(t.schema().to_arrow().names)

    def dataset(self, table: str) -> ds.Dataset:
        """``table``'s rows as a pyarrow dataset read through pyarrow's own filesystem
        (``delta.reading``: no Python in Arrow's threads, no abort at exit)."""
        return table_dataset(self._table(table), join(self.output, table), self.storage)

    def _where(self, table: str, expression: ds.Expression) -> pa.Table:
        if self._table(table) is None:
            return pa.table({})
        return self.dataset(table).to_table(filter=expression)

    def rows_with(self, table: str, column: str, values: list[str]) -> pa.Table:
        return self._where(table, ds.field(column).isin(values))

    def rows_containing(self, table: str, column: str, needles: list[str], where: dict[str, str]) -> pa.Table:
        expression = ds.scalar(False)
        for needle in needles:
            expression = expression | pc.match_substring(ds.field(column), needle)
        for name, value in where.items():
            expression = expression & (ds.field(name) == value)
        return self._where(table, expression)

    def row_count(self, table: str) -> int | None:
        """Rows of ``table`` from the Delta log's statistics (no data file is read)."""
        t = self._table(table)
        if t is None:
            return None
        adds = pa.table(t.get_add_actions(flatten=True))  # delta-rs gives an arro3 table
        return int(pc.sum(adds.column("num_records")).as_py() or 0) if adds.num_rows else 0


class SparkReader:
    """Spark's Delta data source (when Delta's classes are on the session's classpath)."""

    def __init__(self, spark: Any, output: str) -> None:
        self.spark, self.output = spark, output

    def _frame(self, table: str) -> Any:
        try:
            return self.spark.read.format("delta").load(join(self.output, table))
        except Exception:  # no Delta table there (yet)
            return None

    def exists(self, table: str) -> bool:
        return self._frame(table) is not None

    def columns(self, table: str) -> list[str]:
        frame = self._frame(table)
        return [] if frame is None else frame.columns

    def _collect(self, frame: Any) -> pa.Table:
        return pa.table({}) if frame is None else frame.toArrow()

    def rows_with(self, table: str, column: str, values: list[str]) -> pa.Table:
        from pyspark.sql import functions as F

        frame = self._frame(table)
        return self._collect(None if frame is None else frame.filter(F.col(column).isin(values)))

    def rows_containing(self, table: str, column: str, needles: list[str], where: dict[str, str]) -> pa.Table:
        from pyspark.sql import functions as F

        frame = self._frame(table)
        if frame is None:
            return pa.table({})
        hit = F.lit(False)
        for needle in needles:
            hit = hit | F.col(column).contains(needle)
        for name, value in where.items():
            hit = hit & (F.col(name) == value)
        return self._collect(frame.filter(hit))

    def row_count(self, table: str) -> int | None:
        frame = self._frame(table)
        return None if frame is None else frame.count()


def table_reader(output: str, *, spark: Any = None, storage: Storage | None = None) -> TableReader:
    """Spark's Delta source when ``spark`` has Delta's classes, else delta-rs (module docstring)."""
    if spark is not None:
        from ..runtime.session import delta_classes_available

        if delta_classes_available(spark):
            return SparkReader(spark, output)
    return DeltaRsReader(output, storage)
