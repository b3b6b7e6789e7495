"""kill -9 the job at each accumulator fault point and at a random moment; exactly once after.

The fault points (``FAULT_POINTS``) include the two the executors' writes add: after a
batch's staged files are written but before the driver records them, and after a drain's
data files are written but before their commit.

``check`` includes the ``metrics`` table: one row per (micro-batch, shard) that ran, none
twice after the kills, its counts adding up to the other tables and to the input.

Twice: with everything on the local disk, and with the output tables, the accumulator's
staging and the shard-state segments on an S3-compatible store (moto on loopback).
"""

from __future__ import annotations

import pytest
from crash_harness import check, run
from object_store import S3Store

from spark_purgatory.delta.accumulator import FAULT_POINTS

pytestmark = pytest.mark.spark


def test_job_survives_kill_minus_nine_with_exactly_once_outputs(tmp_path):
    plan = [
        "fault=committed:1",
        "fault=written:1",
        "fault=manifest:1",
        "fault=staged:2",
        "fault=staging:2",
        "random",
    ]
    assert {step.split("=")[1].split(":")[0] for step in plan[:-1]} == set(FAULT_POINTS)
    result = run(str(tmp_path / "crash"), n_ops=1400, files=14, plan=plan, feed_seconds=2.0, seed=3)
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len(plan), result["kills"]  # every run died by SIGKILL where planned
    check(result)


def test_job_survives_kill_minus_nine_with_everything_it_writes_on_s3(tmp_path):
    store = S3Store()
    try:
        plan = ["fault=committed:1", "fault=written:1", "fault=staging:2", "random"]
        result = run(
            str(tmp_path / "crash-s3"), n_ops=1000, files=10, plan=plan, feed_seconds=2.0, seed=5, store=store
        )
        keys = store.keys("crash-s3")
    finally:
        store.stop()
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len(plan), result["kills"]
    check(result)
    assert any(k.startswith("crash-s3/state/") for k in keys)  # the segments were on S3 too
