"""Time and memory as pending operations grow: the job and Spark's join, each in its own process.

The workload of issue 48's "1.8M operations, ~1.2M pending": ``--files`` Parquet files per
input of ``--per-file`` operations each (one key each, a one-day timeout), cut at consecutive
event-time ranges, and the confirming events of a third of them one second after their
operation, in the same file index.  Nothing expires within the run, so the pending
operations grow by two thirds of a file per micro-batch (1.8M operations: 1.2M pending at the
end).

Each contender runs in a fresh process (``--child``: ``local_session``, local[2], the same
session settings for each, one file per input per micro-batch, ``availableNow`` to the end):

* **job**: the job as users run it (``contenders.run_job``: operator, accumulator, delta-rs);
* **join**: the stream-stream left-outer join a Spark user writes (``contenders.join_stream``'s
  shape with the one-day window), into Parquet;
* **join-delta**: the same join into a Delta table through Spark's own Delta writer, as a user
  who keeps Delta tables writes it (Delta's JARs from ``make jars``);
* **stateful**: the stateful floor, ``applyInPandasWithState`` doing nothing on both inputs'
  keys and times into Spark's ``noop`` sink (``contenders.stateful_floor``): what moving these
  rows through Spark's stateful Python operator costs on this host, the part of the job no
  operator built on it can cut.

The parent samples the resident memory of the child's process tree (driver JVM with its
executor, Python workers) every ``--sample`` seconds from ``/proc`` and prints per run: wall
time, the first and last micro-batch's time (``triggerExecution``), the peak resident memory,
completed operations; then the ranges over ``--repeat`` alternated rounds and the ratios.

    .venv/bin/python benchmarks/bench_pending.py                          # 12 x 150k, 1.2M pending
    .venv/bin/python benchmarks/bench_pending.py --files 4 --per-file 20000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from procfs import tree_rss_mb  # noqa: E402

DAY_MS = 86_400_000
CONTENDERS = ("job", "join", "join-delta", "stateful")
#: where each join contender writes, and in what format
_JOIN_SINKS = {"join": ("parquet", "join-out"), "join-delta": ("delta", "join-delta-out")}


def write_workload(root: str, files: int, per_file: int) -> tuple[int, int]:
    """The files (module docstring); returns (operations, events)."""
    t0 = int(time.time() * 1000) - DAY_MS  # a day ago: no row is in the future
    stamp = time.time() - files
    n_events = 0
    for kind in ("ops", "events"):
        os.makedirs(f"{root}/{kind}", exist_ok=True)
    for f in range(files):
        ids = np.arange(f * per_file, (f + 1) * per_file)
        ts = t0 + ids * 10  # 100 operations per second of event time
        keys = pa.array([f"k{i}" for i in ids])
        ops = pa.table(
            {
                "op_id": pa.array([f"o{i}" for i in ids]),
                "key": keys,
                "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                "timeout_ms": pa.array(np.full(len(ids), DAY_MS), pa.int64()),
            }
        )
        confirmed = ids % 3 == 0
        events = pa.table(
            {
                "key": keys.filter(pa.array(confirmed)),
                "ts": pa.array(ts[confirmed] + 1_000, pa.timestamp("ms", tz="UTC")),
            }
        )
        n_events += events.num_rows
        for kind, table in (("ops", ops), ("events", events)):
            path = f"{root}/{kind}/part-{f:05d}.parquet"
            pq.write_table(table, path)
            os.utime(path, (stamp + f, stamp + f))  # file sources take files in mtime order
    return files * per_file, n_events


# -- the child: one contender in its own process -------------------------------------------------------


def child(name: str, root: str, ops: int, events: int) -> dict:
    import dataclasses

    from contenders import Files, run_job, stateful_floor, timed, typed_inputs
    from pyspark.sql import functions as F

    from spark_purgatory import PurgatoryConfig
    from spark_purgatory.runtime.session import local_session

    config = PurgatoryConfig(shards=2, watermark_delay="10 seconds")
    spark = local_session("bench-pending", master="local[2]", shuffle_partitions=config.shards + 1)
    files = Files(root, ops, events, "parquet")
    if name == "job":
        config = dataclasses.replace(config, accumulator_linger_ms=0)
        run = run_job(spark, files, config, 1)
    elif name == "stateful":
        import contenders
        from pyspark import cloudpickle

        # the Python workers cannot import this directory: the group function travels by value
        cloudpickle.register_pickle_by_value(contenders)
        run = timed(name, files.rows, stateful_floor(spark, files, config, 1), f"{root}/ck-{name}")
    else:
        ops_in, evs_in = typed_inputs(spark, files, 1)
        o = ops_in.select("op_id", F.col("key").alias("okey"), F.col("ts").alias("ots"))
        e = evs_in.select(F.col("key").alias("ekey"), F.col("ts").alias("ets"))
        joined = o.withWatermark("ots", config.watermark_delay).join(
            e.withWatermark("ets", config.watermark_delay),
            F.expr("okey = ekey AND ets >= ots AND ets < ots + INTERVAL 1 DAY"),
            "leftOuter",
        )
        fmt, out = _JOIN_SINKS[name]
        run = timed(name, files.rows, joined, f"{root}/ck-{name}", fmt, f"{root}/{out}")
        if fmt == "delta":
            from deltalake import DeltaTable

            table = DeltaTable(f"{root}/{out}").to_pyarrow_table(columns=["op_id", "ekey"])
        else:
            table = pq.read_table(f"{root}/{out}", columns=["op_id", "ekey"])
        run.completed = set(table.filter(table["ekey"].is_valid())["op_id"].to_pylist())
    times = [b["ms"] for b in run.batches if b.get("rows")]
    return {
        "seconds": run.seconds,
        "batches": len(times),
        "first_ms": times[0] if times else None,
        "last_ms": times[-1] if times else None,
        "completed": len(run.completed),
    }


# -- the parent ---------------------------------------------------------------------------------------


def measure(name: str, root: str, ops: int, events: int, sample_s: float) -> dict:
    """Run contender ``name`` in a fresh process; sample its tree's resident memory."""
    for old in ("out", "ck-job", "ck-join", "join-out", "ck-join-delta", "join-delta-out", "ck-stateful"):
        shutil.rmtree(f"{root}/{old}", ignore_errors=True)
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--root",
        root,
        "--ops",
        str(ops),
        "--events",
        str(events),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        time.sleep(sample_s)
    out = proc.stdout.read() if proc.stdout else ""
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"contender {name} failed ({proc.returncode}): {out[-2000:]}")
    return {**json.loads(lines[-1]), "peak_mb": peak, "name": name}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--per-file", type=int, default=150_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between memory samples")
    parser.add_argument("--child", choices=CONTENDERS)
    parser.add_argument("--root")
    parser.add_argument("--ops", type=int)
    parser.add_argument("--events", type=int)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.root, args.ops, args.events)), flush=True)
        return 0
    root = tempfile.mkdtemp(prefix="bench-pending-")
    try:
        ops, events = write_workload(root, args.files, args.per_file)
        pending = ops - events
        print(
            f"{ops:,} operations ({args.files} files of {args.per_file:,}), {events:,} confirmed, "
            f"{pending:,} pending at the end (one-day timeouts); one file per micro-batch, local[2], "
            f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"{'contender':<11}{'round':>6}{'wall s':>9}{'first batch s':>15}{'last batch s':>14}"
            f"{'peak RSS MB':>13}{'completed':>11}"
        )
        runs: dict[str, list[dict]] = {}
        names = [n for n in args.contenders.split(",") if n]
        for r in range(args.repeat):
            for name in names if r % 2 == 0 else names[::-1]:  # alternated
                m = measure(name, root, ops, events, args.sample)
                runs.setdefault(name, []).append(m)
                print(
                    f"{name:<11}{r + 1:>6}{m['seconds']:>9.1f}{(m['first_ms'] or 0) / 1000:>15.2f}"
                    f"{(m['last_ms'] or 0) / 1000:>14.2f}{m['peak_mb']:>13,.0f}{m['completed']:>11,}",
                    flush=True,
                )
        for join_name in (n for n in _JOIN_SINKS if n in runs and "job" in runs):
            job, join = runs["job"], runs[join_name]
            speed = [b["seconds"] / a["seconds"] for a in job for b in join]
            drift = [a["last_ms"] / a["first_ms"] for a in job if a["first_ms"]]
            memory = [a["peak_mb"] / b["peak_mb"] for a in job for b in join]
            print(
                f"job vs {join_name}: {min(speed):.2f}-{max(speed):.2f}x faster over the run; the job's "
                f"last micro-batch {min(drift):.2f}-{max(drift):.2f}x its first; its peak memory "
                f"{min(memory):.2f}-{max(memory):.2f}x the {join_name}'s"
            )
        for other in (n for n in ("stateful",) if n in runs):
            for name in (n for n in ("job", *_JOIN_SINKS) if n in runs):
                ratio = [a["seconds"] / b["seconds"] for a in runs[name] for b in runs[other]]
                print(f"{name} time / the stateful floor's: {min(ratio):.2f}-{max(ratio):.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
