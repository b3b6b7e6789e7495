"""What building the operator's plan costs: ``start()`` on a small input, Py4J calls and CPU.

Every test and job run that starts a query pays for building its plan: PySpark sends each
DataFrame step (and each ``Column`` function) to the JVM through Py4J, and the JVM parses and
analyses it, on a JVM that is still cold (interpreted or C1 code) in a new process.  This
runs ``start()`` once in a fresh process with a fresh local[2] session (C1 only, as the
project's sessions; the session and one tiny job are up before the clock starts) over a
small input (``json``: 400 operations as JSON lines, 4 files per stream; ``parquet``: the
payments case of ``tests/support/payments.py``), and prints: the seconds until ``start()`` returns,
the Py4J calls made meanwhile (the main thread's, and all threads': Py4J's finalizer
releases each proxy with one more), the driver's Python CPU seconds, and the JVM's CPU
seconds in that time (``/proc``).  With ``--base`` it alternates with another checkout
(its package first on ``PYTHONPATH``): a change's before and after in the same rounds.

    .venv/bin/python benchmarks/bench_plan.py                          # json, 3 rounds
    .venv/bin/python benchmarks/bench_plan.py --format parquet --base ../older-checkout
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from procfs import jvm_cpu_seconds  # beside this script (sys.path[0])

HERE = Path(__file__).resolve().parent


def _input(root: str, fmt: str) -> tuple[str, str]:
    if fmt == "parquet":
        sys.path.insert(0, str(HERE.parent))  # the root: tests.support
        from tests.support.payments import write_case

        _ops, _events, ops_dir, events_dir = write_case(root)
        return ops_dir, events_dir
    from spark_purgatory.workload import generate, write_json_lines

    work = generate(400, seed=1, ops_per_second=100.0)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=4, malformed=4)
    return f"{root}/ops", f"{root}/events"


def run_once(fmt: str) -> dict:
    """``start()`` once in this process, measured (``--one``)."""
    import py4j.java_gateway as gateway

    from spark_purgatory import PurgatoryConfig, start
    from spark_purgatory.runtime.session import local_session

    calls: collections.Counter = collections.Counter()
    counting = threading.Event()
    send = gateway.GatewayClient.send_command

    def counted(self, command, retry=True, binary=False):
        if counting.is_set():
            calls["main" if threading.current_thread() is threading.main_thread() else "other"] += 1
        return send(self, command, retry, binary)

    gateway.GatewayClient.send_command = counted
    with tempfile.TemporaryDirectory() as root:
        ops_dir, events_dir = _input(root, fmt)
        spark = local_session("bench-plan", master="local[2]", shuffle_partitions=3)
        spark.range(1).count()  # the session is the user's: up before the clock starts
        time.sleep(1)
        jvm0, py0, t0 = jvm_cpu_seconds(), time.process_time(), time.perf_counter()
        counting.set()
        query = start(
            ops_dir,
            events_dir,
            output=f"{root}/tables",
            checkpoint=f"{root}/chk",
            config=PurgatoryConfig(shards=2, watermark_delay="5 seconds"),
            spark=spark,
        )
        counting.clear()
        figures = {
            "start_s": time.perf_counter() - t0,
            "main_calls": calls["main"],
            "all_calls": calls["main"] + calls["other"],
            "python_cpu_s": time.process_time() - py0,
            "jvm_cpu_s": jvm_cpu_seconds() - jvm0,
        }
        query.stop()
    return figures


def _one(fmt: str, base: str | None) -> dict:
    env = dict(os.environ)
    if base:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(base).resolve()), env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--one", "--format", fmt]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"a run failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", choices=["json", "parquet"], default="json")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--base", help="another checkout, alternated with this one")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_once(args.format)))
        return
    contenders = {"this": None, **({"base": args.base} if args.base else {})}
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    for run in range(args.runs):
        order = list(contenders) if run % 2 == 0 else list(contenders)[::-1]
        for name in order:
            r = _one(args.format, contenders[name])
            results[name].append(r)
            print(
                f"run {run + 1} {name:<5} start() {r['start_s']:5.2f} s  Py4J calls {r['main_calls']:5d} "
                f"(all threads {r['all_calls']:5d})  Python CPU {r['python_cpu_s']:4.2f} s  "
                f"JVM CPU {r['jvm_cpu_s']:4.2f} s",
                flush=True,
            )
    for name, runs in results.items():
        line = ", ".join(
            f"{key} {statistics.median(r[key] for r in runs):.2f} "
            f"({min(r[key] for r in runs):.2f}-{max(r[key] for r in runs):.2f})"
            for key in ("start_s", "main_calls", "python_cpu_s", "jvm_cpu_s")
        )
        print(f"{name} ({args.format}, median and range of {len(runs)}): {line}")


if __name__ == "__main__":
    main()
