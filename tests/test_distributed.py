"""The job on a real standalone cluster (two one-core workers on loopback).

This is what catches closures that do not serialise and state that assumes one process:
the shards' state lives in executors' state stores, the driver only stages and commits.
"""

from __future__ import annotations

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


def test_job_on_a_standalone_cluster_gives_the_engine_results(tmp_path):

    work = generate(1500, seed=21, ops_per_second=100)
    write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=6, malformed=4)
    with standalone_cluster(str(tmp_path / "cluster")) as master:
        done = subprocess.run(
            [
                sys.executable,
                JOB,
                "--ops-path",
                str(tmp_path / "ops"),
                "--events-path",
                str(tmp_path / "events"),
                "--output-path",
                str(tmp_path / "out"),
                "--checkpoint-path",
                str(tmp_path / "chk"),
                "--conf",
                os.path.join(ROOT, "conf", "local.conf"),
                "--set",
                f"job.master={master}",
                "--set",
                "source.max.files.per.trigger=2",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch     0" in done.stdout
    local = {
        k: v
        for k, v in read_properties(os.path.join(ROOT, "conf", "local.conf")).items()
        if not k.startswith("job.")
    }
    config = PurgatoryConfig.from_mapping({**local, "source.max.files.per.trigger": "2"})
    outcomes, unmatched = reference(work, config)
    tables = {n: read_table(str(tmp_path / "out" / n), None, n) for n in TABLES}
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})


def test_operator_through_a_spark_connect_session(tmp_path):
    """Databricks shared/serverless compute is Spark Connect: no sparkContext, no _jvm."""
    import json

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
