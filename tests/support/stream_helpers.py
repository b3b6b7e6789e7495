"""Drive the streaming operator over real file sources with availableNow triggers."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pandas as pd
import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.sources import read_stream

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def arriving_input(root, work, *, files: int, malformed: int = 0):
    """``work`` as ``files`` JSON-lines files per input, held back under ``root/pending``;
    returns the two input directories (empty) and ``deliver(parts)``, which moves the files
    numbered ``parts`` into them (each appears whole, as a file source must see it)."""
    from spark_purgatory.workload import write_json_lines

    pending = os.path.join(root, "pending")
    write_json_lines(work, f"{pending}/ops", f"{pending}/events", files=files, malformed=malformed)
    ops, events = os.path.join(root, "ops"), os.path.join(root, "events")
    os.makedirs(ops)
    os.makedirs(events)

    def deliver(parts: range) -> None:
        for i in parts:
            name = f"part-{i:05d}.json"
            os.replace(os.path.join(pending, "ops", name), os.path.join(ops, name))
            os.replace(os.path.join(pending, "events", name), os.path.join(events, name))

    return ops, events, deliver


def keys_in_different_shards(shards: int, count: int) -> list[str]:
    """``count`` keys, each in its own shard of ``shards``: the first of ``key-0``, ``key-1``, ...
    in each shard, by routing's hash (``spark.key_hash``, Spark's ``pmod(xxhash64)`` in Python,
    checked against Spark's by ``tests/spark/test_local_routing.py``: no Spark job)."""
    import numpy as np

    from spark_purgatory.spark.key_hash import shards_of

    names = np.array([f"key-{i}" for i in range(64)], dtype=object)
    first: dict[int, str] = {}
    for name, shard in zip(names, shards_of(names, shards), strict=True):
        first.setdefault(int(shard), name)
    assert len(first) >= count
    return list(first.values())[:count]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def op(op_id: str, key, ts: int, timeout_ms: int = 10_000, condition: str = "any", **extra) -> str:
    keys = [key] if isinstance(key, str) else key
    row = {"op_id": op_id, "keys": keys, "ts": iso(T0 + ts), "timeout_ms": timeout_ms, "condition": condition}
    row.update(extra)
    return json.dumps(row)


def ev(key: str, ts: int, **extra) -> str:
    return json.dumps({"key": key, "ts": iso(T0 + ts), **extra})


class Files:
    """A pair of input directories; each ``add`` writes one file per stream, in order."""

    def __init__(self, root: str) -> None:
        self.ops = os.path.join(root, "ops")
        self.events = os.path.join(root, "events")
        self.checkpoint = os.path.join(root, "checkpoint")
        os.makedirs(self.ops, exist_ok=True)
        os.makedirs(self.events, exist_ok=True)
        self.count = 0

    def add(self, ops: list[str] = (), events: list[str] = ()) -> None:
        stamp = time.time() - 1000 + self.count  # file sources order by modification time
        for directory, lines in ((self.ops, ops), (self.events, events)):
            path = os.path.join(directory, f"part-{self.count:04d}.json")
            with open(path, "w", encoding="utf-8") as out:
                out.write("".join(line + "\n" for line in lines))
            os.utime(path, (stamp, stamp))
        self.count += 1


@dataclass
class Run:
    outcomes: pd.DataFrame
    unmatched: pd.DataFrame
    rejected: pd.DataFrame
    watermarks: dict[int, int] = field(default_factory=dict)  # batch id -> watermark (ms)
    progress: list[dict] = field(default_factory=list)
    plan: str = ""  # the last micro-batch's physical plan


def replicas_warning() -> pytest.WarningsChecker:
    """Expects what a stream says when, without ``purgatory.state.path``, its multi-key
    operations may span shards: each event gets a replica (``spark.routing``)."""
    return pytest.warns(RuntimeWarning, match="purgatory.state.path is not set")


def run_stream(spark, files: Files, config: PurgatoryConfig, fmt: str = "json") -> Run:
    """One availableNow run of the operator from ``files``' checkpoint (one file per stream
    per trigger, read as ``fmt``); collects every row."""
    ops = read_stream(spark, files.ops, fmt, kind="operations", max_files_per_trigger=1)
    evs = read_stream(spark, files.events, fmt, kind="events", max_files_per_trigger=1)
    out = purgatory_stream(ops, evs, config)
    batches: list[pd.DataFrame] = []

    def sink(batch, batch_id: int) -> None:
        frame = batch.drop("op_ts", "deadline", "resolved_at", "ts", "watermark").toPandas()
        frame["batch_id"] = batch_id
        batches.append(frame)

    query = (
        out.writeStream.foreachBatch(sink)
        .option("checkpointLocation", files.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    last = query._jsq.streamingQuery().lastExecution()  # None when no micro-batch ran
    columns = ["kind", "batch_id", "watermark_ms"]
    rows = pd.concat(batches, ignore_index=True) if batches else pd.DataFrame(columns=columns)
    metrics = rows[rows["kind"] == "metrics"]
    watermarks = metrics.groupby("batch_id")["watermark_ms"].max().astype("int64").to_dict()
    return Run(
        outcomes=rows[rows["kind"] == "outcome"].reset_index(drop=True),
        unmatched=rows[rows["kind"] == "unmatched"].reset_index(drop=True),
        rejected=rows[rows["kind"] == "rejected"].reset_index(drop=True),
        watermarks=watermarks,
        progress=[p for p in query.recentProgress],
        plan=last.executedPlan().treeString() if last is not None else "",
    )
