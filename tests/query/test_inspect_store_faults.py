"""The command line's small reads ride out an object store's ``503 SlowDown``: a checkpoint on
S3 (moto, behind ``tests/support/faulty_proxy.FaultyProxy``) read while half of the requests
are refused reads as it does without them.  AWS's SDK for C++ does not retry a 503 to a read
smaller than the error's own body (``tests/delta/test_store_faults.py``): ``read_checkpoint``,
``checkpoint_status`` (the pending record) and the state files of Spark's store are read
through ``storage.read_bytes``, which reads again.  Spark-free: the checkpoint's files are
written here, as Spark and the sink write them.
"""

from __future__ import annotations

import json

import pytest

from spark_purgatory import PurgatoryConfig
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.inspect import read_checkpoint
from spark_purgatory.inspect.status import checkpoint_status
from spark_purgatory.shard.labels import shard_labels
from spark_purgatory.spark import state_files
from spark_purgatory.storage import Storage
from tests.support.faulty_proxy import FaultyProxy
from tests.support.object_store import REGION, S3Store


@pytest.fixture
def store_and_proxy(monkeypatch):
    store = S3Store(bucket="inspect-faults")
    for name, value in store.env.items():
        monkeypatch.setenv(name, value)
    proxy = FaultyProxy(store.endpoint, seed=3)
    yield store, proxy
    proxy.stop()
    store.server.stop()


def _checkpoint(store: S3Store) -> list[state_files.GroupValue]:
    """A purgatory checkpoint's files at batch 4 (two shards and the cross-shard group)."""
    conf = {"spark.sql.shuffle.partitions": "3", "spark.sql.streaming.multipleWatermarkPolicy": "min"}
    offsets = {"batchWatermarkMs": 61_000, "batchTimestampMs": 70_000, "conf": conf}
    store.put("chk/offsets/4", ("v1\n" + json.dumps(offsets) + '\n{"logOffset":4}').encode())
    store.put("chk/commits/4", ("v1\n" + json.dumps({"nextBatchWatermarkMs": 62_000})).encode())
    files = Checkpoint("chk")
    store.put(files.app_id, b"spark-purgatory-0123456789abcdef")
    store.put(files.pending_record, json.dumps({"batch_id": 4, "pending": {"1": 3, "0": 2}}).encode())
    groups = [state_files.GroupValue(label, f"state of {label}", -1) for label in shard_labels(3)]
    fs, root = store.storage.filesystem(store.uri("chk"))
    state_files.write_version(fs, f"{root}/state/0", 0, 5, groups)
    return groups


def test_a_checkpoint_on_s3_reads_the_same_through_503s(store_and_proxy):
    store, proxy = store_and_proxy
    groups = _checkpoint(store)
    uri = store.uri("chk")
    healthy = read_checkpoint(uri, storage=store.storage)
    assert (healthy.last_batch, healthy.watermark_ms, healthy.groups) == (4, 61_000, 3)
    assert healthy.app_id == "spark-purgatory-0123456789abcdef"

    through = Storage(endpoint=proxy.endpoint, region=REGION, allow_http=True)
    config = {"storage.endpoint": proxy.endpoint, "storage.region": REGION, "storage.allow.http": "true"}
    cfg = PurgatoryConfig.from_mapping(config)
    proxy.slow_down(0.5)
    for _ in range(4):
        assert read_checkpoint(uri, storage=through) == healthy
        status = checkpoint_status(uri, config=cfg, state=False)
        assert (status["pending_by_shard"], status["pending"]) == ({"0": 2, "1": 3}, 5)
        assert status["checkpoint"]["app_id"] == healthy.app_id
        fs, root = through.filesystem(uri)
        assert state_files.read_version(fs, f"{root}/state/0", 0, 5) == groups
    assert proxy.injected["pyarrow"] > 0
