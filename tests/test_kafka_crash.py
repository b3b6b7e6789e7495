"""kill -9 the job while it reads Kafka topics and writes Delta; exactly once after.

``crash_harness.run`` with ``kafka``: each share of the input is produced to two topics on the
worker's broker while the job runs with a processing-time trigger; the job is killed at a
random moment after a micro-batch it committed, then at an accumulator fault point (after a
Delta commit, before Spark records the micro-batch: the replay must add nothing), and a last
``available-now`` run reads what is left from the checkpoint's offsets.  The tables must hold
what the Spark-free engine computes from the same input, nothing twice, nothing lost
(``crash_harness.check``, the metrics table included).
"""

from __future__ import annotations

import pytest
from crash_harness import check, run

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka", "kafka-broker")]


def test_job_on_kafka_survives_kill_minus_nine_with_exactly_once_outputs(kafka_broker, tmp_path):
    plan = ["random", "fault=committed:1"]
    result = run(
        str(tmp_path / "crash-kafka"),
        n_ops=600,
        files=6,
        plan=plan,
        feed_seconds=2.0,
        seed=9,
        kafka=kafka_broker,
    )
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len(plan), result["kills"]
    check(result)
