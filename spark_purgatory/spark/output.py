"""The operator's output: one row schema for every kind of row, and its split into the tables.

After an ``EventTimeTimeout`` operator Spark allows no further stateful operator, so every
kind of row leaves as one stream with a ``kind`` column (``OUTPUT_SCHEMA``); ``*_of`` split a
micro-batch into the tables, event times becoming timestamps (``with_timestamps``).

Invariants: every column of the output and of the tables comes from the contract; a table's
rows are exactly the rows of its kind.
"""

from __future__ import annotations

import warnings

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..contract import (
    KIND_METRICS,
    KIND_OUTCOME,
    METRICS,
    OPERATOR_OUTPUT,
    OUTCOMES,
    REJECTED,
    TABLES,
    UNMATCHED_EVENTS,
    TableContract,
    ms_column,
)

#: the operator's output: every kind of row in one schema (times as epoch ms)
OUTPUT_SCHEMA: T.StructType = from_arrow_schema(OPERATOR_OUTPUT)

# PySpark's serializer concatenates our frames with all-NA padding rows, and pandas warns on
# every micro-batch; only that module's warning is silenced
warnings.filterwarnings(
    "ignore",
    message="The behavior of DataFrame concatenation with empty",
    category=FutureWarning,
    module=r"pyspark\.sql\.pandas\.serializers",
)

#: the output's event times, by timestamp name (each travels as ``<name>_ms``)
_TIME_COLUMNS = [*dict.fromkeys([*(c for t in TABLES.values() for c in t.time_columns), "watermark"])]


def with_timestamps(out: DataFrame) -> DataFrame:
    """The operator's rows with each ``<name>_ms`` also as the timestamp ``<name>``, and an
    outcome's single ``key`` back in ``keys`` (one ``withColumns``: each ``withColumn`` is
    analysed again)."""
    outcome = f"kind = '{KIND_OUTCOME}'"
    columns = {
        "keys": f"CASE WHEN {outcome} AND keys IS NULL THEN array(key) ELSE keys END",
        "key": f"CASE WHEN NOT {outcome} THEN key END",
        **{name: f"timestamp_millis(`{ms_column(name)}`)" for name in _TIME_COLUMNS},
    }
    return out.withColumns({name: F.expr(sql) for name, sql in columns.items()})


# -- splitting a micro-batch into the SPEC's tables ------------------------------------------------


def _writer_column(table: TableContract, name: str, batch_id: int | None) -> Column:
    """A column the writer adds: ``batch_id``, ``emitted_at``, or the date partition (the date
    of the table's last event-time column, or today's for a table without one)."""
    if name == table.partition_by:
        column = F.to_date(table.time_columns[-1]) if table.time_columns else F.current_date()
    else:
        column = {"batch_id": F.lit(batch_id).cast("long"), "emitted_at": F.current_timestamp()}[name]
    return column.alias(name)


def _engine_columns(table: TableContract) -> list[Column]:
    """The table's columns the engine fills but ``batch_id``, event times as timestamps."""
    return [
        F.timestamp_millis(F.col(ms_column(c))).alias(c) if c in table.time_columns else F.col(c)
        for c in table.engine_columns
        if c != "batch_id"
    ]


def _table_of(batch: DataFrame, table: TableContract, batch_id: int | None) -> DataFrame:
    writer = [_writer_column(table, c, batch_id) for c in ["batch_id", *table.writer_columns]]
    return batch.where(F.col("kind") == table.kind).select(*_engine_columns(table), *writer)


def outcomes_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``outcomes`` rows of a micro-batch, with the SPEC's columns (+ ``resolved_date``)."""
    return _table_of(batch, OUTCOMES, batch_id)


def unmatched_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``unmatched_events`` rows of a micro-batch."""
    return _table_of(batch, UNMATCHED_EVENTS, batch_id)


def rejected_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``rejected`` rows of a micro-batch (``source`` is operations or events)."""
    return _table_of(batch, REJECTED, batch_id)


def metrics_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The metrics rows of a micro-batch, one per shard that ran: the ``metrics`` table's
    columns up to ``batch_id`` (the sink adds the others, which need every shard)."""
    rows = batch.where(F.col("kind") == KIND_METRICS)
    return rows.select(*_engine_columns(METRICS), F.lit(batch_id).cast("long").alias("batch_id"))
