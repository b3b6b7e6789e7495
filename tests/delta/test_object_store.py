"""Everything the project writes itself, on a real S3-compatible store (moto on loopback).

Output tables (delta-rs, ``conditional_put=etag``), accumulator staging and shard-state
segments on ``s3://``; read back with ``deltalake``.  The job itself runs with all of them on
S3 in ``tests/delta/test_crash.py`` (killed, then exactly once), its Spark checkpoint local:
``s3a://`` needs the hadoop-aws JAR, which cannot be downloaded here.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from spark_purgatory.delta.accumulator import FAULT_POINTS, RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.query import app_id_of
from spark_purgatory.storage import Storage
from tests.delta.test_accumulator import Clock, output_rows
from tests.support.object_store import S3Store, check_segment_files


@pytest.fixture(scope="module")
def s3():
    store = S3Store()
    yield store
    store.stop()


@pytest.fixture
def aws_env(s3, monkeypatch):
    """The credentials as a user exports them; the endpoint comes from our storage.* keys."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return s3


def s3_sink(s3, run: str, clock: Clock, **hooks) -> PurgatorySink:
    acc = RecordAccumulator(
        s3.uri(run, "staging", scheme="s3a"),  # Hadoop's spelling works too
        app_id="query-1",
        batch_size=1,  # every batch is ready at once
        linger_ms=60_000,
        buffer_memory=1 << 30,
        clock=clock,
        storage=s3.storage,
        **hooks,
    )
    return PurgatorySink(acc, DeltaRsWriter(s3.uri(run, "out"), storage=s3.storage))


def op_ids(s3, run: str) -> list[str]:
    table = DeltaTable(s3.uri(run, "out", "outcomes"), storage_options=s3.storage_options)
    return sorted(table.to_pyarrow_table().column("op_id").to_pylist())


def test_staging_and_tables_on_s3_commit_exactly_once(aws_env):
    s3, clock = aws_env, Clock()
    sink = s3_sink(s3, "plain", clock)
    sink.process(output_rows(5, n_unmatched=2, n_rejected=1), 0)
    sink.process(output_rows(5, n_unmatched=2, n_rejected=1), 0)  # a replayed micro-batch
    sink.process(output_rows(5, start=5), 1)
    sink.close()
    assert op_ids(s3, "plain") == sorted(f"op-{i}" for i in range(10))
    table = DeltaTable(s3.uri("plain", "out", "outcomes"), storage_options=s3.storage_options)
    assert table.transaction_version("query-1") == 3 * 1  # batch 1's drain (phase 0)
    assert [k for k in s3.keys("plain/staging") if k.endswith(".parquet")] == []  # all drained
    assert "plain/staging/staged_through" in s3.keys("plain/staging")


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_crash_at_each_fault_point_on_s3_then_a_restart_gives_exactly_once(aws_env, point):
    s3, clock, run = aws_env, Clock(), f"crash-{point}"

    class Crash(Exception):
        pass

    def hook(name: str) -> None:
        if name == point:
            raise Crash(name)

    with pytest.raises(Crash):
        s3_sink(s3, run, clock, fault_hook=hook).process(output_rows(5), 0)
    restarted = s3_sink(s3, run, clock)
    restarted.process(output_rows(5), 0)  # Spark replays the batch
    restarted.process(output_rows(5, start=5), 1)
    restarted.close()
    assert op_ids(s3, run) == sorted(f"op-{i}" for i in range(10))
    assert not any("drain-" in k for k in s3.keys(f"{run}/staging"))  # manifests resolved


def test_segment_files_on_s3(aws_env):
    s3 = aws_env
    check_segment_files(s3.uri("state"), s3.storage)


def test_the_app_id_held_by_an_s3_checkpoint_is_written_once(aws_env):
    s3 = aws_env
    first = app_id_of(s3.uri("chk"), storage=s3.storage)
    assert app_id_of(s3.uri("chk", scheme="s3a"), storage=s3.storage) == first
    assert s3.keys("chk") == ["chk/purgatory-id"]


def test_the_standard_environment_alone_reaches_the_store(s3, monkeypatch):
    for name, value in {**s3.env, "AWS_ENDPOINT_URL": s3.endpoint, "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(name, value)
    acc = RecordAccumulator(
        s3.uri("env-only", "staging"), app_id="q", batch_size=1, linger_ms=1, buffer_memory=1 << 20
    )
    writer = DeltaRsWriter(s3.uri("env-only", "out"))  # no storage.* keys: S3 commit safety only
    assert writer.storage_options == {"conditional_put": "etag", "max_retries": "10"}
    PurgatorySink(acc, writer).process(output_rows(3), 0)
    assert op_ids(s3, "env-only") == ["op-0", "op-1", "op-2"]
    assert Storage().delta_options("/local/out") is None
