"""A micro-batch's one big file on both cores: the job with Spark's file open cost and with
``local_session``'s (``FILE_OPEN_COST``), on the same JSON lines, alternated.

Spark cuts a scan's files into splits of at most ``max(openCostInBytes, bytes per core)``: with
its 4 MB default a micro-batch's one file of operations of a few MB is one task while the other
core waits (issue 48's idle core); with ``local_session``'s 256 KB it is one split per core.
``--files`` JSON files per input of ``--ops`` operations in all, one file per micro-batch
(``contenders.write_workload``), the job as ``bench_operator.py`` runs it, in one session
(``local_session``), the setting switched between runs.  Prints each run's wall and CPU time,
its median micro-batch and completed operations, and the ratios.

    .venv/bin/python benchmarks/bench_file_splits.py [--ops 200000 --files 10 --repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contenders import CONTENDERS, write_workload  # noqa: E402

from spark_purgatory.config import PurgatoryConfig  # noqa: E402
from spark_purgatory.runtime.session import FILE_OPEN_COST, local_session  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=10, help="JSON files per input, one per micro-batch")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    spark = local_session("bench-file-splits", master="local[2]", shuffle_partitions=3)
    config = PurgatoryConfig(shards=2, cross_shard_operations=False, max_timeout_ms=60_000)
    root = tempfile.mkdtemp(prefix="bench-file-splits-")
    try:
        CONTENDERS["job"](spark, write_workload(f"{root}/warm", 4000, 2, "json"), config, 1)
        files = write_workload(f"{root}/w", args.ops, args.files, "json")
        sizes = [os.path.getsize(p) for p in Path(f"{root}/w/ops").glob("*.json*")]
        print(
            f"{files.ops:,} operations, {args.files} JSON files per input (operations' files up to "
            f"{max(sizes) / 1e6:.1f} MB, median {statistics.median(sizes) / 1e6:.1f}), "
            "one per micro-batch, local[2]"
        )
        layouts = {"Spark's 4 MB": None, f"{int(FILE_OPEN_COST[1]) // 1024} KB": FILE_OPEN_COST[1]}
        seconds: dict[str, list[float]] = {name: [] for name in layouts}
        for _ in range(args.repeat):
            for name, cost in layouts.items():
                if cost is None:
                    spark.conf.unset(FILE_OPEN_COST[0])
                else:
                    spark.conf.set(FILE_OPEN_COST[0], cost)
                for d in os.listdir(f"{root}/w"):
                    if d not in ("ops", "events"):
                        shutil.rmtree(f"{root}/w/{d}", ignore_errors=True)
                run = CONTENDERS["job"](spark, files, config, 1)
                batch = statistics.median(b.get("ms", 0) for b in run.batches[1:])
                seconds[name].append(run.seconds)
                print(
                    f"  open cost {name:<14}{run.seconds:7.2f} s {run.cpu:7.1f} s CPU   median micro-batch "
                    f"{batch:6.0f} ms   {len(run.completed):,} completed",
                    flush=True,
                )
        before, after = (seconds[name] for name in layouts)
        ratios = [b / a for b in before for a in after]
        print(f"job with the smaller open cost: {min(ratios):.2f}-{max(ratios):.2f}x as fast")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
