"""The job from an installed wheel against the job from the checkout, on the same files.

What issue 63 measured: the wheel built from this checkout (``make dist``'s ``uv build``), installed
with uv into a fresh venv outside the checkout with nothing else
(``tests/support/wheel_venv.py``: pyspark resolves as pip resolves it, today 4.2.1;
``--pyspark 4.2.0`` pins the checkout's; every module compiled to bytecode, as ``pip install``
does and ``make bytecode`` does for the checkout), runs ``python -m spark_purgatory.job``; the
checkout runs ``jobs/purgatory_job.py`` from its ``.venv``.  Both on the same 200k typed
operations (Parquet, ``contenders.write_workload``: orders and their confirmations, 20 files
per stream, 2 per trigger, 2 shards, ``local[2]``, ``available-now``), each run a fresh process
with a fresh checkpoint and output.

One untimed run of each first: the wheel's first local session has no class-data archive for
its class path and its JVM dumps one at exit into the wheel's own cache (``XDG_CACHE_HOME``
under the work folder; ``runtime.class_data``), which is what every later run of an installed
wheel starts with; its time is printed as the first run's.  Then ``--repeat`` rounds, each
contender once a round, alternated (wheel, checkout; the next round the other way round), each
started once the last run's JVM has exited (an exiting JVM may still be dumping its archive).
Printed: each run's wall time (the process, from start to exit: the JVM's start is the point)
and CPU time (the whole process tree's, the JVM's and its Python workers' too: this script is
their subreaper, so the JVM that outlives its Python is reaped, and counted, here; less
disturbed than wall time by other work on a shared machine), each round's ratios wheel /
checkout and their ranges, against the target (<= 1.15x, on wall time); checked:
the same completed operations from both, and no "not in use" line in either's log (the line
about the Spark version is shown once when the wheel's Spark is not the JARs').

    .venv/bin/python benchmarks/bench_install.py                       # 200k, 3 rounds
    .venv/bin/python benchmarks/bench_install.py --repeat 5 --pyspark 4.2.0
    .venv/bin/python benchmarks/bench_install.py --ops 2000 --repeat 1 # seconds-sized
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET = 1.15  # wheel time / checkout time

sys.path.insert(0, str(ROOT))  # the root: tests.support, spark_purgatory
from contenders import write_workload  # noqa: E402 - beside this script (sys.path[0])

from tests.support.wheel_venv import build_wheel, install_wheel, venv_env  # noqa: E402

NOT_IN_USE = "not in use"
NOTICE = "spark-purgatory's JARs were built for Spark"


def _job_args(files: Path, out: Path, shards: int, per_trigger: int) -> list[str]:
    settings = {
        "job.master": "local[2]",
        "purgatory.shards": str(shards),
        "purgatory.cross.shard.operations": "false",
        "purgatory.max.timeout.ms": "60000",
        "source.max.files.per.trigger": str(per_trigger),
    }
    args = ["--ops-path", f"{files}/ops", "--events-path", f"{files}/events", "--source-format", "parquet"]
    args += ["--output-path", f"{out}/tables", "--checkpoint-path", f"{out}/checkpoint"]
    return args + [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]


def _reap_orphans() -> None:
    """Become the subreaper of everything started from here (Linux ``PR_SET_CHILD_SUBREAPER``):
    a JVM whose Python exited is then this process's child, waited for and counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(
    contender: str, command: list[str], env: dict, cwd: Path, out: Path
) -> tuple[float, float, set[str], str]:
    """One job run in a fresh process: its wall time, its tree's CPU time (once its JVM, which
    outlives it, has exited too), completed op_ids and log."""
    from deltalake import DeltaTable

    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"{contender}: the job failed ({done.returncode}):\n{log[-3000:]}")
    while True:  # the JVM, reparented here (_reap_orphans), may still be exiting
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    cpu = _children_cpu() - cpu
    outcomes = DeltaTable(f"{out}/tables/outcomes").to_pyarrow_table(columns=["op_id", "status"]).to_pylist()
    return seconds, cpu, {o["op_id"] for o in outcomes if o["status"] == "completed"}, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000, help="operations in the workload")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds, each contender once a round")
    parser.add_argument("--pyspark", help="pin the wheel venv's pyspark (default: as pip resolves it)")
    args = parser.parse_args(argv)

    _reap_orphans()
    work = Path(tempfile.mkdtemp(prefix="bench-install-"))
    print(f"building the wheel and its venv in {work}", flush=True)
    pin = (f"pyspark=={args.pyspark}",) if args.pyspark else ()
    python = install_wheel(build_wheel(work / "dist"), work / "venv", bytecode=True, also=pin)  # as pip does
    files = work / "files"
    workload = write_workload(str(files), args.ops, args.files, fmt="parquet")
    versions = subprocess.run(
        [str(python), "-c", "import pyspark, spark_purgatory as s; print(pyspark.__version__, s.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=work,  # not the checkout's package: the installed one
    ).stdout.split()
    print(
        f"{workload.ops:,} operations + {workload.events:,} events, {args.files} Parquet files per stream, "
        f"{args.files_per_trigger} per trigger, {args.shards} shards, local[2]; wheel: pyspark {versions[0]} "
        f"({versions[1]}); load average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    user = work / "user"  # the wheel runs outside the checkout, with its own cache
    user.mkdir()
    wheel_env = venv_env(python, XDG_CACHE_HOME=str(work / "cache"))
    contenders = {
        "wheel": lambda out: ([str(python), "-m", "spark_purgatory.job"], wheel_env, user),
        "checkout": lambda out: (
            [sys.executable, str(ROOT / "jobs" / "purgatory_job.py")],
            dict(os.environ),
            ROOT,
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    cpus: dict[str, list[float]] = {name: [] for name in contenders}
    completed: dict[str, set[str]] = {}
    problems: list[str] = []
    rounds = [list(contenders)] + [list(contenders)[:: 1 if r % 2 else -1] for r in range(args.repeat)]
    for number, order in enumerate(rounds):
        for name in order:
            out = work / f"out-{name}-{number}"
            command, env, cwd = contenders[name](out)
            seconds, cpu, done, log = run(
                name, [*command, *_job_args(files, out, args.shards, args.files_per_trigger)], env, cwd, out
            )
            if NOT_IN_USE in log:
                problems.append(f"{name}: {[line for line in log.splitlines() if NOT_IN_USE in line][0]}")
            if number == 0:
                notice = [line for line in log.splitlines() if NOTICE in line]
                label = "first run, untimed" + (
                    " (its JVM dumps the class-data archive at exit)" if name == "wheel" else ""
                )
                print(f"  {name:<9}{seconds:>7.1f} s {cpu:>7.1f} s CPU   {label}", flush=True)
                if notice:
                    print(f"    said: {notice[0].split(' ', 1)[1]}", flush=True)
            else:
                times[name].append(seconds)
                cpus[name].append(cpu)
                print(f"  {name:<9}{seconds:>7.1f} s {cpu:>7.1f} s CPU   round {number}", flush=True)
            if completed.setdefault(name, done) != done:
                problems.append(f"{name}: another run completed other operations")
    if completed["wheel"] != completed["checkout"]:
        problems.append("the wheel and the checkout completed other operations")
    ratios = [w / c for w, c in zip(times["wheel"], times["checkout"], strict=True)]
    cpu_ratios = [w / c for w, c in zip(cpus["wheel"], cpus["checkout"], strict=True)]
    wheel, checkout = (statistics.median(times[name]) for name in ("wheel", "checkout"))
    print(
        f"wheel {wheel:.1f} s, checkout {checkout:.1f} s (medians of {args.repeat}); wheel / checkout "
        f"per round {min(ratios):.2f}-{max(ratios):.2f}x, median {statistics.median(ratios):.2f}x "
        f"(CPU {min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}x, median {statistics.median(cpu_ratios):.2f}x)   "
        f"target <= {TARGET}x: {'met' if statistics.median(ratios) <= TARGET else 'MISSED'}"
    )
    print(f"completed operations: {len(completed['checkout']):,}, the same from both")
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
