"""kill -9 the job at each accumulator fault point and at a random moment; exactly once after.

The fault points (``FAULT_POINTS``) include the two the executors' writes add: after a
batch's staged files are written but before the driver records them, and after a drain's
data files are written but before their commit.

``check`` includes the ``metrics`` table: one row per (micro-batch, shard) that ran, none
twice after the kills, its counts adding up to the other tables and to the input.

Twice with delta-rs (the embedded default): here with everything on the local disk, and in
``tests/test_s3a.py`` with everything on an S3-compatible store (moto on loopback), Spark's
checkpoint included.  Each job run costs a JVM's start, so the fault points are shared
between the two (``PLANS``: each point killed once, on one store or the other), the local
test also kills one run at a random moment after it committed a micro-batch, and the two tests
run at once on two test workers.  Spark's own Delta writer (``job.writer=spark``) is killed at
each point its path passes and at a random moment in ``test_kafka_crash.py``, on Kafka input.
``tests/test_object_store.py`` crashes the accumulator at every point on S3 in-process, and
``crash_harness.py`` (``--s3``, ``--kills``) runs longer plans.
"""

from __future__ import annotations

import pytest
from crash_harness import check, run
from test_kafka_crash import PLANS as KAFKA_PLANS

from spark_purgatory.delta.accumulator import FAULT_POINTS

#: the kills of each test, in order: every fault point once between the two, and a random one
PLANS = {
    "local": ["fault=committed:1", "fault=manifest:1", "fault=staged:2", "random"],
    "s3": ["fault=written:1", "fault=staging:2"],
}


def _points(plan: list[str]) -> list[str]:
    return [step.split("=")[1].split(":")[0] for step in plan if step != "random"]


def test_the_plans_kill_at_every_fault_point():
    assert sorted(p for plan in PLANS.values() for p in _points(plan)) == sorted(FAULT_POINTS)  # each once
    native = _points(KAFKA_PLANS["spark"])  # Spark's Delta writer has no "written" point
    assert sorted(native) == sorted(set(FAULT_POINTS) - {"written"})  # each once
    assert PLANS["local"][-1] == KAFKA_PLANS["spark"][-1] == KAFKA_PLANS["delta-rs"][0] == "random"


def killed_as_planned(result: dict, plan: list[str]) -> None:
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len(plan), result["kills"]  # every run died by SIGKILL where planned


@pytest.mark.spark
def test_job_survives_kill_minus_nine_with_exactly_once_outputs(tmp_path):
    plan = PLANS["local"]
    result = run(str(tmp_path / "crash"), n_ops=1000, files=10, plan=plan, feed_seconds=2.0, seed=3)
    killed_as_planned(result, plan)
    check(result)
