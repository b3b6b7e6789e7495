"""The hostile input corpus (tests/corpus): the stream never stops and loses nothing.

Every operation line ends in ``outcomes`` or ``rejected``; every event line in ``rejected``,
``unmatched_events``, or counted by an outcome (each valid event here matches at most one
operation), except the last padding event, still waiting for the watermark to pass it.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from spark_purgatory.config import PurgatoryConfig
from tests.support.stream_helpers import Files, replicas_warning, run_stream

pytestmark = pytest.mark.spark
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus")


def test_hostile_corpus_is_fully_accounted_for(spark, tmp_path):
    files = Files(str(tmp_path))
    stamp = time.time() - 100
    for index, (ops, events) in enumerate((("ops-1", "events-1"), ("ops-2", "events-2"))):
        for name, directory in ((ops, files.ops), (events, files.events)):
            target = os.path.join(directory, f"part-{index:04d}.json")
            shutil.copy(os.path.join(CORPUS, f"{name}.jsonl"), target)
            os.utime(target, (stamp + index, stamp + index))
    with open(os.path.join(CORPUS, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)

    with replicas_warning():
        run = run_stream(spark, files, PurgatoryConfig(shards=2, watermark_delay="1 second"))

    rejected_ops = run.rejected[run.rejected["source"] == "operations"]
    rejected_events = run.rejected[run.rejected["source"] == "events"]
    assert len(run.outcomes) + len(rejected_ops) == expected["operations"]["lines"]
    assert run.outcomes["op_id"].is_unique
    counted = int(run.outcomes["matched_events"].sum())
    still_buffered = 1  # the padding event that moved the watermark on
    assert len(rejected_events) + len(run.unmatched) + counted + still_buffered == expected["events"]["lines"]
    assert set(expected["rejected_reasons"]) <= set(run.rejected["reason"])
    line_reasons = [r for reasons in expected["reasons"].values() for r in reasons if r]
    assert sorted(run.rejected["reason"]) == sorted(line_reasons)  # each line its own reason
    assert run.rejected["raw"].notna().all()

    big = run.outcomes[run.outcomes["op_id"] == "big-payload"].iloc[0]
    assert len(big["payload"]) == 300_000  # carried unchanged
    reasons = dict(zip(run.unmatched["key"], run.unmatched["reason"], strict=False))
    assert reasons["nobody"] == "no_operation"
    assert set(run.unmatched["reason"]) <= {"no_operation", "after_resolution"}
