"""Start-up: what a query costs before and at its first micro-batch, each run in a fresh
process.  ``first-batch``: ``start()`` to its first micro-batch done, beside Spark's join;
``plan``: building ``start()``'s plan, in seconds, Py4J calls and CPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import threading
import time

from benchmarks import harness

TARGET_S = 5.0


def _payments(root: str) -> tuple[str, str]:
    """The payments case under ``root``: its two input directories."""
    from spark_purgatory.workload import write_payments

    _ops, _events, ops_dir, events_dir = write_payments(root)
    return ops_dir, events_dir


def _session(conf: dict[str, str], jit: str):
    """A fresh local[2] session (``local_session``: C1 only unless ``jit`` is ``full``), up
    and one tiny job run: the session is the user's, built before the clock starts."""
    from spark_purgatory.runtime.session import local_session

    spark = local_session(
        "bench-startup", master="local[2]", shuffle_partitions=3, conf=conf, c1_only=jit == "c1"
    )
    spark.range(1).count()  # the JVM is up: the clock measures the query, not the session
    return spark


def _start(inputs: tuple[str, str], root: str, spark, **more):
    """``start()`` on the case's two inputs, its tables and checkpoint under ``root``, as a
    new user starts it (2 shards, a 5 s watermark delay); its handle."""
    from spark_purgatory import PurgatoryConfig, start

    ops_dir, events_dir = inputs
    config = PurgatoryConfig(shards=2, watermark_delay="5 seconds")
    return start(
        ops_dir,
        events_dir,
        output=f"{root}/tables",
        checkpoint=f"{root}/chk",
        config=config,
        spark=spark,
        **more,
    )


# -- first-batch -----------------------------------------------------------------------------------


def run_ours(root: str, inputs: tuple[str, str], session: dict, *, warm: bool = True) -> dict:
    """``start()`` on the case, from its call to its first micro-batch done (``--one``)."""
    if not warm:  # what warming the Python workers at start saves (``runtime.workers``)
        import spark_purgatory.runtime.workers as workers

        workers.warm_python_workers = lambda spark, modules=(): None

    spark = _session(**session)
    done: dict = {}

    def first(f: dict) -> None:
        done.setdefault("t", time.perf_counter())
        done.setdefault("cpu", harness.cpu_seconds())

    cpu0, t0 = harness.cpu_seconds(), time.perf_counter()
    purgatory = _start(inputs, root, spark, on_batch=first)
    started = time.perf_counter()
    purgatory.await_termination()
    purgatory.stop()
    progress = purgatory.query.recentProgress[0]
    harness.stop(spark)
    return {
        "first_batch_s": done["t"] - t0,
        "cpu_s": done["cpu"] - cpu0,
        "start_returns_s": started - t0,
        "spark_phases_ms": dict(progress.durationMs),
    }


def run_join(root: str, inputs: tuple[str, str], session: dict) -> dict:
    """Spark's stream-stream join on the case into ``noop``, to its first micro-batch (``--one``)."""
    from pyspark.sql import functions as F

    from spark_purgatory.spark.formats import read_stream

    ops_dir, events_dir = inputs
    spark = _session(**session)
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
        done.setdefault("cpu", harness.cpu_seconds())

    cpu0, t0 = harness.cpu_seconds(), time.perf_counter()
    query = (
        joined.writeStream.foreachBatch(sink)
        .option("checkpointLocation", f"{root}/chk-join")
        .trigger(availableNow=True)
        .start()
    )
    started = time.perf_counter()
    query.awaitTermination()
    harness.stop(spark)
    return {
        "first_batch_s": done["t"] - t0,
        "cpu_s": done["cpu"] - cpu0,
        "start_returns_s": started - t0,
        "spark_phases_ms": dict(query.recentProgress[0].durationMs),
    }


def first_batch(argv: list[str] | None = None) -> int:
    """How long a new user waits for the first micro-batch: ``start()`` to its first batch done.

    The payments case of issue 22 (``workload.payments``: 360 card payments awaiting 2 of 3
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
    ``/proc`` by ``harness.cpu_seconds``): on a busy machine the wall time mostly measures the
    other processes, the CPU time much less so, and on 2 idle cores the wall time cannot fall
    below about half of it.

        python -m benchmarks first-batch              # 3 runs of each, alternating
        python -m benchmarks first-batch --repeat 1
        python -m benchmarks first-batch --cold       # also without the warm-up
        python -m benchmarks first-batch --conf spark.sql.codegen.wholeStage=false
        python -m benchmarks first-batch --jit full  # the JVM's default C1 + C2
    """
    parser = harness.parser("first-batch", first_batch.__doc__, repeat=3)
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
    parser.add_argument("--inputs", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    session = {"conf": dict(c.split("=", 1) for c in args.conf), "jit": args.jit}
    if args.one:
        with tempfile.TemporaryDirectory() as root:
            if args.one == "join":
                figures = run_join(root, tuple(args.inputs), session)
            else:
                figures = run_ours(root, tuple(args.inputs), session, warm=args.one == "ours")
        print(json.dumps(figures))
        return 0
    contenders = ["ours", "join", *(["ours-cold"] if args.cold else [])]
    rounds = harness.Rounds(contenders, args.repeat)
    options = [*(f"--conf={c}" for c in args.conf), "--jit", args.jit]
    with tempfile.TemporaryDirectory() as root:
        inputs = _payments(root)
        for number, which in rounds:
            r = harness.child("first-batch", ["--one", which, "--inputs", *inputs, *options], timeout=900)
            rounds.add(which, r)
            print(
                f"run {number + 1} {which:<9} first batch {r['first_batch_s']:6.2f} s, "
                f"cpu {r['cpu_s']:5.1f} s  "
                f"(start() returns {r['start_returns_s']:.2f} s; Spark phases ms {r['spark_phases_ms']})",
                flush=True,
            )
    print(f"over {args.repeat} rounds, min-max (median):")
    print(rounds.table({"first_batch_s": "first batch s", "cpu_s": "CPU s", "start_returns_s": "start() s"}))
    ratios = {k: rounds.ratios("ours", "join", k) for k in ("first_batch_s", "cpu_s")}
    print(harness.ratio_line("start() / the join, first micro-batch", ratios["first_batch_s"]))
    print(harness.ratio_line("start() / the join, CPU", ratios["cpu_s"]))
    ours = statistics.median(rounds.values("ours", "first_batch_s"))
    print(
        f"median first micro-batch, payments case (360 ops + confirmations, typed Parquet; "
        f"JVM {'C1 only' if args.jit == 'c1' else 'C1 + C2'}): start() {ours:.2f} s; "
        f"target <= {TARGET_S:.0f} s: {'met' if ours <= TARGET_S else 'NOT met'}"
    )
    harness.write_json(args.json, "first-batch", args, {"ours_vs_join": ratios, **rounds.json()})
    return 0


# -- plan ------------------------------------------------------------------------------------------


def _json_lines(root: str) -> tuple[str, str]:
    """400 operations as JSON lines, 4 files per stream, a few malformed lines."""
    from spark_purgatory.workload import generate, write_json_lines

    work = generate(400, seed=1, ops_per_second=100.0)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=4, malformed=4)
    return f"{root}/ops", f"{root}/events"


def run_once(inputs: tuple[str, str]) -> dict:
    """``start()`` once in this process, measured (``--one``)."""
    import py4j.java_gateway as gateway

    calls: collections.Counter = collections.Counter()
    counting = threading.Event()
    send = gateway.GatewayClient.send_command

    def counted(self, command, retry=True, binary=False):
        if counting.is_set():
            calls["main" if threading.current_thread() is threading.main_thread() else "other"] += 1
        return send(self, command, retry, binary)

    gateway.GatewayClient.send_command = counted
    with tempfile.TemporaryDirectory() as root:
        spark = _session({}, "c1")
        time.sleep(1)
        jvm0, py0, t0 = harness.jvm_cpu_seconds(), time.process_time(), time.perf_counter()
        counting.set()
        query = _start(inputs, root, spark)
        counting.clear()
        figures = {
            "start_s": time.perf_counter() - t0,
            "main_calls": calls["main"],
            "all_calls": calls["main"] + calls["other"],
            "python_cpu_s": time.process_time() - py0,
            "jvm_cpu_s": harness.jvm_cpu_seconds() - jvm0,
        }
        query.stop()
        harness.stop(spark)
    gateway.GatewayClient.send_command = send
    return figures


def plan(argv: list[str] | None = None) -> int:
    """What building the operator's plan costs: ``start()`` on a small input, Py4J calls and CPU.

    Every test and job run that starts a query pays for building its plan: PySpark sends each
    DataFrame step (and each ``Column`` function) to the JVM through Py4J, and the JVM parses and
    analyses it, on a JVM that is still cold (interpreted or C1 code) in a new process.  This
    runs ``start()`` once in a fresh process with a fresh local[2] session (C1 only, as the
    project's sessions; the session and one tiny job are up before the clock starts) over a
    small input (``json``: 400 operations as JSON lines, 4 files per stream; ``parquet``: the
    payments case, ``workload.payments``), and prints: the seconds until ``start()`` returns,
    the Py4J calls made meanwhile (the main thread's, and all threads': Py4J's finalizer
    releases each proxy with one more), the driver's Python CPU seconds, and the JVM's CPU
    seconds in that time (``/proc``).  With ``--base`` it alternates with another checkout
    (its package first on ``PYTHONPATH``): a change's before and after in the same rounds.

        python -m benchmarks plan                          # json, 3 rounds
        python -m benchmarks plan --format parquet --base ../older-checkout
    """
    parser = harness.parser("plan", plan.__doc__, repeat=3)
    parser.add_argument("--format", choices=["json", "parquet"], default="json")
    parser.add_argument("--base", help="another checkout, alternated with this one")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_once(tuple(args.inputs))))
        return 0
    checkouts = {"this": None, **({"base": args.base} if args.base else {})}
    rounds = harness.Rounds(list(checkouts), args.repeat)
    with tempfile.TemporaryDirectory() as root:
        inputs = _payments(root) if args.format == "parquet" else _json_lines(root)
        for number, name in rounds:  # the files written here: an older checkout need not write them
            r = harness.child("plan", ["--one", "--inputs", *inputs], checkout=checkouts[name], timeout=900)
            rounds.add(name, r)
            print(
                f"run {number + 1} {name:<5} start() {r['start_s']:5.2f} s  Py4J calls {r['main_calls']:5d} "
                f"(all threads {r['all_calls']:5d})  Python CPU {r['python_cpu_s']:4.2f} s  "
                f"JVM CPU {r['jvm_cpu_s']:4.2f} s",
                flush=True,
            )
    columns = {
        "start_s": "start() s",
        "main_calls": "Py4J calls",
        "python_cpu_s": "Python CPU s",
        "jvm_cpu_s": "JVM CPU s",
    }
    print(f"{args.format}, over {args.repeat} rounds, min-max (median):")
    print(rounds.table(columns))
    ratios = {k: rounds.ratios("this", "base", k) for k in columns} if args.base else {}
    for key, label in columns.items() if args.base else ():
        print(harness.ratio_line(f"this / base, {label}", ratios[key]))
    harness.write_json(args.json, "plan", args, {"this_vs_base": ratios, **rounds.json()})
    return 0
