"""The contenders: the job and Spark's alternatives on the same files (``operator``, ``pending``,
``trickle``, ``handoff``, ``install``, ``connect`` and ``inspect`` build on them).

Every contender reads the same two directories (operations, completion events), the same
number of files per trigger, to the end of its input (``availableNow``), on local[2]:

* **floor**: what any stateful answer must at least do, with no state: read both inputs
  (JSON: the text and one ``from_json`` with the input contract's typed schema), shuffle by
  key, hand key and event time to Python (an identity ``mapInPandas``), ``noop`` sink;
* **stateful**: the floor's rows through Spark's stateful Python operator doing nothing: a
  watermark on each input, the union grouped into ``config.groups`` groups as the operator's,
  ``applyInPandasWithState`` (``EventTimeTimeout``, the HDFS state store) handing each
  group's rows back and storing a few bytes: what any stateful operator in Python pays on
  these rows before it does any work;
* **join**: what a Spark user writes first: a stream-stream left-outer join on the key with
  ``ets >= ots AND ets < ots + timeout``, a watermark on each side, into a Parquet file sink;
* **job**: the job as users run it (``job.run``): the operator, the RecordAccumulator and the
  Delta tables written with delta-rs;
* **join-delta**: the join a Databricks user writes, into a Delta table through Spark's own
  Delta writer (``writeStream.format("delta")``; needs Delta's JARs, ``make jars``);
* **job-native**: the job with ``job.writer=spark``: the same, its tables committed by Spark's
  Delta writer (``txnAppId``/``txnVersion``), as ``auto`` does on Databricks;
* **noop**: the operator alone (``purgatory_stream``) into Spark's ``noop`` sink;
* **routed**: the operator's input without the operator: the project's parsing and routing
  (``input_stream``), the shuffle by shard and every routed column through an identity
  ``mapInPandas`` (with ``floor`` and ``noop``, it splits the job's time into its steps);
* **stateful-routed**: the operator's input (``input_stream``: its parsing, routing and op_id
  claims) grouped by shard into ``applyInPandasWithState``, the group's rows taken and
  nothing done: between ``stateful`` and ``job``, it splits the job's excess over the
  stateful floor into the routed rows' cost and the shard step's;
* **tws**: what a Spark 4 user writes with state: ``transformWithStateInPandas`` grouped by
  the operation's key, a ``StatefulProcessor`` keeping the key's pending operations and
  buffered events in ``ListState``, an event-time timer at each deadline, timeMode
  ``EventTime``, the RocksDB state store provider (``PendingOperations``).

The join and ``tws`` read the inputs as a user would (the typed columns; JSON through one
typed ``from_json``), without the project's validation: the workloads hold no bad row.

Workload (``write_workload``): orders awaiting one confirming event on their own key within
30 s, ~70% confirmed (``workload.generate_confirmations``): the shape all of them can express,
so every contender's completed operations can be compared with the join's.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from benchmarks.harness import cpu_seconds
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import EVENT_INPUT, OPERATION_INPUT
from spark_purgatory.job import JobSettings, run
from spark_purgatory.spark.input_stream import input_stream
from spark_purgatory.spark.metrics import JsonListener
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.sources import (
    EVENTS_PARQUET_SCHEMA,
    OPERATIONS_PARQUET_SCHEMA,
    read_stream,
)
from spark_purgatory.workload import generate_confirmations, write_json_lines

TIMEOUT_MS = 30_000
_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@dataclass
class Run:
    """One timed contender: wall time, CPU time (this process tree), input rows,
    micro-batches and the completed op_ids."""

    name: str
    seconds: float
    rows: int
    batches: list[dict] = field(default_factory=list)
    completed: set[str] = field(default_factory=set)
    cpu: float = float("nan")

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    @property
    def batch_ms(self) -> float:
        """The median micro-batch's time (``triggerExecution``), NaN when not recorded."""
        times = [b["ms"] for b in self.batches if "ms" in b]
        return float(np.median(times)) if times else float("nan")

    def line(self) -> str:
        state = sum(b.get("state_ms", 0) for b in self.batches) / 1000
        commit = sum(b.get("commit_ms", 0) for b in self.batches) / 1000
        return (
            f"{self.name:<34}{self.seconds:>8.1f} s {self.cpu:>7.1f} s CPU {self.rows_per_s:>10,.0f} rows/s "
            f"{len(self.batches):>4} batches {len(self.completed):>10,} completed"
            + (f"  (state operator {state:.1f} s, of which commit {commit:.1f} s)" if state else "")
        )


@dataclass
class Files:
    """A workload written as files: where, how many rows, in which format (json | parquet)."""

    root: str
    ops: int
    events: int
    fmt: str = "json"

    @property
    def rows(self) -> int:
        return self.ops + self.events


# -- workloads ---------------------------------------------------------------------------------------


def write_workload(root: str, n_ops: int, files: int, fmt: str = "json", skew_ms: int = 0) -> Files:
    """``n_ops`` orders and their confirmations as ``files`` files per stream, cut at the same
    event times (JSON lines or typed Parquet); with ``skew_ms`` each events file reaches that
    much further in event time than the operations file of the same index (Parquet only)."""
    work = generate_confirmations(n_ops, timeout_ms=TIMEOUT_MS)
    if fmt == "json":
        if skew_ms:
            raise ValueError("skewed workloads are written as Parquet")
        write_json_lines(work, f"{root}/ops", f"{root}/events", files=files)
    else:
        write_parquet(root, work.operations, work.events, files, skew_ms)
    return Files(root, len(work.operations), len(work.events), fmt)


def write_parquet(
    root: str, operations: pd.DataFrame, events: pd.DataFrame, files: int, skew_ms: int = 0
) -> None:
    """Operations and events as typed Parquet files under ``root``/ops and ``root``/events,
    ``files`` per stream cut at the same event times (the events' ``skew_ms`` further), each
    file's modification time in their order (file sources take files in that order)."""
    ts = np.concatenate([operations["ts"].to_numpy(), events["ts"].to_numpy()])
    edges = np.linspace(ts.min(), ts.max() + 1, files + 1)
    stamp = time.time() - files
    for kind, frame, schema, shift in (
        ("ops", operations, OPERATION_INPUT, 0),
        ("events", events, EVENT_INPUT, skew_ms),
    ):
        os.makedirs(f"{root}/{kind}", exist_ok=True)
        index = np.clip(
            np.searchsorted(edges + shift, frame["ts"].to_numpy(), side="right") - 1, 0, files - 1
        )
        frame = frame.assign(ts=pd.to_datetime(frame["ts"], unit="ms", utc=True)).reindex(
            columns=schema.names
        )
        for i in range(files):
            path = f"{root}/{kind}/part-{i:05d}.parquet"
            pq.write_table(pa.Table.from_pandas(frame[index == i], schema=schema, preserve_index=False), path)
            os.utime(path, (stamp + i, stamp + i))  # file sources take files in mtime order


# -- running a query ---------------------------------------------------------------------------------


def _progress(query) -> list[dict]:
    return [
        {
            "batch": p["batchId"],
            "rows": p["numInputRows"],
            "ms": p["durationMs"].get("triggerExecution", 0),
            "state_ms": sum(
                s.get("allUpdatesTimeMs", 0) + s.get("commitTimeMs", 0) for s in p.get("stateOperators", [])
            ),
            "commit_ms": sum(s.get("commitTimeMs", 0) for s in p.get("stateOperators", [])),
        }
        for p in query.recentProgress
        if p["numInputRows"] or p["durationMs"].get("addBatch")
    ]


def timed(
    name: str, rows: int, stream: DataFrame, checkpoint: str, sink: str = "noop", path: str = ""
) -> Run:
    """Run ``stream`` to the end of its input (availableNow) into ``sink``; time it."""
    writer = stream.writeStream.format(sink).option("checkpointLocation", checkpoint)
    if path:
        writer = writer.option("path", path)
    start, cpu = time.perf_counter(), cpu_seconds()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    return Run(name, seconds, rows, _progress(query), cpu=cpu_seconds() - cpu)


def typed_inputs(spark: SparkSession, files: Files, per_trigger: int) -> tuple[DataFrame, DataFrame]:
    """Both inputs with the contract's typed columns, as a user reads them: Parquet as it is,
    JSON lines through one ``from_json`` with the contract's schema."""
    frames = []
    for kind, schema in (("ops", OPERATIONS_PARQUET_SCHEMA), ("events", EVENTS_PARQUET_SCHEMA)):
        reader = spark.readStream.option("maxFilesPerTrigger", per_trigger)
        if files.fmt == "json":
            text = reader.format("text").load(f"{files.root}/{kind}")
            frames.append(text.select(F.from_json("value", schema).alias("j")).select("j.*"))
        else:
            frames.append(reader.schema(schema).parquet(f"{files.root}/{kind}"))
    return frames[0], frames[1]


def _completed(path: str, op_id: str, matched: str) -> set[str]:
    table = pq.read_table(path, columns=[op_id, matched])
    return set(table.filter(pc.is_valid(table[matched]))[op_id].to_pylist())


# -- the contenders ----------------------------------------------------------------------------------


def run_floor(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """Read both inputs, shuffle by key, key and event time through an identity mapInPandas."""
    ops, evs = typed_inputs(spark, files, per_trigger)
    rows = ops.select(F.coalesce("key", F.col("keys")[0]).alias("key"), "ts").unionByName(
        evs.select("key", "ts")
    )
    shuffled = rows.repartition("key")  # spark.sql.shuffle.partitions, as the operator's groupBy

    def identity(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from frames

    stream = shuffled.mapInPandas(identity, shuffled.schema)
    label = "floor (read, from_json, shuffle)" if files.fmt == "json" else "floor (read, shuffle)"
    return timed(label, files.rows, stream, f"{files.root}/ck-floor")


def _no_work_step(key: tuple, frames: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
    """The ``stateful`` contender's group function: the rows back, a few bytes of state."""
    yield from frames
    state.update((b"-",))
    state.setTimeoutTimestamp(max(int(state.getCurrentWatermarkMs()), 0) + 86_400_000)


def stateful_floor(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> DataFrame:
    """``applyInPandasWithState`` doing nothing (``_no_work_step``) over both typed inputs,
    grouped by key hash into ``config.groups`` groups, a watermark per input."""
    ops, evs = typed_inputs(spark, files, per_trigger)
    groups = F.pmod(F.xxhash64("key"), F.lit(config.groups)).cast("int").alias("group")
    sides = [
        frame.select(key, "ts").withWatermark("ts", config.watermark_delay).select(groups, "key", "ts")
        for frame, key in ((ops, F.coalesce("key", F.col("keys")[0]).alias("key")), (evs, F.col("key")))
    ]
    return (
        sides[0]
        .unionByName(sides[1])
        .groupBy("group")
        .applyInPandasWithState(
            _no_work_step, "group int, key string, ts timestamp", "v binary", "append", "EventTimeTimeout"
        )
    )


def run_stateful(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The floor through ``applyInPandasWithState`` doing nothing (``stateful_floor``)."""
    stream = stateful_floor(spark, files, config, per_trigger)
    return timed("stateful floor (no work)", files.rows, stream, f"{files.root}/ck-stateful")


def join_stream(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> DataFrame:
    """The join a Spark user writes: left-outer on the key, ``ets >= ots AND ets < ots +
    timeout``, a watermark per side (``op_id``, ``okey``, ``ots``, ``ekey``, ``ets``)."""
    ops_in, evs_in = typed_inputs(spark, files, per_trigger)
    ops = ops_in.select("op_id", F.coalesce("key", F.col("keys")[0]).alias("okey"), F.col("ts").alias("ots"))
    evs = evs_in.select(F.col("key").alias("ekey"), F.col("ts").alias("ets"))
    return ops.withWatermark("ots", config.watermark_delay).join(
        evs.withWatermark("ets", config.watermark_delay),
        F.expr(f"okey = ekey AND ets >= ots AND ets < ots + INTERVAL {TIMEOUT_MS} MILLISECONDS"),
        "leftOuter",
    )


def run_join(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """Spark's own answer: a stream-stream left-outer join with a time-range condition."""
    joined = join_stream(spark, files, config, per_trigger)
    out = f"{files.root}/join-out"
    result = timed(
        "stream-stream left-outer join", files.rows, joined, f"{files.root}/ck-join", "parquet", out
    )
    result.completed = _completed(out, "op_id", "ekey")
    return result


def _require_delta(spark: SparkSession, name: str) -> None:
    from spark_purgatory.runtime.session import delta_classes_available

    if not delta_classes_available(spark):
        raise SystemExit(f"contender {name}: Spark's Delta data source is not on the classpath (make jars)")


def run_join_delta(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The join into a Delta table through Spark's own Delta writer (the Databricks user's)."""
    from deltalake import DeltaTable

    _require_delta(spark, "join-delta")
    joined = join_stream(spark, files, config, per_trigger)
    out = f"{files.root}/join-delta-out"
    result = timed(
        "join -> Delta (Spark's writer)", files.rows, joined, f"{files.root}/ck-join-delta", "delta", out
    )
    table = DeltaTable(out).to_pyarrow_table(columns=["op_id", "ekey"])
    result.completed = set(table.filter(pc.is_valid(table["ekey"]))["op_id"].to_pylist())
    return result


class _BatchTimes(JsonListener):
    """Each micro-batch's time (``triggerExecution``) of the queries started while registered
    (a ``JsonListener``: the job's contender carries no heavier a listener than its own), with
    its rows from all sources (``rows``) and from the sources reading ``inputs`` (``input_rows``:
    not the job's wake files, whose run after the last file reads only a relay or the end of
    input)."""

    def __init__(self, inputs: tuple[str, ...] = ()) -> None:
        self.batches: list[dict] = []
        self.inputs = inputs

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's names
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        p = event.progress
        if p.numInputRows or p.durationMs.get("addBatch"):
            ms = p.durationMs.get("triggerExecution", 0)
            read = sum(source.numInputRows for source in p.sources if self._reads_input(source.description))
            self.batches.append({"batch": p.batchId, "rows": p.numInputRows, "input_rows": read, "ms": ms})

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass

    def _reads_input(self, description: str) -> bool:
        """Does the source ``description`` (``FileStreamSource[file:/...]``) read one of ``inputs``?"""
        return any(path in description for path in self.inputs)


def run_job(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The job as users run it: operator, RecordAccumulator, Delta tables (delta-rs)."""
    return _job(spark, files, config, per_trigger, "delta-rs", "job (operator + Delta)")


def run_job_native(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The job with its tables committed by Spark's own Delta writer (``job.writer=spark``)."""
    _require_delta(spark, "job-native")
    return _job(spark, files, config, per_trigger, "spark", "job, Spark's Delta writer")


def run_job_shard_dedup(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The job with ``purgatory.dedup.scope=shard``: beside ``job``, what the op_id registry costs."""
    config = dataclasses.replace(config, dedup_scope="shard")
    return _job(spark, files, config, per_trigger, "delta-rs", "job, op_id dedup per shard", tag="job-shard")


def _job(
    spark: SparkSession,
    files: Files,
    config: PurgatoryConfig,
    per_trigger: int,
    writer: str,
    name: str,
    *,
    tag: str = "job",
) -> Run:
    from deltalake import DeltaTable

    out = f"{files.root}/out" if tag == "job" else f"{files.root}/out-{tag}"
    settings = JobSettings(
        ops_path=f"{files.root}/ops",
        events_path=f"{files.root}/events",
        output_path=out,
        checkpoint_path=f"{files.root}/ck-{tag}",
        config=dataclasses.replace(config, source_max_files_per_trigger=per_trigger),
        source_format=files.fmt,
        writer=writer,
        master="local[2]",
    )
    times = _BatchTimes(inputs=(settings.ops_path, settings.events_path))
    spark.streams.addListener(times)
    start, cpu = time.perf_counter(), cpu_seconds()
    try:
        totals = run(settings)
    finally:
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
        spark.streams.removeListener(times)
    outcomes = DeltaTable(f"{out}/outcomes").to_pyarrow_table(columns=["op_id", "status"])
    completed = outcomes.filter(pc.equal(outcomes["status"], "completed"))["op_id"].to_pylist()
    batches = times.batches or [{"batch": i} for i in range(totals["batches"])]
    return Run(name, seconds, files.rows, batches, set(completed), cpu)


def run_noop(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The operator alone, into Spark's noop sink."""
    ops, evs = (
        read_stream(spark, f"{files.root}/{d}", files.fmt, kind=kind, max_files_per_trigger=per_trigger)
        for d, kind in (("ops", "operations"), ("events", "events"))
    )
    config = dataclasses.replace(config, state_path=f"{files.root}/ck-noop/purgatory-state")
    return timed(
        "operator, no-op sink", files.rows, purgatory_stream(ops, evs, config), f"{files.root}/ck-noop"
    )


def run_routed(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The operator's parsing, routing and shuffle, every routed column to Python, no state."""
    ops, evs = (
        read_stream(spark, f"{files.root}/{d}", files.fmt, kind=kind, max_files_per_trigger=per_trigger)
        for d, kind in (("ops", "operations"), ("events", "events"))
    )
    routed = input_stream(ops, evs, config).repartition("shard")  # as the operator's groupBy

    def identity(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from frames

    stream = routed.mapInPandas(identity, routed.schema)
    return timed("parse, route, shuffle (no state)", files.rows, stream, f"{files.root}/ck-routed")


def _consume_step(key: tuple, frames: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
    """The ``stateful-routed`` contender's group function: the rows taken as the shard step
    takes them (one frame), none back, a few bytes of state."""
    for _frame in frames:
        pass
    state.update((b"-",))
    state.setTimeoutTimestamp(max(int(state.getCurrentWatermarkMs()), 0) + 86_400_000)
    yield pd.DataFrame({"shard": pd.Series([], dtype=np.int32)})


def run_stateful_routed(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The operator's input (parsing, routing, a watermark per input: ``input_stream``) into
    ``applyInPandasWithState`` grouped by shard as the operator's, whose function takes the
    rows and does nothing (``_consume_step``): the job less the shard step's Python work and
    its output; against ``stateful``, what the routed rows cost (their routing, their
    columns, the op_id claims)."""
    ops, evs = (
        read_stream(spark, f"{files.root}/{d}", files.fmt, kind=kind, max_files_per_trigger=per_trigger)
        for d, kind in (("ops", "operations"), ("events", "events"))
    )
    # a state path, as the job's (``query.start``): the op_id claims are routed as the job's are
    config = dataclasses.replace(config, state_path=f"{files.root}/state-stateful-routed")
    stream = (
        input_stream(ops, evs, config)
        .groupBy("shard")
        .applyInPandasWithState(_consume_step, "shard int", "v binary", "append", "EventTimeTimeout")
    )
    return timed("stateful, routed rows (no work)", files.rows, stream, f"{files.root}/ck-stateful-routed")


_TWS_OUTPUT = "op_id string, status string, resolved_at_ms long"
_TWS_PENDING = "op_id string, ts_ms long, deadline_ms long"
_TWS_EVENTS = "ts_ms long"


class PendingOperations(StatefulProcessor):
    """One key's pending operations and buffered events; an event-time timer per deadline.

    An operation completes at the first event on its key in ``[ts, deadline)`` (events before
    their operation count: they stay buffered until the watermark passes them, as in the
    join's state); its timer expires it at its deadline otherwise.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", _TWS_PENDING)
        self.events = handle.getListState("events", _TWS_EVENTS)

    def handleInputRows(self, key, rows, timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        is_op = frame["is_op"].to_numpy(bool)
        known = list(self.pending.get()) if self.pending.exists() else []  # their timers are set
        new = list(frame.loc[is_op, ["op_id", "ts_ms", "deadline_ms"]].itertuples(index=False, name=None))
        new_events = [int(t) for t in frame.loc[~is_op, "ts_ms"]]
        events = [t for (t,) in (self.events.get() if self.events.exists() else ())] + new_events
        done, waiting = [], []
        for op_id, ts, deadline in known + new:
            hits = [t for t in events if ts <= t < deadline]
            if hits:
                done.append((op_id, "completed", min(hits)))
            else:
                waiting.append((op_id, int(ts), int(deadline)))
        deadlines = {d for _o, _t, d in waiting}
        for deadline in {int(d) for _o, _t, d in known} - deadlines:
            self.handle.deleteTimer(deadline)
        for deadline in deadlines - {int(d) for _o, _t, d in known}:
            self.handle.registerTimer(deadline)
        if waiting:
            self.pending.put(waiting)
        else:
            self.pending.clear()
        if new_events:  # kept for operations still to come, until the watermark passes them
            self.events.appendList([(t,) for t in new_events])
            self.handle.registerTimer(max(new_events) + 1)
        if done:
            yield pd.DataFrame(done, columns=["op_id", "status", "resolved_at_ms"])

    def handleExpiredTimer(
        self, key, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        wm = timerValues.getCurrentWatermarkInMs()
        pending = list(self.pending.get()) if self.pending.exists() else []
        expired = [(op_id, "expired", deadline) for op_id, _ts, deadline in pending if deadline <= wm]
        waiting = [p for p in pending if p[2] > wm]
        if waiting:
            self.pending.put(waiting)
        else:
            self.pending.clear()
        if self.events.exists():
            events = [(t,) for (t,) in self.events.get() if t >= wm]
            if events:
                self.events.put(events)
            else:
                self.events.clear()
        if expired:
            yield pd.DataFrame(expired, columns=["op_id", "status", "resolved_at_ms"])

    def close(self) -> None:
        pass


def run_tws(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """``transformWithStateInPandas`` per operation key (``PendingOperations``), RocksDB."""
    ops_in, evs_in = typed_inputs(spark, files, per_trigger)
    ms = F.unix_millis("ts")
    ops = ops_in.select(
        F.coalesce("key", F.col("keys")[0]).alias("key"),
        "op_id",
        ms.alias("ts_ms"),
        (ms + F.col("timeout_ms")).alias("deadline_ms"),
        F.lit(True).alias("is_op"),
        "ts",
    ).withWatermark("ts", config.watermark_delay)
    evs = evs_in.select(
        "key",
        F.lit(None).cast("string").alias("op_id"),
        ms.alias("ts_ms"),
        F.lit(None).cast("long").alias("deadline_ms"),
        F.lit(False).alias("is_op"),
        "ts",
    ).withWatermark("ts", config.watermark_delay)
    grouped = ops.unionByName(evs).drop("ts").groupBy("key")
    stream = grouped.transformWithStateInPandas(PendingOperations(), _TWS_OUTPUT, "Append", "EventTime")
    out = f"{files.root}/tws-out"
    before = spark.conf.get(_PROVIDER, None)
    spark.conf.set(_PROVIDER, _ROCKSDB)  # recorded in the query's checkpoint at its start
    try:
        result = timed(
            "transformWithStateInPandas", files.rows, stream, f"{files.root}/ck-tws", "parquet", out
        )
    finally:
        spark.conf.unset(_PROVIDER) if before is None else spark.conf.set(_PROVIDER, before)
    done = pq.read_table(out)
    result.completed = set(done.filter(pc.equal(done["status"], "completed"))["op_id"].to_pylist())
    return result


#: the contenders by name, in the order they run
CONTENDERS = {
    "floor": run_floor,
    "stateful": run_stateful,
    "routed": run_routed,
    "stateful-routed": run_stateful_routed,
    "noop": run_noop,
    "join": run_join,
    "job": run_job,
    "join-delta": run_join_delta,
    "job-native": run_job_native,
    "job-shard-dedup": run_job_shard_dedup,
    "tws": run_tws,
}
