"""kill -9 the job at each accumulator fault point and at random moments; exactly once after, in
the Delta tables and on the output topic.  And what a run must ride out or end with: a
transient fault (``restart=``: a micro-batch raises once, as an object store's 503 would) is
ridden out by the job's restart policy (``spark_purgatory.restarts``) in the run, here, which
then commits and is stopped by Ctrl-C (SIGINT to its process group: the JVM and the Python
workers get it too) between micro-batches, flushes what lingers and exits 0
(``stopped_cleanly``); a broker that answers nobody for 60 s (``outage=``,
``test_kafka_crash.py``) is ridden out by the query, which then commits and is killed at a
random moment.  A run that rides something out ends with the stop or a kill
(``restart=staged:2+signal=INT``, ``outage=60+random``): one JVM start for both.  SIGTERM takes
the signal's handler too (``PurgatoryQuery.stop_on_signals``): ``tests/query/test_signals.py``
sends both to the handle.

One plan per output (``PLANS``): the Delta tables written by delta-rs (the embedded default,
here, on files) and by Spark's own Delta writer (``job.writer=spark``, in
``test_kafka_crash.py``, on Kafka topics); the workload warns a third of its operations and
withdraws some (``generate``'s ``warned``, ``withdrawn``); each run of both also produces the
outcomes, warnings and rejected rows to an output topic (``output.kafka.*``), whose whole
content a ``read_committed`` consumer must find exactly once after every kill
(``crash_harness.check_topic``). Each job run costs a JVM's start, so each fault point is
killed once per writer across the crash tests (``test_the_plans_kill_at_every_fault_point``):
delta-rs here at ``manifest`` and ``staging``, at ``committed`` in ``test_azure_store.py`` with
its tables, state and staging on ADLS (Azurite), and at ``staged`` and ``written`` in the end of
input's micro-batch and the flush after it (``tests/handoff/test_end_of_input.py``, its
``metrics`` table checked too); Spark's writer on Kafka at ``manifest`` and ``staged``, at
``committed`` in ``tests/delta/test_catalog.py``'s job into catalog tables (``saveAsTable``)
and at ``staging`` in ``tests/delta/test_s3a.py`` with the whole query on an S3-compatible
store. A random kill falls
a random 0-5 s after the run committed a micro-batch of its own: inside a send's transaction to
the topic, between a send and the drain that follows it, in a drain, between micro-batches.
Where the input comes from changes only what a replay reads, which Spark's source log decides:
files here, topics in the other.

The fault points (``FAULT_POINTS``) include the two the executors' writes add: after a
batch's staged files are written but before the driver records them, and after a drain's
data files are written but before their commit.

``check`` includes the ``metrics`` table: one row per (micro-batch, shard) that ran, none
twice after the kills, its counts adding up to the other tables and to the input.
``tests/delta/test_object_store.py`` crashes the accumulator at every point on S3 in-process, and
``crash_harness.py`` (``--s3``, ``--kafka``, ``--kills``) runs longer plans.
"""

from __future__ import annotations

import pytest

from spark_purgatory.delta.accumulator import FAULT_POINTS
from tests.delta.test_azure_store import KILL as ADLS_KILL
from tests.delta.test_catalog import KILL as CATALOG_KILL
from tests.handoff.test_end_of_input import END_KILLS
from tests.support.clean_stops import killed_as_planned, parts_of
from tests.support.crash_harness import check, check_topic_status, run

#: each output's runs, in order (``crash_harness.run``'s plan): every fault point its writer
#: passes (with ``ADLS_KILL``, ``END_KILLS``, ``CATALOG_KILL`` and ``PLANS["s3"]``), what a run rides out, the
#: signal's stop and one random kill (``make nightly`` draws ten kills on files, about a third
#: of them random).  "delta-rs" is this file's (files), "spark" ``test_kafka_crash.py``'s (Kafka
#: topics), "s3" ``test_s3a.py``'s (Spark's writer, the whole query on s3a)
PLANS = {
    "delta-rs": [
        "fault=manifest:1",
        "random",
        "restart=staged:2+signal=INT",
        "fault=staging:2",
    ],
    # the manifest's kill last: the commits that recover it (a Spark job per table) are then
    # the final run's, in a warm JVM, not a new one's
    "spark": [
        "fault=staged:2",
        "outage=60+random",  # the plan's random kill, once the outage was ridden out
        "fault=manifest:1",
    ],
    "s3": ["fault=staging:2"],
}


def _points(plan: list[str]) -> list[str]:
    return [step.split("=")[1].split(":")[0] for step in plan if step.startswith("fault=")]  # kills only


def test_the_plans_kill_at_every_fault_point():
    # delta-rs: the plan kills where the ADLS job and the end of input's runs do not
    elsewhere = _points([f"fault={point}" for point in (ADLS_KILL, *END_KILLS)])
    delta_rs = _points(PLANS["delta-rs"])
    assert set(delta_rs + elsewhere) == set(FAULT_POINTS)
    assert len(set(delta_rs)) == len(delta_rs) and not set(delta_rs) & set(elsewhere)  # none twice
    # Spark's Delta writer (no "written"): the plans and the catalog job's kill
    native = _points(PLANS["s3"]) + _points(PLANS["spark"]) + _points([f"fault={CATALOG_KILL}"])
    assert sorted(native) == sorted(set(FAULT_POINTS) - {"written"})  # each once
    # and in each plan a random kill and what its runs ride out: a restart and Ctrl-C's stop on
    # files (SIGTERM's, the same handler: test_signals), a broker outage on Kafka
    rides = {"delta-rs": ("restart", "signal"), "spark": ("outage",)}
    for output, needed in rides.items():
        steps = [parts_of(step) for step in PLANS[output]]
        assert any("random" in parts for parts in steps), output
        assert all(any(kind in parts for parts in steps) for kind in needed), output


@pytest.mark.spark
@pytest.mark.jars("kafka-broker")
def test_job_survives_kill_minus_nine_with_exactly_once_outputs(kafka_broker, tmp_path):
    plan = PLANS["delta-rs"]
    result = run(
        str(tmp_path / "crash"),
        n_ops=1000,
        files=2 * len(plan) + 2,  # new input for every run
        plan=plan,
        feed_seconds=2.0,
        seed=3,
        writer="delta-rs",
        final_in_process=True,  # the drain after the kills: this worker's session
        output_topic=kafka_broker,  # the outcomes on a topic too, read back read_committed
    )
    killed_as_planned(result, plan)  # and the restart rode its fault out, then Ctrl-C stopped cleanly
    check(result)  # the tables, then the topic (check_topic)
    # the workload warns and withdraws: each warning and cancelled outcome once, kills or not
    assert len(result["expected_warnings"]) and "cancelled" in set(result["expected_outcomes"]["status"])
    assert result["topic"], "no record reached the topic"
    check_topic_status(result)
