"""The whole query on an object store through Spark: ``s3a://`` against moto on loopback.

Spark's own checkpoint (offsets, commits, the state store), the shard-state segments, the
accumulator's staging, the output tables and the input files all on ``s3a://``, through
hadoop-aws (``jvm/s3a/pom.xml``, fetched by ``make jars``) and, for what the project writes
itself, pyarrow and delta-rs (``spark_purgatory.storage``).  One settings set reaches both:
``Storage.hadoop_settings`` gives Spark's S3A the ``storage.*`` endpoint, region and plain
HTTP (the job's local session gets them at start).

* the job with Spark's own Delta writer (``job.writer=spark``), input files on ``s3a://``
  too: the tables committed by Spark through S3A equal the engine's results, and the job's
  working directory stays empty;
* the job killed with ``kill -9`` (``crash_harness``, the fault points of ``PLANS["s3"]``;
  the random moment is the local test's), then exactly once; every job run in an empty working directory,
  which stays empty.
"""

from __future__ import annotations

import os

import pyarrow.fs as pafs
import pytest
from crash_harness import SETTINGS, _job, check, read_table, reference, run
from object_store import ENV, S3Store
from test_crash import PLANS, killed_as_planned

from spark_purgatory import PurgatoryConfig
from spark_purgatory.config import read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.workload import generate, write_json_lines

LOCAL_CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.conf")

pytestmark = [pytest.mark.spark, pytest.mark.jars("s3a")]


def _upload(local: str, store: S3Store, prefix: str) -> None:
    """The files of a local directory as objects under ``prefix`` (input written elsewhere)."""
    fs = pafs.S3FileSystem(
        endpoint_override=store.endpoint,
        scheme="http",
        region=ENV["AWS_REGION"],
        access_key=ENV["AWS_ACCESS_KEY_ID"],
        secret_key=ENV["AWS_SECRET_ACCESS_KEY"],
    )
    for name in sorted(os.listdir(local)):
        with open(os.path.join(local, name), "rb") as f:
            data = f.read()
        with fs.open_output_stream(f"{store.bucket}/{prefix}/{name}") as out:
            out.write(data)


@pytest.mark.jars("delta")
def test_the_job_with_everything_on_s3a_commits_through_spark_and_writes_nothing_locally(tmp_path):
    store = S3Store(bucket="purgatory-job")
    try:
        work = generate(300, seed=21, ops_per_second=50)
        write_json_lines(work, str(tmp_path / "ops"), str(tmp_path / "events"), files=3, malformed=2)
        _upload(str(tmp_path / "ops"), store, "in/ops")
        _upload(str(tmp_path / "events"), store, "in/events")
        s3a = lambda *parts: store.uri(*parts, scheme="s3a")  # noqa: E731
        settings = {**SETTINGS, **store.settings, "job.writer": "spark"}  # Spark's own Delta writer
        args = ["--ops-path", s3a("in", "ops"), "--events-path", s3a("in", "events"),
                "--output-path", s3a("out"), "--checkpoint-path", s3a("chk"),
                "--trigger", "available-now"]  # fmt: skip
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        job = _job(args, settings, store.env, log=str(tmp_path / "logs" / "job"), cwd=str(cwd))
        assert job.wait(timeout=600) == 0, (tmp_path / "logs" / "job.err").read_text()[-3000:]
        out = store.uri("out")
        tables = {name: read_table(f"{out}/{name}", store.storage_options, name) for name in TABLES}
        keys = store.keys()
    finally:
        store.stop()
    assert "writer: SparkDeltaWriter" in (tmp_path / "logs" / "job.out").read_text()
    assert os.listdir(cwd) == []  # nothing under the working directory
    given = {**read_properties(LOCAL_CONF), **SETTINGS}
    engine = {k: v for k, v in given.items() if not k.startswith("job.")}
    config = PurgatoryConfig.from_mapping(engine)
    expected, expected_unmatched = reference(work, config)
    check(
        {
            "tables": tables,
            "expected_outcomes": expected,
            "expected_unmatched": expected_unmatched,
            "malformed": 2,
        }
    )
    # Spark's checkpoint and state store, the shard state, the staging, the tables: in the bucket
    for prefix in ("chk/offsets/", "chk/commits/", "chk/state/", "chk/purgatory-state/", "chk/accumulator/"):
        assert any(k.startswith(prefix) for k in keys), prefix
    assert "chk/purgatory-id" in keys


def test_the_job_with_its_checkpoint_on_s3a_survives_kill_minus_nine(tmp_path):
    store = S3Store(bucket="purgatory-crash")
    try:
        plan = PLANS["s3"]
        result = run(
            str(tmp_path / "crash-s3a"), n_ops=800, files=8, plan=plan, feed_seconds=2.0, seed=5,
            store=store, checkpoint_on_store=True,
        )  # fmt: skip
        keys = store.keys("crash-s3a")
    finally:
        store.stop()
    killed_as_planned(result, plan)
    check(result)
    # everything the query writes went to the bucket: Spark's checkpoint and state store too
    for prefix in ("chk/commits/", "chk/state/", "state/", "out/outcomes/_delta_log/"):
        assert any(k.startswith(f"crash-s3a/{prefix}") for k in keys), prefix
    assert "crash-s3a/staging/staged_through" in keys
    assert not any(k.endswith(".parquet") and k.startswith("crash-s3a/staging/") for k in keys)  # flushed
    assert result["cwd_files"] == []  # every job run's working directory stayed empty
