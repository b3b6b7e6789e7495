"""The job over a Spark Connect session against the same job on a classic one, same files.

A notebook on Databricks serverless compute or on a shared access mode cluster talks to Spark
through Spark Connect, and no custom JAR reaches its driver: the project's JVM parts are out
of reach there, and ``start()`` takes its Connect fallbacks (docs/deployment.md, "Spark
Connect": the checks and routes as SQL, the sink through ``foreachBatch`` with the rows
staged by the sink in one ``mapInArrow``, no linger, no reaper).  This runs the job
(``job.run``, as ``jobs/purgatory_job.py`` runs it) on the same files through:

* **classic**: the job's own local session (``local_session``, local[2]) with the project's
  JARs (``make jars``): the checks and routes as JVM functions, the rows of a micro-batch
  through ``StagedRowsSink``, the shards staging their own output, the checkpoint file manager;
* **classic-sql**: the same session without any JAR of the project (``SPARK_PURGATORY_JARS``
  at an empty folder): what the JVM parts are worth on their own, apart from Connect;
* **connect**: a remote session (``SparkSession.builder.remote``) to pyspark's bundled Spark
  Connect server on loopback (local[2]; a fresh server for each run, started before the
  clock with the classic session's settings and no JAR of the project, as serverless has
  none).  The job builds its session itself (a local one, or spark-submit's); here it is
  handed the remote one, as a notebook's ``start()`` is.

Each contender runs in a fresh Python process, its session up and warmed by one count before
the clock; the clock runs from ``job.run`` to its return (available-now: the whole input, the
last flush).  Both write with delta-rs (the Connect server has no Delta JAR; on Databricks
``auto`` picks Spark's Delta writer on either kind of session).  Printed per run: wall time,
CPU seconds (the client's process tree, plus, for Connect, the server's: its JVM and Python
workers, over the same interval), micro-batches and the outcomes; then each contender's time
against classic's.  The outcomes (op_id, status), unmatched events and rejected rows of every
run must equal the first classic run's: the exit status is 1 when they do not.

    .venv/bin/python benchmarks/bench_connect.py                  # 200k typed, 1 round
    .venv/bin/python benchmarks/bench_connect.py --repeat 2       # alternated, 2 rounds
    .venv/bin/python benchmarks/bench_connect.py --contenders classic,connect --ops 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout: tests.support's Connect server

from procfs import cpu_seconds, jvm_pid  # noqa: E402 - beside this script (sys.path[0])

CONTENDERS = ("classic", "classic-sql", "connect")
SHARDS = 2


def _settings(root: str, run: str, per_trigger: int):
    """The job's settings for one run: the workload's inputs, a new checkpoint and output."""
    from spark_purgatory.config import PurgatoryConfig
    from spark_purgatory.job import JobSettings
    from spark_purgatory.restarts import RestartPolicy

    config = PurgatoryConfig(
        shards=SHARDS,
        cross_shard_operations=False,
        max_timeout_ms=60_000,
        source_max_files_per_trigger=per_trigger,
    )
    return JobSettings(
        ops_path=f"{root}/ops",
        events_path=f"{root}/events",
        output_path=f"{root}/{run}/out",
        checkpoint_path=f"{root}/{run}/chk",
        config=config,
        source_format="parquet",
        writer="delta-rs",
        master="local[2]",
        restart=RestartPolicy(attempts=0),  # a failure is the benchmark's failure
    )


def _outputs(out: str) -> dict:
    """What the run wrote: its outcomes as (op_id, status) pairs, its unmatched events and
    rejected rows as counts."""
    from deltalake import DeltaTable

    outcomes = DeltaTable(f"{out}/outcomes").to_pyarrow_table(columns=["op_id", "status"])
    return {
        "outcomes": sorted(zip(outcomes["op_id"].to_pylist(), outcomes["status"].to_pylist(), strict=True)),
        "unmatched": DeltaTable(f"{out}/unmatched_events").to_pyarrow_table().num_rows,
        "rejected": DeltaTable(f"{out}/rejected").to_pyarrow_table().num_rows,
    }


def child(which: str, root: str, run: str, per_trigger: int, url: str, server_pid: int) -> dict:
    """One contender in this fresh process (``--one``): its figures and outputs."""
    import spark_purgatory.job as job

    settings = _settings(root, run, per_trigger)
    if which == "connect":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(url).getOrCreate()
        job._session = lambda _settings: spark  # the remote session, as a notebook's start() has it
    else:
        from spark_purgatory.runtime.session import local_session

        # the session job.run builds (its _session), built here before the clock
        spark = local_session("spark-purgatory", master="local[2]", shuffle_partitions=SHARDS + 1)
    spark.range(1).count()

    def cpu() -> float:
        return cpu_seconds() + (cpu_seconds(server_pid) if server_pid else 0.0)

    cpu0, t0 = cpu(), time.perf_counter()
    job.run(settings)
    seconds, used = time.perf_counter() - t0, cpu() - cpu0
    # the micro-batches from Spark's commit log: over Connect the sink, which counts them for
    # job.run's totals, runs in the server, and the client's totals stay at 0
    commits = [n for n in os.listdir(f"{settings.checkpoint_path}/commits") if n.isdigit()]
    return {"seconds": seconds, "cpu": used, "batches": len(commits), **_outputs(settings.output_path)}


def _server_conf() -> dict[str, str]:
    """The Connect server's Spark settings: the classic session's (``local_session``) that a
    server can take, and no JAR of the project."""
    from spark_purgatory.runtime.session import C1_ONLY, FILE_OPEN_COST, UNIX_SOCKETS

    return {
        "spark.driver.memory": "4g",
        "spark.driver.extraJavaOptions": C1_ONLY,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.minBatchesToRetain": "20",
        UNIX_SOCKETS: "true",
        FILE_OPEN_COST[0]: FILE_OPEN_COST[1],
    }


def _one(which: str, root: str, run: str, per_trigger: int, url: str = "", server_pid: int = 0) -> dict:
    """``which`` in a fresh process; its figures from the JSON of its last line."""
    env = dict(os.environ)
    if which == "classic-sql":
        env["SPARK_PURGATORY_JARS"] = os.path.join(root, "no-jars")  # an empty folder
        os.makedirs(env["SPARK_PURGATORY_JARS"], exist_ok=True)
    command = [sys.executable, __file__, "--one", which, "--root", root, "--run", run]
    command += ["--files-per-trigger", str(per_trigger), "--url", url, "--server-pid", str(server_pid)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{which} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(which: str, root: str, run: str, per_trigger: int) -> dict:
    """One run of ``which``; for Connect, a fresh server around it."""
    if which != "connect":
        return _one(which, root, run, per_trigger)
    from tests.support.cluster import connect_server

    with connect_server(os.path.join(root, run, "server"), conf=_server_conf()) as url:
        return _one(which, root, run, per_trigger, url, jvm_pid(os.getpid()) or 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=200_000, help="operations in the workload")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"of {', '.join(CONTENDERS)}")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each alternating the order")
    parser.add_argument("--one", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        figures = child(args.one, args.root, args.run, args.files_per_trigger, args.url, args.server_pid)
        print(json.dumps(figures))
        return 0
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contenders {unknown}; of {', '.join(CONTENDERS)}")
    from contenders import write_workload

    with tempfile.TemporaryDirectory() as root:
        files = write_workload(root, args.ops, args.files, fmt="parquet")
        print(
            f"{files.ops:,} operations + {files.events:,} events, typed Parquet, {args.files} files per "
            f"stream, {args.files_per_trigger} per trigger; the job on local[2], {SHARDS} shards, delta-rs",
            flush=True,
        )
        results: dict[str, list[dict]] = {name: [] for name in contenders}
        reference: dict | None = None
        agree = True
        for round_no in range(args.repeat):
            for which in contenders if round_no % 2 == 0 else contenders[::-1]:
                r = measure(which, root, f"{which}-{round_no}", args.files_per_trigger)
                results[which].append(r)
                outputs = {k: r.pop(k) for k in ("outcomes", "unmatched", "rejected")}
                reference = reference or outputs
                same = outputs == reference
                agree &= same
                print(
                    f"round {round_no + 1} {which:<12}{r['seconds']:7.1f} s {r['cpu']:7.1f} s CPU "
                    f"{r['batches']:4} batches {len(outputs['outcomes']):>9,} outcomes "
                    f"{outputs['unmatched']:>7,} unmatched {outputs['rejected']:>4} rejected  "
                    f"{'same outputs' if same else 'OUTPUTS DIFFER'}   load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    if "classic" in results:
        for which in contenders:
            if which == "classic":
                continue
            pairs = list(zip(results[which], results["classic"], strict=True))  # by round
            ratios = [o["seconds"] / c["seconds"] for o, c in pairs]
            cpu = [o["cpu"] / c["cpu"] for o, c in pairs]
            print(
                f"{which} / classic: {', '.join(f'{x:.2f}x' for x in ratios)} the time, "
                f"{', '.join(f'{x:.2f}x' for x in cpu)} the CPU (per round)"
            )
    print("every run's outputs equal" if agree else "OUTPUTS DIFFER between runs")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
