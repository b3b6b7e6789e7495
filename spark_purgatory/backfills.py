"""Backfills: batch mode into the same three Delta tables as the stream, in one call.

``backfill`` writes through the stream's own pieces, so the tables are the same whichever
mode wrote them.

Invariant (idempotence): each table gets at most one commit per ``(app_id, batch_id)``,
recording the app transaction ``(app_id, version=batch_id)``, so a backfill that failed
half-way is simply run again.  The app id is ``BACKFILL_APP_ID`` unless given, unlike every
stream's, so a backfill and a stream can write the same tables.  Versions only grow per app
id: give successive backfills growing ``batch_id`` values, or each its own ``app_id``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from .config import PurgatoryConfig
from .contract import KIND_METRICS, OPERATOR_OUTPUT, TABLES
from .delta.accumulator import TableWriter
from .delta.staging import split_tables
from .delta.writers import WriterChoice, choose_writer
from .runtime.settings import library_plan
from .startup import _session_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .spark.sources import SourceFormat

__all__ = ["BACKFILL_APP_ID", "backfill"]

log = logging.getLogger(__name__)

#: the app id of a backfill's commits unless ``backfill(app_id=...)`` names another
BACKFILL_APP_ID = "spark-purgatory-backfill"


def backfill(
    operations: DataFrame | str,
    events: DataFrame | str,
    *,
    output: str,
    config: PurgatoryConfig | None = None,
    final_watermark_ms: int | None = None,
    writer: WriterChoice | TableWriter = "auto",
    batch_id: int = 0,
    app_id: str = BACKFILL_APP_ID,
    source_format: SourceFormat = "json",
    spark: SparkSession | None = None,
) -> dict[str, int]:
    """Run the purgatory over static input (a replay, a late-arriving day, or a first load
    before the stream takes over) and append its rows to the tables under ``output``.

    Args:
        operations: the operations as a static DataFrame in ``source_format``'s raw form (what
            ``read_batch`` returns: a ``value`` text column for JSON lines), or a path read
            with ``read_batch``.
        events: the completion events, in the same form.
        output: where the ``outcomes``, ``unmatched_events`` and ``rejected`` tables live (the
            stream's ``output``, to backfill its tables; a ``TableWriter`` given as ``writer``
            writes where it was built to).
        config: ``PurgatoryConfig``; the defaults when None.
        final_watermark_ms: the watermark after all input is processed; by default
            everything resolves (``purgatory_batch``'s default).
        writer: ``auto`` (Spark's Delta source when its classes are present, else delta-rs),
            ``delta-rs``, ``spark``, or your own ``TableWriter``.
        batch_id: the ``batch_id`` column of the rows and the version of the app transaction
            (see the module docstring: rerunning the same one adds nothing).
        app_id: the app id of the commits (``BACKFILL_APP_ID`` by default).
        source_format: ``json`` or ``parquet`` (how paths are read and rows parsed).
        spark: the session, when both inputs are paths (else the inputs' session).

    Returns:
        Rows appended per table, by table name (0 for a table that had this version already).

    The writers commit Arrow tables from this process, so the operator's output rows (not
    its metrics rows) are brought to the driver once, as Arrow; size the driver for the
    backfill's outcomes, or split a large backfill by time into several batch ids.

    Example (a notebook, where ``spark`` is the session)::

        from spark_purgatory import PurgatoryConfig, backfill

        counts = backfill("/data/ops-2026-01", "/data/events-2026-01", output="/data/tables",
                          config=PurgatoryConfig(shards=4), batch_id=202601, spark=spark)
        print(counts)   # {'outcomes': 9500, 'unmatched_events': 12, 'rejected': 3, 'metrics': 0}
    """
    config = config or PurgatoryConfig()
    spark = spark or _session_of(operations, events)
    if isinstance(writer, str):
        writer = choose_writer(spark, output, prefer=writer)
    todo = [name for name in TABLES if not _recorded(writer, name, app_id, batch_id)]
    if not todo:
        log.info("backfill %s version %s: every table has it already", app_id, batch_id)
        return dict.fromkeys(TABLES, 0)
    rows = _operator_rows(spark, operations, events, config, final_watermark_ms, source_format)
    tables = split_tables(rows, batch_id, dt.datetime.now(dt.timezone.utc))
    size = config.accumulator_batch_size
    for name in todo:
        writer.commit(name, tables[name], app_id=app_id, version=batch_id, target_file_size=size)
    return {name: tables[name].num_rows if name in todo else 0 for name in TABLES}


def _recorded(writer: TableWriter, table: str, app_id: str, batch_id: int) -> bool:
    done = writer.committed_version(table, app_id)
    return done is not None and done >= batch_id


def _operator_rows(
    spark: SparkSession,
    operations: DataFrame | str,
    events: DataFrame | str,
    config: PurgatoryConfig,
    final_watermark_ms: int | None,
    source_format: SourceFormat,
) -> pa.Table:
    """``purgatory_batch``'s output rows for the tables (``contract.OPERATOR_OUTPUT``), as Arrow."""
    from pyspark.sql import functions as F

    from .spark.batch import purgatory_batch
    from .spark.sources import read_batch

    def source(given: DataFrame | str, kind: str) -> DataFrame:
        return read_batch(spark, given, source_format, kind=kind) if isinstance(given, str) else given

    with library_plan():
        out = purgatory_batch(
            source(operations, "operations"),
            source(events, "events"),
            config,
            source_format=source_format,
            final_watermark_ms=final_watermark_ms,
        )
    frame = out.where(F.col("kind") != KIND_METRICS).select(*OPERATOR_OUTPUT.names)
    if hasattr(frame, "toArrow"):
        return frame.toArrow()
    return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)
