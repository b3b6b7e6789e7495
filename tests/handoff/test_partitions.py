"""The watermark per Kafka partition (``handoff.partitions``), without Spark: what the driver
posts after each micro-batch, what a shard of the next one reads, replays and restarts."""

from __future__ import annotations

import os

from spark_purgatory.handoff.partitions import PartitionWatermarks, cap_before, maxima_text, read_maxima

DELAYS = {"operations": 15_000, "events": 15_000}


def _calls(*by_input: dict) -> list[str | None]:
    return [maxima_text(b) for b in by_input]


def test_the_slowest_partition_that_sent_rows_holds_the_watermark(tmp_path):
    root = str(tmp_path / "watermarks")
    clock = PartitionWatermarks(root, DELAYS)
    # two shard calls; partition 2 of the operations' topic is 43 s behind partition 1
    held = clock.observe(1_000, _calls({"operations": {1: 100_000}}, {"operations": {1: 90_000, 2: 57_000}}))
    assert held == {"operations": 42_000}
    assert cap_before(root, 2_000) == 42_000, "the next micro-batch runs at most there"
    assert cap_before(root, 1_000) is None, "a micro-batch reads only what was posted before it"


def test_a_partition_that_sends_nothing_holds_nothing_and_the_value_never_moves_back(tmp_path):
    clock = PartitionWatermarks(str(tmp_path), DELAYS)
    clock.observe(1_000, _calls({"operations": {1: 100_000, 2: 57_000}}))
    # partition 2 read to its end: only partition 1 sends rows
    assert clock.observe(2_000, _calls({"operations": {1: 130_000}})) == {"operations": 115_000}
    # partition 2 wakes with a row far behind: held where it was, not moved back
    assert clock.observe(3_000, _calls({"operations": {1: 140_000, 2: 60_000}})) == {"operations": 115_000}
    # every input has its own; a shard takes the smallest
    clock.observe(4_000, _calls({"events": {7: 50_000}}))
    assert cap_before(str(tmp_path), 5_000) == 35_000


def test_calls_without_kafka_rows_write_nothing(tmp_path):
    clock = PartitionWatermarks(str(tmp_path / "w"), DELAYS)
    assert clock.observe(1_000, [None, None]) == {}
    assert not os.path.exists(tmp_path / "w")
    assert read_maxima([None, maxima_text({"events": {}})]) == {}


def test_a_replay_reads_what_the_first_attempt_read_and_a_restart_resumes(tmp_path):
    root = str(tmp_path)
    first = PartitionWatermarks(root, DELAYS)
    for key, (a, b) in enumerate([(100_000, 57_000), (160_000, 114_000), (200_000, 170_000)], start=1):
        first.observe(key * 1_000, _calls({"operations": {0: a, 1: b}}))
    # the driver died while micro-batch 3_000 was uncommitted: a new one replays it
    second = PartitionWatermarks(root, DELAYS)
    assert second.observe(3_000, _calls({"operations": {0: 200_000, 1: 170_000}})) == first.watermarks
    assert cap_before(root, 3_000) == 99_000 and cap_before(root, 3_001) == 155_000
    # old files go, the last few stay
    assert len(os.listdir(root)) <= 3
