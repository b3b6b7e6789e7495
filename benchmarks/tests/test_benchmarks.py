"""Every benchmark runs end to end at a tiny size through the runner, so none can rot.

Speed is not asserted here (benchmarks print measured ratios; docs/performance.md has the
figures); this checks that each benchmark runs as ``python -m benchmarks NAME`` (no script
path, nothing of ``tests/``), that the side-by-side one runs every contender on real Spark and
that the job and ``transformWithStateInPandas`` agree with Spark's join on every completed
operation, and that the reports print each target beside its figure.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench(name: str, *args: str, timeout: int = 900) -> str:
    """Run ``python -m benchmarks NAME args`` from the project's root in a fresh interpreter;
    its output, once it has exited 0."""
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", name, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def _figures(path: Path) -> dict:
    """The figures a benchmark wrote with ``--json``."""
    return json.loads(path.read_text(encoding="utf-8"))["figures"]


def test_repeated_rounds_alternate_the_contenders_and_print_each_ratio_range(tmp_path, monkeypatch, capsys):
    """``--repeat``: round 1 runs every contender, then round 2 every one again in the reverse
    order, each on the same files; the ranges pair each round's runs.  The contenders here are
    stand-ins (no Spark): what a real one returns is checked by the test above."""
    from benchmarks import bench_operator
    from benchmarks.contenders import Run
    from spark_purgatory.config import PurgatoryConfig

    seconds = {"join-delta": [10.0, 12.0], "job-native": [8.0, 6.0], "job": [5.0, 4.0]}
    labels = {"join-delta": "join -> Delta", "job-native": "job, Spark's Delta", "job": "job (delta-rs)"}
    calls: list[tuple[str, list[str]]] = []

    def stand_in(name: str):
        def run(spark, files, config, per_trigger) -> Run:
            calls.append((name, sorted(os.listdir(files.root))))  # nothing left by the run before
            os.mkdir(os.path.join(files.root, "chk"))
            took = seconds[name][sum(1 for called, _ in calls if called == name) - 1]
            return Run(labels[name], took, files.ops + files.events, completed={"a", "b"}, cpu=took / 2)

        return run

    for name in seconds:
        monkeypatch.setitem(bench_operator.CONTENDERS, name, stand_in(name))
    args = bench_operator._arguments(["--smoke", "--contenders", ",".join(seconds), "--repeat", "2"])
    config, root = PurgatoryConfig(shards=2), str(tmp_path)
    runs, figures, agree = bench_operator.run_workload(None, root, "typed", list(seconds), args, config)
    assert [name for name, _ in calls] == list(seconds) + list(reversed(seconds))
    assert all(listing == ["events", "ops"] for _, listing in calls)
    assert agree and runs["job"].seconds == 4.0  # the last round's runs
    out = capsys.readouterr().out
    ranges = out[out.index("over 2 rounds") :]
    assert "join -> Delta" in ranges and "10.0-12.0 s (11.0)" in ranges
    # job (delta-rs) / join -> Delta: 10/5 = 2.00 in round 1, 12/4 = 3.00 in round 2; median 2.5
    assert figures["job_vs_join_delta"] == 2.5
    assert "2.00-3.00x (2.50x)" in ranges
    assert "1.50-1.60x (1.55x)" in ranges  # delta-rs / Spark's Delta: 8/5, 6/4


def test_the_batch_anatomy_reads_wall_jobs_and_the_driver_share_from_an_event_log():
    """``bench_trickle.anatomy`` on a small event log written here: no Spark, milliseconds."""
    from benchmarks.bench_trickle import anatomy

    def progress(batch: int, at_ms: int, rows: int, took: dict) -> str:
        stamp = f"2026-01-01T00:00:{at_ms // 1000:02d}.{at_ms % 1000:03d}Z"
        body = {"batchId": batch, "timestamp": stamp, "durationMs": took, "sources": [{"numInputRows": rows}]}
        return json.dumps(
            {
                "Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent",
                "progress": body,
            }
        )

    epoch = 1767225600000  # 2026-01-01T00:00:00Z

    def job(job_id: int, start: int, end: int, stages: list[int]) -> list[str]:
        return [
            json.dumps(
                {
                    "Event": "SparkListenerJobStart",
                    "Job ID": job_id,
                    "Submission Time": epoch + start,
                    "Stage IDs": stages,
                }
            ),
            json.dumps({"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": epoch + end}),
        ]

    ran = [
        json.dumps({"Event": "SparkListenerStageSubmitted", "Stage Info": {"Stage ID": s}}) for s in (0, 1, 3)
    ]
    lines = [
        progress(0, 0, 510, {"triggerExecution": 900, "addBatch": 800, "queryPlanning": 40, "walCommit": 10}),
        progress(1, 1000, 505, {"triggerExecution": 500, "addBatch": 300, "commitOffsets": 20}),
        progress(2, 1500, 0, {"triggerExecution": 100}),  # no data: not a data micro-batch
        *job(0, 100, 400, [0, 1, 2]),  # stage 2 skipped
        *job(1, 300, 600, [3]),  # overlaps job 0: the union counts
        *job(2, 1100, 1300, [4]),
        *ran,
    ]
    sink = {0: {"collect": 600.0, "record": 50.0, "drain": 20.0, "report": 10.0}}
    first, second = anatomy(lines, sink)
    assert (first["batch"], first["rows"], first["wall_ms"], first["jobs"], first["stages"]) == (
        0,
        510,
        1000,
        2,
        3,
    )
    assert (first["in_jobs_ms"], first["outside_ms"]) == (500, 500)
    # outside jobs: 40 planning + 10 offset log + 800 - 500 in jobs (120 collect, 600 - 500 in the
    # sink's Python, 80 sink steps) + 150 other
    assert (first["planning_ms"], first["offsets_ms"], first["collect_ms"], first["python_ms"]) == (
        40,
        10,
        120,
        100,
    )
    assert (first["record_ms"], first["drain_ms"], first["report_ms"], first["other_ms"]) == (50, 20, 10, 150)
    assert (second["wall_ms"], second["in_jobs_ms"], second["outside_ms"], second["stages"]) == (
        500,
        200,
        300,
        0,
    )
    assert (second["collect_ms"], second["commit_log_ms"], second["other_ms"]) == (100, 20, 180)


def test_the_stages_reader_splits_a_micro_batch_into_its_stages_and_shard_tasks():
    """``bench_stages.micro_batches`` on a small event log written here: a run's micro-batch
    with its routing stage and its stateful stage (two shard tasks and the idle group's);
    another run's stages stay apart; a batch without input rows is left out."""
    from benchmarks.bench_stages import _PROGRESS, micro_batches

    def job(job_id, run, batch, stages):
        props = {"spark.jobGroup.id": run, "streaming.sql.batchId": str(batch), "sql.streaming.queryId": "q"}
        return {"Event": "SparkListenerJobStart", "Job ID": job_id, "Stage IDs": stages, "Properties": props}

    def stage(stage_id, scopes, begin, end):
        rdds = [{"RDD ID": i, "Name": n, "Scope": json.dumps({"name": n})} for i, n in enumerate(scopes)]
        info = {"Stage ID": stage_id, "RDD Info": rdds, "Submission Time": begin, "Completion Time": end}
        return {"Event": "SparkListenerStageCompleted", "Stage Info": info}

    def task(stage_id, ms, cpu_ms, rows=0, py_ms=0):
        sql = [
            {"Name": "records read", "Update": str(rows)},
            {"Name": "time to execute Python code", "Update": str(py_ms)},
        ]
        info = {"Launch Time": 1000, "Finish Time": 1000 + ms, "Accumulables": sql if rows else []}
        metrics = {"Executor CPU Time": cpu_ms * 1_000_000, "Executor Deserialize CPU Time": 0}
        return {
            "Event": "SparkListenerTaskEnd",
            "Stage ID": stage_id,
            "Task Info": info,
            "Task Metrics": metrics,
        }

    def progress(run, batch, rows, add_ms, at):
        p = {"runId": run, "batchId": batch, "numInputRows": rows, "durationMs": {"addBatch": add_ms}}
        return {"Event": _PROGRESS, "progress": {**p, "timestamp": at}}

    events = [
        job(1, "r1", 0, [1, 2]),
        task(1, 40, 30),
        task(1, 50, 20),
        stage(1, ["Scan parquet", "WholeStageCodegen (1)", "Exchange"], 0, 60),
        task(2, 300, 90, rows=1000, py_ms=200),
        task(2, 250, 70, rows=900, py_ms=150),
        task(2, 45, 10),
        stage(2, ["Exchange", "FlatMapGroupsInPandasWithState"], 60, 400),
        progress("r1", 0, 1900, 450, "2026-01-01T00:00:01.000Z"),
        job(2, "r1", 1, [3]),
        stage(3, ["Scan text", "Exchange"], 0, 10),
        progress("r1", 1, 0, 20, "2026-01-01T00:00:02.000Z"),
        job(3, "r2", 0, [4]),
        task(4, 500, 100, rows=10, py_ms=400),
        stage(4, ["Exchange", "FlatMapGroupsInPandasWithState"], 0, 500),
        progress("r2", 0, 10, 520, "2026-01-01T00:00:03.000Z"),
    ]
    runs = micro_batches([json.dumps(e) for e in events])
    assert list(runs) == ["run1", "run2"] and len(runs["run1"]) == 1
    first = runs["run1"][0]
    assert (first["add_ms"], first["route_ms"], first["route_cpu"]) == (450, 60, 50)
    assert (first["state_ms"], first["busy"], first["busy_max_ms"], first["idle_ms"]) == (340, 2, 300, 45)
    assert (first["jvm_cpu"], first["py_ms"]) == (80, 175)
    assert runs["run2"][0]["busy_max_ms"] == 500 and runs["run2"][0]["idle_ms"] == 0


def test_the_batch_anatomy_splits_catalysts_rule_time_by_group_and_micro_batch():
    """``bench_trickle.rule_groups`` on a ``RuleExecutor.dumpTimeSpent()`` text (Spark 4.2's
    layout), then ``per_batch_rules`` on snapshots: no Spark."""
    from benchmarks.bench_trickle import per_batch_rules, rule_groups

    def dump(analysis: int, optimizer: int, delta: int) -> str:
        rows = [
            ("org.apache.spark.sql.catalyst.analysis.Analyzer$ResolveReferences", analysis),
            ("org.apache.spark.sql.catalyst.optimizer.CollapseProject", optimizer),
            ("org.apache.spark.sql.execution.datasources.SchemaPruning", 1_000_000),
            ("org.apache.spark.sql.delta.stats.PrepareDeltaScan", delta),
        ]
        head = "=== Metrics of Analyzer/Optimizer Rules ===\nTotal number of runs: 9\n"
        head += "Total time: 0.1 seconds\n\n"
        head += f"{'Rule':<99}{'Effective Time / Total Time':<48}Effective Runs / Total Runs\n\n"
        return head + "".join(f"{r:<99}{f'7 / {ns}':<48}{'1 / 3':<47}\n" for r, ns in rows)

    assert rule_groups(dump(2_000_000, 5_000_000, 500_000)) == {
        "analyzer": 2.0,
        "optimizer": 6.0,  # Catalyst's optimizer and Spark's data-source rules
        "extensions": 0.5,
    }
    snapshots = {
        3: rule_groups(dump(2_000_000, 5_000_000, 0)),
        4: rule_groups(dump(3_000_000, 9_000_000, 0)),
        6: rule_groups(dump(4_000_000, 9_500_000, 0)),  # batch 5's progress was not read
    }
    assert per_batch_rules(snapshots) == {
        4: {"rules_analyzer_ms": 1.0, "rules_optimizer_ms": 4.0, "rules_extensions_ms": 0.0}
    }


def test_the_pending_workload_leaves_two_thirds_pending_and_memory_counts_the_process_tree(tmp_path):
    """``pending``'s workload: operations in consecutive event-time files, a third confirmed one
    second later in the same file index; ``harness.tree_rss_mb`` counts this process at least."""
    import pyarrow.parquet as pq

    from benchmarks.bench_pending import DAY_MS, write_workload
    from benchmarks.harness import tree_rss_mb

    ops, events = write_workload(str(tmp_path), files=3, per_file=30)
    assert (ops, events) == (90, 30)
    tables = [pq.read_table(tmp_path / "ops" / f"part-{f:05d}.parquet") for f in range(3)]
    assert [t.num_rows for t in tables] == [30, 30, 30]
    assert tables[0]["ts"].to_pylist()[-1] < tables[1]["ts"].to_pylist()[0]  # cut by event time
    assert set(tables[2]["timeout_ms"].to_pylist()) == {DAY_MS}
    confirmed = pq.read_table(tmp_path / "events" / "part-00001.parquet")["key"].to_pylist()
    assert confirmed == [f"k{i}" for i in range(30, 60) if i % 3 == 0]
    assert tree_rss_mb(os.getpid()) > 10


def test_memory_by_kind_tells_the_driver_the_jvm_and_its_python_workers_apart(tmp_path):
    """``harness.rss_by_kind`` (the soak's memory columns): this process is the Python driver,
    a ``java`` under it the JVM, the Python processes under that the workers; the kinds add
    up to the tree.  ``cpu_by_kind`` (``operator``'s CPU by process) by the same kinds: the
    worker's busy loop counts as the workers', and as theirs beside the main thread
    (``worker_threads_cpu``: it runs in a thread), and the kinds add up to ``cpu_seconds``.  The
    "JVM" here is Python started as ``java`` (argv[0] is what counts)."""
    import signal
    import subprocess
    import time

    from benchmarks.harness import (
        cpu_by_kind,
        cpu_seconds,
        jvm_pid,
        rss_by_kind,
        tree_rss_mb,
        worker_threads_cpu,
    )

    java = tmp_path / "java"
    java.symlink_to(sys.executable)
    ready = tmp_path / "worker-pid"
    worker = (
        "import os, pathlib, threading, time\nbegan = time.process_time()\n"
        "def spin():\n    while time.process_time() - began < 0.4: pass\n"
        "spinner = threading.Thread(target=spin); spinner.start(); spinner.join()\n"
        f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(60)"
    )
    # the worker by Python's own name (``sys.executable`` under the "java" link is the link)
    starts = (
        f"import subprocess, time; subprocess.Popen([{sys.executable!r}, '-c', {worker!r}]); time.sleep(60)"
    )
    jvm = subprocess.Popen([str(java), "-c", starts])
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        kinds = rss_by_kind(os.getpid())
        assert jvm_pid(os.getpid()) == jvm.pid
        assert kinds["python driver"] > 10 and kinds["driver JVM"] > 1 and kinds["python workers"] > 1, kinds
        assert abs(sum(kinds.values()) - tree_rss_mb(os.getpid())) < 50  # the same tree, moments apart
        cpu = cpu_by_kind()
        assert cpu["python workers"] >= 0.35 and cpu["python driver"] > 0, cpu
        assert abs(sum(cpu.values()) - cpu_seconds()) < 0.2
        assert worker_threads_cpu() >= 0.35  # the worker's loop ran in a thread of its own
    finally:
        if ready.exists() and ready.read_text():
            os.kill(int(ready.read_text()), signal.SIGKILL)
        jvm.kill()
        jvm.wait()


# -- the runner, and each benchmark at a tiny size -------------------------------------------------


def test_the_runner_lists_every_benchmark_and_each_one_is_there():
    """``python -m benchmarks`` names every benchmark with its line; each name's module and
    function import (a benchmark reaches nothing of ``tests/``, and no module edits
    ``sys.path``: the runner's package is the only way in)."""
    import importlib

    from benchmarks.__main__ import BENCHMARKS

    out = _bench("--help")
    for name, benchmark in BENCHMARKS.items():
        assert f"  {name} " in out and benchmark.summary in out
        assert callable(
            getattr(importlib.import_module(f"benchmarks.{benchmark.module}"), benchmark.function)
        )
    for path in sorted(Path(ROOT, "benchmarks").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "sys.path" not in text, path
        assert not re.search(r"^\s*(from|import) tests\b", text, re.MULTILINE), path


def _smoke(*names: str, figures: Path | None = None, timeout: int = 1800) -> dict[str, str]:
    """``python -m benchmarks smoke NAMES``: each benchmark's output, by name (its figures
    into ``figures``/NAME.json when given)."""
    out = _bench("smoke", *(("--json", str(figures)) if figures else ()), *names, timeout=timeout)
    parts = re.split(r"^== ([\w-]+)(?![\w:-]).*$", out, flags=re.MULTILINE)  # a run's first line
    found = dict(zip(parts[1::2], parts[2::2], strict=True))
    assert set(found) == set(names)
    for name, text in found.items():
        assert f"== {name}: ok" in text
    return found


def test_the_spark_free_benchmarks_run_one_after_another(tmp_path):
    """``engine`` (its measuring run in the runner's process), ``wheel``, ``rescale`` and
    ``profile-shard``, which drives ``ShardStep`` as the operator does and prints its phases."""
    out = _smoke("engine", "wheel", "rescale", "profile-shard")
    assert "| 1,000 |" in out["engine"] and "Kafka linked-list port" in out["wheel"]
    assert '"from": 2, "to": 3' in out["rescale"]
    for step in ("shard step", "    load", "    process", "    save", "    output", "pandas -> arrow"):
        assert step in out["profile-shard"]
    _bench("wheel", "--n", "20000", "--repeat", "1", "--json", str(tmp_path / "w.json"))
    wheel = json.loads((tmp_path / "w.json").read_text(encoding="utf-8"))
    assert wheel["benchmark"] == "wheel" and wheel["options"]["n"] == 20000 and wheel["figures"]["ratio"] > 0


@pytest.mark.jars("delta", "kafka", "kafka-broker")
def test_the_spark_benchmarks_run_one_after_another_in_one_jvm(tmp_path):
    """The Spark benchmarks, each at its tiny size, their runs in fresh processes made in the
    runner's, on the session the benchmark before left running where Spark's event log allows
    (``harness.stop``).  ``operator`` runs every contender on real Spark once: on the typed
    workload all but the join, whose twin into Delta (``join-delta``) is the reference there,
    the join and the job on JSON lines, and its scaling series; the job and
    ``transformWithStateInPandas`` agree with Spark's join on every completed operation, and
    the report prints each target beside its figure; the others print their tables and ratios.
    ``stages`` reads the event log of its own run of the one contender no other smoke run
    runs (``stateful-routed``).  ``latency`` runs once, on a trickle with the output topic
    (``_the_latency_run``).

    ``connect`` runs without a round (its command line, workload, report and figures): a round
    of its classic contender alone would be a job in a fresh local process, which ``install``'s
    smoke run (``test_the_install_and_soak_benchmarks_run_the_job_as_a_process``) and the job's
    tests are too, and the job over Spark Connect is ``tests/spark/test_distributed.py``'s."""
    # trickle and stages last: each starts a session of its own (Spark's event log), the
    # others run on the one the benchmark before them left running
    names = (
        *("operator", "pending", "first-batch", "plan", "kafka", "latency", "inspect", "handoff"),
        *("connect", "trickle", "stages"),
    )
    out = _smoke(*names, figures=tmp_path)
    _the_operator_run(out["operator"], _figures(tmp_path / "operator.json"))
    _the_latency_run(out["latency"], _figures(tmp_path / "latency.json"))
    assert "the job's last micro-batch / its first" in out["pending"]
    assert "the driver's share" in out["trickle"] and "Catalyst's rules per micro-batch" in out["trickle"]
    assert "start() / the join, first micro-batch" in out["first-batch"]
    assert "Py4J calls" in out["plan"]
    assert "join / job, wall time" in out["kafka"] and "the same from every run" in out["kafka"]
    assert "pending by shard" in out["inspect"] and "at-risk" in out["inspect"]
    assert "floor CPU / text's" in out["handoff"] and "µs CPU per row" in out["handoff"]
    assert "stateful, routed rows (no work)" in out["stages"] and "busy_max_ms" in out["stages"]
    assert "400 operations" in out["connect"] and "every run's outputs equal" in out["connect"]
    for name in names:
        assert _figures(tmp_path / f"{name}.json") is not None


def _the_latency_run(out: str, results: dict) -> None:
    """``latency``'s report and figures (``smoke``'s options: a trickle with ``--output kafka``
    at a fractional trigger, one run): the trickle expires every operation left (none missing
    from the table or the topic, none of the wrong status) and prints the trickle's bound
    beside its figures; a read_committed consumer of the output topic receives every outcome
    the table commits, once and of the right status, and the report prints the topic's lags
    beside the table's with where they go."""
    trickle = [line.split() for line in out.splitlines() if line.startswith("trickle every 1.5s")]
    expiries = next(cells for cells in trickle if cells[3:5] == ["expiry", "trickle"])
    assert int(expiries[5]) > 0  # rows
    assert trickle and all(cells[9] == "0" and cells[-1] == "0" for cells in trickle)  # missing: table, topic
    assert "wrong status: 0" in out and "trickle bound: quiet-stream bound" in out
    (figures,) = results["configs"]
    rows = {}
    for output in ("", "topic_"):
        kinds = (f"{output}expiry_", f"{output}completion_")
        phases = {k[len(output) :]: v for k, v in figures.items() if k.startswith(kinds)}
        assert all(p["missing"] == 0 for p in phases.values()), phases
        assert figures[f"{output}wrong_status"] == 0
        rows[output] = {k: p["rows"] for k, p in phases.items()}
    assert rows["topic_"] == rows[""] and sum(rows[""].values()) > 0
    assert figures["topic_duplicates"] == 0
    assert set(figures["topic_split_p50_s"]) == {"decided", "produced", "received"}
    assert "trigger 0.5 s" in out and "topic, medians: decided" in out and "load average" in out
    assert "the sink's record step" in out and figures["record_ms_p50"] > 0


def _the_operator_run(out: str, results: dict) -> None:
    """``operator``'s report and figures (``smoke``'s options: every contender but the join on
    the typed workload, against the join into Delta, the join and the job on JSON lines, the
    scaling series)."""
    for contender in (
        "floor (read, shuffle)",
        "stateful floor (no work)",
        "stream-stream left-outer join",
        "job (operator + Delta)",
        "transformWithStateInPandas",
    ):
        assert contender in out
    assert "DISAGREE" not in out
    for target in ("target <= 1.3x", "target >= 1.5x", "target >= 6.0x", "target <= 2.0x"):
        assert target in out
    typed = out[: out.index("\njson:")]
    assert "stream-stream left-outer join" not in typed  # its twin into Delta is the reference there
    assert typed.count("0 fewer, 0 more: agree") == 3  # the job on each writer and TWS, against the join
    side_by_side = typed[typed.index("Delta writers side by side") :]
    for line in (
        "join -> Delta (Spark's writer)",
        "job, Spark's Delta writer",
        "job (operator + Delta)",
        "job (delta-rs) / join -> Delta",
        "job: delta-rs / Spark's Delta writer",
    ):
        assert line in side_by_side
    assert set(results["workloads"]) == {"typed", "json"}
    for workload in results["workloads"].values():
        assert workload["figures"]["agree"] == 1.0
        assert workload["figures"]["job_fewer"] == 0
    assert "job_vs_join" in results["workloads"]["json"]["figures"]
    typed_figures = results["workloads"]["typed"]["figures"]
    assert {
        "job_vs_floor",
        "job_vs_tws",
        "job_vs_stateful",
        "job_vs_join_delta",
        "native_vs_join_delta",
    } <= set(typed_figures)
    assert typed_figures["job-native_fewer"] == 0
    assert "job_vs_tws" not in results["workloads"]["json"]["figures"]  # not a contender there
    assert typed_figures["tws_fewer"] == 0
    assert results["scaling_ratio"] > 0


def test_the_install_and_soak_benchmarks_run_the_job_as_a_process():
    """``install``'s untimed run of the checkout's job script as a process (no wheel built: the
    tests of the wheel run it from its venv); the soak, a few seconds on files without
    faults, then its end-of-input run and the exactly-once check."""
    out = _smoke("install", "soak")
    assert "the same from every run" in out["install"] and "CHECK FAILED" not in out["install"]
    assert "lost 0, duplicated 0, differing 0" in out["soak"]


def test_a_child_with_another_checkout_imports_that_checkouts_package_and_these_benchmarks(tmp_path):
    """``harness.child_env(checkout)`` (``engine --against``, ``trickle``'s ``job-base``,
    ``plan --base``): the child imports the other checkout's ``spark_purgatory``, and the
    benchmarks of this one, even run from this checkout's root."""
    from benchmarks import harness

    (tmp_path / "spark_purgatory").mkdir()
    (tmp_path / "spark_purgatory" / "__init__.py").write_text("", encoding="utf-8")
    where = "import os, benchmarks as b, spark_purgatory as s; print(os.path.realpath(s.__file__))"
    where += "; print(os.path.realpath(b.__file__))"
    with harness.child_env(str(tmp_path)) as env:
        done = subprocess.run(
            [sys.executable, "-c", where], env=env, cwd=ROOT, capture_output=True, text=True, check=True
        )
    package, benchmarks = done.stdout.split()
    assert Path(package) == tmp_path.resolve() / "spark_purgatory" / "__init__.py"
    assert Path(benchmarks) == Path(ROOT, "benchmarks", "__init__.py").resolve()
