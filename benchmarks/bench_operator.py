"""The purgatory operator side by side with Spark's alternatives, and its scaling with pending ops.

One run, one workload, the same files, the same ``maxFilesPerTrigger``, local[2]:

* **operator + accumulator**: the job itself (``job.run``): operator, RecordAccumulator,
  Delta tables written with delta-rs;
* **operator, no-op sink**: ``purgatory_stream`` into Spark's ``noop`` sink;
* **stream-stream join**: Spark's left-outer join with a time-range condition and
  watermarks, writing its result to a Parquet file sink;
* **per-key state**: a straightforward ``applyInPandasWithState`` grouped by key, keeping a
  dict of pending operations (run on a smaller workload: it is slow; compared in rows/s);
* **stateless floor**: the same parsing, routing and shuffle plus an identity ``mapInPandas``,
  no state, ``noop`` sink.

Workload: orders awaiting one confirming event on their key within 30 s, ~70% confirmed
(``generate_confirmations``).  Every query parses the input with the project's own parser
(the join and the per-key baseline drop what it rejects), so the comparison is about the
stateful part.  The operator's completed orders must equal the join's matched orders.

Further workloads (``--workloads``), each the job against the join on the same files, their
completed operations asserted equal: **typed**, the workload as Parquet files read as typed
columns; **skewed**, the same with every events file reaching further in event time than the
operations file of the same trigger by more than ``watermark.delay`` (each input has its own
watermark: the job must lose no operation the join completes).

The scaling series preloads 100k / 1M / 5M pending operations (timeouts of a day, so none
expire) in one micro-batch, then runs micro-batches of the same size (new operations plus
events completing preloaded ones) and prints the per-batch time against the pending count,
and the state's size on disk.

    .venv/bin/python benchmarks/bench_operator.py                  # 1M operations, full series
    .venv/bin/python benchmarks/bench_operator.py --ops 200000 --scaling 100000,1000000
    .venv/bin/python benchmarks/bench_operator.py --smoke          # seconds-sized, for CI
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
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

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import EVENT_INPUT, OPERATION_INPUT
from spark_purgatory.job import JobSettings, run
from spark_purgatory.spark.operator import purgatory_stream, routed_stream
from spark_purgatory.spark.session import local_session
from spark_purgatory.spark.sources import parse_events, parse_operations, read_stream
from spark_purgatory.workload import START_MS, generate_confirmations, write_json_lines

TIMEOUT_MS = 30_000
TARGETS = {
    "join": 3.0,  # at least 3x the join's throughput
    "per_key": 50.0,  # at least 50x the per-key baseline's rows/s
    "floor": 1.25,  # total time at most 1.25x the stateless floor
    "scaling": 2.0,  # per-batch time at 5M pending at most 2x that at 100k
}


@dataclass
class Run:
    """One timed query: wall time, input rows and the per-micro-batch progress."""

    name: str
    seconds: float
    rows: int
    batches: list[dict] = field(default_factory=list)
    completed: set[str] = field(default_factory=set)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds

    def line(self) -> str:
        return (
            f"{self.name:<34}{self.seconds:>8.1f} s {self.rows_per_s:>11,.0f} rows/s "
            f"{len(self.batches):>4} batches"
        )


@dataclass
class Files:
    """A workload written as files: where, how many rows, and in which format."""

    root: str
    ops: int
    events: int
    fmt: str = "json"

    @property
    def rows(self) -> int:
        return self.ops + self.events


def write_workload(root: str, n_ops: int, files: int) -> Files:
    work = generate_confirmations(n_ops, timeout_ms=TIMEOUT_MS)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=files)
    return Files(root, len(work.operations), len(work.events))


def write_parquet_workload(root: str, n_ops: int, files: int, skew_ms: int = 0) -> Files:
    """The same workload as ``write_workload``, as typed Parquet files cut at the same event
    times; with ``skew_ms`` each events file reaches that much further than the operations
    file of the same index (the streams are cut independently, as in the issue)."""
    work = generate_confirmations(n_ops, timeout_ms=TIMEOUT_MS)
    ts = np.concatenate([work.operations["ts"].to_numpy(), work.events["ts"].to_numpy()])
    edges = np.linspace(ts.min(), ts.max() + 1, files + 1)
    stamp = time.time() - files
    for kind, frame, schema, shift in (
        ("ops", work.operations, OPERATION_INPUT, 0),
        ("events", work.events, EVENT_INPUT, skew_ms),
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
    return Files(root, len(work.operations), len(work.events), "parquet")


def _sources(spark: SparkSession, files: Files, per_trigger: int) -> tuple[DataFrame, DataFrame]:
    return tuple(  # type: ignore[return-value]
        read_stream(spark, f"{files.root}/{d}", files.fmt, kind=kind, max_files_per_trigger=per_trigger)
        for d, kind in (("ops", "operations"), ("events", "events"))
    )


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
    start = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    return Run(name, time.perf_counter() - start, rows, _progress(query))


# -- the contenders --------------------------------------------------------------------------------


def run_operator_job(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """The job as users run it: operator, RecordAccumulator, Delta tables (delta-rs)."""
    from deltalake import DeltaTable

    config = dataclasses.replace(config, source_max_files_per_trigger=per_trigger)
    settings = JobSettings(
        ops_path=f"{files.root}/ops",
        events_path=f"{files.root}/events",
        output_path=f"{files.root}/out",
        checkpoint_path=f"{files.root}/ck-job",
        config=config,
        source_format=files.fmt,
        writer="delta-rs",
        master="local[2]",
    )
    start = time.perf_counter()
    totals = run(settings)
    seconds = time.perf_counter() - start
    outcomes = DeltaTable(f"{files.root}/out/outcomes").to_pyarrow_table(columns=["op_id", "status"])
    completed = outcomes.filter(pc.equal(outcomes["status"], "completed"))["op_id"].to_pylist()
    result = Run(
        "operator + accumulator (Delta)",
        seconds,
        files.rows,
        [{"batch": i} for i in range(totals["batches"])],
        set(completed),
    )
    result.outcomes = outcomes.num_rows  # type: ignore[attr-defined]
    return result


def run_operator_noop(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    ops, evs = _sources(spark, files, per_trigger)
    config = dataclasses.replace(config, state_path=f"{files.root}/ck-noop/purgatory-state")
    return timed(
        "operator, no-op sink", files.rows, purgatory_stream(ops, evs, config), f"{files.root}/ck-noop"
    )


def run_floor(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """Parse, route and shuffle exactly like the operator, then an identity mapInPandas."""
    ops, evs = _sources(spark, files, per_trigger)
    routed = routed_stream(ops, evs, config)
    shuffled = routed.repartition("shard")  # as groupBy("shard"): spark.sql.shuffle.partitions

    def identity(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        yield from frames

    stream = shuffled.mapInPandas(identity, shuffled.schema)
    return timed("stateless floor", files.rows, stream, f"{files.root}/ck-floor")


def run_join(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    """Spark's own answer: a stream-stream left-outer join with a time-range condition."""
    ops_raw, evs_raw = _sources(spark, files, per_trigger)
    ops = parse_operations(ops_raw, max_timeout_ms=config.max_timeout_ms).where("reason IS NULL")
    evs = parse_events(evs_raw).where("reason IS NULL")
    ops = ops.select("op_id", F.col("keys")[0].alias("okey"), F.timestamp_millis("ts_ms").alias("ots"))
    evs = evs.select(F.col("key").alias("ekey"), F.timestamp_millis("ts_ms").alias("ets"))
    joined = ops.withWatermark("ots", config.watermark_delay).join(
        evs.withWatermark("ets", config.watermark_delay),
        F.expr(f"okey = ekey AND ets >= ots AND ets < ots + INTERVAL {TIMEOUT_MS} MILLISECONDS"),
        "leftOuter",
    )
    out = f"{files.root}/join-out"
    result = timed(
        "stream-stream left-outer join", files.rows, joined, f"{files.root}/ck-join", "parquet", out
    )
    matched = pq.read_table(out, columns=["op_id", "ekey"])
    matched = matched.filter(pc.is_valid(matched["ekey"]))
    result.completed = set(matched["op_id"].to_pylist())
    return result


_PER_KEY_SCHEMA = "op_id string, status string, resolved_at_ms long"
_PER_KEY_STATE = "pending string"


def _per_key_step(key: tuple, frames: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
    """What a user writes first: one group per key, a dict of pending operations as JSON."""
    pending: dict[str, list[int]] = json.loads(state.get[0]) if state.exists else {}
    watermark = state.getCurrentWatermarkMs()
    done: list[tuple[str, str, int]] = []
    if state.hasTimedOut:
        for op_id, (_ts, deadline) in list(pending.items()):
            if deadline <= watermark:
                done.append((op_id, "expired", deadline))
                del pending[op_id]
    else:
        for frame in frames:
            frame = frame.sort_values("is_event", kind="stable")  # operations before events
            for row in frame.itertuples(index=False):
                if not row.is_event:
                    pending[row.op_id] = [int(row.ts_ms), int(row.ts_ms + row.timeout_ms)]
                    continue
                for op_id, (ts, deadline) in list(pending.items()):
                    if ts <= row.ts_ms < deadline:
                        done.append((op_id, "completed", int(row.ts_ms)))
                        del pending[op_id]
    if pending:
        state.update((json.dumps(pending),))
        state.setTimeoutTimestamp(max(min(d for _t, d in pending.values()) - 1, watermark))
    else:
        state.remove()
    yield pd.DataFrame(done, columns=["op_id", "status", "resolved_at_ms"])


def run_per_key(spark: SparkSession, files: Files, config: PurgatoryConfig, per_trigger: int) -> Run:
    ops_raw, evs_raw = _sources(spark, files, per_trigger)
    ops = parse_operations(ops_raw, max_timeout_ms=config.max_timeout_ms).where("reason IS NULL")
    evs = parse_events(evs_raw).where("reason IS NULL")
    rows = ops.select(
        F.col("keys")[0].alias("key"), "op_id", "ts_ms", "timeout_ms", F.lit(False).alias("is_event")
    ).unionByName(
        evs.select(
            "key",
            F.lit(None).cast("string").alias("op_id"),
            "ts_ms",
            F.lit(None).cast("long").alias("timeout_ms"),
            F.lit(True).alias("is_event"),
        )
    )
    rows = rows.withColumn("event_time", F.timestamp_millis("ts_ms")).withWatermark(
        "event_time", config.watermark_delay
    )
    stream = rows.groupBy("key").applyInPandasWithState(
        _per_key_step, _PER_KEY_SCHEMA, _PER_KEY_STATE, "append", "EventTimeTimeout"
    )
    return timed("per-key applyInPandasWithState", files.rows, stream, f"{files.root}/ck-per-key")


# -- more workloads: the job against the join --------------------------------------------------------


def compare_with_join(spark: SparkSession, root: str, workload: str, args, config: PurgatoryConfig) -> bool:
    """``typed``: the workload as Parquet files; ``skewed``: the same, with every events file
    reaching 12 s (> ``watermark.delay``) further in event time than its operations file.  The
    job's completed operations must equal the join's matched ones; prints both and the ratio."""
    skew_ms = {"typed": 0, "skewed": config.watermark_delay_ms + 2_000}[workload]
    files = write_parquet_workload(f"{root}/{workload}", args.ops, args.files, skew_ms)
    job = run_operator_job(spark, files, config, args.files_per_trigger)
    join = run_join(spark, files, config, args.files_per_trigger)
    missing, extra = join.completed - job.completed, job.completed - join.completed
    agree = not missing and not extra
    print(
        f"\n{workload} workload ({files.ops:,} operations, Parquet, events ahead by {skew_ms // 1000} s):\n"
        f"  {job.line()}\n  {join.line()}\n  throughput vs join: {join.seconds / job.seconds:.2f}x; "
        f"completed: job {len(job.completed):,}, join {len(join.completed):,}; "
        f"{len(missing):,} only by the join, {len(extra):,} only by the job: {_verdict(agree)}",
        flush=True,
    )
    return agree


# -- scaling with pending operations ---------------------------------------------------------------


def _ops_table(op_ids: np.ndarray, ts: np.ndarray, timeout_ms: int) -> pa.Table:
    return pa.table(
        {
            "op_id": pa.array(op_ids, pa.string()),
            "keys": pa.array([[k] for k in op_ids], pa.list_(pa.string())),
            "ts": pa.array(ts * 1000, pa.timestamp("us", tz="UTC")),
            "timeout_ms": pa.array(np.full(len(op_ids), timeout_ms), pa.int64()),
        }
    )


def _events_table(keys: np.ndarray, ts: np.ndarray) -> pa.Table:
    return pa.table(
        {"key": pa.array(keys, pa.string()), "ts": pa.array(ts * 1000, pa.timestamp("us", tz="UTC"))}
    )


def write_scaling(root: str, pending: int, batches: int, batch_ops: int, seed: int = 0) -> None:
    """Parquet files: file 0 preloads ``pending`` operations; files 1..batches each add
    ``batch_ops`` operations and ``0.7 * batch_ops`` events completing preloaded ones."""
    rng = np.random.default_rng(seed)
    day = 86_400_000
    os.makedirs(f"{root}/ops", exist_ok=True)
    os.makedirs(f"{root}/events", exist_ok=True)
    ids = np.char.add("p-", np.arange(pending).astype(str)).astype(object)
    ts = START_MS + np.sort(rng.integers(0, 3_600_000, pending))
    stamp = time.time() - batches - 1

    def put(kind: str, index: int, table: pa.Table) -> None:
        path = f"{root}/{kind}/part-{index:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (stamp + index, stamp + index))

    put("ops", 0, _ops_table(ids, ts, day))
    put("events", 0, _events_table(np.array([], dtype=object), np.array([], dtype=np.int64)))
    hits = rng.permutation(pending)
    for b in range(1, batches + 1):
        t0 = START_MS + 3_600_000 + b * 1_000
        new = np.char.add(f"n{b}-", np.arange(batch_ops).astype(str)).astype(object)
        put("ops", b, _ops_table(new, t0 + np.sort(rng.integers(0, 1_000, batch_ops)), day))
        n_ev = int(batch_ops * 0.7)
        chosen = hits[(b - 1) * n_ev : b * n_ev]
        put("events", b, _events_table(ids[chosen], t0 + np.sort(rng.integers(0, 1_000, len(chosen)))))


def _du(path: str) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


def run_scaling(
    spark: SparkSession, root: str, pending: int, batches: int, batch_ops: int, config: PurgatoryConfig
) -> dict:
    write_scaling(root, pending, batches, batch_ops)
    ops = read_stream(spark, f"{root}/ops", "parquet", kind="operations", max_files_per_trigger=1)
    evs = read_stream(spark, f"{root}/events", "parquet", kind="events", max_files_per_trigger=1)
    config = dataclasses.replace(
        config, max_timeout_ms=2 * 86_400_000, state_path=f"{root}/ck/purgatory-state"
    )
    result = timed(
        f"scaling {pending:,}",
        pending,
        purgatory_stream(ops, evs, config, source_format="parquet"),
        f"{root}/ck",
    )
    steady = [b["ms"] for b in result.batches[1:] if b["rows"]]
    return {
        "pending": pending,
        "preload_s": result.batches[0]["ms"] / 1000 if result.batches else float("nan"),
        "batch_ms": statistics.median(steady) if steady else float("nan"),
        "batch_ms_all": steady,
        "state_ms_all": [b["state_ms"] for b in result.batches[1:] if b["rows"]],
        "commit_ms_all": [b["commit_ms"] for b in result.batches[1:] if b["rows"]],
        "state_bytes": _du(f"{root}/ck/state") + _du(f"{root}/ck/purgatory-state"),
    }


# -- the report ------------------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(runs: dict[str, Run], scaling: list[dict]) -> dict:
    print()
    for r in runs.values():
        print(r.line())
    figures: dict[str, float] = {}
    op = runs.get("operator")
    noop = runs.get("noop")
    print("\nratios (targets beside them):")
    if op and "join" in runs:
        figures["vs_join"] = runs["join"].seconds / op.seconds
        line = f"  throughput vs stream-stream join:   {figures['vs_join']:6.2f}x"
        if noop:
            figures["vs_join_noop"] = runs["join"].seconds / noop.seconds
            line += f" (no-op sink {figures['vs_join_noop']:.2f}x)"
        print(f"{line}   target >= {TARGETS['join']}x: {_verdict(figures['vs_join'] >= TARGETS['join'])}")
    if op and "per_key" in runs:
        figures["vs_per_key"] = op.rows_per_s / runs["per_key"].rows_per_s
        print(
            f"  rows/s vs per-key state:            {figures['vs_per_key']:6.1f}x   "
            f"target >= {TARGETS['per_key']}x: {_verdict(figures['vs_per_key'] >= TARGETS['per_key'])}"
        )
    if "floor" in runs and (noop or op):
        base = noop or op
        figures["vs_floor"] = base.seconds / runs["floor"].seconds
        label = "no-op sink" if noop else "with the accumulator"
        print(
            f"  time / stateless floor ({label}): {figures['vs_floor']:6.2f}x   "
            f"target <= {TARGETS['floor']}x: {_verdict(figures['vs_floor'] <= TARGETS['floor'])}"
        )
        if noop and op:
            figures["vs_floor_accumulator"] = op.seconds / runs["floor"].seconds
            print(f"    (with the accumulator and Delta: {figures['vs_floor_accumulator']:.2f}x)")
    if op and "join" in runs:
        both = op.completed & runs["join"].completed
        differ = op.completed ^ runs["join"].completed
        figures["agree"] = float(not differ)
        print(
            f"  agreement with the join: {'yes' if not differ else 'NO'} "
            f"({len(both):,} completed by both, {len(differ):,} differ)"
        )
    if scaling:
        print("\nscaling with pending operations (same micro-batch size):")
        print(f"  {'pending':>10} {'preload':>9} {'per batch (median)':>19} {'state on disk':>14}")
        for s in scaling:
            print(
                f"  {s['pending']:>10,} {s['preload_s']:>8.1f}s {s['batch_ms']:>16,.0f} ms "
                f"{s['state_bytes'] / 2**20:>11,.1f} MiB"
            )
        if len(scaling) > 1:
            figures["scaling"] = scaling[-1]["batch_ms"] / scaling[0]["batch_ms"]
            print(
                f"  per-batch time at {scaling[-1]['pending']:,} / at {scaling[0]['pending']:,}: "
                f"{figures['scaling']:.2f}x   target <= {TARGETS['scaling']}x: "
                f"{_verdict(figures['scaling'] <= TARGETS['scaling'])}"
            )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="operations in the comparison")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--per-key-ops", type=int, default=20_000, help="the per-key baseline's workload")
    parser.add_argument("--warm-ops", type=int, default=20_000, help="an untimed warm-up run first (JIT)")
    parser.add_argument("--scaling", default="100000,1000000,5000000", help="pending counts ('' to skip)")
    parser.add_argument("--scaling-batches", type=int, default=5)
    parser.add_argument("--scaling-batch-ops", type=int, default=20_000)
    parser.add_argument(
        "--only", default="operator,noop,join,per_key,floor", help="which contenders to run (comma list)"
    )
    parser.add_argument(
        "--workloads", default="typed,skewed", help="more workloads, job vs join: typed, skewed ('' to skip)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness runs (CI)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ops, args.files, args.per_key_ops, args.warm_ops = 3_000, 4, 600, 500
        args.scaling, args.scaling_batches, args.scaling_batch_ops = "2000,8000", 2, 500

    root = tempfile.mkdtemp(prefix="bench-operator-")
    spark = local_session("bench-operator", master="local[2]", shuffle_partitions=args.shards + 1)
    config = PurgatoryConfig(shards=args.shards, cross_shard_operations=False, max_timeout_ms=60_000)
    only = set(args.only.split(","))
    try:
        files = write_workload(f"{root}/main", args.ops, args.files)
        print(
            f"workload: {files.ops:,} operations + {files.events:,} events, {args.files} JSON files per "
            f"stream, {args.files_per_trigger} per trigger, local[2], {args.shards} shards; "
            f"pyspark {spark.version}, python {sys.version.split()[0]}",
            flush=True,
        )
        # JVM code generation and Python worker imports: paid once here, not by the first contender
        warm = write_workload(f"{root}/warm", args.warm_ops, 4)
        for fn in (run_floor, run_operator_noop, run_join):
            fn(spark, warm, config, 2)
        contenders = {
            "floor": run_floor,
            "noop": run_operator_noop,
            "operator": run_operator_job,
            "join": run_join,
        }
        runs: dict[str, Run] = {}
        for name, fn in contenders.items():
            if name in only:
                runs[name] = fn(spark, files, config, args.files_per_trigger)
                print(runs[name].line(), flush=True)
        if "per_key" in only:
            small = write_workload(f"{root}/per-key", args.per_key_ops, args.files)
            runs["per_key"] = run_per_key(spark, small, config, args.files_per_trigger)
            print(runs["per_key"].line() + f"  ({small.ops:,} operations)", flush=True)
        scaling = []
        for n in [int(x) for x in args.scaling.split(",") if x]:
            scaling.append(
                run_scaling(
                    spark, f"{root}/scale-{n}", n, args.scaling_batches, args.scaling_batch_ops, config
                )
            )
            s = scaling[-1]
            print(
                f"scaling {n:,}: preload {s['preload_s']:.1f} s, per batch {s['batch_ms_all']} ms, "
                f"state update+commit {s['state_ms_all']} ms, commit {s['commit_ms_all']} ms",
                flush=True,
            )
            shutil.rmtree(f"{root}/scale-{n}", ignore_errors=True)
        figures = report(runs, scaling)
        agree = figures.get("agree", 1.0) == 1.0
        for workload in [w for w in args.workloads.split(",") if w]:
            agree &= compare_with_join(spark, root, workload, args, config)
        if args.json:
            with open(args.json, "w") as out:
                json.dump(
                    {
                        "figures": figures,
                        "runs": {k: r.seconds for k, r in runs.items()},
                        "batch_ms": {k: [b.get("ms") for b in r.batches] for k, r in runs.items()},
                        "scaling": scaling,
                    },
                    out,
                    indent=1,
                )
        return 0 if agree else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
