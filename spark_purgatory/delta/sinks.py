"""Delta sinks: the three output tables, their writers, and the foreachBatch sink.

Tables (under the output path), with the SPEC's columns plus a date partition column:

* ``outcomes`` partitioned by ``resolved_date`` (the date of ``resolved_at``),
* ``unmatched_events`` partitioned by ``event_date`` (the date of the event's ``ts``),
* ``rejected`` partitioned by ``rejected_date`` (the date the row was rejected).

Two writers, one contract (``accumulator.TableWriter``): commit Arrow rows in one Delta
commit that records an app transaction ``(app_id, version)``, and say which version an app
id last recorded, so a replayed micro-batch adds nothing twice.

* ``DeltaRsWriter`` (the embedded default): ``deltalake.write_deltalake`` with
  ``CommitProperties(app_transactions=[Transaction(app_id, version)])``; skips a version the
  table already recorded (``DeltaTable.transaction_version``).
* ``SparkDeltaWriter`` (clusters, Databricks): ``df.write.format("delta")`` with
  ``txnAppId``/``txnVersion``, Delta's own idempotent-write options.  Chosen by
  ``choose_writer`` only when the Delta classes are on the session's classpath, which is
  detected at run time, never assumed.  The recorded version is read with delta-rs in both
  cases (the log format is the same).

``PurgatorySink`` is the ``foreachBatch`` function: it splits the operator's output into the
tables, stages the rows in the ``RecordAccumulator`` and drains what is ready.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import OUTCOMES, REJECTED, UNMATCHED_EVENTS
from ..contract import TABLES as CONTRACTS
from .accumulator import RecordAccumulator

__all__ = [
    "TABLES",
    "OUTCOMES_SCHEMA",
    "UNMATCHED_SCHEMA",
    "REJECTED_SCHEMA",
    "DeltaRsWriter",
    "SparkDeltaWriter",
    "choose_writer",
    "delta_classes_available",
    "PurgatorySink",
    "maintain_tables",
]

log = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")
OUTCOMES_SCHEMA = OUTCOMES.schema
UNMATCHED_SCHEMA = UNMATCHED_EVENTS.schema
REJECTED_SCHEMA = REJECTED.schema
#: table name -> (schema, partition column)
TABLES = {t.name: (t.schema, t.partition_by) for t in CONTRACTS.values()}


class DeltaRsWriter:
    """Writes with delta-rs (no JVM Delta needed); idempotent through app transactions."""

    def __init__(self, root: str, *, storage_options: dict[str, str] | None = None) -> None:
        self.root = root
        self.storage_options = storage_options

    def path(self, table: str) -> str:
        return os.path.join(self.root, table)

    def committed_version(self, table: str, app_id: str) -> int | None:
        return _recorded_version(self.path(table), app_id, self.storage_options)

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        done = self.committed_version(table, app_id)
        if done is not None and done >= version:
            log.info("skip %s version %s: already recorded (%s)", table, version, done)
            return
        schema, partition = TABLES[table]
        write_deltalake(
            self.path(table),
            rows.select(schema.names).cast(schema),
            mode="append",
            partition_by=[partition],
            target_file_size=max(int(target_file_size), 1 << 20),
            storage_options=self.storage_options,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            ),
        )


class SparkDeltaWriter:
    """Writes with Spark's Delta data source (``txnAppId``/``txnVersion``): clusters, Databricks."""

    def __init__(self, spark: Any, root: str) -> None:
        self.spark = spark
        self.root = root

    def path(self, table: str) -> str:
        return os.path.join(self.root, table)

    def committed_version(self, table: str, app_id: str) -> int | None:
        return _recorded_version(self.path(table), app_id, None)

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        schema, partition = TABLES[table]
        frame = self.spark.createDataFrame(rows.select(schema.names).cast(schema).to_pandas())
        (
            frame.write.format("delta")
            .mode("append")
            .partitionBy(partition)
            .option("txnAppId", app_id)
            .option("txnVersion", version)
            .save(self.path(table))
        )


def _recorded_version(path: str, app_id: str, storage_options: dict[str, str] | None) -> int | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(path, storage_options=storage_options)
    except TableNotFoundError:
        return None
    return table.transaction_version(app_id)


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


def choose_writer(spark: Any, root: str, *, prefer: str = "auto"):
    """``SparkDeltaWriter`` when Delta is on the classpath (or ``prefer="spark"``), else delta-rs."""
    if prefer not in ("auto", "spark", "delta-rs"):
        raise ValueError(f"writer must be auto, spark or delta-rs, got {prefer!r}")
    if prefer == "spark" or (prefer == "auto" and delta_classes_available(spark)):
        return SparkDeltaWriter(spark, root)
    return DeltaRsWriter(root)


# -- splitting the operator's output --------------------------------------------------------------


def _date(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.cast(pc.cast(ts, _TS), pa.date32())


def _from_ms(values: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.cast(pc.multiply(pc.cast(values, pa.int64()), 1000), pa.timestamp("us")).cast(_TS)


def split_tables(rows: pa.Table, batch_id: int, now: dt.datetime) -> dict[str, pa.Table]:
    """The operator's output rows (``streaming.OUTPUT_SCHEMA``) as the three tables' rows."""
    kind = rows.column("kind")
    out: dict[str, pa.Table] = {}
    emitted = pa.scalar(now, type=_TS)

    o = rows.filter(pc.equal(kind, "outcome"))
    resolved_at = _from_ms(o.column("resolved_at_ms"))
    out["outcomes"] = pa.table(
        {
            "op_id": o.column("op_id"),
            "keys": o.column("keys"),
            "status": o.column("status"),
            "op_ts": _from_ms(o.column("op_ts_ms")),
            "deadline": _from_ms(o.column("deadline_ms")),
            "resolved_at": resolved_at,
            "latency_ms": o.column("latency_ms"),
            "matched_events": o.column("matched_events"),
            "progress": o.column("progress"),
            "condition": o.column("condition"),
            "target": o.column("target"),
            "payload": o.column("payload"),
            "batch_id": pa.array(np.full(o.num_rows, batch_id, dtype=np.int64)),
            "emitted_at": pa.array([emitted.as_py()] * o.num_rows, type=_TS),
            "resolved_date": _date(resolved_at),
        },
        schema=OUTCOMES_SCHEMA,
    )
    u = rows.filter(pc.equal(kind, "unmatched"))
    ts = _from_ms(u.column("ts_ms"))
    out["unmatched_events"] = pa.table(
        {
            "key": u.column("key"),
            "ts": ts,
            "op_id": u.column("op_id"),
            "source": u.column("source"),
            "value": u.column("value"),
            "reason": u.column("reason"),
            "batch_id": pa.array(np.full(u.num_rows, batch_id, dtype=np.int64)),
            "event_date": _date(ts),
        },
        schema=UNMATCHED_SCHEMA,
    )
    r = rows.filter(pc.equal(kind, "rejected"))
    out["rejected"] = pa.table(
        {
            "source": r.column("source"),
            "raw": r.column("raw"),
            "reason": r.column("reason"),
            "batch_id": pa.array(np.full(r.num_rows, batch_id, dtype=np.int64)),
            "rejected_date": pa.array([now.date()] * r.num_rows, type=pa.date32()),
        },
        schema=REJECTED_SCHEMA,
    )
    return out


class PurgatorySink:
    """The ``foreachBatch`` function: split, stage in the accumulator, drain what is ready.

    Args:
        accumulator: where rows wait for ``batch.size`` / ``linger.ms``.
        writer: ``DeltaRsWriter`` or ``SparkDeltaWriter`` (see ``choose_writer``).
        on_batch: called with a dict of per-batch figures (rows per kind, pending, watermark,
            what was committed), e.g. to log a progress line.
        clock: seconds since the epoch (for ``emitted_at`` and the rejected date).

    Example::

        sink = PurgatorySink(RecordAccumulator(f"{chk}/staging", app_id=..., ...), DeltaRsWriter(out))
        query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
        query.awaitTermination()
        sink.close()   # flush what is still lingering
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        writer: Any,
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
        """Stage and drain one micro-batch given as Arrow rows (``OUTPUT_SCHEMA``)."""
        with self._lock:
            return self._process(rows, batch_id)

    def drain_lingering(self) -> list[dict]:
        """Commit destinations whose rows have lingered long enough, between micro-batches.

        A quiet stream runs no micro-batch, so without this rows would wait past linger.ms
        for the next input; the job calls it from a timer (Kafka's sender thread).
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
            partition = TABLES[name][1]
            if table.num_rows == 0:
                continue
            dates = table.column(partition)
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
        metrics = rows.filter(pc.equal(rows.column("kind"), "metrics"))
        for shard, pending in zip(
            metrics.column("shard").to_pylist(), metrics.column("pending").to_pylist(), strict=True
        ):
            self.pending[int(shard)] = int(pending or 0)
        outcomes = tables["outcomes"]
        status = outcomes.column("status")
        wm = pc.max(metrics.column("watermark_ms")).as_py() if metrics.num_rows else None
        return {
            "batch_id": batch_id,
            "pending": sum(self.pending.values()),
            "completed": int(pc.sum(pc.equal(status, "completed")).as_py() or 0),
            "expired": int(pc.sum(pc.equal(status, "expired")).as_py() or 0),
            "unmatched": tables["unmatched_events"].num_rows,
            "rejected": tables["rejected"].num_rows,
            "watermark_ms": wm,
            "staged_bytes": self.accumulator.buffered_bytes,
            "committed": written,
        }


def _to_arrow(batch: Any) -> pa.Table:
    """A micro-batch DataFrame as Arrow (``toArrow`` where available, else via pandas)."""
    from ..spark.output import OUTPUT_SCHEMA

    columns = [f.name for f in OUTPUT_SCHEMA.fields]
    frame = batch.select(*columns)
    if hasattr(frame, "toArrow"):
        return frame.toArrow()
    return pa.Table.from_pandas(frame.toPandas(), preserve_index=False)


def maintain_tables(root: str, *, compact: bool = True, checkpoint: bool = True) -> dict[str, dict]:
    """Optional upkeep through delta-rs: compact small files and write a log checkpoint."""
    from deltalake import DeltaTable

    report = {}
    for name in TABLES:
        path = os.path.join(root, name)
        if not os.path.isdir(os.path.join(path, "_delta_log")):
            continue
        table = DeltaTable(path)
        entry: dict[str, Any] = {}
        if compact:
            entry["compact"] = table.optimize.compact()
        if checkpoint:
            table.create_checkpoint()
            entry["checkpoint_version"] = table.version()
        report[name] = entry
    return report
