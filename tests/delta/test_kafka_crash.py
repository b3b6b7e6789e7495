"""kill -9 the job while it reads Kafka topics and writes Delta through Spark's own Delta writer;
exactly once after, in the tables and on the output topic.  And a run whose broker answers
nobody for 60 s mid-run (``KafkaBroker.pause``: the query rides it out and commits the input
produced after it; ``tests/support/clean_stops.py``), then is killed at a random moment, the
plan's random kill (``outage=60+random``: one JVM start for both).  Ctrl-C's clean stop of the
job is ``test_crash.py``'s, on files.

``crash_harness.run`` with ``kafka``: each share of the input is produced to two topics on the
file's broker while the job runs with a processing-time trigger; the job is killed, then a
last ``available-now`` run reads what is left from the checkpoint's offsets.  The tables must
hold what the Spark-free engine computes from the same input, nothing twice, nothing lost
(``crash_harness.check``, the metrics table included), and every commit of rows is Delta's own
writer's.  Spark's writer is killed at the fault points its path passes (``written`` is
delta-rs's alone: Spark's Delta writes a drain's data files and commits them in one call),
and at a random moment after the outage; its ``staging`` kill is ``test_s3a.py``'s, its
``committed`` kill (Delta's ``txnAppId``/``txnVersion`` skips the replay) ``test_catalog.py``'s,
and delta-rs's kills are on files (``test_crash.PLANS``: one plan per output, and the runs
that exist anyway on ADLS and at the end of input).

The outcomes (cancelled ones too), warnings and rejected rows also go to an output topic (``output.kafka.*``,
``kafka_output``): after the kills and the outage, a ``read_committed`` consumer of
the whole topic must see every outcome and warning of the reference once and nothing else
(``crash_harness.check_topic``), and the checkpoint's status names the last micro-batch the
topic committed.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from tests.delta.test_crash import PLANS
from tests.support.clean_stops import killed_as_planned
from tests.support.crash_harness import check, check_topic_status, run

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka", "kafka-broker", "delta")]


def test_job_on_kafka_through_sparks_delta_writer_survives_kill_minus_nine(kafka_broker, tmp_path):
    plan = PLANS["spark"]
    root = str(tmp_path / "crash-kafka")
    result = run(
        root,
        n_ops=600,
        files=2 * len(plan) + 2,  # new input for every run
        plan=plan,
        feed_seconds=2.0,
        seed=9,
        kafka=kafka_broker,
        writer="spark",
        # Spark's writer commits a drain table by table, a Spark job each: fewer drains per run
        # (every fault point is still passed in each run's first seconds)
        extra={"accumulator.linger.ms": "6000"},
        final_in_process=True,  # the drain after the kills: this worker's session
        output_topic=kafka_broker,  # the outcomes on a topic too, read back read_committed
    )
    killed_as_planned(result, plan)  # and the outage was ridden out before the random kill
    check(result)  # the tables, then the topic
    # the workload warns and withdraws: each warning and cancelled outcome once, kills or not
    assert len(result["expected_warnings"]) and "cancelled" in set(result["expected_outcomes"]["status"])
    assert result["topic"], "no record reached the topic"
    check_topic_status(result)
    # every commit of rows was Delta's own writer's
    history = DeltaTable(f"{root}/out/outcomes").history()
    # the owner's record (delta.ownership) is a properties-only commit, made by delta-rs
    rows = [c for c in history if c.get("operation") != "SET TBLPROPERTIES"]
    engines = {str(c.get("engineInfo", "")).split("/")[0] for c in rows}
    assert engines == {"Apache-Spark"}, engines
