"""Time and memory as pending operations grow: the job and Spark's join, each in its own process.

The workload of issue 48's "1.8M operations, ~1.2M pending": ``--files`` Parquet files per
input of ``--per-file`` operations each (one key each, a one-day timeout), cut at consecutive
event-time ranges, and the confirming events of a third of them one second after their
operation, in the same file index.  Nothing expires within the run, so the pending
operations grow by two thirds of a file per micro-batch (1.8M operations: 1.2M pending at the
end).

Each contender runs in a fresh process (``--child``: ``local_session``, local[2], the same
session settings for each, one file per input per micro-batch, ``availableNow`` to the end),
the contenders alternated (``--repeat`` rounds, every other round in the reverse order):

* **job**: the job as users run it (``contenders.run_job``: operator, accumulator, delta-rs);
* **join**: the stream-stream left-outer join a Spark user writes (``contenders.join_stream``'s
  shape with the one-day window), into Parquet;
* **join-delta**: the same join into a Delta table through Spark's own Delta writer, as a user
  who keeps Delta tables writes it (Delta's JARs from ``make jars``);
* **stateful**: the stateful floor, ``applyInPandasWithState`` doing nothing on both inputs'
  keys and times into Spark's ``noop`` sink (``contenders.stateful_floor``): what moving these
  rows through Spark's stateful Python operator costs on this host, the part of the job no
  operator built on it can cut;
* **stateful-routed**: the job's routed rows (its parsing, routing, op_id claims and marks)
  through the same operator doing nothing (``contenders.run_stateful_routed``): against
  ``stateful``, what the routed rows cost; against ``job``, what the shard step's work and its
  output cost.

The parent samples the resident memory of the child's process tree (driver JVM with its
executor, Python workers) every ``--sample`` seconds from ``/proc`` and prints per run: wall
time, the first and last micro-batch's time (``triggerExecution``), the peak resident memory,
completed operations; then each figure's range over the rounds and the ratios, round by
round.

With ``PURGATORY_STATE_LOG=1`` the job's shard calls log how their state was loaded and
what each phase cost (``ShardStep.log``, on the Python workers' stderr): the child sends its
stderr to a file and the parent prints, per job run, how the calls loaded and the
distribution of their ``save_ms`` and ``load_ms``.

    python -m benchmarks pending                          # 12 x 150k, 1.2M pending
    python -m benchmarks pending --files 4 --per-file 20000 --repeat 1
    PURGATORY_STATE_LOG=1 python -m benchmarks pending --contenders job --repeat 1 [--checkout ../main]
    python -m benchmarks pending --saves --repeat 2 [--checkout ../main]   # no Spark

``--saves`` times the job's state saves alone on one shard's half of the same files, without
Spark (``saves_child``): the CPU each save takes, call by call, as pending operations grow.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import harness

DAY_MS = 86_400_000
CONTENDERS = ("job", "join", "join-delta", "stateful", "stateful-routed")
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


#: the shard calls' log lines (``PURGATORY_STATE_LOG``), and where a child writes its stderr
_STATE_LINE, _STATE_LOG = "purgatory-state ", "state-{name}.log"


def child(name: str, root: str, ops: int, events: int) -> dict:
    import dataclasses

    if os.environ.get("PURGATORY_STATE_LOG") and not os.environ.get(harness.IN_PROCESS):
        # the workers inherit this process's stderr: keep it in a file the parent reads
        log = os.open(f"{root}/{_STATE_LOG.format(name=name)}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 2)

    from pyspark.sql import functions as F

    from benchmarks.contenders import Files, run_job, run_stateful_routed, stateful_floor, timed, typed_inputs
    from spark_purgatory import PurgatoryConfig
    from spark_purgatory.runtime.session import local_session

    config = PurgatoryConfig(shards=2, watermark_delay="10 seconds")
    spark = local_session("bench-pending", master="local[2]", shuffle_partitions=config.groups)
    files = Files(root, ops, events, "parquet")
    if name == "job":
        config = dataclasses.replace(config, accumulator_linger_ms=0)
        run = run_job(spark, files, config, 1)
    elif name in ("stateful", "stateful-routed"):
        from pyspark import cloudpickle

        from benchmarks import contenders

        # the Python workers cannot import the benchmarks: the group function travels by value
        cloudpickle.register_pickle_by_value(contenders)
        if name == "stateful":
            run = timed(name, files.rows, stateful_floor(spark, files, config, 1), f"{root}/ck-{name}")
        else:
            run = run_stateful_routed(spark, files, config, 1)
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
    harness.stop(spark)
    # micro-batches that read the input files (not the job's last run on its wake files alone)
    times = [b["ms"] for b in run.batches if b.get("input_rows", b.get("rows"))]
    return {
        "seconds": run.seconds,
        "batches": len(times),
        "first_ms": times[0] if times else None,
        "last_ms": times[-1] if times else None,
        "completed": len(run.completed),
    }


# -- the state saves alone ----------------------------------------------------------------------------


def saves_child(root: str, files: int, per_file: int) -> dict:
    """The job's state saves on one shard of the workload, without Spark: the engine takes a
    shard's share of each file (half of it, as with two shards), ``save_state`` writes it to a
    ``SegmentStore`` and the worker cache hands it back, as in a steady stream; returns each
    save's CPU time (process time: Arrow's compression threads included) and its main
    thread's (the worker's thread the shard call runs on), in ms."""
    import pandas as pd

    from spark_purgatory import Purgatory, PurgatoryConfig
    from spark_purgatory.state import SegmentStore, WorkerCache, load_state, save_state

    config = PurgatoryConfig(shards=1, watermark_delay="10 seconds", cross_shard_operations=False)
    p, cache, store, saves, threads = Purgatory(config), WorkerCache(), SegmentStore(f"{root}/state"), [], []
    t0 = int(time.time() * 1000) - DAY_MS
    for f in range(files):
        ids = np.arange(f * per_file, (f + 1) * per_file, 2)  # the shard's half
        ts = t0 + ids * 10
        ops = pd.DataFrame(
            {
                "op_id": [f"o{i}" for i in ids],
                "keys": [[f"k{i}"] for i in ids],
                "ts": ts,
                "timeout_ms": DAY_MS,
            }
        )
        confirmed = ids % 3 == 0
        events = pd.DataFrame({"key": [f"k{i}" for i in ids[confirmed]], "ts": ts[confirmed] + 1_000})
        p.process(ops, events, watermark_ms=int(ts[0]) - 10_000)
        start, thread = time.process_time(), time.thread_time()
        value = save_state(p, store, park=True, cache=cache, version=f + 1)
        saves.append((time.process_time() - start) * 1000)
        threads.append((time.thread_time() - thread) * 1000)
        p = load_state(value, config, store, cache=cache)
    return {"saves_ms": saves, "thread_ms": threads, "pending": p.pending}


def measure_saves(args: argparse.Namespace) -> None:
    """``--saves``: each checkout's saves (this one, and ``--checkout``'s), alternated."""
    checkouts = [None, args.checkout] if args.checkout else [None]
    print(f"state saves alone, one of two shards, {args.files} files of {args.per_file:,} operations")
    for number in range(args.repeat):
        for checkout in checkouts if number % 2 == 0 else checkouts[::-1]:
            with tempfile.TemporaryDirectory(prefix="bench-saves-") as root:
                argv = [
                    "--saves-child",
                    "--root",
                    root,
                    "--files",
                    str(args.files),
                    "--per-file",
                    str(args.per_file),
                ]
                out = harness.child("pending", argv, checkout=checkout)
            ms = np.array(out["saves_ms"])
            thread = f", main thread {sum(out['thread_ms']):.0f} ms" if "thread_ms" in out else ""
            print(
                f"  {checkout or 'this checkout'} (load {os.getloadavg()[0]:.1f}): "
                f"total {ms.sum():.0f} ms{thread}, median {np.median(ms):.0f}, max {ms.max():.0f}, "
                f"{out['pending']:,} pending; "
                f"in order {np.round(ms).astype(int).tolist()}",
                flush=True,
            )


# -- the parent ---------------------------------------------------------------------------------------


def _logged(line: str) -> list[dict]:
    """The shard calls' figures on a line of a child's stderr (two workers' lines may share
    one: each figure is read from its marker on; a cut one is left out)."""
    found, at = [], line.find(_STATE_LINE)
    while at >= 0:
        try:
            found.append(json.JSONDecoder().raw_decode(line, at + len(_STATE_LINE))[0])
        except ValueError:
            pass
        at = line.find(_STATE_LINE, at + 1)
    return found


def state_calls(root: str, name: str) -> str | None:
    """The shard calls' state figures a child logged (``PURGATORY_STATE_LOG``), summed up:
    how they loaded, and ``save_ms`` and ``load_ms`` by percentile; None without a log."""
    path = f"{root}/{_STATE_LOG.format(name=name)}"
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as lines:
        calls = [call for line in lines for call in _logged(line)]
    if not calls:
        return f"  {name}: no shard call logged"
    loads: dict[str, int] = {}
    for call in calls:
        loads[call["loaded_by"]] = loads.get(call["loaded_by"], 0) + 1
    out = [
        f"  {name}: {len(calls)} shard calls, loaded "
        + ", ".join(f"{k} {v}" for k, v in sorted(loads.items()))
    ]
    for phase in ("save_ms", "load_ms"):
        ms = np.array([call.get(phase, 0) for call in calls], float)
        p50, p90 = np.percentile(ms, [50, 90])
        spread = f"median {p50:.0f}, p90 {p90:.0f}, max {ms.max():.0f}"
        out.append(f"    {phase}: {spread}, in call order {ms.astype(int).tolist()}")
    return "\n".join(out)


def measure(
    name: str, root: str, ops: int, events: int, sample_s: float, checkout: str | None = None
) -> dict:
    """Run contender ``name`` in a fresh process (``checkout``: with that checkout's
    ``spark_purgatory``); sample its tree's resident memory."""
    old_dirs = ("out", "ck-job", "ck-join", "join-out", "ck-join-delta", "join-delta-out", "ck-stateful")
    for old in (*old_dirs, "ck-stateful-routed", "state-stateful-routed"):
        shutil.rmtree(f"{root}/{old}", ignore_errors=True)
    if os.path.exists(f"{root}/{_STATE_LOG.format(name=name)}"):
        os.remove(f"{root}/{_STATE_LOG.format(name=name)}")
    argv = ["--child", name, "--root", root, "--ops", str(ops), "--events", str(events)]
    try:
        return {**harness.child("pending", argv, sample_s=sample_s, checkout=checkout), "name": name}
    except RuntimeError as failed:
        raise SystemExit(f"contender {name} failed: {failed}") from None


#: the printed figures of a run: key, heading
COLUMNS = {
    "seconds": "wall s",
    "first_s": "first batch s",
    "last_s": "last batch s",
    "peak_mb": "peak RSS MB",
}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser("pending", __doc__, repeat=2)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--per-file", type=int, default=150_000)
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"of {', '.join(CONTENDERS)}")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between memory samples")
    parser.add_argument("--checkout", help="run the contenders on another checkout's spark_purgatory")
    parser.add_argument("--saves", action="store_true", help="the job's state saves alone, without Spark")
    parser.add_argument("--saves-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--ops", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.root, args.ops, args.events)), flush=True)
        return 0
    if args.saves_child:
        print(json.dumps(saves_child(args.root, args.files, args.per_file)), flush=True)
        return 0
    if args.saves:
        measure_saves(args)
        return 0
    names = harness.names(args.contenders)
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}")
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
            f"{'contender':<11}{'round':>6}"
            + "".join(f"{h:>15}" for h in COLUMNS.values())
            + f"{'completed':>11}"
        )
        rounds = harness.Rounds(names, args.repeat)
        for number, name in rounds:
            m = measure(name, root, ops, events, args.sample, args.checkout)
            m["first_s"], m["last_s"] = ((m[k] or 0) / 1000 for k in ("first_ms", "last_ms"))
            m["drift"] = m["last_ms"] / m["first_ms"] if m["first_ms"] else None
            rounds.add(name, m)
            print(
                f"{name:<11}{number + 1:>6}"
                + "".join(f"{m[k]:>15,.2f}" for k in COLUMNS)
                + f"{m['completed']:>11,}",
                flush=True,
            )
            calls = state_calls(root, name)
            if calls:
                print(calls, flush=True)
        print(f"\nover {args.repeat} rounds, min-max (median):")
        print(rounds.table(COLUMNS))
        ratios = {}
        for join_name in (n for n in _JOIN_SINKS if n in names and "job" in names):
            speed = ratios[f"job_vs_{join_name}"] = rounds.ratios(join_name, "job", "seconds")
            memory = ratios[f"job_vs_{join_name}_memory"] = rounds.ratios("job", join_name, "peak_mb")
            print(harness.ratio_line(f"job vs {join_name}, throughput (its time / the job's)", speed))
            print(harness.ratio_line(f"the job's peak memory / the {join_name}'s", memory))
        if "job" in names:
            drift = rounds.values("job", "drift")
            print(f"  the job's last micro-batch / its first: {harness.span(drift, 'x')}")
        beside_floor = ("job", "stateful-routed", *_JOIN_SINKS)
        for name in (n for n in beside_floor if n in names and "stateful" in names):
            floor = ratios[f"{name}_vs_stateful"] = rounds.ratios(name, "stateful", "seconds")
            print(harness.ratio_line(f"{name} time / the stateful floor's", floor))
        harness.write_json(args.json, "pending", args, {"ratios": ratios, **rounds.json()})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0
