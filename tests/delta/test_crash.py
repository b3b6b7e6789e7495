"""kill -9 the job at each accumulator fault point; exactly once after.  And a clean stop:
SIGTERM (here, files) and SIGINT (``test_kafka_crash.py``, Kafka) stop a run between
micro-batches, flush what lingers and exit 0 (``stopped_cleanly``); the next run continues.
And a transient fault (``restart=``: a micro-batch raises once, as an object store's 503
would) is ridden out by the job's restart policy (``spark_purgatory.restarts``) in the run.

The fault points (``FAULT_POINTS``) include the two the executors' writes add: after a
batch's staged files are written but before the driver records them, and after a drain's
data files are written but before their commit.

``check`` includes the ``metrics`` table: one row per (micro-batch, shard) that ran, none
twice after the kills, its counts adding up to the other tables and to the input.

Each job run costs a JVM's start, so every fault point is killed once per writer across the
crash tests, not once per test (``PLANS``, ``test_kafka_crash.PLANS`` and
``test_azure_store.KILL``, checked by ``test_the_plans_kill_at_every_fault_point``): delta-rs
(the embedded default) here with everything on the local disk, in ``test_kafka_crash.py`` on
Kafka input (at a random moment after a committed micro-batch too) and after a commit in
``test_azure_store.py`` with its tables, state and staging on ADLS (Azurite); Spark's own Delta
writer (``job.writer=spark``) in ``test_kafka_crash.py`` and in ``tests/delta/test_s3a.py`` with
the whole query (input, Spark's checkpoint, state, staging, tables) on an S3-compatible store
(moto on loopback).
``tests/delta/test_object_store.py`` crashes the accumulator at every point on S3 in-process, and
``crash_harness.py`` (``--s3``, ``--kills``) runs longer plans.
"""

from __future__ import annotations

import pytest

from spark_purgatory.delta.accumulator import FAULT_POINTS
from tests.delta.test_azure_store import KILL as ADLS_KILL
from tests.delta.test_kafka_crash import PLANS as KAFKA_PLANS
from tests.support.clean_stops import killed_as_planned
from tests.support.crash_harness import check, run

#: the kills of each test, in order: with ``KAFKA_PLANS`` and ``ADLS_KILL`` every fault point
#: once per writer, and a random one per writer; "s3" is Spark's Delta writer on s3a (``test_s3a.py``)
PLANS = {
    "local": [
        "fault=manifest:1",
        "signal=TERM",
        "fault=staged:2",
        "restart=staged:2",
        "fault=staging:2",
    ],
    "s3": ["fault=staging:2"],
}


def _points(plan: list[str]) -> list[str]:
    return [step.split("=")[1].split(":")[0] for step in plan if step.startswith("fault=")]  # kills only


def test_the_plans_kill_at_every_fault_point():
    delta_rs = _points(PLANS["local"]) + _points(KAFKA_PLANS["delta-rs"]) + _points([f"fault={ADLS_KILL}"])
    assert sorted(delta_rs) == sorted(FAULT_POINTS)  # each once
    native = _points(PLANS["s3"]) + _points(KAFKA_PLANS["spark"])  # Spark's Delta writer: no "written"
    assert sorted(native) == sorted(set(FAULT_POINTS) - {"written"})  # each once
    assert KAFKA_PLANS["spark"][-1] == KAFKA_PLANS["delta-rs"][0] == "random"


@pytest.mark.spark
def test_job_survives_kill_minus_nine_with_exactly_once_outputs(tmp_path):
    plan = PLANS["local"]
    result = run(
        str(tmp_path / "crash"),
        n_ops=1000,
        files=2 * len(plan) + 2,  # new input for every run
        plan=plan,
        feed_seconds=2.0,
        seed=3,
        final_in_process=True,
    )
    killed_as_planned(result, plan)
    check(result)
