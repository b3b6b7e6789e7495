"""``spark_purgatory.start``: the one call that runs the stream, with the job's defaults."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.config import ConfigError
from spark_purgatory.delta.accumulator import RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.driver_step import DriverStep
from spark_purgatory.handle import _Totals
from spark_purgatory.handoff.control import MicroBatchControl
from spark_purgatory.handoff.partitions import PartitionWatermarks
from spark_purgatory.handoff.wake import Wake
from spark_purgatory.query import app_id_of
from spark_purgatory.runtime.settings import QUERY_EXCLUDED_RULES
from spark_purgatory.state.pending_counts import PendingRecord
from spark_purgatory.workload import generate, write_json_lines

SHUFFLE = "spark.sql.shuffle.partitions"
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
ARROW_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"


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
    before = {
        key: spark.conf.get(key, None) for key in (SHUFFLE, ARROW_RECORDS, EXCLUDED_RULES, CHECKPOINT_FILES)
    }
    with start(ops, events, output=out, checkpoint=chk, config=config, trigger="processing-time=1s") as q:
        # the session's own values are restored (the query keeps what it started with)
        assert {key: spark.conf.get(key, None) for key in before} == before
        q.process_all_available()
        assert q.is_active and q.accumulator.destinations(), "rows wait for linger.ms"
        # the plan Spark re-optimizes each micro-batch has no filter inferred from the routing's
        # explode, which inlined the validation into one huge condition (runtime.settings)
        plan = q.query._jsq.streamingQuery().lastExecution().optimizedPlan().toString()
        assert not [line for line in plan.splitlines() if "Filter" in line and "size(" in line]
        # ... and the query runs without the rules for what its plan never holds
        ran_with = q.query._jsq.streamingQuery().lastExecution().sparkSession().conf().get(EXCLUDED_RULES)
        assert set(QUERY_EXCLUDED_RULES) <= set(ran_with.split(","))
        # a local checkpoint: Spark's logs renamed in the JVM, no readlink process per file
        assert _renames_in_the_jvm(q.query._jsq.streamingQuery().offsetLog().fileManager())
        assert q.totals["batches"] >= 3 and q.totals["commits"] == 0
        # every micro-batch's stages keep the call site the query started with: the sink's
        # actions would leave the stream thread none, and Spark would walk its stack for each
        # RDD and name them "run at <unknown>:0" (runtime.call_site)
        names = _stage_names(spark, str(q.query.runId))
        assert len(names) >= 2 * 3 and _WALKED not in names
    assert not q.is_active
    assert q.accumulator.destinations() == []  # stop() flushed everything
    assert q.stop() == []  # a second stop does nothing
    # the job's defaults: one shuffle partition per shard group, state and staging beside the checkpoint
    assert q.query.lastProgress["stateOperators"][0]["numShufflePartitions"] == config.groups
    assert os.listdir(os.path.join(chk, "purgatory-state"))
    assert q.accumulator.staging_dir == os.path.join(chk, "accumulator")
    outcomes = DeltaTable(os.path.join(out, "outcomes"))
    assert outcomes.transaction_version(app_id_of(chk)) is not None
    ids = outcomes.to_pyarrow_table().column("op_id").to_pylist()
    assert len(ids) == len(set(ids)) == q.totals["completed"] + q.totals["expired"] > 0
    assert set(ids) <= set(work.operations["op_id"])
    assert q.totals["commits"] >= 1 and q.history and q.last_progress["batch_id"] >= 2
    # the observed metrics (from the rows the shards staged) add up to what the sink counted
    counted = ("completed", "expired", "unmatched", "rejected")
    assert {k: sum(h[k] for h in q.history) for k in counted} == {k: q.totals[k] for k in counted}
    assert q.last_progress["pending"] == q.pending and any(h["group_rows_total"] for h in q.history)


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


def test_the_function_start_gives_foreach_batch_pickles_for_spark_connect(tmp_path):
    """Over Spark Connect ``foreachBatch`` pickles the driver's step to run it in the server's
    Python: the sink and the control plane go with it (a Connect query has no reaper)."""
    acc = RecordAccumulator(
        str(tmp_path / "staging"), app_id="q", batch_size=1, linger_ms=1, buffer_memory=1 << 20
    )
    chk = str(tmp_path / "chk")
    control = MicroBatchControl(
        wake=Wake.under(chk, cross_shard=2),
        partitions=PartitionWatermarks(str(tmp_path / "state" / "watermarks"), {"operations": 1_000}),
        pending=PendingRecord.under(chk),
        on_batch=_Totals(None),
    )
    step = DriverStep(PurgatorySink(acc, DeltaRsWriter(str(tmp_path / "out"))), control)
    copy = pickle.loads(pickle.dumps(step))
    assert (
        copy.control.on_batch.totals == step.control.on_batch.totals and copy.sink.accumulator.app_id == "q"
    )
    assert (copy.control.wake.root, copy.control.partitions.root) == (
        control.wake.root,
        control.partitions.root,
    )


def test_the_app_id_belongs_to_the_checkpoint(tmp_path, monkeypatch):
    chk, other = str(tmp_path / "data" / "chk"), str(tmp_path / "data" / "other")
    assert app_id_of(chk) == app_id_of(chk) != app_id_of(other)
    assert app_id_of(chk).startswith("spark-purgatory-")


def test_the_app_id_is_the_same_from_every_directory_and_for_every_spelling(tmp_path, monkeypatch):
    (tmp_path / "host-a").mkdir()
    (tmp_path / "host-b").mkdir()
    monkeypatch.chdir(tmp_path / "host-a")
    first = app_id_of("../data/chk")  # a relative checkpoint, as a user may give it
    monkeypatch.chdir(tmp_path / "host-b")
    assert app_id_of(str(tmp_path / "data" / "chk")) == first
    assert app_id_of(f"file://{tmp_path}/data/chk") == first == app_id_of(f"file:{tmp_path}/data/chk/")
    # the id is what the checkpoint holds, written once
    assert (tmp_path / "data" / "chk" / "purgatory-id").read_text() == first
    assert os.listdir(tmp_path / "host-a") == os.listdir(tmp_path / "host-b") == []


def test_a_checkpoint_from_before_the_id_file_keeps_the_id_it_committed_under(tmp_path, monkeypatch):
    import hashlib

    chk = tmp_path / "chk"
    chk.mkdir()
    (chk / "metadata").write_text('{"id":"spark-query-id"}')  # Spark ran on it already
    legacy = "spark-purgatory-" + hashlib.sha1(str(chk).encode()).hexdigest()[:12]
    assert app_id_of(str(chk)) == legacy
    monkeypatch.chdir(tmp_path)
    assert app_id_of("chk") == legacy  # now held by the checkpoint, whatever the directory


STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _recorded_providers(checkpoint: str) -> list[str]:
    """The state store provider each micro-batch's offset log entry recorded, in batch order."""
    offsets = os.path.join(checkpoint, "offsets")
    names = sorted((n for n in os.listdir(offsets) if n.isdigit()), key=int)
    providers = []
    for name in names:
        with open(os.path.join(offsets, name)) as f:
            metadata = json.loads(f.read().splitlines()[1])
        providers.append(metadata["conf"][STATE_STORE])
    return providers


@pytest.mark.spark
@pytest.mark.parametrize("first, then", [(None, ROCKSDB), (ROCKSDB, None)])
def test_a_checkpoint_keeps_the_state_store_it_began_with(spark, tmp_path, monkeypatch, first, then):
    """A new checkpoint gets Spark's HDFS-backed store unless the session names one (RocksDB
    then with changelog checkpointing); a restart under another session setting keeps the
    checkpoint's store (and still completes operations).  Every path is a ``file:`` URI, run
    from another working directory: nothing is written relative to it, and the shard state,
    the staging and the id go beside the checkpoint."""
    work = generate(300, seed=11, ops_per_second=50)
    staged = {kind: tmp_path / f"all-{kind}" for kind in ("ops", "events")}
    write_json_lines(work, str(staged["ops"]), str(staged["events"]), files=2)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    base = f"file://{tmp_path}"
    paths = {"output": f"{base}/out", "checkpoint": f"{base}/chk", "spark": spark}
    config = PurgatoryConfig(shards=2, watermark_delay="2 seconds", state_segment_rows=20)
    recorded, done, resolved = [], 0, 0
    for run, provider in enumerate((first, then)):
        for kind, source in staged.items():  # one more file per stream for each run
            os.makedirs(tmp_path / kind, exist_ok=True)
            name = sorted(os.listdir(source))[run]
            shutil.copy(source / name, tmp_path / kind / name)
        if provider is None:
            spark.conf.unset(STATE_STORE)
        else:
            spark.conf.set(STATE_STORE, provider)
        try:
            with start(f"{base}/ops", f"{base}/events", config=config, **paths) as q:
                q.await_termination()
            assert spark.conf.get(STATE_STORE, None) == provider  # the session's own value is back
        finally:
            spark.conf.unset(STATE_STORE)
        recorded.append(_recorded_providers(str(tmp_path / "chk")))
        done += q.totals["completed"]
        resolved += q.totals["completed"] + q.totals["expired"]
    began_with = first or HDFS
    assert set(recorded[0]) == set(recorded[1]) == {began_with}
    assert len(recorded[1]) > len(recorded[0])  # the restart ran micro-batches of its own
    assert done > 0
    assert os.listdir(cwd) == []
    assert set(os.listdir(tmp_path / "chk")) >= {"purgatory-id", "purgatory-state", "accumulator", "offsets"}
    assert os.listdir(tmp_path / "chk" / "purgatory-state")  # segment files beside the checkpoint
    outcomes = DeltaTable(str(tmp_path / "out" / "outcomes"))
    assert outcomes.transaction_version(app_id_of(str(tmp_path / "chk"))) is not None
    ids = outcomes.to_pyarrow_table().column("op_id").to_pylist()
    assert len(ids) == len(set(ids)) == resolved  # exactly once across the restart
    files = [name for _dir, _dirs, names in os.walk(tmp_path / "chk" / "state") for name in names]
    if began_with == ROCKSDB:  # RocksDB named by the session: with changelog checkpointing
        assert any(name.endswith(".changelog") for name in files)
    else:
        assert any(name.endswith(".delta") for name in files)


_WALKED = "run at <unknown>:0"  # what Spark's stack walk names the stream thread's RDDs


def _stage_names(spark, run_id: str) -> list[str]:
    """The names of the stages of a query's jobs (its run's job group)."""
    tracker = spark.sparkContext.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(run_id) for s in tracker.getJobInfo(j).stageIds]
    return [info.name for info in map(tracker.getStageInfo, stages) if info is not None]


def _renames_in_the_jvm(manager) -> bool:
    """Spark's FileSystem-based checkpoint file manager, itself or behind the project's."""
    if manager.getClass().getSimpleName() == "LocalCheckpointFiles":
        manager = manager.delegate()
    return manager.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"


@pytest.mark.spark
def test_only_a_local_checkpoint_changes_the_checkpoint_file_manager(spark, tmp_path):
    """``settings.checkpoint_files`` swaps Spark's manager for a query only where the path
    resolves to the local file system: a path, a ``file:`` URI; not a scheme Hadoop resolves
    elsewhere, nor one it cannot resolve; and never over the session's own choice."""
    from spark_purgatory.runtime.settings import FILE_SYSTEM_FILES, checkpoint_files, on_local_files

    assert on_local_files(spark, str(tmp_path)) and on_local_files(spark, tmp_path.as_uri())
    assert not on_local_files(spark, "nosuchscheme://bucket/checkpoint")
    own = spark.conf.get(CHECKPOINT_FILES, None)  # the project's session names its own
    spark.conf.unset(CHECKPOINT_FILES)
    try:
        with checkpoint_files(spark, "nosuchscheme://bucket/checkpoint"):
            assert spark.conf.get(CHECKPOINT_FILES, None) is None
        with checkpoint_files(spark, str(tmp_path)):
            assert spark.conf.get(CHECKPOINT_FILES) == FILE_SYSTEM_FILES
        assert spark.conf.get(CHECKPOINT_FILES, None) is None  # restored
        mine = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(CHECKPOINT_FILES, mine)
        with checkpoint_files(spark, str(tmp_path)):
            assert spark.conf.get(CHECKPOINT_FILES) == mine
    finally:
        spark.conf.unset(CHECKPOINT_FILES)
        if own is not None:
            spark.conf.set(CHECKPOINT_FILES, own)


@pytest.mark.spark
@pytest.mark.jars("checks", "s3a")
def test_the_sessions_checkpoint_file_manager_is_sparks_own_off_the_local_file_system(spark, tmp_path):
    """``local_session`` names the project's manager for every query of the session (a file
    source's log is made with the session it was read with, after ``start`` returns): a local
    path gets Spark's FileSystem-based manager, an ``s3a://`` one what Spark itself picks."""
    from spark_purgatory.runtime.settings import LOCAL_CHECKPOINT_FILES

    assert spark.conf.get(CHECKPOINT_FILES) == LOCAL_CHECKPOINT_FILES
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # what a query's logs are made with
    for key, value in {  # an endpoint nothing listens on: building the managers reads nothing
        "fs.s3a.endpoint": "http://127.0.0.1:9",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.bucket.probe": "0",
        "fs.s3a.access.key": "key",
        "fs.s3a.secret.key": "secret",
    }.items():
        conf.set(key, value)

    def manager(path: str):
        files = jvm.io.sparkpurgatory.checkpoint.LocalCheckpointFiles
        return files(jvm.org.apache.hadoop.fs.Path(path), conf)

    assert _renames_in_the_jvm(manager(str(tmp_path))) and _renames_in_the_jvm(manager(tmp_path.as_uri()))
    s3 = manager("s3a://bucket/checkpoint")
    spark_own = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path("s3a://bucket/checkpoint"), conf
    )
    assert spark_own.getClass().getSimpleName() == "LocalCheckpointFiles"  # the session names it
    assert s3.delegate().getClass().getSimpleName() == "FileContextBasedCheckpointFileManager"
