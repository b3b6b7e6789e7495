"""The job on a real standalone cluster (two one-core workers on loopback).

This is what catches closures that do not serialise and state that assumes one process:
the shards' state lives in executors' state stores, the driver only stages and commits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.workload import generate, write_json_lines
from tests.support.cluster import cluster_env, standalone_cluster
from tests.support.crash_harness import ROOT, check, read_table, reference

pytestmark = pytest.mark.spark


#: the driver of the cluster test: the job over the next 3 files of each input with 2 shards,
#: ``spark-purgatory rescale`` to 4, the job over the rest with 4: one Spark application (a
#: notebook's way: stop, rescale, start again on the same cluster; one set of executors).
#: argv: the test's directory, then the job's own arguments
_STOP_RESCALE_CONTINUE = """
import os, sys
from spark_purgatory.cli import main as cli
from spark_purgatory.job import main as job
tmp, args = sys.argv[1], sys.argv[2:]
for shards in (2, 4):
    if shards != 2 and cli(["rescale", "--checkpoint", f"{tmp}/chk", "--shards", str(shards)]):
        sys.exit("rescale failed")
    for kind in ("ops", "events"):
        for name in sorted(os.listdir(f"{tmp}/all-{kind}"))[:3]:
            os.replace(f"{tmp}/all-{kind}/{name}", f"{tmp}/{kind}/{name}")
    print(f"=== run with {shards} shards", flush=True)
    if job([*args, "--set", f"purgatory.shards={shards}"]):
        sys.exit("job failed")
"""


def test_job_on_a_standalone_cluster_gives_the_engine_results_across_a_rescale(tmp_path):
    """Begun with 2 shards on half of the input, stopped, rescaled to 4 (``spark-purgatory
    rescale``, no JVM) and continued on the rest: the tables equal the engine's over all the
    input, the metrics table has the new layout's shards from the next micro-batch on, and
    both workers ran tasks of the new layout.

    Operations wait 5 s and the watermark trails by 2 s, so some expire in each run (pending
    operations carried across the rescale expire in the new layout).  The files are cut in
    event-time order, both inputs at the same times, so no row of the second half is late.
    """
    work = generate(1500, seed=21, ops_per_second=100, timeout_ms=5_000)
    write_json_lines(work, str(tmp_path / "all-ops"), str(tmp_path / "all-events"), files=6, malformed=4)
    (tmp_path / "ops").mkdir()
    (tmp_path / "events").mkdir()
    settings = {"source.max.files.per.trigger": "3", "watermark.delay": "2 seconds"}
    cluster = str(tmp_path / "cluster")
    with standalone_cluster(cluster) as master:
        done = subprocess.run(
            [sys.executable, "-c", _STOP_RESCALE_CONTINUE, str(tmp_path),
             "--ops-path", str(tmp_path / "ops"), "--events-path", str(tmp_path / "events"),
             "--output-path", str(tmp_path / "out"), "--checkpoint-path", str(tmp_path / "chk"),
             "--conf", os.path.join(ROOT, "conf", "local.conf"), "--set", f"job.master={master}",
             *(a for k, v in settings.items() for a in ("--set", f"{k}={v}"))],
            capture_output=True, text=True, timeout=600, cwd=ROOT, env=cluster_env(cluster),
        )  # fmt: skip
    (tmp_path / "driver.out").write_text(done.stdout)  # kept for a failure's post-mortem
    assert done.returncode == 0, done.stderr[-3000:]
    runs = done.stdout.split("=== run with ")[1:]
    assert [r.split()[0] for r in runs] == ["2", "4"] and "rescaled" in runs[0], done.stdout[-3000:]
    assert not os.listdir(tmp_path / "all-ops")  # all input read
    local = {
        k: v
        for k, v in read_properties(os.path.join(ROOT, "conf", "local.conf")).items()
        if not k.startswith("job.")
    }
    outcomes, unmatched = reference(work, PurgatoryConfig.from_mapping({**local, **settings}))
    tables = {n: read_table(str(tmp_path / "out" / n), None, n) for n in TABLES}
    assert (tables["outcomes"]["status"] == "expired").any()
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})
    # a metrics row per (micro-batch, shard) called: shards 0-1 (and the cross-shard group 2),
    # then 0-3 (and 4) from the first micro-batch after the rescale on
    metrics, layout = tables["metrics"], []
    for run in runs:
        batches = {int(line.split()[2]) for line in run.splitlines() if " batch " in line}
        layout.append(set(metrics[metrics["batch_id"].isin(batches)]["shard"].astype(int)))
    assert layout[0] <= {0, 1, 2} and 3 in layout[1] <= set(range(5)), layout
    # the executors, one per worker: each ran tasks of the second run's state partitions
    # (Spark's state store logs them with the query run; partitions 3 and 4 exist only with 4 shards)
    second = set(re.findall(r"query started id=\S+ run=(\S+)", runs[1]))
    (app,) = os.listdir(os.path.join(cluster, "work"))  # one application, both runs
    served = {}
    for executor in os.listdir(os.path.join(cluster, "work", app)):
        with open(os.path.join(cluster, "work", app, executor, "stderr"), encoding="utf-8") as f:
            found = re.findall(r"partitionId=(\d+), storeName=default \], queryRunId=(\S+) \]", f.read())
        served[executor] = {int(p) for p, run in found if run in second}
    assert len(served) == 2 and all(served.values()), served  # both workers ran shard tasks
    assert set().union(*served.values()) == set(range(5)), served


def test_operator_through_a_spark_connect_session(tmp_path):
    """Databricks shared/serverless compute is Spark Connect: no sparkContext, no _jvm."""
    from deltalake import DeltaTable

    from tests.support.cluster import connect_server

    work = generate(600, seed=4, ops_per_second=50)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=4, malformed=2)
    with connect_server(str(tmp_path / "server")) as url:
        client = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tests", "support", "connect_client.py"), url, str(tmp_path)],
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
