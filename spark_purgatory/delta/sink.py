"""The ``foreachBatch`` sink: the operator's output rows split into the three Delta tables.

Tables (under the output path), with the columns ``contract.TABLES`` declares:

* ``outcomes`` partitioned by ``resolved_date`` (the date of ``resolved_at``),
* ``unmatched_events`` partitioned by ``event_date`` (the date of the event's ``ts``),
* ``rejected`` partitioned by ``rejected_date`` (the date the row was rejected).

``split_tables`` is the one place rows become table rows, and it knows no table by name: a
table's engine columns are copied from the operator's output (``contract.OPERATOR_OUTPUT``),
its event times arrive as epoch ms (``contract.ms_column``) and become timestamps, and the
writer's columns are added: ``batch_id``, ``emitted_at`` (now) and the date partition, which
is the date of the table's last event-time column, or of now for a table without one.

``PurgatorySink`` is the ``foreachBatch`` function: it splits a micro-batch, stages the rows
in the ``RecordAccumulator`` and drains what is ready (``spark_purgatory.start`` wires it).
The sink knows the operator only through the contract, never through its Spark schema.

Where the rows go today, and where they should go (design, not yet built).  Today the
sink collects each micro-batch to the driver (``toArrow``), which stages and writes it:
on a cluster the driver is the throughput ceiling and the memory risk of the query.
Kafka's producer is the model: records are batched where they are produced, and the
sender thread ships only ready batches and keeps the bookkeeping.  In those terms:

* **the producers are the executors**.  ``foreachBatch`` runs ``batch.mapInArrow`` with
  ``split_tables`` and the accumulator's staging (its directory is already a URI every
  executor reaches): each task appends its rows per destination to one staged file named
  for ``(batch_id, task partition)``, so a retried task attempt overwrites its own file,
  and returns one small row per file (destination, name, bytes, rows).  Only those rows,
  and the per-kind counts, reach the driver, which records them in the batch's staged
  manifest before moving ``staged_through`` (files no manifest names are a failed attempt's
  and are deleted);
* **the accumulator is the driver's bookkeeping**, as now: bytes and age per destination
  from the staged manifests, ``ready()`` unchanged (``batch.size``, ``linger.ms``,
  ``buffer.memory``, flush on close);
* **the sender is a second small Spark job** per drain: one task per ready destination
  reads its staged files and writes Parquet data files of about ``batch.size`` into the
  table's location, returning each file's add action (path, size, partition values,
  stats).  The driver writes the drain manifest, then commits the add actions in one
  commit per table with ``DeltaTable.create_write_transaction(actions, mode="append",
  ..., commit_properties=CommitProperties(app_transactions=[Transaction(app_id,
  version)]))`` -- metadata only (checked here: delta-rs 1.6 commits such add actions with
  the app transaction, and ``transaction_version`` reads it back).  Where Delta is on the
  classpath, Delta's own writer with ``txnAppId``/``txnVersion`` does the same from a
  DataFrame over the staged files.

Exactly once stays the accumulator's argument: a drain's data files are invisible until
its commit, so a crash before it leaves only unreferenced files (removed by ``VACUUM``),
and a crash after it is resolved by ``transaction_version`` as now.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import (
    COMPLETED,
    EXPIRED,
    KIND_METRICS,
    OPERATOR_OUTPUT,
    OUTCOMES,
    REJECTED,
    TABLES,
    UNMATCHED_EVENTS,
    TableContract,
    ms_column,
)
from .accumulator import RecordAccumulator, TableWriter

__all__ = ["PurgatorySink", "split_tables"]

_TS = pa.timestamp("us", tz="UTC")


def _date(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.cast(pc.cast(ts, _TS), pa.date32())


def _from_ms(values: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.cast(pc.multiply(pc.cast(values, pa.int64()), 1000), pa.timestamp("us")).cast(_TS)


def _table_rows(table: TableContract, rows: pa.Table, batch_id: int, now: dt.datetime) -> pa.Table:
    """One table's rows from its kind of operator output rows (see the module docstring)."""
    n = rows.num_rows
    columns: dict[str, Any] = {}
    for name in table.engine_columns:
        if name == "batch_id":
            columns[name] = pa.array(np.full(n, batch_id, dtype=np.int64))
        elif name in table.time_columns:
            columns[name] = _from_ms(rows.column(ms_column(name)))
        else:
            columns[name] = rows.column(name)
    for name in table.writer_columns:
        if name == table.partition_by:
            if table.time_columns:
                columns[name] = _date(columns[table.time_columns[-1]])
            else:
                columns[name] = pa.array([now.date()] * n, type=pa.date32())
        else:  # emitted_at: when the row is written
            columns[name] = pa.array([now] * n, type=table.schema.field(name).type)
    return pa.table(columns, schema=table.schema)


def split_tables(rows: pa.Table, batch_id: int, now: dt.datetime) -> dict[str, pa.Table]:
    """The operator's output rows (``contract.OPERATOR_OUTPUT``) as the tables' rows, by name."""
    kind = rows.column("kind")
    return {
        name: _table_rows(table, rows.filter(pc.equal(kind, table.kind)), batch_id, now)
        for name, table in TABLES.items()
    }


class PurgatorySink:
    """The ``foreachBatch`` function: split, stage in the accumulator, drain what is ready.

    Args:
        accumulator: where rows wait for ``batch.size`` / ``linger.ms``.
        writer: ``DeltaRsWriter`` or ``SparkDeltaWriter`` (see ``choose_writer``).
        on_batch: called with a dict of per-batch figures (rows per kind, pending, watermark,
            what was committed), e.g. to log a progress line.
        clock: seconds since the epoch (for ``emitted_at`` and the rejected date).

    ``spark_purgatory.start`` builds and closes the sink; wire it yourself only for your own
    sink around it::

        sink = PurgatorySink(RecordAccumulator(f"{chk}/staging", app_id=..., ...), DeltaRsWriter(out))
        query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
        query.awaitTermination()
        sink.close()   # flush what is still lingering
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        writer: TableWriter,
        *,
        on_batch: Callable[[dict], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.accumulator = accumulator
        self.writer = writer
        self.on_batch = on_batch
        self.clock = clock or accumulator.clock
        self.last_batch_id: int | None = None
        self.pending: dict[int, int] = {}  # shard -> last reported pending count
        self._lock = threading.Lock()  # micro-batches and linger drains never overlap

    def __getstate__(self) -> dict:
        # Spark Connect pickles the foreachBatch function to run it in the server's Python
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = _to_arrow(batch)
        self.process(rows, int(batch_id))

    def process(self, rows: pa.Table, batch_id: int) -> dict:
        """Stage and drain one micro-batch given as Arrow rows (``contract.OPERATOR_OUTPUT``)."""
        with self._lock:
            return self._process(rows, batch_id)

    def drain_lingering(self) -> list[dict]:
        """Commit destinations whose rows have lingered long enough, between micro-batches.

        A quiet stream runs no micro-batch, so without this rows would wait past linger.ms
        for the next input; ``start`` calls it from a timer (Kafka's sender thread).
        """
        with self._lock:
            if self.last_batch_id is None:
                return []
            return self.accumulator.drain(self.last_batch_id, self.writer, phase=RecordAccumulator.LINGER)

    def _process(self, rows: pa.Table, batch_id: int) -> dict:
        now = dt.datetime.fromtimestamp(self.clock(), tz=dt.timezone.utc)
        tables = split_tables(rows, batch_id, now)
        acc = self.accumulator
        for name, table in tables.items():
            if table.num_rows == 0:
                continue
            dates = table.column(TABLES[name].partition_by)
            for value in pc.unique(dates).to_pylist():
                part = table.filter(pc.equal(dates, pa.scalar(value, pa.date32())))
                acc.append(batch_id, name, value.isoformat(), part)
        acc.mark_staged(batch_id)
        written = acc.drain(batch_id, self.writer)
        self.last_batch_id = batch_id
        figures = self._figures(rows, tables, batch_id, written)
        if self.on_batch:
            self.on_batch(figures)
        return figures

    def close(self) -> list[dict]:
        """Flush everything still staged (the producer's ``close()``)."""
        with self._lock:
            batch_id = self.last_batch_id
            if batch_id is None:
                batch_id = max(self.accumulator.staged_through, 0)
            return self.accumulator.flush(batch_id, self.writer)

    def _figures(
        self, rows: pa.Table, tables: dict[str, pa.Table], batch_id: int, written: list[dict]
    ) -> dict:
        metrics = rows.filter(pc.equal(rows.column("kind"), KIND_METRICS))
        for shard, pending in zip(
            metrics.column("shard").to_pylist(), metrics.column("pending").to_pylist(), strict=True
        ):
            self.pending[int(shard)] = int(pending or 0)
        status = tables[OUTCOMES.name].column("status")
        watermark = ms_column("watermark")
        wm = pc.max(metrics.column(watermark)).as_py() if metrics.num_rows else None
        return {
            "batch_id": batch_id,
            "pending": sum(self.pending.values()),
            "completed": int(pc.sum(pc.equal(status, COMPLETED)).as_py() or 0),
            "expired": int(pc.sum(pc.equal(status, EXPIRED)).as_py() or 0),
            "unmatched": tables[UNMATCHED_EVENTS.name].num_rows,
            "rejected": tables[REJECTED.name].num_rows,
            watermark: wm,
            "staged_bytes": self.accumulator.buffered_bytes,
            "committed": written,
        }


def _to_arrow(batch: Any) -> pa.Table:
    """A micro-batch DataFrame as Arrow (``toArrow`` where available, else via pandas)."""
    frame = batch.select(*OPERATOR_OUTPUT.names)
    if hasattr(frame, "toArrow"):
        return frame.toArrow()
    return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)
