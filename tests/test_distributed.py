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
from crash_harness import JOB, ROOT, check, reference

from spark_purgatory.config import PurgatoryConfig, read_properties
from spark_purgatory.workload import generate, write_json_lines

pytestmark = pytest.mark.spark


def test_job_on_a_standalone_cluster_gives_the_engine_results(tmp_path):
    from deltalake import DeltaTable

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
    tables = {
        n: DeltaTable(str(tmp_path / "out" / n)).to_pandas()
        for n in ("outcomes", "unmatched_events", "rejected")
    }
    check({"tables": tables, "expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": 4})
