"""``spark_purgatory.start``: the one call that runs the stream, with the job's defaults."""

from __future__ import annotations

import os
import pickle

import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.config import ConfigError
from spark_purgatory.delta.accumulator import RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.query import _Totals, app_id_of
from spark_purgatory.workload import generate, write_json_lines

SHUFFLE = "spark.sql.shuffle.partitions"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


@pytest.mark.spark
def test_start_applies_the_job_defaults_and_leaving_the_block_stops_and_flushes(spark, tmp_path):
    work = generate(400, seed=5, ops_per_second=50)
    ops, events = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops, events, files=3, malformed=2)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    config = PurgatoryConfig(
        shards=2,
        watermark_delay="2 seconds",
        accumulator_linger_ms=3_600_000,  # nothing is committed before stop()
        state_segment_rows=50,  # shard state goes to segment files early
        source_max_files_per_trigger=1,
    )
    before = spark.conf.get(SHUFFLE, None)
    with start(ops, events, output=out, checkpoint=chk, config=config, trigger="processing-time=1s") as q:
        assert spark.conf.get(SHUFFLE, None) == before  # the session's own value is restored
        q.process_all_available()
        assert q.is_active and q.accumulator.destinations(), "rows wait for linger.ms"
        assert q.totals["batches"] >= 3 and q.totals["commits"] == 0
    assert not q.is_active
    assert q.accumulator.destinations() == []  # stop() flushed everything
    assert q.stop() == []  # a second stop does nothing
    # the job's defaults: one shuffle partition per shard group, state and staging beside the checkpoint
    assert q.query.lastProgress["stateOperators"][0]["numShufflePartitions"] == config.shards + 1
    assert os.listdir(os.path.join(chk, "purgatory-state"))
    assert q.accumulator.staging_dir == os.path.join(chk, "accumulator")
    outcomes = DeltaTable(os.path.join(out, "outcomes"))
    assert outcomes.transaction_version(app_id_of(chk)) is not None
    ids = outcomes.to_pyarrow_table().column("op_id").to_pylist()
    assert len(ids) == len(set(ids)) == q.totals["completed"] + q.totals["expired"] > 0
    assert set(ids) <= set(work.operations["op_id"])
    assert q.totals["commits"] >= 1 and q.history and q.last_progress["batch_id"] >= 2


@pytest.mark.spark
def test_start_refuses_settings_that_would_break_the_query_saying_what_to_set(spark, tmp_path):
    paths = {"output": str(tmp_path / "out"), "checkpoint": str(tmp_path / "chk"), "spark": spark}
    with pytest.raises(ConfigError, match="available-now"):
        start("ops", "events", trigger="sometimes", **paths)
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        with pytest.raises(ConfigError, match=f'"{NO_DATA_BATCHES}", "true"'):
            start("ops", "events", **paths)
    finally:
        spark.conf.unset(NO_DATA_BATCHES)


def test_the_sink_start_builds_pickles_for_spark_connect(tmp_path):
    acc = RecordAccumulator(
        str(tmp_path / "staging"), app_id="q", batch_size=1, linger_ms=1, buffer_memory=1 << 20
    )
    sink = PurgatorySink(acc, DeltaRsWriter(str(tmp_path / "out")), on_batch=_Totals(None))
    copy = pickle.loads(pickle.dumps(sink))
    assert copy.on_batch.totals == sink.on_batch.totals and copy.accumulator.app_id == "q"


def test_the_app_id_belongs_to_the_checkpoint():
    assert app_id_of("/data/chk") == app_id_of("/data/chk") != app_id_of("/data/other")
    assert app_id_of("/data/chk").startswith("spark-purgatory-")
