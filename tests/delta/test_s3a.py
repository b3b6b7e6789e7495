"""The whole query on an object store through Spark: ``s3a://`` against moto on loopback.

Spark's own checkpoint (offsets, commits, the state store), the shard-state segments, the
accumulator's staging, the output tables and the input files all on ``s3a://``, through
hadoop-aws (``jvm/s3a/pom.xml``, fetched by ``make jars``) and, for what the project writes
itself, pyarrow and delta-rs (``spark_purgatory.storage``).  One settings set reaches both:
``Storage.hadoop_settings`` gives Spark's S3A the ``storage.*`` endpoint, region and plain
HTTP (the job's local session gets them at start).

The job commits through Spark's own Delta writer (``job.writer=spark``: Delta's log through
S3A too) and is killed with ``kill -9`` (``crash_harness``, the fault points of
``PLANS["s3"]``; the others are the local and Kafka tests'), each run in an empty working
directory; after the last run the tables hold exactly what the engine computes, and the
working directory is still empty.

All along, the store answers one request in ten with ``503 SlowDown`` (``FaultyProxy`` in
front of moto): S3A, pyarrow and delta-rs ride them out by their retries (``storage.retries``
gives each its count: ``docs/operating.md``), and the outcomes are those of an undisturbed run.
"""

from __future__ import annotations

import pytest

from tests.delta.test_crash import PLANS, killed_as_planned
from tests.support.crash_harness import check, run
from tests.support.faulty_proxy import FaultyProxy
from tests.support.object_store import S3Store

pytestmark = [pytest.mark.spark, pytest.mark.jars("s3a")]


@pytest.mark.jars("delta")
def test_the_whole_query_on_s3a_commits_through_spark_through_503s_and_survives_kill_minus_nine(tmp_path):
    store = S3Store(bucket="purgatory-crash")
    proxy = FaultyProxy(store.endpoint, seed=5)
    proxy.slow_down(0.1)  # one request in ten, from every client, all along
    try:
        plan = PLANS["s3"]
        result = run(
            str(tmp_path / "crash-s3a"), n_ops=600, files=4, plan=plan, feed_seconds=2.0, seed=5,
            store=store.via(proxy.endpoint), checkpoint_on_store=True, input_on_store=True, writer="spark",
            # Spark's writer commits a drain table by table, a Spark job each, each request
            # through the proxy to moto: no drain but the last run's flush (the kill at staging:2
            # comes before any drain, the final run commits everything once)
            extra={"accumulator.linger.ms": "3600000"},
        )  # fmt: skip
        keys = store.keys("crash-s3a")
        injected = proxy.injected
    finally:
        proxy.stop()
        store.stop()
    killed_as_planned(result, plan)
    check(result)  # the outcomes of an undisturbed run, through the 503s
    # each client met them: Spark's S3A (checkpoint, input, Delta's writer), pyarrow (staging,
    # state), delta-rs (the tables' owner record, reading them back)
    assert min(injected[c] for c in ("s3a", "pyarrow", "delta-rs")) > 0, injected
    for log in ("run-0", "final"):  # each run committed through Delta's own writer
        assert "writer: SparkDeltaWriter" in (tmp_path / "crash-s3a" / "logs" / f"{log}.out").read_text()
    # everything the query reads and writes is in the bucket: the input, Spark's checkpoint and
    # state store, the shard state, the staging, the tables
    for prefix in ("ops/", "events/", "chk/offsets/", "chk/commits/", "chk/state/", "state/", "out/metrics/"):
        assert any(k.startswith(f"crash-s3a/{prefix}") for k in keys), prefix
    assert "crash-s3a/staging/staged_through" in keys
    assert not any(k.endswith(".parquet") and k.startswith("crash-s3a/staging/") for k in keys)  # flushed
    assert result["cwd_files"] == []  # every job run's working directory stayed empty
