"""The Spark host: the purgatory as one ``applyInPandasWithState`` operator over two streams.

Shape of the query::

    operations -> parse --+
                          +-> route -> watermark -> groupBy(shard).applyInPandasWithState
    events ----> parse --+                                   |
                              kind = outcome | unmatched | rejected | metrics

**One operator, one output.**  After an ``EventTimeTimeout`` operator Spark allows no further
stateful operator, so outcomes, unmatched events, rejected rows and per-shard metrics leave
the operator as one stream with a ``kind`` column; ``outcomes_of`` / ``unmatched_of`` /
``rejected_of`` split a micro-batch (in ``foreachBatch``) into the three tables.

**Sharded watchers.**  Rows are routed to ``purgatory.shards`` groups by
``pmod(xxhash64(key), shards)`` (Kafka shards its WatcherLists by key hash the same way);
the group key is not the shard number but a label chosen so that Spark's hash partitioner
puts every group in its own partition (``shard_labels``: plain numbers 0..8 would put 8
shards into 4 of 9 partitions).
Each group's state is one binary value: that shard's ``Purgatory`` (watchers, timing wheel,
key progress, buffered events) serialised with Arrow IPC.  The group's event-time timeout is
the shard's next wake-up (earliest deadline, buffered event, or retention expiry), so Spark
calls the shard exactly when the watermark makes something due.  Grouping by shard instead of
by key is what makes this fast: Spark scans state rows and calls Python once per *shard* per
micro-batch, not once per key, and the shard advances its wheel and joins its events
vectorised.

**Multi-key operations across shards.**  An operation whose keys all hash to one shard lives
there.  One whose keys span shards is *cross-shard*: it lives in an extra group, the
cross-shard shard (number ``shards``), which also receives a *replica* of every event, so it
sees every event of every key its operations watch and evaluates the condition over their
union exactly as SPEC says.  In each primary shard of its keys the operation leaves a *stub*:
a watcher that never completes and emits nothing, whose only job is to mark the events it
matches as matched, so that the primary shard (which alone reports unmatched events) does not
report them.  Replicas are never reported, rejected or counted as late by the cross-shard
shard; stubs are never reported by the primaries.  Cost: with cross-shard operations enabled,
every event is processed twice (set ``purgatory.cross.shard.operations=false`` to reject
cross-shard operations instead, as ``cross_shard_keys``, and skip the replicas).  A stub lives
until its operation's deadline, even when the operation completed earlier.

**Nothing dropped by the watermark.**  Spark drops rows behind the watermark before an
``EventTimeTimeout`` operator sees them.  The watermark is therefore declared on a helper
column ``ts + L`` with delay ``watermark.delay + L`` (L = 100 years): the operator gets the
same watermark, but only rows more than 100 years late are dropped by Spark; the operator
itself rejects rows behind the watermark as ``late``.  Rejected-at-parse rows carry the
epoch as their time, so they never move the watermark and are never dropped.

**Batch mode.**  ``purgatory_batch`` runs the same parsing, routing and engine on static
DataFrames (backfills, users' tests): everything is processed at once and the watermark is
then moved to ``final_watermark_ms``; for input without late rows it gives the outcomes the
stream gives at the same final watermark.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..config import PurgatoryConfig
from ..contract import OPERATOR_OUTPUT
from ..engine.conditions import CONDITIONS
from ..engine.purgatory import OUTCOME_COLUMNS, UNMATCHED_COLUMNS, BatchResult, Purgatory
from ..engine.wheel import NO_EXPIRATION
from ..state import SegmentStore, load_state, loaded_by, save_state
from .sources import SourceFormat, parse_events, parse_operations

__all__ = [
    "OUTPUT_SCHEMA",
    "purgatory_stream",
    "purgatory_batch",
    "route",
    "outcomes_of",
    "unmatched_of",
    "rejected_of",
    "metrics_of",
]

# PySpark's own serializer concatenates our output frames, whose unused columns are all-NA;
# pandas warns about that on every micro-batch in the worker logs.  The result is correct.
warnings.filterwarnings(
    "ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning
)

#: PURGATORY_STATE_LOG=1: each shard call logs how its state was loaded and what it cost
_STATE_LOG = bool(os.environ.get("PURGATORY_STATE_LOG"))

#: how far behind the watermark a row may be before Spark itself drops it (see module doc)
LATE_ALLOWANCE_MS = 36_500 * 86_400_000

#: the operator's output: every kind of row in one schema (times as epoch ms)
OUTPUT_SCHEMA: T.StructType = from_arrow_schema(OPERATOR_OUTPUT)
_OUTPUT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields]
_OBJECT_COLUMNS = [
    f.name for f in OUTPUT_SCHEMA.fields if isinstance(f.dataType, (T.StringType, T.ArrayType))
]
_STATE_SCHEMA = T.StructType([T.StructField("shard_state", T.BinaryType())])

# the operator's input: operations, stubs, events, replicas and rejected-at-parse rows
_ROUTED_COLUMNS = [
    "shard",
    "kind",
    "side",
    "op_id",
    "keys",
    "ts_ms",
    "timeout_ms",
    "condition",
    "target",
    "members",
    "payload",
    "key",
    "source",
    "value",
    "raw",
    "reason",
]


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` (Murmur3_x86_32) of an int, as its hash partitioner computes it.

    >>> [spark_hash_int(v) for v in (0, 1, 2, 3)]
    [933211791, -559580957, 1765031574, -1823081949]
    """
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = seed ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def shard_labels(groups: int, partitions: int | None = None) -> list[int]:
    """Group-key values, one per shard group, that Spark's hash partitioning sends to distinct
    partitions (when ``groups <= partitions``; otherwise as evenly as it can).

    Spark places a group in partition ``pmod(hash(key), spark.sql.shuffle.partitions)``.  With
    the shard numbers themselves as keys, 8 shards on 9 partitions land in only 4 partitions
    (5 in one: a single task runs them one after the other).  The labels depend only on the
    configuration, so they are the same on every restart.  ``partitions`` defaults to
    ``groups``: the job sets ``spark.sql.shuffle.partitions`` to ``purgatory.shards + 1``,
    the primary shards plus the cross-shard group.

    >>> shard_labels(3, 4), shard_labels(8, 9)
    ([0, 2, 6], [0, 1, 2, 6, 8, 11, 15, 20])
    """
    partitions = partitions or groups
    labels: list[int] = []
    load = [0] * partitions
    candidate = 0
    while len(labels) < groups:
        part = spark_hash_int(candidate) % partitions
        if load[part] == min(load):  # a least-loaded partition: take it
            labels.append(candidate)
            load[part] += 1
        candidate += 1
    return labels


def _shard_of(key: Column, shards: int) -> Column:
    return F.pmod(F.xxhash64(key), F.lit(shards)).cast("int")


def route(parsed_ops: DataFrame, parsed_events: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Assign every parsed row to a shard (see the module docstring); one schema for all."""
    shards = config.shards
    cross = shards  # the cross-shard group: one past the primaries
    rows_type = "array<struct<kind:string,shard:int,keys:array<string>>>"

    ops = parsed_ops.withColumn(
        "_shards", F.array_distinct(F.transform("keys", lambda k: _shard_of(k, shards)))
    )
    single = F.array(F.struct(F.lit("op").alias("kind"), F.col("_shards")[0].alias("shard"), F.col("keys")))
    spread = F.concat(
        F.array(F.struct(F.lit("op").alias("kind"), F.lit(cross).alias("shard"), F.col("keys"))),
        F.transform(
            "_shards",
            lambda s: F.struct(
                F.lit("stub").alias("kind"),
                s.alias("shard"),
                F.filter("keys", lambda k: _shard_of(k, shards) == s).alias("keys"),
            ),
        ),
    )
    is_cross = F.size("_shards") > 1
    reason = F.col("reason")
    if not config.cross_shard_operations:
        reason = F.when(reason.isNull() & is_cross, F.lit("cross_shard_keys")).otherwise(reason)
    ops = ops.withColumn("reason", reason)
    ops = ops.withColumn(
        "_rows",
        F.when(F.col("reason").isNotNull(), F.lit(None).cast(rows_type))
        .when(is_cross, spread.cast(rows_type))
        .otherwise(single.cast(rows_type)),
    )
    # one watched key travels as a plain string in `key` (`keys` null): an array column costs
    # ~3x more to hand to Python than the rest of the row together (measured)
    keys = F.coalesce(F.col("_r.keys"), F.col("keys"))
    one_key = F.coalesce(F.size(keys) == 1, F.lit(False))
    ops_out = ops.select("*", F.explode_outer("_rows").alias("_r")).select(
        F.coalesce(F.col("_r.shard"), _shard_of(F.col("raw"), shards)).alias("shard"),
        F.coalesce(F.col("_r.kind"), F.lit("bad")).alias("kind"),
        F.lit("operations").alias("side"),
        "op_id",
        F.when(~one_key, keys).alias("keys"),
        "ts_ms",
        "timeout_ms",
        "condition",
        "target",
        "members",
        "payload",
        F.when(one_key, keys[0]).alias("key"),
        F.lit(None).cast("string").alias("source"),
        F.lit(None).cast("double").alias("value"),
        F.when(F.col("reason").isNotNull(), F.col("raw")).alias("raw"),
        "reason",
    )

    home = _shard_of(F.col("key"), shards)
    event_rows = F.array(F.struct(F.lit("event").alias("kind"), home.alias("shard")))
    if config.cross_shard_operations and shards > 1:
        event_rows = F.concat(
            event_rows, F.array(F.struct(F.lit("replica").alias("kind"), F.lit(cross).alias("shard")))
        )
    events = parsed_events.withColumn(
        "_rows",
        F.when(
            F.col("reason").isNotNull(),
            F.array(F.struct(F.lit("bad").alias("kind"), _shard_of(F.col("raw"), shards).alias("shard"))),
        ).otherwise(event_rows),
    )
    events_out = events.select("*", F.explode("_rows").alias("_r")).select(
        F.col("_r.shard").alias("shard"),
        F.col("_r.kind").alias("kind"),
        F.lit("events").alias("side"),
        "op_id",
        F.lit(None).cast("array<string>").alias("keys"),
        "ts_ms",
        F.lit(None).cast("long").alias("timeout_ms"),
        F.lit(None).cast("string").alias("condition"),
        F.lit(None).cast("double").alias("target"),
        F.lit(None).cast("array<string>").alias("members"),
        F.lit(None).cast("string").alias("payload"),
        "key",
        "source",
        "value",
        F.when(F.col("reason").isNotNull(), F.col("raw")).alias("raw"),
        "reason",
    )
    # the group key: a label per shard that Spark's partitioner spreads (see shard_labels)
    labels = F.array(*[F.lit(label) for label in shard_labels(shards + 1)])
    return ops_out.unionByName(events_out).withColumn("shard", F.element_at(labels, F.col("shard") + 1))


def _shard_numbers(config: PurgatoryConfig) -> dict[int, int]:
    """Group label -> shard number (the cross-shard group is number ``shards``)."""
    return {label: number for number, label in enumerate(shard_labels(config.shards + 1))}


def _with_event_time(routed: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The watermark on ``ts + L`` (module docstring): Spark drops nothing we must report."""
    days = LATE_ALLOWANCE_MS // 86_400_000
    event_time = F.expr(
        f"timestamp_millis(CASE WHEN kind = 'bad' THEN 0 ELSE ts_ms END) + INTERVAL {days} DAYS"
    )
    delay_ms = config.watermark_delay_ms + LATE_ALLOWANCE_MS
    return routed.withColumn("_event_time", event_time).withWatermark(
        "_event_time", f"{delay_ms} milliseconds"
    )


def purgatory_stream(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig | None = None,
    *,
    source_format: SourceFormat = "json",
) -> DataFrame:
    """The purgatory over two streaming DataFrames; returns one stream of output rows.

    Args:
        operations: the operations source as read (``read_stream``): text lines for
            ``json``, typed rows for ``parquet``, Kafka records for ``kafka``.
        events: the completion-events source, in the same format.
        config: shards, wheel, retention, watermark delay (``PurgatoryConfig``).
        source_format: ``json``, ``parquet`` or ``kafka``.

    Returns:
        A streaming DataFrame with ``OUTPUT_SCHEMA`` plus timestamps; split each micro-batch
        with ``outcomes_of``, ``unmatched_of`` and ``rejected_of``.

    Example::

        from .sources import read_stream
        ops = read_stream(spark, "/data/ops", "json", kind="operations")
        evs = read_stream(spark, "/data/events", "json", kind="events")
        out = purgatory_stream(ops, evs, PurgatoryConfig(shards=8))

        def sink(batch, batch_id):
            outcomes_of(batch, batch_id).write.mode("append").parquet("/out/outcomes")

        out.writeStream.foreachBatch(sink).option("checkpointLocation", "/chk").start()
    """
    config = config or PurgatoryConfig()
    parsed_ops = parse_operations(
        operations, source_format, max_timeout_ms=config.max_timeout_ms, max_future_ms=config.max_future_ms
    )
    parsed_events = parse_events(events, source_format, max_future_ms=config.max_future_ms)
    routed = _with_event_time(route(parsed_ops, parsed_events, config), config)
    out = routed.groupBy("shard").applyInPandasWithState(
        _stateful_shard(config),
        OUTPUT_SCHEMA,
        _STATE_SCHEMA,
        "append",
        "EventTimeTimeout",
    )
    return _with_timestamps(out)


def purgatory_batch(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig | None = None,
    *,
    source_format: SourceFormat = "json",
    final_watermark_ms: int | None = None,
) -> DataFrame:
    """The same engine on static DataFrames: process everything, then move the watermark.

    ``final_watermark_ms`` defaults to "everything resolved" (past every deadline).  For
    input without late rows the outcomes equal the stream's at the same final watermark.
    """
    config = config or PurgatoryConfig()
    parsed_ops = parse_operations(operations, source_format, max_timeout_ms=config.max_timeout_ms)
    parsed_events = parse_events(events, source_format)  # a backfill: no future-time check
    routed = route(parsed_ops, parsed_events, config)
    final = NO_EXPIRATION - 1 if final_watermark_ms is None else int(final_watermark_ms)
    out = routed.groupBy("shard").applyInPandas(_batch_shard(config, final), OUTPUT_SCHEMA)
    return _with_timestamps(out)


def _with_timestamps(out: DataFrame) -> DataFrame:
    # an outcome's single key comes back as `key` (see _output): make it `keys` again
    single = (F.col("kind") == "outcome") & F.col("keys").isNull()
    out = out.withColumn("keys", F.when(single, F.array("key")).otherwise(F.col("keys")))
    out = out.withColumn("key", F.when(F.col("kind") != "outcome", F.col("key")))
    ts = {
        "op_ts": "op_ts_ms",
        "deadline": "deadline_ms",
        "resolved_at": "resolved_at_ms",
        "ts": "ts_ms",
        "watermark": "watermark_ms",
    }
    for name, ms in ts.items():
        out = out.withColumn(name, F.timestamp_millis(F.col(ms)))
    return out


# -- splitting a micro-batch into the SPEC's tables ------------------------------------------------


def _batch_id(batch_id: int | None) -> Column:
    return F.lit(batch_id).cast("long").alias("batch_id")


def outcomes_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``outcomes`` rows of a micro-batch, with the SPEC's columns (+ ``resolved_date``)."""
    rows = batch.where(F.col("kind") == "outcome")
    columns = [c for c in OUTCOME_COLUMNS if c != "batch_id"]
    return rows.select(
        *columns,
        _batch_id(batch_id),
        F.current_timestamp().alias("emitted_at"),
        F.to_date("resolved_at").alias("resolved_date"),
    )


def unmatched_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``unmatched_events`` rows of a micro-batch."""
    rows = batch.where(F.col("kind") == "unmatched")
    columns = [c for c in UNMATCHED_COLUMNS if c != "batch_id"]
    return rows.select(*columns, _batch_id(batch_id), F.to_date("ts").alias("event_date"))


def rejected_of(batch: DataFrame, batch_id: int | None = None) -> DataFrame:
    """The ``rejected`` rows of a micro-batch (``source`` is operations or events)."""
    rows = batch.where(F.col("kind") == "rejected")
    return rows.select(
        "source", "raw", "reason", _batch_id(batch_id), F.current_date().alias("rejected_date")
    )


def metrics_of(batch: DataFrame) -> DataFrame:
    """Per-shard gauges reported by the shards that ran in this micro-batch."""
    return batch.where(F.col("kind") == "metrics").select(
        "shard", "pending", "buffered", "watched", "watermark"
    )


# -- what runs in the Python workers -----------------------------------------------------------------


def _split_input(pdf: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Routed rows -> (validated operations, validated events, rejected-at-parse rows)."""
    kind = pdf["kind"].to_numpy(dtype=object)
    is_op = (kind == "op") | (kind == "stub")
    o = pdf.loc[is_op]
    ts = o["ts_ms"].to_numpy(np.int64)
    ops = pd.DataFrame(
        {
            "op_id": o["op_id"].to_numpy(dtype=object),
            "keys": _keys_of(o["keys"].to_numpy(dtype=object), o["key"].to_numpy(dtype=object)),
            "ts": ts,
            "deadline": ts + o["timeout_ms"].to_numpy(np.int64),
            "cond": o["condition"].map(CONDITIONS).to_numpy(np.int8),
            "target": o["target"].to_numpy(float),
            "members": o["members"].to_numpy(dtype=object),
            "payload": o["payload"].to_numpy(dtype=object),
            "stub": kind[is_op] == "stub",
        }
    )
    is_event = (kind == "event") | (kind == "replica")
    e = pdf.loc[is_event]
    events = pd.DataFrame(
        {
            "key": e["key"].to_numpy(dtype=object),
            "ts": e["ts_ms"].to_numpy(np.int64),
            "op_id": e["op_id"].to_numpy(dtype=object),
            "source": e["source"].to_numpy(dtype=object),
            "value": e["value"].to_numpy(float),
            "replica": kind[is_event] == "replica",
        }
    )
    b = pdf.loc[kind == "bad"]
    bad = pd.DataFrame(
        {
            "source": b["side"].to_numpy(dtype=object),
            "raw": b["raw"].to_numpy(dtype=object),
            "reason": b["reason"].to_numpy(dtype=object),
        }
    )
    return ops, events, bad


def _keys_of(keys: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Operations' key lists, from `keys` or (one key, see ``route``) from `key`."""
    keys = keys.copy()
    for i in np.flatnonzero(pd.isna(keys)):
        keys[i] = [key[i]]
    return keys


def _output(shard: int, result: BatchResult, bad: pd.DataFrame, p: Purgatory, wm: int) -> pd.DataFrame:
    # the engine's columns, renamed where the output carries epoch ms
    outcomes = result.outcomes.drop(columns="batch_id").rename(
        columns={"op_ts": "op_ts_ms", "deadline": "deadline_ms", "resolved_at": "resolved_at_ms"}
    )
    outcomes["kind"] = "outcome"
    # a single key goes back as a plain string (`key`), like it came (``_with_timestamps``)
    keys = outcomes["keys"].to_numpy(dtype=object).copy()
    key = np.full(len(keys), None, dtype=object)
    for i, k in enumerate(keys):
        if len(k) == 1:
            key[i], keys[i] = k[0], None
    outcomes["key"], outcomes["keys"] = key, keys
    unmatched = result.unmatched.drop(columns="batch_id").rename(columns={"ts": "ts_ms"})
    unmatched["kind"] = "unmatched"
    r = (
        pd.concat([result.rejected[["source", "raw", "reason"]], bad], ignore_index=True)
        if len(bad)
        else (result.rejected[["source", "raw", "reason"]])
    )
    rejected = pd.DataFrame(
        {"kind": "rejected", "source": r["source"], "raw": r["raw"], "reason": r["reason"]}
    )
    metrics = pd.DataFrame(
        {
            "kind": ["metrics"],
            "pending": [p.pending],
            "buffered": [p.buffered_events],
            "watched": [p.watched],
            "watermark_ms": [wm],
        }
    )
    parts = [f for f in (outcomes, unmatched, rejected) if len(f)] + [metrics]
    out = pd.concat(parts, ignore_index=True).reindex(columns=_OUTPUT_COLUMNS)
    for name in _OBJECT_COLUMNS:  # Arrow wants None, not NaN, for a missing string or array
        values = out[name].to_numpy(dtype=object)
        values[pd.isna(values)] = None
        out[name] = values
    out["shard"] = shard
    return out


def segment_store(config: PurgatoryConfig) -> SegmentStore | None:
    """The ``SegmentStore`` that ``purgatory.state.path`` asks for, if any."""
    if not config.state_path:
        return None
    return SegmentStore(
        config.state_path,
        segment_rows=config.state_segment_rows,
        retain_versions=config.state_retain_versions,
    )


def _stateful_shard(config: PurgatoryConfig):
    """The function Spark calls once per shard per micro-batch (and on the shard's timeout)."""
    store = segment_store(config)

    numbers = _shard_numbers(config)

    def shard_step(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        shard = numbers[int(key[0])]
        started = time.perf_counter()
        p = load_state(state.get[0], config, store) if state.exists else Purgatory(config)
        if p.shard not in (None, shard):  # the shard layout changed under this checkpoint
            raise ValueError(
                f"the state under group {key[0]} belongs to shard {p.shard}, not {shard}: the "
                "checkpoint was written with another shard layout; start a new checkpoint"
            )
        p.shard = shard
        loaded = time.perf_counter()
        wm = int(state.getCurrentWatermarkMs())
        frames = [f for f in pdfs if len(f)]
        pdf = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=_ROUTED_COLUMNS)
        ops, events, bad = _split_input(pdf)
        result = p.process(ops, events, watermark_ms=wm, validated=True)
        yield _output(shard, result, bad, p, wm)
        if p.is_empty():
            state.remove()
            return
        wake = p.next_wakeup()
        processed, how, pending = time.perf_counter(), loaded_by(p), p.pending
        value = save_state(p, store, park=store is not None)  # parked: no use of p after this
        state.update((value,))
        if _STATE_LOG:  # one JSON line per shard call on the worker's stderr (the executor log)
            figures = {
                "shard": shard,
                "loaded_by": how,
                "load_ms": round((loaded - started) * 1000),
                "process_ms": round((processed - loaded) * 1000),
                "save_ms": round((time.perf_counter() - processed) * 1000),
                "value_bytes": len(value),
                "pending": pending,
            }
            print("purgatory-state " + json.dumps(figures), file=sys.stderr, flush=True)
        if wake < NO_EXPIRATION:
            # Spark fires once the watermark is *past* the timestamp; we are due at wake
            state.setTimeoutTimestamp(max(wake - 1, wm))

    return shard_step


def _batch_shard(config: PurgatoryConfig, final_watermark_ms: int):
    numbers = _shard_numbers(config)

    def shard_all(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        shard = numbers[int(key[0])]
        p = Purgatory(config)
        ops, events, bad = _split_input(pdf)
        result = p.replay(ops, events, final_watermark_ms=final_watermark_ms, validated=True)
        return _output(shard, result, bad, p, final_watermark_ms)

    return shard_all
