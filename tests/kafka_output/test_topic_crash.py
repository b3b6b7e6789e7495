"""kill -9 the job five times at random moments while it produces outcomes to a topic; a
``read_committed`` consumer of the whole topic then sees every outcome of the reference once
and nothing else, and the Delta tables equal the reference too (``crash_harness.check``,
``check_topic``).

Each kill falls a random 0-5 s after the run committed a micro-batch of its own: inside a
send's transaction, between a send and the drain that follows it, in a drain, between
micro-batches.  The accumulator's fault points, a paused broker and the clean stops are
``tests/delta/test_kafka_crash.py``'s, with the topic on too.
"""

from __future__ import annotations

import pytest

from tests.support.clean_stops import killed_as_planned
from tests.support.crash_harness import check, run

pytestmark = [pytest.mark.spark, pytest.mark.jars("kafka-broker")]

PLAN = ["random"] * 5


def test_the_topic_holds_each_outcome_once_after_five_random_kills(kafka_broker, tmp_path):
    result = run(
        str(tmp_path / "crash-topic"),
        n_ops=600,
        files=2 * len(PLAN) + 2,  # new input for every run
        plan=PLAN,
        feed_seconds=1.5,
        seed=66,
        final_in_process=True,
        output_topic=kafka_broker,
    )
    killed_as_planned(result, PLAN)
    check(result)  # the tables, then the topic (check_topic)
    assert result["topic"], "no record reached the topic"
