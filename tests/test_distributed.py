"""The job on a real standalone cluster (two one-core workers on loopback).

This is what catches closures that do not serialise and state that assumes one process:
the shards' state lives in executors' state stores, the driver only stages and commits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cluster import standalone_cluster
from crash_harness import JOB, ROOT, check, read_table, reference

from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.workload import generate, write_json_lines

pytestmark = pytest.mark.spark


def test_job_on_a_standalone_cluster_gives_the_engine_results_across_a_rescale(tmp_path):
    """Begun with 2 shards on half of the input, stopped, rescaled to 4 (``spark-purgatory
    rescale``, no JVM) and continued on the rest: the tables equal the engine's over all the
    input, the metrics table has the new layout's shards from the next micro-batch on, and
    both workers ran shard calls of the new layout.

    Operations wait 5 s and the watermark trails by 2 s, so some expire in each run (pending
    operations carried across the rescale expire in the new layout); 5% watch two keys (cross-shard
    stubs and relays are re-split too).  The files are cut in event-time order, both inputs
    at the same times, so no row of the second half is late.
    """
    from spark_purgatory.cli import main as cli

    work = generate(1500, seed=21, ops_per_second=100, timeout_ms=5_000, multi_key=0.05)
    staged = {kind: tmp_path / f"all-{kind}" for kind in ("ops", "events")}
    write_json_lines(work, str(staged["ops"]), str(staged["events"]), files=6, malformed=4)
    settings = {"source.max.files.per.trigger": "3", "watermark.delay": "2 seconds"}
    chk, cluster, batches = str(tmp_path / "chk"), str(tmp_path / "cluster"), []
    with standalone_cluster(cluster, env={"PURGATORY_STATE_LOG": "1"}) as master:
        for shards in (2, 4):
            if shards != 2:
                assert cli(["rescale", "--checkpoint", chk, "--shards", str(shards)]) == 0
            for kind, source in staged.items():  # the next 3 files of each input
                (tmp_path / kind).mkdir(exist_ok=True)
                for name in sorted(os.listdir(source))[:3]:
                    os.replace(source / name, tmp_path / kind / name)
            done = subprocess.run(
                [sys.executable, JOB, "--ops-path", str(tmp_path / "ops"),
                 "--events-path", str(tmp_path / "events"), "--output-path", str(tmp_path / "out"),
                 "--checkpoint-path", chk, "--conf", os.path.join(ROOT, "conf", "local.conf"),
                 "--set", f"job.master={master}", "--set", f"purgatory.shards={shards}",
                 *(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            batches.append({int(line.split()[2]) for line in done.stdout.splitlines() if " batch " in line})
    assert all(batches) and not os.listdir(staged["ops"])  # each run ran micro-batches; all input read
    local = {
        k: v
        for k, v in read_properties(os.path.join(ROOT, "conf", "local.conf")).items()
        if not k.startswith("job.")
    }
    outcomes, unmatched = reference(work, PurgatoryConfig.from_mapping({**local, **settings}))
    tables = {n: read_table(str(tmp_path / "out" / n), None, n) for n in TABLES}
    assert (tables["outcomes"]["status"] == "expired").any()
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})
    # a metrics row per (micro-batch, shard): 2 shards + the cross-shard group, then 4 + 1
    metrics = tables["metrics"]
    layout = [set(metrics[metrics["batch_id"].isin(run)]["shard"].astype(int)) for run in batches]
    assert layout == [{0, 1, 2}, set(range(5))], layout
    # the second run's executors, one per worker, each logged shard calls (PURGATORY_STATE_LOG)
    second = sorted(os.listdir(os.path.join(cluster, "work")))[-1]  # app ids sort by start time
    called = {}
    for executor in os.listdir(os.path.join(cluster, "work", second)):
        with open(os.path.join(cluster, "work", second, executor, "stderr"), encoding="utf-8") as f:
            logged = [line.split("purgatory-state ", 1)[1] for line in f if "purgatory-state {" in line]
        called[executor] = {json.loads(line)["shard"] for line in logged}
    assert len(called) == 2 and all(called.values()), called  # both workers ran shard tasks
    assert set().union(*called.values()) <= set(range(5))


def test_operator_through_a_spark_connect_session(tmp_path):
    """Databricks shared/serverless compute is Spark Connect: no sparkContext, no _jvm."""
    from cluster import connect_server
    from deltalake import DeltaTable

    work = generate(600, seed=4, ops_per_second=50)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=4, malformed=2)
    with connect_server(str(tmp_path / "server")) as url:
        client = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tests", "connect_client.py"), url, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert client.returncode == 0, client.stderr[-3000:]
    report = json.loads(client.stdout.strip().splitlines()[-1])
    assert report["session"].startswith("pyspark.sql.connect")
    assert report["writer"] == "DeltaRsWriter"  # no Delta JARs on this server
    outcomes = DeltaTable(str(tmp_path / "out" / "outcomes")).to_pandas()
    rejected = DeltaTable(str(tmp_path / "out" / "rejected")).to_pandas()
    expected, _ = reference(work, PurgatoryConfig(shards=2, watermark_delay="2 seconds"))
    assert outcomes["op_id"].is_unique and len(rejected) == 2
    assert {(r.op_id, r.status) for r in outcomes.itertuples()} == {
        (r.op_id, r.status) for r in expected.itertuples()
    }
