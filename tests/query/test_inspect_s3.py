"""Pending operations read back when the shard state's segment files are on S3 (moto).

Spark's own checkpoint stays local (``s3a://`` needs the hadoop-aws JAR); what the project
writes itself, the shard state's segments and the mailbox, goes to the object store, and
``pending_operations`` must read it there with the same ``storage.*`` settings.
"""

from __future__ import annotations

import pytest

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.inspect import pending_operations
from tests.support.object_store import S3Store
from tests.support.stream_helpers import Files, ev, op

pytestmark = pytest.mark.spark


@pytest.fixture
def s3(spark, monkeypatch):
    store = S3Store()
    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    # the Python workers get the session's environment with each task (not the driver's)
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update(store.env)
    yield store
    env.clear()
    env.update(saved)
    store.server.stop()


def test_pending_operations_read_segment_files_on_s3(spark, s3, tmp_path):
    config = PurgatoryConfig.from_mapping(
        {
            **s3.settings,
            "purgatory.shards": "2",
            "purgatory.state.path": s3.uri("inspect", "state"),
            "purgatory.state.segment.rows": "2",
            "source.max.files.per.trigger": "1",
        }
    )
    files = Files(str(tmp_path))
    files.add(
        [op(f"w-{i}", f"key-{i}", 0, 600_000, "count", target=2) for i in range(6)],
        [ev("key-0", 10, source="a"), ev("key-3", 11, source="b")],
    )
    query = start(files.ops, files.events, output=str(tmp_path / "out"), checkpoint=files.checkpoint,
                  config=config, spark=spark)  # fmt: skip
    query.await_termination()
    query.stop()
    assert any("/base-" in k or "/change-" in k for k in s3.keys("inspect/state")), "segments on S3"
    rows = {
        r.op_id: r.progress
        for r in pending_operations(files.checkpoint, spark=spark, config=config).collect()
    }
    assert rows == {"w-0": 1.0, "w-1": 0.0, "w-2": 0.0, "w-3": 1.0, "w-4": 0.0, "w-5": 0.0}
