"""The job side by side with Spark's alternatives on the same files, and its scaling with pending ops.

Three workloads (``--workloads``), each written once and read by every contender
(``--contenders``, see ``contenders.py``): **typed**, orders and confirmations as Parquet files
read as typed columns; **skewed**, the same with every events file reaching further in event
time than the operations file of the same trigger by more than ``watermark.delay`` (each input
has its own watermark: the job must lose no operation the join completes); **json**, the same
workload as JSON lines.  Per workload it prints each contender's wall time, CPU time (the
driver, the JVM and its Python workers: less disturbed by other work on a shared machine) and
rows/s, and the ratios with their targets (the verdict on wall time, the CPU ratio beside it):

* job time / floor time (<= 1.3; for JSON the floor includes one typed ``from_json``);
* job throughput / join throughput (>= 1.5);
* job throughput / ``transformWithStateInPandas`` throughput (>= 6);
* job time / the stateful floor's (no target: the ``stateful`` contender is Spark's stateful
  Python operator doing nothing on the floor's rows, the part of the job no operator built on
  ``applyInPandasWithState`` can cut);
* with ``join-delta`` / ``job-native`` (Delta's JARs from ``make jars``), the Delta writers
  side by side, no targets: throughput and median micro-batch time of the join into Delta
  through Spark's writer, the job on Spark's Delta writer and the job on delta-rs, and their
  throughput ratios;

and checks that the job's completed operations equal the join's matched ones (skewed: none
fewer), and that ``transformWithStateInPandas`` completes the join's operations on the typed
workload.  The exit status is 1 when a check fails (a missed speed target only prints).
``--repeat N`` runs every contender N times, alternated (round 1: each contender, round 2:
each again in the reverse order ...), on the same files, and prints each wall time's and
ratio's range: on a noisy machine one run of each can be far from the next.

The scaling series preloads 100k / 1M / 5M pending operations (timeouts of a day, so none
expire) in one micro-batch, then runs micro-batches of the same size (new operations plus
events completing preloaded ones) and prints the per-batch time against the pending count
(<= 2x from 100k to 5M), and the state's size on disk.

    python -m benchmarks operator --ops 200000 --scaling ''   # the comparison
    python -m benchmarks operator --ops 1000000 --contenders floor,join,job
    python -m benchmarks operator --workloads typed --contenders join,job --repeat 3
    python -m benchmarks operator --workloads typed --scaling '' \
        --contenders join-delta,job-native,job --repeat 3          # the Delta writers
    python -m benchmarks operator --workloads '' --scaling 100000,5000000
    python -m benchmarks operator --smoke          # seconds-sized, for CI
    python -m benchmarks operator --jit full       # the JVM's default C1 + C2
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from benchmarks import bench_trickle, contenders, harness
from benchmarks.contenders import CONTENDERS, Run, timed, write_workload
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.runtime.session import local_session
from spark_purgatory.spark.metrics import JsonListener
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.sources import read_stream
from spark_purgatory.workload import START_MS

#: the targets of issue 12, beside each printed ratio
TARGETS = {
    "floor": 1.3,  # job time at most 1.3x the stateless floor's
    "join": 1.5,  # job throughput at least 1.5x the join's
    "tws": 6.0,  # job throughput at least 6x transformWithStateInPandas's
    "scaling": 2.0,  # per-batch time at 5M pending at most 2x that at 100k
}
WORKLOADS = ("typed", "skewed", "json")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


# -- the comparison ----------------------------------------------------------------------------------


def run_workload(
    spark: SparkSession, root: str, workload: str, names: list[str], args, config: PurgatoryConfig
) -> tuple[dict[str, Run], dict[str, float], bool]:
    """Every contender on one workload's files; returns the runs, the ratios and whether the
    completed operations agree."""
    skew_ms = config.watermark_delay_ms + 2_000 if workload == "skewed" else 0
    fmt = "json" if workload == "json" else "parquet"
    files = write_workload(f"{root}/{workload}", args.ops, args.files, fmt, skew_ms)
    print(
        f"\n{workload}: {files.ops:,} operations + {files.events:,} events, {args.files} {fmt} files per "
        f"stream, {args.files_per_trigger} per trigger"
        + (f", events ahead by {skew_ms / 1000:g} s" if skew_ms else ""),
        flush=True,
    )
    rounds: list[dict[str, Run]] = []
    per_round: list[tuple[dict[str, float], bool]] = []  # each round's ratios and agreement
    runs: dict[str, Run] = {}
    driver: dict[str, dict[str, float]] = {}  # this round's driver phases by contender
    driver_rounds: list[dict[str, dict[str, float]]] = []
    for round_no, name in harness.alternated(names, args.repeat):
        if not runs and args.repeat > 1:
            print(f"  round {round_no + 1} of {args.repeat}", flush=True)
        _clear_outputs(files.root)  # each run starts from no checkpoint and no output
        before, threads = harness.cpu_by_kind(), harness.worker_threads_cpu()
        with _driver_phases(spark) as phases:
            runs[name] = CONTENDERS[name](spark, files, config, args.files_per_trigger)
        print(f"  {runs[name].line()}   load {os.getloadavg()[0]:.1f}", flush=True)
        cpu = _cpu_line(before, harness.cpu_by_kind())
        threads = max(harness.worker_threads_cpu() - threads, 0.0)  # a worker that ended takes its own
        print(f"    CPU by process: {cpu} (of which {threads:.1f} s beside their main threads)", flush=True)
        driver[name] = phases.medians()
        print(f"    driver ms a micro-batch (median): {_phase_line(driver[name])}", flush=True)
        if len(runs) == len(names):
            runs = {n: runs[n] for n in names}  # the ratios' order, whatever the round's
            rounds.append(runs)
            per_round.append(_ratios(workload, runs))
            driver_rounds.append(driver)
            runs, driver = {}, {}
    if len(rounds) > 1:
        _print_ranges(rounds, [figures for figures, _ok in per_round])
    _print_phases(driver_rounds)
    figures = {k: statistics.median(f[k] for f, _ok in per_round) for k in per_round[0][0]}
    return rounds[-1], figures, all(ok for _f, ok in per_round)


def _cpu_line(before: dict[str, float], after: dict[str, float]) -> str:
    """Each kind of process's CPU seconds between two ``harness.cpu_by_kind`` readings: the
    driver's Python (the sink's steps, delta-rs), the JVM (the driver and the executors'
    threads: local mode), the Python workers (the group function, PySpark's conversions)."""
    used = {kind: after[kind] - before.get(kind, 0.0) for kind in after}
    return ", ".join(
        f"{kind} {seconds:.1f} s" for kind, seconds in used.items() if kind != "other" or seconds
    )


def _clear_outputs(root: str) -> None:
    """Remove what earlier runs wrote beside the workload's two input directories."""
    for name in os.listdir(root):
        if name not in ("ops", "events"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _print_ranges(rounds: list[dict[str, Run]], figures: list[dict[str, float]]) -> None:
    """Each contender's wall time over the rounds, and each ratio's range: the runs of a
    round are adjacent in time, so its ratios pair runs the machine's noise touched alike."""
    print(f"  over {len(rounds)} rounds (min-max, median):")
    for name in rounds[0]:
        seconds = sorted(runs[name].seconds for runs in rounds)
        low, high, mid = seconds[0], seconds[-1], statistics.median(seconds)
        print(f"    {rounds[0][name].name:<36}{low:6.1f}-{high:.1f} s ({mid:.1f})")
    labels = [(key, label) for key, label, _o, _t in _RATIOS] + [(k, lb) for k, lb, _m, _o in _DELTA_RATIOS]
    for key, label in labels:
        values = [f[key] for f in figures if key in f]
        if values:
            print(f"    {label:<36}{harness.span(values, 'x'):>20}")


#: the ratios printed per workload: name, label, the contender the job is compared with, target
_RATIOS = (
    ("job_vs_floor", "job time / floor time", "floor", f"<= {TARGETS['floor']}"),
    ("job_vs_join", "job throughput / join's", "join", f">= {TARGETS['join']}"),
    ("job_vs_tws", "job throughput / TWS's", "tws", f">= {TARGETS['tws']}"),
)


def _ratios(workload: str, runs: dict[str, Run]) -> tuple[dict[str, float], bool]:
    """Print the ratios against their targets and the agreement checks."""
    figures: dict[str, float] = {}
    job, join = runs.get("job"), runs.get("join")
    for name, label, other, target in _RATIOS:
        if job and other in runs:  # a time ratio (<=) or a throughput ratio (>=) on the same rows
            at_most = target.startswith("<=")
            value, cpu = (
                (job.seconds / runs[other].seconds, job.cpu / runs[other].cpu)
                if at_most
                else (runs[other].seconds / job.seconds, runs[other].cpu / job.cpu)
            )
            bound = float(target.split()[1])
            figures[name], figures[f"{name}_cpu"] = value, cpu
            _line(label, value, cpu, target, value <= bound if at_most else value >= bound)
    if job and "stateful" in runs:  # no target: how much of the job Spark's stateful operator is
        figures["job_vs_stateful"] = job.seconds / runs["stateful"].seconds
        cpu = job.cpu / runs["stateful"].cpu
        print(f"    (job time / stateful floor's: {figures['job_vs_stateful']:.2f}x, CPU {cpu:.2f}x)")
    for name in ("stateful", "routed", "noop"):
        if name in runs and "floor" in runs:
            figures[f"{name}_vs_floor"] = runs[name].seconds / runs["floor"].seconds
            cpu = runs[name].cpu / runs["floor"].cpu
            print(f"    ({runs[name].name} / floor: {figures[f'{name}_vs_floor']:.2f}x, CPU {cpu:.2f}x)")
    _delta_writers(runs, figures)
    agree = True
    join = join or runs.get("join-delta")  # the same join, into Delta
    for name in ("job", "job-native", "job-shard-dedup", "tws"):
        if name not in runs or not join:
            continue
        missing = join.completed - runs[name].completed
        extra = runs[name].completed - join.completed
        must = name != "tws" or workload == "typed"  # TWS: asserted on the join-comparable workload
        ok = not missing and not extra
        agree &= ok or not must
        print(
            f"    {name} completed {len(runs[name].completed):,}, join {len(join.completed):,}: "
            f"{len(missing):,} fewer, {len(extra):,} more: "
            + ("agree" if ok else "DISAGREE" if must else "differ (not asserted)")
        )
        figures[f"{name}_fewer"] = float(len(missing))
    figures["agree"] = float(agree)
    return figures, agree


#: the Delta writers side by side: (figure, label, numerator's contender, denominator's)
_DELTA_RATIOS = (
    ("job_vs_join_delta", "job (delta-rs) / join -> Delta", "job", "join-delta"),
    ("native_vs_join_delta", "job (Spark's Delta) / join -> Delta", "job-native", "join-delta"),
    ("job_vs_native", "job: delta-rs / Spark's Delta writer", "job", "job-native"),
)


def _delta_writers(runs: dict[str, Run], figures: dict[str, float]) -> None:
    """Throughput and per-micro-batch time of the contenders writing Delta, and their ratios
    (no targets): what a user gains over the join they would write, on each writer."""
    writers = [name for name in ("join-delta", "job-native", "job") if name in runs]
    if not {"join-delta", "job-native"} & set(writers) or len(writers) < 2:
        return
    print("    Delta writers side by side (throughput, median micro-batch):")
    for name in writers:
        run = runs[name]
        print(f"      {run.name:<34}{run.rows_per_s:>10,.0f} rows/s {run.batch_ms:>8,.0f} ms/batch")
    for key, label, mine, other in _DELTA_RATIOS:
        if mine in runs and other in runs:
            figures[key] = runs[other].seconds / runs[mine].seconds  # throughput ratio, same rows
            cpu = runs[other].cpu / runs[mine].cpu
            print(f"      {label:<38}{figures[key]:6.2f}x throughput (CPU {cpu:.2f}x)")


def _line(label: str, value: float, cpu: float, target: str, ok: bool) -> None:
    print(f"    {label:<26}{value:7.2f}x (CPU {cpu:.2f}x)   target {target}x: {_verdict(ok)}")


# -- the driver's share of a micro-batch -------------------------------------------------------------

#: Spark's phases of a micro-batch (a progress's ``durationMs``), as printed; ``outside``: the
#: trigger less ``addBatch`` (planning, offsets, the logs: the driver's alone)
PHASES = (
    "queryPlanning",
    "getBatch",
    "latestOffset",
    "walCommit",
    "commitOffsets",
    "addBatch",
    "triggerExecution",
)
#: Catalyst's rule time (ms) and the Java sources compiled, a micro-batch (``bench_trickle``'s clocks)
CLOCKS = ("rules", "compiled")
#: the job's own steps inside ``addBatch`` (``DriverStep.timings``, logged per micro-batch)
SINK_STEPS = ("collect", "record", "drain", "report")
_SHORT = {"queryPlanning": "planning", "triggerExecution": "trigger", "commitOffsets": "commit"}


class _Phases(JsonListener):
    """Each data micro-batch's ``durationMs`` of the queries started while registered, and the
    job's sink steps (``driver_step``'s DEBUG record of each micro-batch, ``sink_ms``)."""

    def __init__(self, spark: SparkSession) -> None:
        super().__init__()
        self.batches: list[dict[str, float]] = []
        self.sink: list[dict[str, float]] = []
        jvm = spark.sparkContext._jvm
        self._rules = jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
        self._compiled = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
        self._clock = self._clocks()

    @classmethod
    def none(cls) -> _Phases:
        """Phases that saw no micro-batch (``medians`` is empty)."""
        phases = cls.__new__(cls)
        phases.batches, phases.sink = [], []
        return phases

    def _clocks(self) -> dict[str, float]:
        """Catalyst's rule time so far (all groups, ms) and the Java sources compiled so far."""
        rules = sum(bench_trickle.rule_groups(self._rules.dumpTimeSpent()).values())
        return {"rules": rules, "compiled": float(self._compiled.getCount())}

    def onQueryStarted(self, event) -> None:  # noqa: N802 - Spark's names
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        p = event.progress
        clock, before = self._clocks(), self._clock
        self._clock = clock
        if p.numInputRows:
            phases = {k: float(v) for k, v in p.durationMs.items()}
            self.batches.append(phases | {k: clock[k] - before[k] for k in clock})

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass

    def medians(self) -> dict[str, float]:
        """Each phase's median over the micro-batches after the first (which plans and
        compiles everything once), ``outside`` and the sink's steps with them."""
        batches = self.batches[1:] or self.batches
        out = {k: statistics.median(b.get(k, 0.0) for b in batches) for k in PHASES if batches}
        if batches:
            out.update({k: statistics.median(b[k] for b in batches) for k in CLOCKS})
            out["outside"] = statistics.median(
                b.get("triggerExecution", 0) - b.get("addBatch", 0) for b in batches
            )
        sink = self.sink[1:] or self.sink
        out.update({k: statistics.median(s.get(k, 0.0) for s in sink) for k in SINK_STEPS if sink})
        return out


class _SinkSteps(logging.Handler):
    def __init__(self, into: list[dict[str, float]]) -> None:
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        steps = getattr(record, "sink_ms", None)
        if steps:
            self.into.append({k: float(v) for k, v in steps.items() if k != "batch_id"})


@contextlib.contextmanager
def _driver_phases(spark: SparkSession):
    """The driver's phases of the micro-batches run within (``_Phases``); none without a
    session (the unit tests' stand-in contenders run none)."""
    if spark is None:
        yield _Phases.none()
        return
    phases = _Phases(spark)
    logger = logging.getLogger("spark_purgatory.driver_step")
    handler, level = _SinkSteps(phases.sink), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    spark.streams.addListener(phases)
    try:
        yield phases
    finally:
        spark.streams.removeListener(phases)
        logger.removeHandler(handler)
        logger.setLevel(level)


def _phase_line(phases: dict[str, float]) -> str:
    keys = (*PHASES, "outside", *CLOCKS, *SINK_STEPS)
    return ", ".join(f"{_SHORT.get(k, k)} {phases[k]:.0f}" for k in keys if k in phases)


def _print_phases(rounds: list[dict[str, dict[str, float]]]) -> None:
    """Each contender's driver phases over the rounds (min-max of the medians), and the job's
    excess over the stateful floor's in each."""
    if not rounds:
        return
    print("  driver ms a micro-batch over the rounds (min-max of each run's median):")
    for name in rounds[0]:
        keys = [k for k in (*PHASES, "outside", *CLOCKS, *SINK_STEPS) if k in rounds[0][name]]
        spans = ", ".join(
            f"{_SHORT.get(k, k)} {harness.span([r[name][k] for r in rounds], digits=0)}" for k in keys
        )
        print(f"    {name:<10}{spans}")
    if all("job" in r and "stateful" in r for r in rounds):
        for k in (
            "queryPlanning",
            "getBatch",
            "latestOffset",
            "walCommit",
            "outside",
            "rules",
            "triggerExecution",
        ):
            over = [r["job"][k] - r["stateful"][k] for r in rounds if k in r["job"] and k in r["stateful"]]
            if over:
                print(
                    f"    job - stateful floor, {_SHORT.get(k, k):<14}{harness.span(over, ' ms', digits=0)}"
                )


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
    steady = [b for b in result.batches[1:] if b["rows"]]
    return {
        "pending": pending,
        "preload_s": result.batches[0]["ms"] / 1000 if result.batches else float("nan"),
        "batch_ms": statistics.median(b["ms"] for b in steady) if steady else float("nan"),
        "batch_ms_all": [b["ms"] for b in steady],
        "state_ms_all": [b["state_ms"] for b in steady],
        "state_bytes": _du(f"{root}/ck/state") + _du(f"{root}/ck/purgatory-state"),
    }


def report_scaling(scaling: list[dict]) -> dict[str, float]:
    print("\nscaling with pending operations (same micro-batch size):")
    print(f"  {'pending':>10} {'preload':>9} {'per batch (median)':>19} {'state on disk':>14}")
    for s in scaling:
        print(
            f"  {s['pending']:>10,} {s['preload_s']:>8.1f}s {s['batch_ms']:>16,.0f} ms "
            f"{s['state_bytes'] / 2**20:>11,.1f} MiB"
        )
    if len(scaling) < 2:
        return {}
    ratio = scaling[-1]["batch_ms"] / scaling[0]["batch_ms"]
    print(
        f"  per-batch time at {scaling[-1]['pending']:,} / at {scaling[0]['pending']:,}: {ratio:.2f}x   "
        f"target <= {TARGETS['scaling']}x: {_verdict(ratio <= TARGETS['scaling'])}"
    )
    return {"scaling_ratio": ratio}


# -- the command line --------------------------------------------------------------------------------


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.parser("operator", __doc__)
    parser.add_argument("--ops", type=int, default=200_000, help="operations per workload")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list ('' to skip)")
    parser.add_argument(
        "--contenders", default="floor,stateful,join,job,tws", help=f"comma list of {', '.join(CONTENDERS)}"
    )
    parser.add_argument(
        "--other-contenders",
        help="the contenders of the workloads after the first (default: --contenders); the smoke run "
        "gives the JSON lines the join and the job alone",
    )
    parser.add_argument("--warm-ops", type=int, default=20_000, help="an untimed warm-up run first (JIT)")
    parser.add_argument("--scaling", default="100000,1000000,5000000", help="pending counts ('' to skip)")
    parser.add_argument("--scaling-batches", type=int, default=5)
    parser.add_argument("--scaling-batch-ops", type=int, default=20_000)
    parser.add_argument(
        "--jit",
        choices=["c1", "full"],
        default="c1",
        help="the session's JVM: C1 only (local_session's default) or HotSpot's default C1 + C2",
    )
    parser.add_argument(
        "--event-log",
        help="a directory for Spark's event log (one file for the whole run): every stage's and task's "
        "times, read per contender and micro-batch by `python -m benchmarks stages DIR`",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness runs (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        # no warm-up: a JIT's worth of rows is not what a smoke run checks; 500 operations
        # still complete hundreds on every contender (transformWithStateInPandas alone took
        # 26 CPU-s over 2,000 operations, 15 over 500)
        args.ops, args.files, args.warm_ops = 500, 4, 0
        args.scaling_batches, args.scaling_batch_ops = 1, 500
        args.scaling = "2000,4000" if args.scaling else ""  # --scaling '' still skips it
    named = set(harness.names(args.contenders)) | set(harness.names(args.other_contenders))
    unknown = named - set(CONTENDERS) or set(harness.names(args.workloads)) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown contender or workload: {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    first = harness.names(args.contenders)
    # the Python workers cannot import the benchmarks: what contenders defines travels by value
    cloudpickle.register_pickle_by_value(contenders)
    root = tempfile.mkdtemp(prefix="bench-operator-")
    spark = local_session(
        "bench-operator",
        master="local[2]",
        shuffle_partitions=PurgatoryConfig(shards=args.shards).groups,
        c1_only=args.jit == "c1",
        conf=harness.event_log_conf(args.event_log) if args.event_log else None,
    )
    config = PurgatoryConfig(shards=args.shards, cross_shard_operations=False, max_timeout_ms=60_000)
    print(
        f"local[2], {args.shards} shards, JVM {'C1 only' if args.jit == 'c1' else 'C1 + C2'}; "
        f"pyspark {spark.version}, python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    try:
        # JVM code generation and Python worker imports: paid here, not by the first contender
        if args.warm_ops:
            warm = write_workload(f"{root}/warm", args.warm_ops, 2, "parquet")
            for name in first:
                CONTENDERS[name](spark, warm, config, 1)
        results: dict = {"workloads": {}}
        agree = True
        others = harness.names(args.other_contenders) if args.other_contenders else first
        for number, workload in enumerate(harness.names(args.workloads)):
            names = others if number else first
            runs, figures, ok = run_workload(spark, root, workload, names, args, config)
            agree &= ok
            results["workloads"][workload] = {
                "seconds": {k: r.seconds for k, r in runs.items()},
                "cpu_seconds": {k: r.cpu for k, r in runs.items()},
                "rows_per_s": {k: r.rows_per_s for k, r in runs.items()},
                "figures": figures,
            }
            shutil.rmtree(f"{root}/{workload}", ignore_errors=True)
        scaling = []
        for n in [int(x) for x in harness.names(args.scaling)]:
            scaling.append(
                run_scaling(
                    spark, f"{root}/scale-{n}", n, args.scaling_batches, args.scaling_batch_ops, config
                )
            )
            s = scaling[-1]
            print(
                f"scaling {n:,}: preload {s['preload_s']:.1f} s, per batch {s['batch_ms_all']} ms", flush=True
            )
            shutil.rmtree(f"{root}/scale-{n}", ignore_errors=True)
        if scaling:
            results.update(report_scaling(scaling), scaling=scaling)
        print(f"\nload average at the end: {os.getloadavg()}")
        harness.write_json(args.json, "operator", args, results)
        return 0 if agree else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
        harness.stop(spark)
