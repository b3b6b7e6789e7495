"""The operator's output: one row schema for every kind of row, and its split into the tables.

**One operator, one output.**  After an ``EventTimeTimeout`` operator Spark allows no further
stateful operator, so outcomes, unmatched events, rejected rows and per-shard metrics leave
the operator as one stream with a ``kind`` column (``OUTPUT_SCHEMA``, from
``contract.OPERATOR_OUTPUT``).  Event times travel as epoch ms (``<name>_ms``) and get their
timestamp twins on the stream (``with_timestamps``); ``outcomes_of`` / ``unmatched_of`` /
``rejected_of`` split a micro-batch (in ``foreachBatch``) into the three tables of
``contract.TABLES``.

Invariants: every column of the output and of the tables comes from the contract; a table's
rows are exactly the rows of its kind.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..contract import (
    GAUGES,
    KIND_METRICS,
    KIND_OUTCOME,
    KIND_REJECTED,
    KIND_UNMATCHED,
    OPERATOR_OUTPUT,
    OUTCOMES,
    REJECTED,
    TABLES,
    UNMATCHED_EVENTS,
    TableContract,
    ms_column,
)
from ..engine.purgatory import BatchResult, Purgatory

__all__ = [
    "OUTPUT_SCHEMA",
    "output_rows",
    "with_timestamps",
    "outcomes_of",
    "unmatched_of",
    "rejected_of",
    "metrics_of",
]

#: the operator's output: every kind of row in one schema (times as epoch ms)
OUTPUT_SCHEMA: T.StructType = from_arrow_schema(OPERATOR_OUTPUT)
_OUTPUT_COLUMNS = OUTPUT_SCHEMA.fieldNames()
_OBJECT_COLUMNS = [
    f.name for f in OUTPUT_SCHEMA.fields if isinstance(f.dataType, (T.StringType, T.ArrayType))
]
_WATERMARK = "watermark"

# PySpark's own serializer concatenates our output frames, whose unused columns are all-NA;
# pandas warns about that on every micro-batch in the worker logs.  The result is correct.
warnings.filterwarnings(
    "ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning
)

#: a rejected row's columns in the output (``contract.REJECTED``'s, but ``batch_id``)
_REJECTED_ROWS = [c for c in REJECTED.engine_columns if c != "batch_id"]
#: the output's event times, by timestamp name (each travels as ``<name>_ms``)
_TIME_COLUMNS = [*dict.fromkeys(c for t in TABLES.values() for c in t.time_columns), _WATERMARK]


# -- in the Python workers: one shard's result as output rows ------------------------------------


def _ms_names(table: TableContract) -> dict[str, str]:
    return {name: ms_column(name) for name in table.time_columns}


def output_rows(
    shard: int,
    result: BatchResult,
    bad: pd.DataFrame,
    p: Purgatory,
    wm: int,
    group_rows: int = 0,
    relayed: int = 0,
) -> pd.DataFrame:
    """A shard's micro-batch as ``OUTPUT_SCHEMA`` rows: its outcomes, unmatched events,
    rejected rows (the engine's and ``bad``, those rejected at parse) and one metrics row
    (``group_rows``: the input rows this call got; ``relayed``: the rows it posted to the
    mailbox)."""
    outcomes = result.outcomes.drop(columns="batch_id").rename(columns=_ms_names(OUTCOMES))
    unmatched = result.unmatched.drop(columns="batch_id").rename(columns=_ms_names(UNMATCHED_EVENTS))
    gauges = dict(
        zip(GAUGES, (p.pending, p.buffered_events, p.watched, group_rows, relayed), strict=True)
    )
    parts = [
        (KIND_OUTCOME, _with_single_key(outcomes)),
        (KIND_UNMATCHED, unmatched),
        (KIND_REJECTED, result.rejected[_REJECTED_ROWS]),
        (KIND_REJECTED, bad),
        (KIND_METRICS, pd.DataFrame({name: [value] for name, value in gauges.items()})),
    ]
    out = _stacked([(kind, part) for kind, part in parts if len(part)])
    # the metrics row (the last) carries the watermark; exact, not through a float column
    watermark = pd.array([None] * len(out), dtype="Int64")
    watermark[-1] = wm
    out[ms_column(_WATERMARK)] = watermark
    out["shard"] = np.int32(shard)
    return out


def _with_single_key(outcomes: pd.DataFrame) -> pd.DataFrame:
    """A single key goes back as a plain string (``key``), like it came (``with_timestamps``)."""
    keys = pa.array(outcomes["keys"].to_numpy(dtype=object), pa.list_(pa.string()))
    single = pc.equal(pc.list_value_length(keys), 1).to_numpy(zero_copy_only=False)
    first = pc.list_element(keys.filter(pa.array(single)), 0).to_numpy(zero_copy_only=False)
    key = np.full(len(outcomes), None, dtype=object)
    key[single] = first
    multi = outcomes["keys"].to_numpy(dtype=object).copy()
    multi[single] = None
    return outcomes.assign(key=key, keys=multi)


def _stacked(parts: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The parts one after another in ``OUTPUT_SCHEMA``'s columns, each with its ``kind``,
    column by column: a column a part lacks is null there (None, or NaN in a number column)."""
    sizes = [len(part) for _kind, part in parts]
    columns: dict[str, np.ndarray] = {"kind": np.repeat(np.array([k for k, _ in parts], dtype=object), sizes)}
    for name in _OUTPUT_COLUMNS[1:]:
        null = None if name in _OBJECT_COLUMNS else np.nan
        values = np.concatenate(
            [part[name].to_numpy() if name in part else np.full(len(part), null) for _k, part in parts]
        )
        if null is None:  # Arrow wants None, not NaN, for a missing string or array
            values = values.astype(object, copy=False)
            values[pd.isna(values)] = None
        columns[name] = values
    return pd.DataFrame(columns, copy=False)


def with_timestamps(out: DataFrame) -> DataFrame:
    """The operator's rows with each ``<name>_ms`` also as the timestamp ``<name>``, and an
    outcome's single ``key`` back in ``keys``."""
    single = (F.col("kind") == KIND_OUTCOME) & F.col("keys").isNull()
    out = out.withColumn("keys", F.when(single, F.array("key")).otherwise(F.col("keys")))
    out = out.withColumn("key", F.when(F.col("kind") != KIND_OUTCOME, F.col("key")))
    for name in _TIME_COLUMNS:
        out = out.withColumn(name, F.timestamp_millis(F.col(ms_column(name))))
    return out


# -- splitting a micro-batch into the SPEC's tables ------------------------------------------------


def _writer_column(table: TableContract, name: str, batch_id: int | None) -> Column:
    """A column the writer adds: ``batch_id``, ``emitted_at``, or the date partition (the date
    of the table's last event-time column, or today's for a table without one)."""
    if name == table.partition_by:
        column = F.to_date(table.time_columns[-1]) if table.time_columns else F.current_date()
    else:
        column = {"batch_id": F.lit(batch_id).cast("long"), "emitted_at": F.current_timestamp()}[name]
    return column.alias(name)


def _table_of(batch: DataFrame, table: TableContract, batch_id: int | None) -> DataFrame:
    rows = batch.where(F.col("kind") == table.kind)
    engine = [
        F.timestamp_millis(F.col(ms_column(c))).alias(c) if c in table.time_columns else F.col(c)
        for c in table.engine_columns
        if c != "batch_id"
    ]
    writer = [_writer_column(table, c, batch_id) for c in ["batch_id", *table.writer_columns]]
    return rows.select(*engine, *writer)


def outcomes_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``outcomes`` rows of a micro-batch, with the SPEC's columns (+ ``resolved_date``)."""
    return _table_of(batch, OUTCOMES, batch_id)


def unmatched_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``unmatched_events`` rows of a micro-batch."""
    return _table_of(batch, UNMATCHED_EVENTS, batch_id)


def rejected_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``rejected`` rows of a micro-batch (``source`` is operations or events)."""
    return _table_of(batch, REJECTED, batch_id)


def metrics_of(batch: DataFrame) -> DataFrame:
    """Per-shard gauges reported by the shards that ran in this micro-batch."""
    return batch.where(F.col("kind") == KIND_METRICS).select("shard", *GAUGES, _WATERMARK)
