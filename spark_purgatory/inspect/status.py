"""How a purgatory query is running, from what it leaves behind: ``checkpoint_status``.

The driver's progress is gone when it restarts; what stays is the checkpoint (the last
committed micro-batch, its watermark), the output tables and the ``metrics`` table (each
input's own watermark), and the state's files (pending per shard).  The result says which
source each figure came from.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..checkpoint_paths import Checkpoint, base_name
from ..config import PurgatoryConfig
from ..contract import MAX_TS_MS, TABLES
from ..engine.tables import I64_MIN
from ..state.versions import read_record
from ..storage import Storage, read_bytes
from .checkpoint import read_checkpoint
from .countdown import Countdown, countdown_of, iso_text
from .pending_table import StateNeedsSpark, pending_batches
from .pending_view import inspect_config, pending_operations
from .table_readers import DeltaRsReader, TableReader, table_reader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: the metrics table's name under the output path (written by the query when it has one)
METRICS_TABLE = "metrics"


def checkpoint_status(
    checkpoint: str,
    *,
    output: str | None = None,
    spark: SparkSession | None = None,
    config: PurgatoryConfig | None = None,
    state: bool = True,
    reader: TableReader | None = None,
) -> dict[str, Any]:
    """The query's last committed micro-batch, watermarks, pending by shard and table sizes.

    Args:
        checkpoint: the query's checkpoint.
        output: where its tables are (row counts, the metrics table); skipped when None.
        spark: for the pending count from a state only Spark reads (RocksDB ...); the state
            that ``start`` keeps is read from its files, without Spark.
        config: the query's ``PurgatoryConfig`` (state path, ``storage.*`` settings).
        state: count pending operations from the state; False: from the shards' last
            metrics rows or pending record.  Either counts an operation once.

    Returns:
        A JSON-ready dict: ``checkpoint``, ``layout`` (the shard count and the rescale
        history), ``last_batch`` (the metrics table's last rows, if any), ``pending_by_shard``
        (and ``pending_from``), ``tables``, ``notes``; with ``output.kafka.topic`` in
        ``config``, ``output_topic`` (the topic and the last micro-batch it committed).
    """
    cfg = inspect_config(checkpoint, config)
    storage = Storage.of(cfg)
    info = read_checkpoint(checkpoint, storage=storage)
    countdown = countdown_of(checkpoint, storage, floor_ms=info.watermark_ms, latest=True)
    notes: list[str] = []
    result: dict[str, Any] = {
        "checkpoint": {
            # first, the one that decides expiries now; then what it comes from
            **_expiry_watermark(countdown, info.watermark_ms),
            "path": checkpoint,
            "last_committed_batch": info.last_batch,
            "running_batch": info.running_batch,
            "watermark": iso_text(info.watermark_ms),
            "watermark_ms": info.watermark_ms,
            "next_watermark": iso_text(info.next_watermark_ms),
            "batch_time": iso_text(info.batch_timestamp_ms),
            "groups": info.groups,
            "watermark_policy": info.conf.get("spark.sql.streaming.multipleWatermarkPolicy"),
            "app_id": info.app_id,
            # how an operation's time left counts now
            "time_left": countdown.summary(),
            # who last started on it, and the formats it holds (docs/upgrading.md)
            **_version(checkpoint, storage),
        },
        "layout": _layout(checkpoint, info.groups, storage),
        "last_batch": None,
        "input_watermarks": None,
        "expiry_lag": None,
        "pending_by_shard": None,
        "pending_from": None,
        "tables": {},
        "notes": notes,
    }
    gauges = None
    if output:
        tables = reader or table_reader(output, spark=spark, storage=storage)
        result["tables"] = _table_sizes(tables, info.app_id)
        metrics = _last_metrics(tables)
        if metrics is None:
            notes.append(
                f"no metrics table at {output}/{METRICS_TABLE}: each input's watermark is unknown "
                "(the checkpoint keeps only the global one)"
            )
        else:
            result["last_batch"] = metrics
            result["input_watermarks"] = metrics["watermarks"]
            result["expiry_lag"] = metrics["expiry_lag"]
            gauges = metrics["pending_by_shard"]
    else:
        notes.append("no --output given: no table sizes, no metrics table")
    # the state is read at the last committed batch; the metrics table may lag it (linger.ms)
    if state and info.last_batch is not None:
        result["pending_by_shard"] = _pending_in_state(checkpoint, cfg, spark, notes)
        result["pending_from"] = f"state, batch {info.last_batch}"
    if result["pending_by_shard"] is None and gauges:
        result["pending_by_shard"] = gauges
        result["pending_from"] = "metrics table (each shard's last row)"
    if result["pending_by_shard"] is None:
        recorded = _pending_record(checkpoint, storage)
        if recorded is not None:
            result["pending_by_shard"] = recorded[1]
            record = base_name(Checkpoint(checkpoint).pending_record)
            result["pending_from"] = f"{record} (batch {recorded[0]})"
    if result["pending_by_shard"] is None:
        notes.append("pending by shard not read (no metrics table, state not read)")
    else:
        result["pending"] = sum(result["pending_by_shard"].values())
    if cfg.output_kafka_topic and info.app_id:
        result["output_topic"] = _output_topic(cfg, info.app_id, notes)
    return result


def _expiry_watermark(countdown: Countdown, watermark_ms: int | None) -> dict[str, Any]:
    """The watermark expiries are decided against now (``expiry_watermark``) and what it is:
    the operator's clock once it follows the wall clock, else Spark's watermark of the last
    committed micro-batch (each input's own, in the metrics table, only feeds it)."""
    ms = countdown.watermark(watermark_ms if watermark_ms is not None else I64_MIN)
    if ms == I64_MIN:
        return {"expiry_watermark": None, "expiry_watermark_is": "none yet: no micro-batch committed"}
    on_clock = watermark_ms is None or ms > watermark_ms
    what = (
        "the operator's clock (the inputs are silent: the wall clock less watermark.idle.timeout's lag)"
        if on_clock
        else "Spark's watermark of the last committed micro-batch (the inputs' combined, by the "
        "watermark policy below)"
    )
    return {"expiry_watermark": iso_text(ms), "expiry_watermark_is": what}


def _output_topic(config: PurgatoryConfig, app_id: str, notes: list[str]) -> dict[str, Any]:
    """The output topic and the last micro-batch it committed (its marker: ``kafka_output``)."""
    from ..kafka_output import committed_batch, settings_of

    settings = settings_of(config, app_id)
    assert settings is not None
    entry: dict[str, Any] = {"topic": settings.topic, "last_committed_batch": None}
    try:
        entry["last_committed_batch"] = committed_batch(settings, timeout_s=10.0)
    except Exception as error:  # a broker that does not answer: the rest of the status stands
        notes.append(f"output topic {settings.topic}: its marker not read ({error})")
    return entry


def _pending_in_state(
    checkpoint: str, config: PurgatoryConfig, spark: SparkSession | None, notes: list[str]
) -> dict[str, int]:
    """Pending operations per shard in the last committed batch's state: from its files (no
    JVM), or with Spark where only Spark reads them (said in ``notes``)."""
    try:
        counts: dict[int, int] = {}
        for batch in pending_batches(checkpoint, config=config):
            for entry in pc.value_counts(batch.column("shard")).to_pylist():
                counts[entry["values"]] = counts.get(entry["values"], 0) + entry["counts"]
        return {str(shard): counts[shard] for shard in sorted(counts)}
    except StateNeedsSpark as why:
        notes.append(f"the state was read with Spark: {why}")
    rows = pending_operations(checkpoint, spark=spark, config=config).groupBy("shard").count().collect()
    return {str(r["shard"]): int(r["count"]) for r in sorted(rows)}


def _version(checkpoint: str, storage: Storage) -> dict[str, Any]:
    """The version record's ``written_by`` and ``formats`` (a checkpoint from before the record:
    said so, no formats)."""
    record = read_record(checkpoint, storage)
    if record is None:
        return {"written_by": "before version records", "formats": None}
    return {"written_by": record["written_by"], "formats": record["formats"]}


def _layout(checkpoint: str, groups: int | None, storage: Storage) -> dict[str, Any]:
    """The shard layout: primaries (the checkpoint's partitions less the cross-shard group),
    each rescale (micro-batch, from, to, when), and a rescale a crash left under way."""
    from ..state.layout import layout_of

    record = layout_of(checkpoint, storage=storage) or {}
    fs, journal = storage.filesystem(Checkpoint(checkpoint).rescale_journal)
    return {
        "shards": None if groups is None else PurgatoryConfig.shards_in(groups),
        "rescales": record.get("history", []),
        "rescale_under_way": fs.get_file_info(journal).is_file,
    }


def _table_sizes(tables: TableReader, app_id: str | None) -> dict[str, dict]:
    sizes = {}
    for name in [*TABLES, METRICS_TABLE]:
        if not tables.exists(name):
            continue
        entry: dict[str, Any] = {"rows": tables.row_count(name)}
        if app_id and isinstance(tables, DeltaRsReader):
            entry["app_commit"] = tables._table(name).transaction_version(app_id)  # the accumulator's last
        sizes[name] = entry
    return sizes


def _last_metrics(tables: TableReader) -> dict | None:
    """The metrics table's last micro-batch: its rows, each input's watermark in it, and each
    shard's last pending count (a shard is not called in a batch with nothing for it, so its
    last row may be older).  None: no metrics table."""
    columns = tables.columns(METRICS_TABLE)
    if not tables.exists(METRICS_TABLE) or "batch_id" not in columns:
        return None
    gauges = [c for c in ("shard", "batch_id", "pending", EXPIRY_LAG, "watermark") if c in columns]
    if isinstance(tables, DeltaRsReader):
        import pyarrow.dataset as ds

        dataset = tables.dataset(METRICS_TABLE)
        every = dataset.to_table(columns=gauges)
        last = pc.max(every.column("batch_id")).as_py()
        rows = dataset.to_table(filter=ds.field("batch_id") == last) if last is not None else pa.table({})
    else:  # Spark's reader
        frame = tables._frame(METRICS_TABLE)  # type: ignore[attr-defined]
        every = frame.select(*gauges).toArrow()
        last = pc.max(every.column("batch_id")).as_py() if every.num_rows else None
        rows = frame.filter(frame["batch_id"] == last).toArrow() if last is not None else pa.table({})
    if "shard" in rows.column_names:
        rows = rows.sort_by("shard")
    by_shard: dict[str, int] = {}
    if {"shard", "pending"} <= set(gauges):
        for row in every.sort_by([("batch_id", "ascending")]).to_pylist():
            if row["pending"] is not None:
                by_shard[str(row["shard"])] = int(row["pending"])
    listed = rows.to_pylist()
    watermarks = {
        name: max((r[name] for r in listed if r[name] is not None), default=None)
        for name in rows.column_names
        if name.endswith("watermark")
    }
    return {"batch_id": last, "rows": listed, "pending_by_shard": dict(sorted(by_shard.items())),
            "watermarks": watermarks, "expiry_lag": _expiry_lag(every)}  # fmt: skip


#: the metrics column of how long after its deadline a shard call's latest expiry was decided
EXPIRY_LAG = "expiry_lag_ms"


def _expiry_lag(every: pa.Table) -> dict | None:
    """The expiry lag (``metrics.expiry_lag_ms``) of the last micro-batch that expired
    something, and the largest in the table: is "reported within T" kept?  None: no expiry
    recorded (or a table from before the column)."""
    if EXPIRY_LAG not in every.column_names:
        return None
    lagged = every.filter(pc.is_valid(every.column(EXPIRY_LAG)))
    if "watermark" in lagged.column_names:  # a table from before the end of input's lags were null
        watermark = lagged.column("watermark")
        end = pa.scalar(MAX_TS_MS, pa.timestamp("ms", tz="UTC")).cast(watermark.type)
        lagged = lagged.filter(pc.fill_null(pc.less(watermark, end), True))
    if lagged.num_rows == 0:
        return None
    last = pc.max(lagged.column("batch_id")).as_py()
    in_last = lagged.filter(pc.equal(lagged.column("batch_id"), last))
    return {"batch_id": last, "last_ms": pc.max(in_last.column(EXPIRY_LAG)).as_py(),
            "max_ms": pc.max(lagged.column(EXPIRY_LAG)).as_py()}  # fmt: skip


def expiry_lag(tables: TableReader) -> dict | None:
    """``_expiry_lag`` of the output's metrics table (``at-risk`` prints it beside its rows)."""
    metrics = _last_metrics(tables)
    return None if metrics is None else metrics["expiry_lag"]


def _pending_record(checkpoint: str, storage: Storage) -> tuple[int, dict[str, int]] | None:
    """``<checkpoint>/purgatory-pending``, the driver's last pending count per shard, if the
    query writes one: ``(batch_id, {shard: pending})``."""
    fs, path = storage.filesystem(Checkpoint(checkpoint).pending_record)
    try:
        body = json.loads(read_bytes(fs, path))
        pending = {
            str(shard): int(n) for shard, n in sorted(body["pending"].items(), key=lambda i: int(i[0]))
        }
        return int(body.get("batch_id", -1)), pending
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
        return None
