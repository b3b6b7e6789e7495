"""Where users run the job besides a checkout: ``install``, the job from its installed wheel
against the job from the checkout; ``connect``, the job over a Spark Connect session against a
classic one.  Both on the same typed files (``contenders.write_workload``), each run a fresh
process, the contenders alternated round by round, the outputs compared.

The wheel's venv, as a user gets it, is ``testbed.wheel``'s (the tests make it the same way).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from testbed.wheel import ROOT, build_wheel, install_wheel, venv_env

TARGET = 1.15  # wheel time / checkout time
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


def install(argv: list[str] | None = None) -> int:
    """The job from an installed wheel against the job from the checkout, on the same files.

    What issue 63 measured: the wheel built from this checkout (``make dist``'s ``uv build``), installed
    with uv into a fresh venv outside the checkout with nothing else
    (``install_wheel``: pyspark resolves as pip resolves it;
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

    ``--python`` takes a venv's Python where the wheel is installed already instead (no build);
    ``--contenders checkout`` runs the checkout alone (the smoke run's: no wheel at all).

        python -m benchmarks install                       # 200k, 3 rounds
        python -m benchmarks install --repeat 5 --pyspark 4.2.0
        python -m benchmarks install --ops 2000 --repeat 1 # seconds-sized
    """
    parser = harness.parser("install", install.__doc__, repeat=3)
    parser.add_argument("--ops", type=int, default=200_000, help="operations in the workload")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--pyspark", help="pin the wheel venv's pyspark (default: as pip resolves it)")
    parser.add_argument("--python", help="a venv's Python with the wheel installed (default: build one)")
    parser.add_argument("--contenders", default="wheel,checkout", help="of wheel, checkout")
    args = parser.parse_args(argv)
    names = harness.names(args.contenders)
    if not names or set(names) - {"wheel", "checkout"}:
        parser.error(f"contenders of wheel, checkout: {args.contenders!r}")
    from benchmarks.contenders import write_workload

    _reap_orphans()
    work = Path(tempfile.mkdtemp(prefix="bench-install-"))
    files = work / "files"
    workload = write_workload(str(files), args.ops, args.files, fmt="parquet")
    print(
        f"{workload.ops:,} operations + {workload.events:,} events, {args.files} Parquet files per stream, "
        f"{args.files_per_trigger} per trigger, {args.shards} shards, local[2]; "
        f"load average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    contenders = {
        "checkout": ([sys.executable, str(ROOT / "jobs" / "purgatory_job.py")], dict(os.environ), ROOT),
    }
    if "wheel" in names:
        contenders["wheel"] = _wheel(work, args.python, args.pyspark)
    contenders = {name: contenders[name] for name in names}
    rounds = harness.Rounds(names, args.repeat)
    completed: dict[str, set[str]] = {}
    problems: list[str] = []
    # round 0 untimed (the wheel's JVM dumps its class-data archive at exit), then --repeat rounds
    for number, name in harness.alternated(names, args.repeat + 1):
        out = work / f"out-{name}-{number}"
        command, env, cwd = contenders[name]
        job_args = _job_args(files, out, args.shards, args.files_per_trigger)
        seconds, cpu, done, log = run(name, [*command, *job_args], env, cwd, out)
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
            rounds.add(name, {"seconds": seconds, "cpu": cpu})
            print(f"  {name:<9}{seconds:>7.1f} s {cpu:>7.1f} s CPU   round {number}", flush=True)
        if completed.setdefault(name, done) != done:
            problems.append(f"{name}: another run completed other operations")
    if len(set(map(frozenset, completed.values()))) > 1:
        problems.append("the wheel and the checkout completed other operations")
    ratios = rounds.ratios("wheel", "checkout", "seconds")
    cpu_ratios = rounds.ratios("wheel", "checkout", "cpu")
    if ratios:
        print(f"over {args.repeat} rounds, min-max (median):")
        print(rounds.table({"seconds": "wall s", "cpu": "CPU s"}))
        verdict = "met" if statistics.median(ratios) <= TARGET else "MISSED"
        print(harness.ratio_line("wheel / checkout, wall", ratios, f"target <= {TARGET}x: {verdict}"))
        print(harness.ratio_line("wheel / checkout, CPU", cpu_ratios))
    if not problems:
        print(f"completed operations: {len(completed[names[0]]):,}, the same from every run")
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    figures = {"wheel_vs_checkout": ratios, "wheel_vs_checkout_cpu": cpu_ratios, **rounds.json()}
    harness.write_json(args.json, "install", args, figures)
    if problems:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


def _wheel(work: Path, python: str | None, pyspark: str | None) -> tuple[list[str], dict[str, str], Path]:
    """The wheel's contender: its command, environment and working directory (outside the
    checkout, with a cache of its own); the wheel built and installed into a venv under
    ``work`` unless ``python`` names a venv's interpreter that has it."""
    if python is None:
        print(f"building the wheel and its venv in {work}", flush=True)
        pin = (f"pyspark=={pyspark}",) if pyspark else ()
        wheel = build_wheel(work / "dist")
        python = str(install_wheel(wheel, work / "venv", also=pin))
    user = work / "user"
    user.mkdir()
    versions = subprocess.run(
        [python, "-c", "import pyspark, spark_purgatory as s; print(pyspark.__version__, s.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=user,  # not the checkout's package: the installed one
    ).stdout.split()
    print(f"the wheel: pyspark {versions[0]} ({versions[1]})", flush=True)
    env = venv_env(Path(python), XDG_CACHE_HOME=str(work / "cache"))
    return [python, "-m", "spark_purgatory.job"], env, user


# -- over Spark Connect ----------------------------------------------------------------------------

CONNECT_CONTENDERS = ("classic", "classic-sql", "connect")
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


def _connect_child(which: str, root: str, run: str, per_trigger: int, url: str, server_pid: int) -> dict:
    """One contender in this fresh process (``--one``): its figures and outputs."""
    import spark_purgatory.job as job

    settings = _settings(root, run, per_trigger)
    if which == "connect":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(url).getOrCreate()  # as a notebook's start() has it
    else:
        from spark_purgatory.runtime.session import local_session

        # the session job.run would build, built here before the clock
        spark = local_session("spark-purgatory", master="local[2]", shuffle_partitions=SHARDS + 1)
    spark.range(1).count()

    def cpu() -> float:
        return harness.cpu_seconds() + (harness.cpu_seconds(server_pid) if server_pid else 0.0)

    cpu0, t0 = cpu(), time.perf_counter()
    job.run(settings, spark=spark)
    seconds, used = time.perf_counter() - t0, cpu() - cpu0
    # the micro-batches from Spark's commit log: over Connect the sink, which counts them for
    # job.run's totals, runs in the server, and the client's totals stay at 0
    commits = [n for n in os.listdir(f"{settings.checkpoint_path}/commits") if n.isdigit()]
    spark.stop()
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
    """``which`` in a fresh process; its figures."""
    env = dict(os.environ)
    if which == "classic-sql":
        env["SPARK_PURGATORY_JARS"] = os.path.join(root, "no-jars")  # an empty folder
        os.makedirs(env["SPARK_PURGATORY_JARS"], exist_ok=True)
    argv = ["--one", which, "--root", root, "--run", run, "--files-per-trigger", str(per_trigger)]
    return harness.child("connect", [*argv, "--url", url, "--server-pid", str(server_pid)], env=env)


def measure(which: str, root: str, run: str, per_trigger: int) -> dict:
    """One run of ``which``; for Connect, a fresh server around it."""
    if which != "connect":
        return _one(which, root, run, per_trigger)
    from testbed.services import connect_server

    with connect_server(os.path.join(root, run, "server"), conf=_server_conf()) as url:
        return _one(which, root, run, per_trigger, url, harness.jvm_pid(os.getpid()) or 0)


def connect(argv: list[str] | None = None) -> int:
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
    against classic's, round by round (every other round in the reverse order).  The outcomes
    (op_id, status), unmatched events and rejected rows of every run must equal the first run's:
    the exit status is 1 when they do not.

        python -m benchmarks connect                  # 200k typed, 1 round
        python -m benchmarks connect --repeat 2       # alternated, 2 rounds
        python -m benchmarks connect --contenders classic,connect --ops 20000
    """
    parser = harness.parser("connect", connect.__doc__)
    parser.add_argument("--ops", type=int, default=200_000, help="operations in the workload")
    parser.add_argument("--files", type=int, default=20, help="files per stream")
    parser.add_argument("--files-per-trigger", type=int, default=2)
    parser.add_argument(
        "--contenders", default=",".join(CONNECT_CONTENDERS), help=f"of {', '.join(CONNECT_CONTENDERS)}"
    )
    parser.add_argument("--one", choices=CONNECT_CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        figures = _connect_child(
            args.one, args.root, args.run, args.files_per_trigger, args.url, args.server_pid
        )
        print(json.dumps(figures))
        return 0
    contenders = harness.names(args.contenders)
    unknown = sorted(set(contenders) - set(CONNECT_CONTENDERS))
    if unknown:
        parser.error(f"unknown contenders {unknown}; of {', '.join(CONNECT_CONTENDERS)}")
    from benchmarks.contenders import write_workload

    rounds = harness.Rounds(contenders, args.repeat)
    with tempfile.TemporaryDirectory() as root:
        files = write_workload(root, args.ops, args.files, fmt="parquet")
        print(
            f"{files.ops:,} operations + {files.events:,} events, typed Parquet, {args.files} files per "
            f"stream, {args.files_per_trigger} per trigger; the job on local[2], {SHARDS} shards, delta-rs",
            flush=True,
        )
        reference: dict | None = None
        agree = True
        for round_no, which in rounds:
            r = measure(which, root, f"{which}-{round_no}", args.files_per_trigger)
            outputs = {k: r.pop(k) for k in ("outcomes", "unmatched", "rejected")}
            rounds.add(which, r)
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
    print(f"over {args.repeat} rounds, min-max (median):")
    print(rounds.table({"seconds": "wall s", "cpu": "CPU s"}))
    ratios = {}
    for which in (c for c in contenders if c != "classic" and "classic" in contenders):
        ratios[which] = {k: rounds.ratios(which, "classic", k) for k in ("seconds", "cpu")}
        print(harness.ratio_line(f"{which} / classic, wall", ratios[which]["seconds"]))
        print(harness.ratio_line(f"{which} / classic, CPU", ratios[which]["cpu"]))
    print("every run's outputs equal" if agree else "OUTPUTS DIFFER between runs")
    harness.write_json(args.json, "connect", args, {"vs_classic": ratios, **rounds.json()})
    return 0 if agree else 1
