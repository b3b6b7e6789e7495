"""The operator on real Spark: file sources, availableNow triggers, checkpoints and restarts.

Each test is one scenario of SPEC.md run through the whole host (parsing, routing,
watermark, applyInPandasWithState, splitting); the engine's own tests cover each rule in
isolation, so these check that Spark delivers the same answers.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.shard.labels import shard_labels, spark_hash_int
from spark_purgatory.spark.batch import purgatory_batch
from spark_purgatory.spark.output import metrics_of, outcomes_of, unmatched_of
from spark_purgatory.spark.sources import parse_events, parse_operations, read_batch
from spark_purgatory.state.segments import SegmentStore
from spark_purgatory.workload import generate, write_json_lines
from tests.support.stream_helpers import (
    T0,
    Files,
    ev,
    keys_in_different_shards,
    op,
    replicas_warning,
    run_stream,
)

pytestmark = pytest.mark.spark

CONFIG = PurgatoryConfig(shards=2, tick_ms=100, wheel_size=16, watermark_delay="1 second")


def resolved(run) -> dict[str, tuple[str, int]]:
    o = run.outcomes
    return {r.op_id: (r.status, int(r.resolved_at_ms) - T0) for r in o.itertuples()}


def test_stream_follows_the_spec_across_a_restart(spark, tmp_path):
    # shard state kept in segment files from the first rows on (purgatory.state.path)
    config = dataclasses.replace(CONFIG, state_path=str(tmp_path / "segments"), state_segment_rows=5)
    files = Files(str(tmp_path))
    files.add(
        ops=[
            op("any-1", "k-any", 1000, 5000),
            op("count-1", "k-count", 1000, 5000, "count", target=2),
            op("sum-1", "k-sum", 1000, 5000, "sum", target=10),
            op("all-1", "k-all", 1000, 5000, "all", members=["m1", "m2"]),
            op("target-a", "k-t", 1000, 5000),
            op("target-b", "k-t", 1000, 5000),
            op("exp-1", "k-exp", 1000, 3000),
            op("dup", "k-dup", 1000, 5000),
            op("dup", "k-dup", 1001, 5000),
            '{"op_id": "broken", "keys": ["k"',
        ],
        events=[
            ev("k-any", 1500),
            ev("k-count", 1800, source="r1"),
            ev("k-count", 1200, source="r1"),
            ev("k-sum", 1300, value=4),
            ev("k-all", 1400, source="m1"),
            ev("k-t", 1500, op_id="target-b"),
            ev("k-hw", 500, value=100),
            ev("k-early", 2500),
            ev("nobody", 1100),
        ],
    )
    files.add(
        ops=[
            op("hw-1", "k-hw", 2000, 5000, "offset", target=50),
            op("early-1", "k-early", 2000),
            op("dup", "k-dup", 2000),
        ],
        events=[
            ev("k-count", 2100, source="r2"),
            ev("k-sum", 3000, value=3),
            ev("k-sum", 2200, value=3),
            ev("k-all", 2600, source="m2"),
            ev("k-any", 2700),
        ],
    )
    # both inputs move on (the watermark is the slower input's): 3999, exp-1 (deadline 4000) must wait
    files.add(ops=[op("pad-1", "k-pad-op", 4999, 60_000)], events=[ev("k-pad", 4999)])
    first = run_stream(spark, files, config)
    assert SegmentStore(config.state_path).segments()  # the shards wrote their state's segments
    assert max(first.watermarks.values()) == T0 + 3999
    assert resolved(first) == {
        "any-1": ("completed", 1500),
        "target-b": ("completed", 1500),
        "count-1": ("completed", 2100),  # r1 twice counts once
        "sum-1": ("completed", 3000),  # 4 + 3 (at 2200) + 3 (at 3000), out of order
        "all-1": ("completed", 2600),
        "hw-1": ("completed", 2000),  # progress reached before the operation existed
        "early-1": ("completed", 2500),  # the event came first
    }
    assert sorted(first.rejected["reason"]) == ["duplicate_op_id", "duplicate_op_id", "malformed_json"]
    # k-hw@500 raised hw-1's progress before hw-1 existed: not one of its matched events (it
    # would not be either had the watermark passed it first), and no operation's window holds it
    assert sorted(zip(first.unmatched["key"], first.unmatched["reason"], strict=True)) == [
        ("k-any", "after_resolution"),
        ("k-hw", "no_operation"),
        ("nobody", "no_operation"),
    ]

    # watermark 4000; an operation and an event behind the watermark (3999) the restart began at
    files.add(
        ops=[op("pad-2", "k-pad-op", 5000, 60_000), op("late-op", "k-late", 1_000)],
        events=[ev("k-pad", 5000), ev("k-late", 500)],
    )
    second = run_stream(spark, files, config)  # a new query on the same checkpoint
    assert resolved(second) == {"exp-1": ("expired", 4000)}
    batch = int(second.outcomes["batch_id"].iloc[0])
    assert second.watermarks[batch] >= T0 + 4000  # never early ...
    earlier = [wm for b, wm in {**first.watermarks, **second.watermarks}.items() if b < batch]
    assert max(earlier) < T0 + 4000 + config.tick_ms  # ... and no later than one tick after
    assert_late_rows_are_rejected_not_dropped(second)

    third = run_stream(spark, files, config)  # nothing new: nothing emitted twice
    assert len(third.outcomes) == 0 and len(third.unmatched) == 0


def assert_late_rows_are_rejected_not_dropped(run) -> None:
    """``late-op`` and the event ``k-late``@500, behind the watermark, are in ``rejected`` with
    reason ``late`` and the fields the operator read (those with a value: docs/contract.md),
    and Spark dropped no row by the watermark."""
    late = run.rejected[run.rejected["reason"] == "late"]
    assert len(late) == len(run.rejected) and sorted(late["source"]) == ["events", "operations"]
    assert json.loads(late[late["source"] == "operations"]["raw"].iloc[0])["op_id"] == "late-op"
    assert sorted(late["raw"]) == sorted(
        [
            json.dumps(
                {
                    "op_id": "late-op",
                    "keys": ["k-late"],
                    "ts": T0 + 1_000,
                    "timeout_ms": 10_000,
                    "condition": "any",
                }
            ),
            json.dumps({"key": "k-late", "ts": T0 + 500}),
        ]
    )
    dropped = sum(
        s.get("numRowsDroppedByWatermark", 0) for p in run.progress for s in p.get("stateOperators", [])
    )
    assert dropped == 0


def test_multi_key_operations_across_shards(spark, tmp_path):
    config = PurgatoryConfig(shards=4, tick_ms=100, wheel_size=16, watermark_delay="1 second")
    a, b, c, d = keys_in_different_shards(4, 4)
    files = Files(str(tmp_path))
    files.add(
        ops=[
            op("mk-count", [a, b], 1000, 5000, "count", target=2),
            op("mk-offset", [c, d], 1000, 5000, "offset", target=5),
            op("mk-expire", [a, c], 1000, 2000, "count", target=3),
        ],
        events=[ev(a, 1100), ev(b, 1200), ev(c, 1100, value=7), ev(d, 1300, value=5), ev(d, 1250, value=1)],
    )
    files.add(ops=[op("pad-op", "pad-op-key", 9000, 60_000)], events=[ev("pad", 9000)])  # both inputs on
    with replicas_warning():
        run = run_stream(spark, files, config)
    assert resolved(run) == {
        "mk-count": ("completed", 1200),
        "mk-offset": ("completed", 1300),
        "mk-expire": ("expired", 3000),
    }
    expired = run.outcomes[run.outcomes["op_id"] == "mk-expire"].iloc[0]
    assert expired["matched_events"] == 2  # a@1100 and c@1100, from two shards
    assert len(run.unmatched) == 0  # every event was matched by a cross-shard operation


def test_batch_mode_gives_the_stream_outcomes(spark, tmp_path):
    work = generate(400, seed=5, ops_per_second=100)
    ops_dir, ev_dir = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops_dir, ev_dir, files=3)  # three micro-batches
    files = Files(str(tmp_path))
    config = PurgatoryConfig(shards=3, watermark_delay="2 seconds")
    with replicas_warning():
        run = run_stream(spark, files, config)
    assert len(run.rejected) == 0
    final = max(run.watermarks.values())
    batch = purgatory_batch(
        read_batch(spark, ops_dir, kind="operations"),
        read_batch(spark, ev_dir, kind="events"),
        config,
        final_watermark_ms=final,
    )
    outcomes = batch.where("kind = 'outcome'").select("op_id", "status", "resolved_at_ms", "matched_events")
    streamed = spark.createDataFrame(
        run.outcomes[["op_id", "status", "resolved_at_ms", "matched_events"]].astype(
            {"resolved_at_ms": "int64", "matched_events": "int64"}
        )
    )
    assert_df_equality(outcomes, streamed, ignore_row_order=True, ignore_nullable=True)


def test_batch_mode_resolves_everything_by_default(spark):
    # no final_watermark_ms: every operation resolves, expired ones at their deadline
    lines = [
        op("done", "k1", 0, 1000),
        op("waits", "k2", 0, 1000, "count", target=2),
        op("multi", ["k1", "k3"], 0, 5000, "count", target=2),
    ]
    events = [ev("k1", 100), ev("k2", 200), ev("k3", 300), ev("nobody", 400)]
    as_text = "value string"
    out = purgatory_batch(
        spark.createDataFrame([(x,) for x in lines], as_text),
        spark.createDataFrame([(x,) for x in events], as_text),
        CONFIG,
    ).cache()  # computed once for the four reads below, each of which would run it again
    resolved = {r.op_id: (r.status, r.resolved_at_ms - T0) for r in out.where("kind = 'outcome'").collect()}
    assert resolved == {"done": ("completed", 100), "waits": ("expired", 1000), "multi": ("completed", 300)}
    assert sorted(r.op_id for r in outcomes_of(out).collect()) == ["done", "multi", "waits"]
    assert [r.key for r in unmatched_of(out).collect()] == ["nobody"]
    assert max(r.watermark for r in metrics_of(out).collect()) is not None
    out.unpersist()


def test_kafka_and_parquet_inputs_parse_like_json(spark, tmp_path):
    lines = [
        op("o1", ["b", "a", "a"], 0, 100, "count", target=2, payload="p"),
        '{"op_id": "o2", "key": "k", "ts": 1767225600000, "timeout_ms": "100"}',
        '{"op_id": "o3", "keys": "solo", "ts": "2026-01-01T00:00:00Z", "timeout_ms": -1}',
        "{not json",
    ]
    json_rows = parse_operations(
        spark.createDataFrame([(x,) for x in lines], "value string"), "json", max_timeout_ms=1000
    )
    kafka = spark.createDataFrame(
        [(None, x.encode(), "ops", 0, i, None, 0) for i, x in enumerate(lines)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int",
    )
    kafka_rows = parse_operations(kafka, "kafka", max_timeout_ms=1000)
    # a rejected Kafka record's raw is the whole record, so that it can be found (test_kafka)
    assert_df_equality(json_rows.drop("raw"), kafka_rows.drop("raw", "part"), ignore_row_order=True)
    # where a record came from, for its partition's watermark (handoff.partitions)
    assert len({r.part for r in kafka_rows.collect()} - {None}) == 1
    assert {r.raw for r in kafka_rows.collect() if r.reason == "malformed_json"} == {
        '{"topic":"ops","partition":0,"offset":3,"value":"{not json"}'
    }
    got = {r.op_id: (r.keys, r.reason) for r in json_rows.collect()}
    assert got["o1"] == (["b", "a"], None)  # in their order, each once
    assert got["o2"] == (["k"], None)
    assert got["o3"] == (["solo"], "negative_timeout")
    assert got[None] == (None, "malformed_json")

    path = str(tmp_path / "events.parquet")
    pd.DataFrame(
        {
            "key": ["k", None],
            "ts": pd.to_datetime([T0, T0], unit="ms"),
            "op_id": [None, "x"],
            "source": ["s", None],
            "value": [1.5, None],
        }
    ).to_parquet(path, coerce_timestamps="us")
    parsed = parse_events(read_batch(spark, path, "parquet", kind="events"), "parquet").collect()
    assert [(r.key, r.ts_ms, r.value, r.reason) for r in parsed] == [
        ("k", T0, 1.5, None),
        (None, T0, None, "missing_key"),
    ]


def test_shard_groups_land_in_distinct_spark_partitions(spark):
    # Spark's own partitioner decides; 8 shards + the cross-shard group on 9 partitions
    labels = shard_labels(9)
    rows = spark.createDataFrame([(label,) for label in labels], "shard int")
    placed = rows.repartition(9, "shard").select("shard", F.spark_partition_id().alias("p")).collect()
    assert len({r.p for r in placed}) == 9
    plain = spark.createDataFrame([(n,) for n in range(9)], "shard int").repartition(9, "shard")
    assert plain.select(F.spark_partition_id()).distinct().count() < 9  # what the labels avoid
    check = spark.range(-50, 50).select(
        F.col("id").cast("int").alias("v"), F.hash(F.col("id").cast("int")).alias("h")
    )
    assert all(spark_hash_int(r.v) == r.h for r in check.collect())
