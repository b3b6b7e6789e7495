"""Every benchmark runs end to end at a tiny size through the runner, so none can rot.

Speed is not asserted here (benchmarks print measured ratios; docs/performance.md has the
figures); this checks that each benchmark runs as ``python -m benchmarks NAME`` (no script
path, nothing of ``tests/``), that the side-by-side one runs every contender on real Spark on
every workload and that the job and ``transformWithStateInPandas`` agree with Spark's join on
every completed operation, and that the reports print each target beside its figure.
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


@pytest.mark.jars("delta")
def test_the_comparison_and_scaling_harness_runs_and_agrees_with_the_join(tmp_path):
    figures_file = tmp_path / "figures.json"
    # every contender on the first workload, the Delta writers' too; the floor, the join and the
    # job on the others
    contenders = "floor,stateful,join,job,tws,join-delta,job-native"
    out = _bench(
        "operator",
        *("--smoke", "--contenders", contenders, "--other-contenders", "floor,join,job"),
        *("--json", str(figures_file)),
    )
    for contender in (
        "floor (read, shuffle)",
        "floor (read, from_json, shuffle)",
        "stateful floor (no work)",
        "stream-stream left-outer join",
        "job (operator + Delta)",
        "transformWithStateInPandas",
    ):
        assert contender in out
    assert "DISAGREE" not in out
    for target in ("target <= 1.3x", "target >= 1.5x", "target >= 6.0x", "target <= 2.0x"):
        assert target in out
    typed = out[: out.index("\nskewed:")]
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
    results = _figures(figures_file)
    assert set(results["workloads"]) == {"typed", "skewed", "json"}
    for workload in results["workloads"].values():
        assert workload["figures"]["agree"] == 1.0
        assert workload["figures"]["job_fewer"] == 0
        assert set(workload["figures"]) >= {"job_vs_floor", "job_vs_join"}
    typed_figures = results["workloads"]["typed"]["figures"]
    assert {"job_vs_tws", "job_vs_stateful", "job_vs_join_delta", "native_vs_join_delta"} <= set(
        typed_figures
    )
    assert typed_figures["job-native_fewer"] == 0
    assert "job_vs_tws" not in results["workloads"]["json"]["figures"]  # not a contender there
    assert typed_figures["tws_fewer"] == 0
    assert results["scaling_ratio"] > 0


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


def test_the_connect_bench_runs_the_job_over_connect_with_the_classic_jobs_outputs():
    """The job handed a remote session (a Connect server on loopback) writes the outcomes,
    unmatched events and rejected rows the classic job writes from the same files."""
    out = _bench("connect", "--ops", "400", "--files", "2", "--contenders", "classic,connect")
    assert "round 1 connect" in out and "connect / classic, CPU:" in out
    assert "every run's outputs equal" in out


def test_the_latency_bench_expires_every_operation_on_a_trickle_and_prints_its_bound():
    """``latency --configs trickle``, tiny: a live query whose events input keeps
    trickling after the operations stop expires every operation left (none missing, none of
    the wrong status), and the report prints the trickle's bound beside its figures."""
    out = _bench(
        "latency",
        *("--configs", "trickle", "--load-seconds", "3", "--rate", "5", "--complete", "0.5"),
        *("--timeout-min", "2", "--timeout-max", "4", "--trickle-gap", "1.5", "--give-up", "120"),
        timeout=600,
    )
    trickle = [line.split() for line in out.splitlines() if line.startswith("trickle every 1.5s")]
    expiries = next(cells for cells in trickle if cells[3:5] == ["expiry", "trickle"])
    assert int(expiries[5]) > 0 and expiries[-1] == "0"  # rows, missing
    assert all(cells[-1] == "0" for cells in trickle)
    assert "wrong status: 0" in out and "trickle bound: quiet-stream bound" in out


def test_the_shard_profile_runs_the_operators_shard_step():
    """``profile-shard`` drives the shard step with a stand-in for Spark's GroupState: when
    the step uses more of GroupState, the stand-in must follow (it had not, once)."""
    out = _bench("profile-shard", "--ops", "2000", "--batches", "2", "--staged", "--segments", timeout=300)
    for step in ("shard step", "Purgatory.process", "save_state", "output_table", "staging", "staged output"):
        assert step in out


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
    up to the tree.  The "JVM" here is Python started as ``java`` (argv[0] is what counts)."""
    import signal
    import subprocess
    import time

    from benchmarks.harness import jvm_pid, rss_by_kind, tree_rss_mb

    java = tmp_path / "java"
    java.symlink_to(sys.executable)
    ready = tmp_path / "worker-pid"
    worker = (
        f"import os, pathlib, time; pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(60)"
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


def test_the_spark_free_benchmarks_run_and_write_their_figures(tmp_path):
    """``engine`` (a child process per checkout), ``wheel`` and ``rescale``, tiny: each prints
    its table and writes its figures as JSON."""
    engine = _bench("engine", "--pending", "0,1000", "--repeat", "2", "--json", str(tmp_path / "e.json"))
    assert "| 1,000 |" in engine
    assert (
        json.loads((tmp_path / "e.json").read_text())["figures"]["checkouts"][0]["rows"][1]["pending"] == 1000
    )
    wheel = _bench("wheel", "--n", "20000", "--repeat", "1", "--json", str(tmp_path / "w.json"))
    assert (
        "Kafka linked-list port" in wheel
        and json.loads((tmp_path / "w.json").read_text())["figures"]["ratio"] > 0
    )
    _bench("rescale", "--pending", "2000", "--from", "2", "--to", "3", "--json", str(tmp_path / "r.json"))
    (done,) = _figures(tmp_path / "r.json")["rescales"]
    assert (done["from"], done["to"]) == (2, 3) and done["operations_and_stubs"] >= 2000


def test_the_pending_bench_runs_each_contender_in_its_own_process(tmp_path):
    out = _bench(
        "pending",
        *("--files", "2", "--per-file", "300", "--repeat", "1", "--contenders", "job,stateful"),
        *("--sample", "0.2", "--json", str(tmp_path / "p.json")),
    )
    assert "job time / the stateful floor's" in out
    runs = _figures(tmp_path / "p.json")["runs"]
    assert runs["job"][0]["completed"] == 200 and runs["stateful"][0]["peak_mb"] > 0


def test_the_trickle_bench_reads_each_micro_batch_from_the_event_log():
    out = _bench("trickle", "--smoke", "--contenders", "job,floor")
    assert "the driver's share" in out and "job - floor, outside jobs" in out


@pytest.mark.jars("kafka", "kafka-broker", "delta")
def test_the_kafka_bench_runs_the_job_and_the_join_on_the_same_topics():
    out = _bench("kafka", "--ops", "300", "--partitions", "1", "--repeat", "1")
    assert "join / job, wall time" in out and "the same from every run" in out


def test_the_handoff_bench_times_each_layout():
    out = _bench("handoff", "--ops", "300", "--repeat", "1", "--layouts", "text,floor")
    assert "floor CPU / text's" in out and "µs CPU per row" in out


def test_the_inspect_bench_reads_a_checkpoint_it_built():
    out = _bench("inspect", "--ops", "500", "--shards", "2", "--files", "2", "--repeat", "1")
    assert "pending by shard" in out and "at-risk" in out


def test_the_startup_benches_time_start_and_its_plan_in_fresh_processes():
    first = _bench("first-batch", "--repeat", "1")
    assert "start() / the join, first micro-batch" in first and "target <= 5 s" in first
    plan = _bench("plan", "--repeat", "1")
    assert "Py4J calls" in plan


def test_the_install_bench_runs_the_job_from_a_venv_and_from_the_checkout():
    """``install --python``: a venv's Python with the package (here the dev venv's, so no wheel
    is built) against the checkout's job script."""
    out = _bench("install", "--python", sys.executable, "--ops", "300", "--files", "2", "--repeat", "1")
    assert "wheel / checkout, wall" in out and "the same from both" in out and "CHECK FAILED" not in out


def test_the_soak_runs_the_job_and_checks_its_outcomes_exactly_once():
    out = _bench(
        "soak", "--minutes", "0.4", "--input", "files", "--faults", "", "--rate", "20", "--report", "10"
    )
    assert "lost 0, duplicated 0, differing 0" in out
