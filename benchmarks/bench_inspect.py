"""Reading a checkpoint's pending operations: seconds for a million, memory bounded by a shard.

Builds a real checkpoint (``start``, available-now, local[2]) holding about ``--ops``
pending operations of every condition (the broker workload of ``workload.generate`` with
one-day timeouts, a few of them completed), then times, ``--runs`` times each:

* ``pending``: ``pending_operations(checkpoint).count()``: every shard's state read by
  Spark's state data source and decoded on the executors (segments included), every row
  built, nothing collected to the driver;
* ``at-risk``: ``at_risk(checkpoint, within="1h")`` sorted, its first 20 rows to the driver
  (what the command line prints);
* ``write``: the pending operations into Spark's ``noop`` sink (a full scan of every column).

While each runs it samples the resident memory of the Python driver, the driver's JVM and
the Python workers (``/proc``): the driver's must stay flat (no row reaches it), a worker's
follows the largest shard it decodes, not the total.

    .venv/bin/python benchmarks/bench_inspect.py                    # 1M operations, 4 shards
    .venv/bin/python benchmarks/bench_inspect.py --ops 200000 --runs 2
    .venv/bin/python benchmarks/bench_inspect.py --keep /tmp/b1m   # build once; again: read only

Read the figures of a reused checkpoint (a second run with ``--keep``): in the run that
builds it, the Python workers still hold the query's parked shards (``state.cache``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contenders import _write_parquet  # noqa: E402  (typed Parquet files, cut by event time)

from spark_purgatory import PurgatoryConfig, start  # noqa: E402
from spark_purgatory.inspect import at_risk, pending_operations, read_checkpoint  # noqa: E402
from spark_purgatory.runtime.session import local_session  # noqa: E402
from spark_purgatory.workload import generate  # noqa: E402

DAY_MS = 86_400_000


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def python_workers() -> list[int]:
    """Spark's Python worker processes (``pyspark.daemon`` and the workers it forks)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"pyspark.daemon" in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Peak:
    """Samples the driver, its JVM and the Python workers every 50 ms; keeps the peaks (kB)."""

    def __init__(self, jvm: int) -> None:
        self.jvm, self.peak = jvm, {"driver": 0, "jvm": 0, "worker": 0, "workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            workers = [rss_kib(pid) for pid in python_workers()]
            now = {
                "driver": rss_kib(os.getpid()),
                "jvm": rss_kib(self.jvm),
                "worker": max(workers, default=0),
                "workers": sum(workers),
            }
            self.peak = {k: max(v, now[k]) for k, v in self.peak.items()}

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def build(root: str, n_ops: int, shards: int, files: int, spark) -> tuple[str, float]:
    work = generate(n_ops, complete_ratio=0.05, timeout_ms=DAY_MS, seed=3)
    _write_parquet(root, work.operations, work.events, files=files, skew_ms=0)
    config = PurgatoryConfig(shards=shards, source_max_files_per_trigger=1, max_timeout_ms=7 * DAY_MS)
    started = time.perf_counter()
    query = start(
        f"{root}/ops", f"{root}/events", output=f"{root}/out", checkpoint=f"{root}/chk",
        config=config, source_format="parquet", spark=spark,
    )  # fmt: skip
    query.await_termination()
    query.stop()
    return f"{root}/chk", time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=20, help="input files per stream (one per micro-batch)")
    parser.add_argument("--keep", help="build the checkpoint here and keep it (reused if it is there)")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="bench-inspect-")
    spark = local_session("bench-inspect", master="local[2]", shuffle_partitions=args.shards + 1)
    try:
        if args.keep and os.path.isdir(f"{root}/chk"):  # a fresh process on a kept checkpoint:
            chk, built = f"{root}/chk", None  # fresh JVM and Python workers, as the CLI has
        else:
            chk, built = build(root, args.ops, args.shards, args.files, spark)
        info = read_checkpoint(chk)
        how = "reused" if built is None else f"built in {built:.1f} s"
        print(
            f"checkpoint: {args.ops:,} operations, {args.shards} shards, {how}, last batch {info.last_batch}"
        )
        pending = pending_operations(chk, spark=spark)
        steps = {
            "pending": lambda: pending_operations(chk, spark=spark).count(),
            "at-risk": lambda: len(at_risk(chk, within="1h", spark=spark).limit(20).collect()),
            "write": lambda: (
                pending_operations(chk, spark=spark).write.format("noop").mode("overwrite").save()
            ),
        }
        for name, step in steps.items():
            times, peaks, result = [], [], None
            for _ in range(args.runs):
                with Peak(spark.sparkContext._gateway.proc.pid) as peak:
                    started = time.perf_counter()
                    result = step()
                    times.append(time.perf_counter() - started)
                peaks.append(peak.peak)
            top = {k: max(p[k] for p in peaks) // 1024 for k in peaks[0]}
            runs = ", ".join(f"{t:.2f}" for t in times)
            print(
                f"{name:>8}: median {statistics.median(times):6.2f} s  (runs {runs})"
                f"  result {result}  peak RSS MiB: driver {top['driver']}, JVM {top['jvm']}, "
                f"largest worker {top['worker']}, all workers {top['workers']}"
            )
        by_shard = sorted((r["shard"], r["count"]) for r in pending.groupBy("shard").count().collect())
        print("pending by shard:", ", ".join(f"{s}: {c:,}" for s, c in by_shard))
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
