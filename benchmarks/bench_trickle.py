"""A micro-batch's anatomy on a trickle: the job beside Spark's join and the stateful floor.

A streaming user with a small, steady input sees each micro-batch's fixed cost as latency.
The trickle (issue 35): 16 Parquet files per stream of 300 operations and ~210
confirmations (``contenders.write_workload``), one file per stream per micro-batch
(``source.max.files.per.trigger=1``), ``watermark.delay=5 seconds``, local[2], every JVM C1
only as the project's sessions are.  The contenders (``--contenders``):

* **job**: the job as users run it (``job.run``, the defaults, delta-rs);
* **join**: Spark's stream-stream left-outer join (``contenders.join_stream``) into a
  ``foreachBatch`` writing Delta as a user would (Spark's Delta writer with ``txnAppId`` /
  ``txnVersion``, exactly once; Parquet appends when Delta's JARs are absent, said so);
* **join-parquet**: the same join into Spark's Parquet file sink (the issue's first table);
* **job-base**: the job as the checkout at ``--base`` has it (its package first on
  ``PYTHONPATH``), alternated with this one's: a change's before and after in the same rounds;
* **floor**: ``applyInPandasWithState`` doing nothing (2 inputs, ``config.groups`` groups,
  ``EventTimeTimeout``; ``contenders.run_stateful``): what any stateful Python operator pays;
* **job-tcp**, **floor-tcp**: the job and the floor with PySpark's Python workers on TCP
  sockets, Spark's default (``spark.python.unix.domain.socket.enabled=false``; every other
  contender runs in the project's session, on Unix domain sockets: ``runtime.session``);
* **job-fc**, **floor-fc**: the job and the floor with Spark's default checkpoint file
  manager (Hadoop's ``FileContext``, a ``readlink`` process per file renamed on the local file
  system), where the project's session names ``io.sparkpurgatory.checkpoint.LocalCheckpointFiles``
  (``runtime.settings.checkpoint_files``).

Each run is a fresh Python process with a fresh session and Spark's event log on
(``spark.eventLog.enabled``, a temporary directory); the contenders alternate (round 1: each
once, round 2: each again in the reverse order ...).  From the event log (``anatomy``), per data micro-batch:
its wall time (from its trigger's start to the next trigger's start: everything the stream
thread does for it, progress reporting included), its Spark jobs and stages (stages that
ran), the time inside Spark jobs (the union of the jobs' spans) and the time on the driver
outside any job (the rest).  Printed: medians over the data micro-batches after the first
``--skip`` (JIT and Python workers warming), then each figure's median over the rounds with
its range.  And where the driver's share goes (``breakdown``), from the progress's
``durationMs`` (planning, offsets, the commit log) and, for the job, the sink's own timings
(``PurgatorySink.timings``, as ``driver_step`` logs them: the batch's rows collected, record,
drain and commit, report); ``other`` is what remains of the wall time (progress reporting,
the trigger's bookkeeping).
And Catalyst's own time per micro-batch (``RULE_GROUPS``: the analyzer's, the optimizer's and
the session extensions' rules, from Spark's ``RuleExecutor`` metering, read after each
micro-batch by a listener): how much of ``planning`` (and of the analysis inside
``foreachBatch``) is rules re-run over the plan.

    python -m benchmarks trickle                       # 3 rounds of job, join, floor
    python -m benchmarks trickle --repeat 5 --contenders job,join,join-parquet,floor
    python -m benchmarks trickle --contenders job-base,job,floor --base ../older-checkout
    python -m benchmarks trickle --smoke               # seconds-sized, checks the harness
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import logging
import os
import re
import shutil
import statistics
import tempfile

from benchmarks import harness

CONTENDERS = (
    *("job", "job-base", "job-tcp", "job-fc"),
    *("join", "join-parquet"),
    *("floor", "floor-tcp", "floor-fc"),
)
LABELS = {
    "job": "the job (delta-rs, defaults)",
    "job-base": "the job, --base checkout",
    "job-tcp": "the job, workers on TCP sockets",
    "job-fc": "the job, Spark's checkpoint files",
    "join": "left-outer join, foreachBatch to Delta",
    "join-parquet": "left-outer join, Parquet file sink",
    "floor": "applyInPandasWithState doing nothing",
    "floor-tcp": "the floor, workers on TCP sockets",
    "floor-fc": "the floor, Spark's checkpoint files",
}
_PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
#: the figures per micro-batch, as printed side by side
FIGURES = ("wall_ms", "jobs", "stages", "in_jobs_ms", "outside_ms")
#: the driver's share, by step (``breakdown``)
STEPS = ("planning", "offsets", "collect", "python", "record", "drain", "report", "commit_log", "other")
#: Catalyst's rules by group, ms per micro-batch (``rule_groups``)
RULE_GROUPS = ("analyzer", "optimizer", "extensions")
#: those, and the count of Java sources Spark compiled per micro-batch (Janino, on the
#: driver: whole-stage and expression code not in its cache; ``CodegenMetrics``)
CLOCKS = (*RULE_GROUPS, "compilations")


# -- the event log --------------------------------------------------------------------------------


def _ms(timestamp: str) -> float:
    """A progress's ``timestamp`` (ISO, UTC) as epoch milliseconds."""
    return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000


def anatomy(lines: list[str], sink: dict[int, dict] | None = None) -> list[dict]:
    """Per micro-batch with input rows, from an event log's JSON lines: ``batch``, ``rows``,
    ``wall_ms`` (trigger start to the next trigger's start; the last: ``triggerExecution``),
    ``jobs`` and ``stages`` (that ran) of the jobs begun in that span, ``in_jobs_ms`` (the
    union of the jobs' spans within it), ``outside_ms`` (the rest), and the driver's steps
    (``breakdown``; ``sink``: ``PurgatorySink.timings`` by batch id)."""
    progress, jobs, stage_ran, job_stages = [], {}, set(), {}
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event")
        if kind == _PROGRESS:
            progress.append(event["progress"])
        elif kind == "SparkListenerJobStart":
            jobs[event["Job ID"]] = [event["Submission Time"], None]
            job_stages[event["Job ID"]] = event.get("Stage IDs", [])
        elif kind == "SparkListenerJobEnd":
            jobs.setdefault(event["Job ID"], [event["Completion Time"], None])[1] = event["Completion Time"]
        elif kind == "SparkListenerStageSubmitted":
            stage_ran.add(event["Stage Info"]["Stage ID"])
    progress.sort(key=lambda p: _ms(p["timestamp"]))
    spans = sorted((start, end if end is not None else start, job) for job, (start, end) in jobs.items())
    out = []
    for i, p in enumerate(progress):
        rows = p.get("numInputRows") or sum(s.get("numInputRows", 0) for s in p.get("sources", []))
        if not rows:  # the event log's progress has the rows per source only
            continue
        begin = _ms(p["timestamp"])
        took = p.get("durationMs", {})
        end = _ms(progress[i + 1]["timestamp"]) if i + 1 < len(progress) else begin + took["triggerExecution"]
        mine = [(max(s, begin), min(e, end), j) for s, e, j in spans if begin <= s < end]
        inside, reached = 0.0, begin
        for s, e, _j in mine:  # the union of the spans: overlapping jobs count once
            if e > reached:
                inside += e - max(s, reached)
                reached = e
        figures = {
            "batch": p["batchId"],
            "rows": rows,
            "wall_ms": end - begin,
            "jobs": len(mine),
            "stages": sum(1 for _s, _e, j in mine for stage in job_stages.get(j, []) if stage in stage_ran),
            "in_jobs_ms": inside,
            "outside_ms": end - begin - inside,
        }
        figures.update(breakdown(figures, took, (sink or {}).get(p["batchId"])))
        out.append(figures)
    return out


def breakdown(figures: dict, took: dict, sink: dict | None) -> dict:
    """Where a micro-batch's time outside Spark jobs goes, in milliseconds.

    ``planning``: ``queryPlanning`` and ``getBatch``; ``offsets``: ``latestOffset`` and the
    offset log (``walCommit``); ``commit_log``: ``commitOffsets``; for the job, the sink's
    steps (``PurgatorySink.timings``): ``collect`` (the batch's one action less its time in
    jobs: the ``foreachBatch`` call, the rows to the driver), ``record``, ``drain`` (and
    commit), ``report``, and ``python``: the sink's wait for its rows less the time in
    jobs (``toArrow``'s set-up, the rows into Python); ``collect`` is the rest of
    ``addBatch`` outside jobs (Spark's side of ``foreachBatch``: the plan's driver-side
    execution, the call into Python); elsewhere ``collect`` is all of ``addBatch`` outside jobs;
    ``other``: the rest (progress reporting, the trigger's bookkeeping)."""
    steps = {
        "planning": took.get("queryPlanning", 0) + took.get("getBatch", 0),
        "offsets": took.get("latestOffset", 0) + took.get("walCommit", 0),
        "commit_log": took.get("commitOffsets", 0),
    }
    outside_add = max(took.get("addBatch", 0) - figures["in_jobs_ms"], 0.0)
    if sink:
        for step in ("record", "drain", "report"):
            steps[step] = sink.get(step, 0.0)
        # the sink's own wait for its rows, less the job: the Python side of the collect
        steps["python"] = max(sink.get("collect", 0.0) - figures["in_jobs_ms"], 0.0)
        sink_steps = steps["python"] + steps["record"] + steps["drain"] + steps["report"]
        steps["collect"] = max(outside_add - sink_steps, 0.0)
    else:
        steps.update(collect=outside_add, python=0.0, record=0.0, drain=0.0, report=0.0)
    steps["other"] = figures["outside_ms"] - sum(steps.values())
    return {f"{k}_ms": float(v) for k, v in steps.items()}


def summary(batches: list[dict], skip: int) -> dict[str, float]:
    """Each figure's median over the data micro-batches after the first ``skip``."""
    kept = batches[skip:] or batches
    keys = [*FIGURES, *(f"{s}_ms" for s in STEPS), *(f"rules_{g}_ms" for g in CLOCKS)]
    figures = {k: [b[k] for b in kept if k in b] for k in keys}
    return {k: float(statistics.median(v)) for k, v in figures.items() if v} | {"batches": float(len(kept))}


def rule_groups(dump: str) -> dict[str, float]:
    """Catalyst's rule time so far, ms by group, from ``RuleExecutor.dumpTimeSpent()``: the
    analyzer's rules (``.analysis.`` packages), the session extensions' (any package outside
    ``org.apache.spark.sql.catalyst`` / ``.execution``, Delta's for one) and the optimizer's
    (the rest: Catalyst's optimizer, Spark's data-source and planning rules)."""
    groups = dict.fromkeys(RULE_GROUPS, 0.0)
    for line in dump.splitlines():
        found = re.match(r"\s*(\S+)\s+\d+ / (\d+)\s+\d+ / \d+\s*$", line)
        if not found:
            continue
        rule, nanos = found.group(1), int(found.group(2))
        if ".analysis." in rule:
            group = "analyzer"
        elif rule.startswith(("org.apache.spark.sql.catalyst.", "org.apache.spark.sql.execution.")):
            group = "optimizer"
        else:
            group = "extensions"
        groups[group] += nanos / 1e6
    return groups


def per_batch_rules(snapshots: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """Each micro-batch's rule time: its snapshot less the one before (``rule_groups`` read
    when each batch's progress arrived; a batch whose predecessor has none gets none)."""
    out = {}
    for batch, after in snapshots.items():
        before = snapshots.get(batch - 1)
        if before is not None:
            out[batch] = {f"rules_{g}_ms": after[g] - before[g] for g in after}
    return out


def _rule_clock(spark) -> dict[int, dict[str, float]]:
    """Register a listener that reads Catalyst's rule time after each micro-batch; returns
    the snapshots it fills (batch id -> ``rule_groups``).  JVM-wide: every query's rules."""
    from spark_purgatory.spark.metrics import JsonListener

    jvm = spark.sparkContext._jvm
    meter = jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
    meter.resetMetrics()
    compiled = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    snapshots: dict[int, dict[str, float]] = {}

    class RuleClock(JsonListener):
        def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's names
            pass

        def onQueryProgress(self, event) -> None:  # noqa: N802
            snapshot = rule_groups(meter.dumpTimeSpent())
            snapshot["compilations"] = float(compiled.getCount())
            snapshots[event.progress.batchId] = snapshot

        def onQueryIdle(self, event) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802
            pass

    spark.streams.addListener(RuleClock())
    return snapshots


# -- one run, in its own process ------------------------------------------------------------------


def _one(name: str, data: str, events_dir: str, args: argparse.Namespace) -> dict:
    """Run contender ``name`` on the trickle under ``data`` with the event log into
    ``events_dir``; the anatomy of its micro-batches."""
    from spark_purgatory.config import PurgatoryConfig
    from spark_purgatory.runtime.session import local_session

    conf = harness.event_log_conf(events_dir)  # one file, in a session of its own
    if name.endswith("-tcp"):  # Spark's default sockets to the Python workers
        conf["spark.python.unix.domain.socket.enabled"] = "false"
        name = name.removesuffix("-tcp")
    if name.endswith("-fc"):  # Spark's default checkpoint file manager
        from spark_purgatory.runtime.settings import CHECKPOINT_FILES, FILE_CONTEXT_FILES

        conf[CHECKPOINT_FILES] = FILE_CONTEXT_FILES
        name = name.removesuffix("-fc")
    spark = local_session(
        "bench-batch",
        master="local[2]",
        shuffle_partitions=PurgatoryConfig(shards=args.shards).groups,
        conf=conf,
    )
    spark.sparkContext.setLogLevel("ERROR")
    config = PurgatoryConfig(
        shards=args.shards, watermark_delay=args.watermark_delay, source_max_files_per_trigger=1
    )
    sink: dict[int, dict] = {}
    snapshots = _rule_clock(spark)
    note = ""
    if name == "job":
        from spark_purgatory.job import JobSettings, run

        class Timings(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if hasattr(record, "sink_ms"):
                    sink[record.sink_ms["batch_id"]] = record.sink_ms

        sink_log, timings = logging.getLogger("spark_purgatory.driver_step"), Timings()
        sink_log.addHandler(timings)
        sink_log.setLevel(logging.DEBUG)
        settings = JobSettings(
            ops_path=f"{data}/ops",
            events_path=f"{data}/events",
            output_path=f"{data}/out",
            checkpoint_path=f"{data}/ck-job",
            config=config,
            source_format="parquet",
            writer="delta-rs",
            master="local[2]",
        )
        try:
            run(settings)
        finally:
            sink_log.removeHandler(timings)
    elif name in ("join", "join-parquet"):
        files = _files(data)
        from benchmarks.contenders import join_stream

        joined = join_stream(spark, files, config, 1)
        writer = joined.writeStream.option("checkpointLocation", f"{data}/ck-{name}").trigger(
            availableNow=True
        )
        if name == "join-parquet":
            query = writer.format("parquet").option("path", f"{data}/join-out").start()
        else:
            from spark_purgatory.runtime.session import delta_classes_available

            delta = delta_classes_available(spark)
            note = "" if delta else "Delta's JARs absent (make jars): Parquet appends"
            query = writer.foreachBatch(_user_sink(f"{data}/join-out", delta)).start()
        query.awaitTermination()
    else:
        files = _files(data)
        from benchmarks.contenders import run_stateful

        run_stateful(spark, files, config, 1)
    spark.stop()  # the event log is complete once the application ends
    lines = []
    for log_file in sorted(glob.glob(f"{events_dir}/**/*", recursive=True)):  # a file, or rolled ones
        if os.path.isfile(log_file) and not os.path.basename(log_file).startswith("appstatus"):
            with open(log_file) as f:
                lines += f.readlines()
    batches = anatomy(lines, sink)
    rules = per_batch_rules(snapshots)
    for figures in batches:
        figures.update(rules.get(figures["batch"], {}))
    return {"batches": batches, "note": note}


def _files(data: str):
    """The trickle as ``contenders`` takes it (imported here: the job's run, perhaps of an
    older checkout (``job-base``), needs nothing of it)."""
    from pyspark import cloudpickle

    from benchmarks import contenders

    cloudpickle.register_pickle_by_value(contenders)  # its no-work step runs in the workers
    return contenders.Files(data, 0, 0, "parquet")


def _user_sink(path: str, delta: bool):
    """The ``foreachBatch`` a user writes: each micro-batch appended to a Delta table, once
    (Delta's idempotent writes: ``txnAppId`` and ``txnVersion``)."""

    def write(batch, batch_id: int) -> None:
        if delta:
            (
                batch.write.format("delta")
                .option("txnAppId", "bench-batch-join")
                .option("txnVersion", batch_id)
                .mode("append")
                .save(path)
            )
        else:
            batch.write.mode("append").parquet(path)

    return write


# -- the rounds -----------------------------------------------------------------------------------


def _clear(root: str) -> None:
    for name in os.listdir(root):
        if name not in ("ops", "events"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _run(name: str, data: str, scratch: str, args: argparse.Namespace) -> dict:
    """Contender ``name`` in a fresh process (``job-base``: with the ``--base`` checkout's
    package); the anatomy of its micro-batches."""
    _clear(data)
    events_dir = tempfile.mkdtemp(prefix="eventlog-", dir=scratch)
    argv = ["--one", name.removesuffix("-base"), "--data", data, "--events-dir", events_dir]  # -tcp, -fc stay
    argv += ["--shards", str(args.shards), "--watermark-delay", args.watermark_delay]
    try:
        result = harness.child("trickle", argv, checkout=args.base if name == "job-base" else None)
    except RuntimeError as failed:
        raise SystemExit(f"{name} failed: {failed}") from None
    if os.environ.get("BENCH_EVENTS_KEEP"):  # the event log kept for a closer look at stages and tasks
        shutil.copytree(events_dir, os.path.join(os.environ["BENCH_EVENTS_KEEP"], name), dirs_exist_ok=True)
    shutil.rmtree(events_dir, ignore_errors=True)
    return result


def _range(values: list[float]) -> str:
    values = sorted(values)
    return f"{statistics.median(values):6.0f} ({values[0]:.0f}-{values[-1]:.0f})"


def report(runs: dict[str, list[dict]], skip: int) -> dict[str, dict[str, list[float]]]:
    """Print each contender's medians over the rounds with their ranges; return them."""
    table: dict[str, dict[str, list[float]]] = {}
    for name, results in runs.items():
        per_round = [summary(r["batches"], skip) for r in results if r["batches"]]
        table[name] = {k: [s[k] for s in per_round if k in s] for k in per_round[0]} if per_round else {}
    print(f"\nper data micro-batch, medians over micro-batches {skip + 1}.., then over the rounds (range):")
    head = ("wall ms", "jobs", "stages", "in jobs ms", "outside jobs ms")
    print(f"  {'':<40}" + "".join(f"{h:>19}" for h in head))
    for name, figures in table.items():
        if figures:
            print(f"  {LABELS[name]:<40}" + "".join(f"{_range(figures[k]):>19}" for k in FIGURES))
    print("\nthe driver's share (outside jobs) by step, ms, medians (range):")
    print(f"  {'':<40}" + "".join(f"{s:>17}" for s in STEPS))
    for name, figures in table.items():
        if figures:
            print(f"  {LABELS[name]:<40}" + "".join(f"{_range(figures[s + '_ms']):>17}" for s in STEPS))
    print(
        "\nCatalyst's rules per micro-batch (RuleExecutor's metering, JVM-wide), ms, and the Java"
        " sources compiled (a count), medians (range):"
    )
    print(f"  {'':<40}" + "".join(f"{g:>17}" for g in CLOCKS))
    for name, figures in table.items():
        if figures and f"rules_{RULE_GROUPS[0]}_ms" in figures:
            print(
                f"  {LABELS[name]:<40}"
                + "".join(
                    f"{_range(figures[f'rules_{g}_ms']):>17}" for g in CLOCKS if f"rules_{g}_ms" in figures
                )
            )
    ratios = {}
    if table.get("job") and table.get("join"):
        ratios["job_vs_join"] = [
            j / o for j, o in zip(table["job"]["wall_ms"], table["join"]["wall_ms"], strict=False)
        ]
    if table.get("job") and table.get("floor"):
        ratios["job_minus_floor_outside_ms"] = [
            j - o for j, o in zip(table["job"]["outside_ms"], table["floor"]["outside_ms"], strict=False)
        ]
    if table.get("job") and table.get("job-base"):
        ratios["job_minus_base_outside_ms"] = [
            j - o for j, o in zip(table["job"]["outside_ms"], table["job-base"]["outside_ms"], strict=False)
        ]
    if ratios:
        print()
    if "job_vs_join" in ratios:
        v = sorted(ratios["job_vs_join"])
        print(
            f"  job / join, wall per micro-batch (per round): {statistics.median(v):.2f}x "
            f"({v[0]:.2f}-{v[-1]:.2f})"
        )
    if "job_minus_floor_outside_ms" in ratios:
        v = sorted(ratios["job_minus_floor_outside_ms"])
        print(
            f"  job - floor, outside jobs (per round): {statistics.median(v):+.0f} ms "
            f"({v[0]:+.0f} to {v[-1]:+.0f})"
        )
    if "job_minus_base_outside_ms" in ratios:
        v = sorted(ratios["job_minus_base_outside_ms"])
        print(
            f"  job - job-base, outside jobs (per round): {statistics.median(v):+.0f} ms "
            f"({v[0]:+.0f} to {v[-1]:+.0f})"
        )
    return {"contenders": table, "ratios": ratios}


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser("trickle", __doc__, repeat=3)
    parser.add_argument(
        "--contenders", default="job,join,floor", help=f"comma list of {', '.join(CONTENDERS)}"
    )
    parser.add_argument("--ops", type=int, default=4_800, help="operations in all (~70%% confirmed)")
    parser.add_argument("--files", type=int, default=16, help="files per stream (one per micro-batch)")
    parser.add_argument("--skip", type=int, default=3, help="the first data micro-batches left out")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--watermark-delay", default="5 seconds")
    parser.add_argument("--base", help="a checkout of the project for the job-base contender")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round: checks the harness")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a run in its own process (_one)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--events-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.ops, args.files, args.skip, args.repeat = 400, 4, 1, 1
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders: {sorted(unknown)}")
    if "job-base" in args.contenders.split(",") and not args.base:
        parser.error("the job-base contender needs --base <checkout>")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args = _arguments(argv)
    if args.one:
        print(json.dumps(_one(args.one, args.data, args.events_dir, args)))
        return 0
    from benchmarks.contenders import write_workload

    names = harness.names(args.contenders)
    root = tempfile.mkdtemp(prefix="bench-trickle-")
    try:
        files = write_workload(f"{root}/trickle", args.ops, args.files, "parquet")
        print(
            f"trickle: {files.ops:,} operations + {files.events:,} events in {args.files} Parquet files "
            f"per stream, one per micro-batch; watermark.delay {args.watermark_delay}; local[2], "
            f"{args.shards} shards, C1-only JVMs, a fresh process per run; "
            f"load average {os.getloadavg()[0]:.1f} at start",
            flush=True,
        )
        runs: dict[str, list[dict]] = {name: [] for name in names}
        for round_no, name in harness.alternated(names, args.repeat):
            result = _run(name, files.root, root, args)
            runs[name].append(result)
            s = summary(result["batches"], args.skip) if result["batches"] else {}
            print(
                f"  round {round_no + 1}: {LABELS[name]:<40} {len(result['batches']):>3} data batches, "
                f"wall {s.get('wall_ms', float('nan')):5.0f} ms, outside jobs "
                f"{s.get('outside_ms', float('nan')):4.0f} ms   load {os.getloadavg()[0]:.1f}"
                + (f"   ({result['note']})" if result["note"] else ""),
                flush=True,
            )
        figures = report(runs, args.skip)
        harness.write_json(args.json, "trickle", args, figures | {"runs": runs})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0
