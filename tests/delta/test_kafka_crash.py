"""kill -9 the job while it reads Kafka topics and writes Delta; exactly once after.  And two
runs that must end cleanly: one stopped by Ctrl-C (SIGINT to its process group), one whose
broker answers nobody for 60 s mid-run (``KafkaBroker.pause``: the query rides it out and
commits the input produced after it; ``tests/support/clean_stops.py``).

``crash_harness.run`` with ``kafka``: each share of the input is produced to two topics on the
worker's broker while the job runs with a processing-time trigger; the job is killed, then a
last ``available-now`` run reads what is left from the checkpoint's offsets.  The tables must
hold what the Spark-free engine computes from the same input, nothing twice, nothing lost
(``crash_harness.check``, the metrics table included).  Both writers: delta-rs (killed at a
random moment after a micro-batch it committed, then after a drain's data files were written,
before their commit) and Spark's own Delta writer, killed at the fault points its path passes
(``written`` is delta-rs's alone: Spark's Delta writes a drain's data files and commits them in
one call), ``committed`` included (Delta's ``txnAppId``/``txnVersion`` skips the replay), and at
a random moment.  Each writer's other fault points are killed in ``test_crash.py`` (delta-rs,
files) and ``test_s3a.py`` (Spark's writer, the whole query on s3a): where the input comes from
changes only what a replay reads, which Spark's offset log decides.

Both tests also write the outcomes and rejected rows to an output topic (``output.kafka.*``,
``kafka_output``): after the kills, the outage and the stops, a ``read_committed`` consumer of
the whole topic must see every outcome of the reference once and nothing else
(``crash_harness.check_topic``).
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.inspect import checkpoint_status
from spark_purgatory.kafka_output.records import HEADER_BATCH
from tests.support.clean_stops import killed_as_planned
from tests.support.crash_harness import check, run

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka", "kafka-broker")]

#: each writer's kills, in order
PLANS = {
    "delta-rs": ["random", "signal=INT", "outage=60", "fault=written:1"],
    "spark": ["fault=manifest:1", "fault=staged:2", "fault=committed:1", "random"],
}


@pytest.mark.parametrize(
    "writer",
    ["delta-rs", pytest.param("spark", marks=pytest.mark.jars("delta"))],
)
def test_job_on_kafka_survives_kill_minus_nine_with_exactly_once_outputs(kafka_broker, tmp_path, writer):
    plan = PLANS[writer]
    root = str(tmp_path / f"crash-kafka-{writer}")
    result = run(
        root,
        n_ops=600,
        files=2 * len(plan) + 2,  # new input for every run
        plan=plan,
        feed_seconds=2.0,
        seed=9,
        kafka=kafka_broker,
        writer=writer,
        # Spark's writer commits a drain table by table, a Spark job each: fewer drains per run
        # (every fault point is still passed in each run's first seconds)
        extra={"accumulator.linger.ms": "6000"} if writer == "spark" else None,
        final_in_process=True,  # the drain after the kills: this worker's session
        output_topic=kafka_broker,  # the outcomes on a topic too, read back read_committed
    )
    killed_as_planned(result, plan)  # and the SIGINT run stopped cleanly, flushed, exit 0
    check(result)
    # the status names the last micro-batch the topic committed: the last its records came from
    config = PurgatoryConfig.from_mapping(result["topic_settings"])
    status = checkpoint_status(result["checkpoint"], config=config, state=False)
    last = max(int(dict(m.headers())[HEADER_BATCH]) for m in result["topic"])
    assert status["output_topic"]["last_committed_batch"] == last
    if writer == "spark":  # every commit of rows was Delta's own writer's
        history = DeltaTable(f"{root}/out/outcomes").history()
        # the owner's record (delta.ownership) is a properties-only commit, made by delta-rs
        rows = [c for c in history if c.get("operation") != "SET TBLPROPERTIES"]
        engines = {str(c.get("engineInfo", "")).split("/")[0] for c in rows}
        assert engines == {"Apache-Spark"}, engines
