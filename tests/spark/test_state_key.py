"""The operator's state key, ``shard``, is ``integer NOT NULL`` whatever the input and the session.

Spark records a stateful operator's key schema in the checkpoint and refuses a restart whose
key is nullable where the recorded one is not (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``; a
non-nullable key where the recorded one is nullable it accepts).  Checkpoints written by
6e49991 recorded ``shard`` non-nullable; a later change of how the label is looked up made it
nullable and every such checkpoint refused to continue (issue 63).  These tests read the
routed stream's schema, the grouping key of the operator, for each kind of input and both
ANSI modes: no micro-batch runs.  ``tests/upgrades`` continues the real checkpoints.
"""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest

from spark_purgatory import PurgatoryConfig
from spark_purgatory.spark.formats import read_stream
from spark_purgatory.spark.input_stream import input_stream

pytestmark = pytest.mark.spark


@contextlib.contextmanager
def _ansi(spark, enabled: bool):
    before = spark.conf.get("spark.sql.ansi.enabled", None)
    spark.conf.set("spark.sql.ansi.enabled", str(enabled).lower())
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset("spark.sql.ansi.enabled")
        else:
            spark.conf.set("spark.sql.ansi.enabled", before)


def _inputs(spark, kind: str, root) -> tuple:
    """The two streams of one kind of input (nothing is read: only their schemas count)."""
    if kind == "kafka":
        options = {"kafka.bootstrap.servers": "127.0.0.1:9", "startingOffsets": "earliest"}
        kafka = spark.readStream.format("kafka")
        return tuple(kafka.options(subscribe=topic, **options).load() for topic in ("o", "e"))
    ts = pd.Timestamp("2026-01-01", tz="UTC")
    frames = {
        "operations": pd.DataFrame({"op_id": ["a"], "keys": [["k"]], "ts": [ts], "timeout_ms": [1000]}),
        "events": pd.DataFrame({"key": ["k"], "ts": [ts]}),
    }
    streams = []
    for name, frame in frames.items():
        folder = root / name
        folder.mkdir()
        if kind == "json":
            (folder / "a.json").write_text(frame.to_json(orient="records", lines=True, date_format="iso"))
        else:
            frame.to_parquet(folder / "a.parquet", coerce_timestamps="us", allow_truncated_timestamps=True)
        streams.append(read_stream(spark, str(folder), kind, kind=name))
    return tuple(streams)


@pytest.mark.parametrize("ansi", [True, False], ids=["ansi", "no-ansi"])
@pytest.mark.parametrize("kind", ["json", "parquet", pytest.param("kafka", marks=pytest.mark.jars("kafka"))])
def test_the_shard_key_is_never_nullable(spark, tmp_path, kind, ansi):
    operations, events = _inputs(spark, kind, tmp_path)
    (tmp_path / "wake").mkdir()
    for shards in (1, 2, 5):
        config = PurgatoryConfig(shards=shards, state_path=str(tmp_path / "state"))
        with _ansi(spark, ansi):
            routed = input_stream(
                operations, events, config, source_format=kind, wake_path=str(tmp_path / "wake")
            )
        key = routed.schema["shard"]
        assert (key.dataType.simpleString(), key.nullable) == ("int", False), (kind, shards, ansi)
