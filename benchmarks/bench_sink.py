"""What the Delta output costs: the job (``start``) against the operator into a no-op sink.

Two measurements, on bench_operator's workload (its writers and timing; local[2]):

* **cost of the output**: the whole query as ``start`` runs it (operator, staging on the
  executors, the sender's data files, the driver's commits, the flush on stop) against
  the same operator into Spark's ``noop`` sink, at each ``--ops`` size, ``--runs`` times
  each, alternating; prints the median times and their ratio (target <= 1.1x).
* **driver memory when the micro-batch grows tenfold**: the job on one workload with one
  file per trigger, then ten (micro-batches of N and 10N operations), sampling the RSS of
  the Python driver and of the driver's JVM (``/proc/<pid>/status``; the JVM is the py4j
  gateway's process) during each run; prints the peaks and their growth (target: flat).
  No output row reaches the driver, so neither should grow with the micro-batch.  For
  contrast, the same series with a ``foreachBatch`` that collects each micro-batch to the
  driver (``toArrow``, what the sink did before the executors wrote the rows).

    .venv/bin/python benchmarks/bench_sink.py                      # 200k and 1M, 3 runs each
    .venv/bin/python benchmarks/bench_sink.py --ops 200000 --runs 2 --rss-ops 200000
    .venv/bin/python benchmarks/bench_sink.py --smoke              # seconds-sized, for CI
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contenders import Files, timed, write_workload  # noqa: E402  (the same workload and timing)

from spark_purgatory import start  # noqa: E402
from spark_purgatory.config import PurgatoryConfig  # noqa: E402
from spark_purgatory.contract import OPERATOR_OUTPUT  # noqa: E402
from spark_purgatory.runtime.session import local_session  # noqa: E402
from spark_purgatory.spark.operator import purgatory_stream  # noqa: E402
from spark_purgatory.spark.sources import read_stream  # noqa: E402

TARGET = 1.1  # the job at most 1.1x the operator with a no-op sink


def _streams(spark, files: Files, per_trigger: int):
    return [
        read_stream(spark, f"{files.root}/{d}", files.fmt, kind=kind, max_files_per_trigger=per_trigger)
        for d, kind in (("ops", "operations"), ("events", "events"))
    ]


def run_noop(spark, files: Files, config: PurgatoryConfig, per_trigger: int) -> float:
    """The operator into Spark's no-op sink, on a fresh checkpoint; seconds."""
    chk = f"{files.root}/ck-noop-{uuid.uuid4().hex[:8]}"
    config = dataclasses.replace(config, state_path=f"{chk}/purgatory-state")
    stream = purgatory_stream(*_streams(spark, files, per_trigger), config)
    seconds = timed("operator, no-op sink", files.rows, stream, chk).seconds
    shutil.rmtree(chk, ignore_errors=True)
    return seconds


def run_job(spark, files: Files, config: PurgatoryConfig, per_trigger: int) -> tuple[float, dict]:
    """The query as ``start`` runs it, available-now, until stop() has flushed; seconds, totals."""
    run = uuid.uuid4().hex[:8]
    chk, out = f"{files.root}/ck-job-{run}", f"{files.root}/out-{run}"
    began = time.perf_counter()
    with start(
        *_streams(spark, files, per_trigger), output=out, checkpoint=chk, config=config, writer="delta-rs"
    ) as query:
        query.await_termination()
    seconds = time.perf_counter() - began
    totals = dict(query.totals)
    shutil.rmtree(chk, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return seconds, totals


# -- driver memory -------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """A process's resident set (kB), from /proc (psutil is not in the environment)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def jvm_pid(spark) -> int:
    """The driver JVM: the process py4j's gateway was launched as (spark-submit execs java)."""
    return spark.sparkContext._gateway.proc.pid


class Peak:
    """Samples the RSS of some processes in a thread; ``peak`` per process (kB)."""

    def __init__(self, pids: dict[str, int], every: float = 0.05) -> None:
        self.pids, self.every = pids, every
        self.peak = {name: rss_kib(pid) for name, pid in pids.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_kib(pid))


def run_collect(spark, files: Files, config: PurgatoryConfig, per_trigger: int) -> tuple[float, dict]:
    """The operator into a ``foreachBatch`` that collects each micro-batch to the driver."""
    chk = f"{files.root}/ck-collect-{uuid.uuid4().hex[:8]}"
    config = dataclasses.replace(config, state_path=f"{chk}/purgatory-state")
    batches = []

    def collect(batch, batch_id: int) -> None:
        batch.select(*OPERATOR_OUTPUT.names).toArrow()
        batches.append(batch_id)

    stream = purgatory_stream(*_streams(spark, files, per_trigger), config)
    began = time.perf_counter()
    query = stream.writeStream.foreachBatch(collect).option("checkpointLocation", chk)
    query.trigger(availableNow=True).start().awaitTermination()
    shutil.rmtree(chk, ignore_errors=True)
    return time.perf_counter() - began, {"batches": len(batches)}


def driver_memory(
    spark, files: Files, config: PurgatoryConfig, per_triggers: tuple[int, int], run=run_job
) -> list[dict]:
    """Peak driver RSS (Python, JVM) running ``run`` at each files-per-trigger."""
    pids = {"python": os.getpid(), "jvm": jvm_pid(spark)}
    rows = []
    for per_trigger in per_triggers:
        before = {name: rss_kib(pid) for name, pid in pids.items()}
        with Peak(pids) as peak:
            seconds, totals = run(spark, files, config, per_trigger)
        ops_per_batch = files.ops * min(per_trigger, files_in(files)) // files_in(files)
        rows.append(
            {
                "per_trigger": per_trigger,
                "ops_per_batch": ops_per_batch,
                "seconds": seconds,
                "before": before,
                "peak": dict(peak.peak),
                "batches": totals["batches"],
            }
        )
        print(
            f"  {ops_per_batch:>9,} ops per micro-batch ({totals['batches']} batches, {seconds:.1f} s): "
            f"python {before['python'] / 1024:,.0f} -> peak {peak.peak['python'] / 1024:,.0f} MiB, "
            f"JVM {before['jvm'] / 1024:,.0f} -> peak {peak.peak['jvm'] / 1024:,.0f} MiB",
            flush=True,
        )
    return rows


def files_in(files: Files) -> int:
    return len(os.listdir(f"{files.root}/ops"))


# -- the report ------------------------------------------------------------------------------------


def compare(spark, files: Files, config: PurgatoryConfig, per_trigger: int, runs: int) -> float:
    noop, job = [], []
    for _ in range(runs):  # alternating, so a noisy neighbour hits both
        noop.append(run_noop(spark, files, config, per_trigger))
        job.append(run_job(spark, files, config, per_trigger)[0])
        print(f"  no-op sink {noop[-1]:6.1f} s   job {job[-1]:6.1f} s", flush=True)
    ratio = statistics.median(job) / statistics.median(noop)
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(
        f"{files.ops:,} operations: median no-op sink {statistics.median(noop):.1f} s, job "
        f"{statistics.median(job):.1f} s: {ratio:.2f}x   target <= {TARGET}x: {verdict}",
        flush=True,
    )
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="200000,1000000", help="workload sizes (comma list)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument(
        "--rss-ops", type=int, default=1_000_000, help="workload of the memory series (0: skip)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness runs (CI)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ops, args.runs, args.files, args.rss_ops = "3000", 1, 10, 3000
    root = tempfile.mkdtemp(prefix="bench-sink-")
    spark = local_session("bench-sink", master="local[2]", shuffle_partitions=args.shards + 1)
    config = PurgatoryConfig(shards=args.shards, cross_shard_operations=False, max_timeout_ms=60_000)
    print(
        f"local[2], {args.shards} shards, {args.files} JSON files per stream, {args.files_per_trigger} "
        f"per trigger; batch.size {config.accumulator_batch_size:,} B, linger.ms "
        f"{config.accumulator_linger_ms:,}; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    try:
        warm = write_workload(f"{root}/warm", 500 if args.smoke else 20_000, 4)
        run_noop(spark, warm, config, 2)  # JVM code generation, Python worker imports
        run_job(spark, warm, config, 2)
        ratios = {}
        for n in [int(x) for x in args.ops.split(",") if x]:
            files = write_workload(f"{root}/ops-{n}", n, args.files)
            ratios[n] = compare(spark, files, config, args.files_per_trigger, args.runs)
            shutil.rmtree(files.root, ignore_errors=True)
        if args.rss_ops:
            files = write_workload(f"{root}/rss", args.rss_ops, args.files)
            for label, run in (("the job", run_job), ("collecting each micro-batch (before)", run_collect)):
                print(f"driver memory, {label}, {files.ops:,} operations, {args.files} files:", flush=True)
                small, large = driver_memory(spark, files, config, (1, 10), run)
                for name in ("python", "jvm"):
                    growth = (large["peak"][name] - small["peak"][name]) / 1024
                    print(f"  {name} peak at 10N - at N: {growth:+,.0f} MiB")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
