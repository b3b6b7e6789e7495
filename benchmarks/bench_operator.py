"""The purgatory operator against Spark's stream-stream left-outer join, on the same files.

Workload: orders awaiting one confirmation within a timeout (``generate_confirmations``),
written as JSON lines and read by both queries with the same maxFilesPerTrigger, local[2],
the same shuffle partitions and a no-op sink.  Prints wall time, input rows/s and the ratio,
and checks that both agree on which orders completed.

    .venv/bin/python benchmarks/bench_operator.py --ops 200000
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from pyspark.sql import functions as F

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.session import local_session
from spark_purgatory.sources import parse_events, parse_operations, read_stream
from spark_purgatory.streaming import purgatory_stream
from spark_purgatory.workload import generate_confirmations, write_json_lines


def timed_run(stream, checkpoint: str, completed_ids) -> tuple[float, set[str]]:
    """Run ``stream`` with availableNow into a sink that collects completed op_ids; time it."""
    completed: set[str] = set()

    def sink(batch, batch_id):
        completed.update(r.op_id for r in completed_ids(batch).collect())

    start = time.perf_counter()
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    query.trigger(availableNow=True).start().awaitTermination()
    return time.perf_counter() - start, completed


def run_operator(spark, root: str, config: PurgatoryConfig, files_per_trigger: int) -> tuple[float, set[str]]:
    ops = read_stream(spark, f"{root}/ops", kind="operations", max_files_per_trigger=files_per_trigger)
    evs = read_stream(spark, f"{root}/events", kind="events", max_files_per_trigger=files_per_trigger)
    return timed_run(
        purgatory_stream(ops, evs, config),
        f"{root}/ck-op",
        lambda b: b.where("kind = 'outcome' AND status = 'completed'").select("op_id"),
    )


def run_join(
    spark, root: str, config: PurgatoryConfig, files_per_trigger: int, timeout_ms: int
) -> tuple[float, set[str]]:
    """Spark's own answer: a stream-stream left-outer join with a time-range condition."""
    ops = parse_operations(
        read_stream(spark, f"{root}/ops", kind="operations", max_files_per_trigger=files_per_trigger),
        max_timeout_ms=config.max_timeout_ms,
    ).where("reason IS NULL")
    evs = parse_events(
        read_stream(spark, f"{root}/events", kind="events", max_files_per_trigger=files_per_trigger)
    )
    ops = ops.select(
        "op_id", F.col("keys")[0].alias("okey"), F.timestamp_millis("ts_ms").alias("ots")
    ).withWatermark("ots", config.watermark_delay)
    evs = evs.where("reason IS NULL").select(
        F.col("key").alias("ekey"), F.timestamp_millis("ts_ms").alias("ets")
    )
    evs = evs.withWatermark("ets", config.watermark_delay)
    joined = ops.join(
        evs,
        F.expr(f"okey = ekey AND ets >= ots AND ets < ots + INTERVAL {timeout_ms} MILLISECONDS"),
        "leftOuter",
    )
    return timed_run(
        joined, f"{root}/ck-join", lambda b: b.where("ekey IS NOT NULL").select("op_id").distinct()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--skip-join", action="store_true")
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="bench-operator-")
    work = generate_confirmations(args.ops)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=args.files)
    rows = len(work.operations) + len(work.events)
    spark = local_session("bench-operator", master="local[2]", shuffle_partitions=args.shards + 1)
    config = PurgatoryConfig(shards=args.shards, cross_shard_operations=False, max_timeout_ms=60_000)
    print(
        f"workload: {len(work.operations):,} operations + {len(work.events):,} events, "
        f"{args.files} files per stream, {args.files_per_trigger} per trigger, local[2]"
    )
    t_op, done_op = run_operator(spark, root, config, args.files_per_trigger)
    print(
        f"{'purgatory operator':<34}{t_op:>8.1f} s {rows / t_op:>12,.0f} rows/s   completed {len(done_op):,}"
    )
    if not args.skip_join:
        t_join, done_join = run_join(spark, root, config, args.files_per_trigger, 30_000)
        print(
            f"{'stream-stream left-outer join':<34}{t_join:>8.1f} s {rows / t_join:>12,.0f} rows/s   "
            f"completed {len(done_join):,}"
        )
        print(f"ratio: operator is {t_join / t_op:.2f}x the join's throughput")
        print(
            f"agreement on completed orders: {'yes' if done_op == done_join else 'NO'} "
            f"({len(done_op ^ done_join)} differ)"
        )
    shutil.rmtree(root, ignore_errors=True)
    spark.stop()


if __name__ == "__main__":
    main()
