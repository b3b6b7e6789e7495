"""How long a new user waits for the first micro-batch: ``start()`` to its first batch done.

The payments case of issue 22 (``tests/support/payments.py``: 360 card payments awaiting 2 of 3
clearing confirmations, ~740 confirmations, typed Parquet in 4 files per stream), run
through ``start()`` with the defaults, beside Spark's own stream-stream left-outer join (a
watermark per side, a time-range condition) on the same files into a ``foreachBatch`` that
writes to Spark's ``noop`` sink.  Each contender runs in a fresh Python process with a fresh
local[2] session (``local_session``, so C1 only unless ``--jit full``; built before the
clock starts: the session is the user's, not ours), so neither inherits the other's warm JVM
or Python workers.

Printed per contender: seconds from the call that starts the query to the end of its first
micro-batch (``first batch``), and where they went: building the query (``start()``
returns), Spark's own phases of the first batch (``durationMs`` of its progress: planning,
``addBatch`` = the operator and the sink); and the CPU seconds the whole process tree
(driver, JVM, Python workers) spent from the call to the first batch done (``cpu``, read from
``/proc`` by ``procfs.cpu_seconds``): on a busy machine the wall time mostly measures the
other processes, the CPU time much less so, and on 2 idle cores the wall time cannot fall
below about half of it.

    .venv/bin/python benchmarks/bench_first_batch.py              # 3 runs of each, alternating
    .venv/bin/python benchmarks/bench_first_batch.py --runs 1
    .venv/bin/python benchmarks/bench_first_batch.py --cold       # also without the warm-up
    .venv/bin/python benchmarks/bench_first_batch.py --conf spark.sql.codegen.wholeStage=false
    .venv/bin/python benchmarks/bench_first_batch.py --jit full  # the JVM's default C1 + C2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_S = 5.0

from procfs import cpu_seconds  # noqa: E402 - beside this script (sys.path[0])


def _case(root: str) -> tuple[str, str]:
    sys.path.insert(0, str(HERE.parent))  # the root: tests.support
    from tests.support.payments import write_case

    _ops, _events, ops_dir, events_dir = write_case(root)
    return ops_dir, events_dir


def _session():
    from spark_purgatory.runtime.session import local_session

    conf = json.loads(os.environ.get("BENCH_FIRST_BATCH_CONF", "{}"))  # --conf
    c1_only = os.environ.get("BENCH_FIRST_BATCH_JIT", "c1") == "c1"  # --jit
    spark = local_session(
        "bench-first-batch", master="local[2]", shuffle_partitions=3, conf=conf, c1_only=c1_only
    )
    spark.range(1).count()  # the JVM is up: the clock measures the query, not the session
    return spark


def run_ours(root: str, *, warm: bool = True) -> dict:
    from spark_purgatory import PurgatoryConfig, start

    if not warm:  # what warming the Python workers at start saves (``runtime.workers``)
        import spark_purgatory.runtime.workers as workers

        workers.warm_python_workers = lambda spark, modules=(): None

    ops_dir, events_dir = _case(root)
    spark = _session()
    done: dict = {}

    def first(f: dict) -> None:
        done.setdefault("t", time.perf_counter())
        done.setdefault("cpu", cpu_seconds())

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    purgatory = start(
        ops_dir,
        events_dir,
        output=f"{root}/tables",
        checkpoint=f"{root}/chk",
        config=PurgatoryConfig(shards=2, watermark_delay="5 seconds"),
        on_batch=first,
        spark=spark,
    )
    started = time.perf_counter()
    purgatory.await_termination()
    purgatory.stop()
    progress = purgatory.query.recentProgress[0]
    return {
        "first_batch_s": done["t"] - t0,
        "cpu_s": done["cpu"] - cpu0,
        "start_returns_s": started - t0,
        "spark_phases_ms": dict(progress.durationMs),
    }


def run_join(root: str) -> dict:
    from pyspark.sql import functions as F

    from spark_purgatory.spark.formats import read_stream

    ops_dir, events_dir = _case(root)
    spark = _session()
    ops = read_stream(spark, ops_dir, "parquet", kind="operations", max_files_per_trigger=16)
    events = read_stream(spark, events_dir, "parquet", kind="events", max_files_per_trigger=16)
    o = ops.select("op_id", F.col("key").alias("o_key"), F.col("ts").alias("o_ts"), "timeout_ms")
    o = o.withColumn("deadline", F.col("o_ts") + F.expr("INTERVAL 30 SECONDS")).withWatermark(
        "o_ts", "5 seconds"
    )
    e = events.select(F.col("key").alias("e_key"), F.col("ts").alias("e_ts"), "source")
    e = e.withWatermark("e_ts", "5 seconds")
    cond = (
        (F.col("o_key") == F.col("e_key"))
        & (F.col("e_ts") >= F.col("o_ts"))
        & (F.col("e_ts") < F.col("deadline"))
    )
    joined = o.join(e, cond, "leftOuter")
    done: dict = {}

    def sink(batch, batch_id):
        batch.write.format("noop").mode("append").save()
        done.setdefault("t", time.perf_counter())
        done.setdefault("cpu", cpu_seconds())

    cpu0, t0 = cpu_seconds(), time.perf_counter()
    query = (
        joined.writeStream.foreachBatch(sink)
        .option("checkpointLocation", f"{root}/chk-join")
        .trigger(availableNow=True)
        .start()
    )
    started = time.perf_counter()
    query.awaitTermination()
    return {
        "first_batch_s": done["t"] - t0,
        "cpu_s": done["cpu"] - cpu0,
        "start_returns_s": started - t0,
        "spark_phases_ms": dict(query.recentProgress[0].durationMs),
    }


def _one(which: str) -> dict:
    """One contender in a fresh process (``--one``), its figures as JSON on the last line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, __file__, "--one", which], capture_output=True, text=True, env=env, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"{which} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also start() without warming the workers")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a session setting for both"
    )
    parser.add_argument(
        "--jit",
        choices=["c1", "full"],
        default="c1",
        help="the session's JVM: C1 only (local_session's default) or HotSpot's default C1 + C2",
    )
    parser.add_argument("--one", choices=["ours", "ours-cold", "join"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as root:
            if args.one == "join":
                figures = run_join(root)
            else:
                figures = run_ours(root, warm=args.one == "ours")
        print(json.dumps(figures))
        return
    os.environ["BENCH_FIRST_BATCH_CONF"] = json.dumps(dict(c.split("=", 1) for c in args.conf))
    os.environ["BENCH_FIRST_BATCH_JIT"] = args.jit
    contenders = ["ours", "join", *(["ours-cold"] if args.cold else [])]
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    for run in range(args.runs):
        for which in contenders if run % 2 == 0 else contenders[::-1]:
            results[which].append(_one(which))
            r = results[which][-1]
            print(
                f"run {run + 1} {which:<9} first batch {r['first_batch_s']:6.2f} s, cpu {r['cpu_s']:5.1f} s  "
                f"(start() returns {r['start_returns_s']:.2f} s; Spark phases ms {r['spark_phases_ms']}"
                + ")",
                flush=True,
            )
    if args.cold:
        cold = statistics.median(r["first_batch_s"] for r in results["ours-cold"])
        print(f"median first micro-batch of start() without warming the Python workers: {cold:.2f} s")
    ours = statistics.median(r["first_batch_s"] for r in results["ours"])
    join = statistics.median(r["first_batch_s"] for r in results["join"])
    ours_cpu = statistics.median(r["cpu_s"] for r in results["ours"])
    join_cpu = statistics.median(r["cpu_s"] for r in results["join"])
    print(
        f"median CPU seconds to the first micro-batch: start() {ours_cpu:.1f} s, "
        f"Spark's stream-stream join {join_cpu:.1f} s ({ours_cpu / join_cpu:.1f}x)"
    )
    print(
        f"median first micro-batch, payments case (360 ops + confirmations, typed Parquet; "
        f"JVM {'C1 only' if args.jit == 'c1' else 'C1 + C2'}): "
        f"start() {ours:.2f} s, Spark's stream-stream join {join:.2f} s "
        f"({ours / join:.1f}x); target <= {TARGET_S:.0f} s: {'met' if ours <= TARGET_S else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
