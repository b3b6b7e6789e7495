"""The routing stage's reading of one operations file, step by step, in one Spark session.

A micro-batch's routing stage reads each input file and checks and routes its rows in the
scan's task (``routing.route_typed_operations`` for typed input, the SQL reading and
``route_operations`` otherwise).  This writes the benchmark's typed workload (200k
operations in ten Parquet files) and, on the operations of one file or of all, times a
``noop`` write of each step: the file read (``readall``), the typed reading's projection
(``read_proj``), the one-call check and route (``route_typed``, the JVM function when the
checks JAR is on the classpath) and the SQL reading routed (``route_sql``).  Each step is
written ``--runs`` times (the first two not counted); it prints the median wall time and the
JVM's CPU time (its ``/proc`` figures, user and system), and per operation what each step
costs above the read.

    .venv/bin/python benchmarks/bench_routing.py [--all] [--runs 12] [--repeat 2]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="all ten files (else the fourth)")
    parser.add_argument("--runs", type=int, default=12, help="writes per step (two warm-up)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds over the steps, alternated")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from contenders import write_workload

    from spark_purgatory.config import PurgatoryConfig
    from spark_purgatory.spark import operator, routing
    from spark_purgatory.spark.typed_columns import operations_read
    from spark_purgatory.testing import spark_session

    root = tempfile.mkdtemp(prefix="bench-routing-")
    write_workload(f"{root}/w", 200_000, 10, fmt="parquet")
    files = sorted(glob.glob(f"{root}/w/ops/*.parquet"))
    spark = spark_session()
    config = PurgatoryConfig()
    df = spark.read.parquet(*(files if args.all else files[3:4]))
    ops = df.count()
    reading = dict(
        max_timeout_ms=config.max_timeout_ms, max_future_ms=config.max_future_ms, limits=config.input_limits
    )
    steps = {
        "readall": lambda: df.select("*"),
        "read_proj": lambda: operations_read(df, config.max_timeout_ms, config.input_limits)[0],
        "route_typed": lambda: routing.route_typed_operations(df, config, **reading),
        "route_sql": lambda: routing.route_operations(
            operator.parse_operations(df, "auto", **reading), config
        ),
    }
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    tick = os.sysconf("SC_CLK_TCK")

    def jvm_cpu_ms() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / tick

    print(
        f"{ops:,} operations ({'all ten files' if args.all else 'one file'}), load {os.getloadavg()[0]:.1f}"
    )
    for round_ in range(args.repeat):
        figures = {}
        for name, make in steps.items():
            frame = make()
            if frame is None:  # no checks JAR: no one-call reading
                continue
            walls, cpus = [], []
            for _ in range(args.runs):
                cpu, began = jvm_cpu_ms(), time.perf_counter()
                frame.write.format("noop").mode("overwrite").save()
                walls.append((time.perf_counter() - began) * 1000)
                cpus.append(jvm_cpu_ms() - cpu)
            figures[name] = (statistics.median(walls[2:]), statistics.median(cpus[2:]))
        read_wall, read_cpu = figures["readall"]
        for name, (wall, cpu) in figures.items():
            above = (
                ""
                if name == "readall"
                else (
                    f"   above the read: {(wall - read_wall) * 1000 / ops:5.2f} µs wall, "
                    f"{(cpu - read_cpu) * 1000 / ops:5.2f} µs CPU an operation"
                )
            )
            print(f"  round {round_ + 1}  {name:<12} wall {wall:7.1f} ms  JVM CPU {cpu:7.1f} ms{above}")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
