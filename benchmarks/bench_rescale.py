"""How long ``spark-purgatory rescale`` takes for N pending operations (no Spark, no JVM).

Builds a stopped checkpoint as ``start`` leaves it: N pending operations (a share of them
multi-key, some across shards) and events buffered, in ``--from`` primary shards whose
bulk is in segment files (``purgatory-state``), each shard group's value in Spark's state
store files at the last committed micro-batch; then times ``rescale`` to ``--to`` shards,
step by step (read and load, reshard, write), and checks that every operation is still
pending once.

    python benchmarks/bench_rescale.py --pending 1000000 --from 2 --to 8

Prints one JSON line per rescale: its wall time, its CPU time (the machine may be shared:
``load`` is the 1-minute load average), the operations and stubs it wrote, the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.rescale import _HDFS, rescale
from spark_purgatory.shard.labels import shard_labels, spark_hash_int
from spark_purgatory.spark import state_files
from spark_purgatory.spark.group_state import to_group_state
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.state import SegmentStore, save_state

START = 1_767_225_600_000


def build(chk: str, pending: int, shards: int, multi_key: float, seed: int = 0) -> float:
    """A stopped checkpoint of ``pending`` operations on ``shards`` shards; returns seconds."""
    began = time.perf_counter()
    rng = np.random.default_rng(seed)
    n_keys = max(1, pending // 4)
    keys = np.array([f"key-{i}" for i in range(n_keys)], dtype=object)
    shard_of_key = shards_of(keys, shards)
    first = rng.integers(0, n_keys, pending)
    second = rng.integers(0, n_keys, pending)
    multi = rng.random(pending) < multi_key
    op_keys = np.empty(pending, dtype=object)
    op_keys[:] = [
        [keys[a], keys[b]] if m and a != b else [keys[a]]
        for a, b, m in zip(first, second, multi, strict=True)
    ]
    home = np.where(
        [
            len(k) == 1 or shard_of_key[a] == shard_of_key[b]
            for k, a, b in zip(op_keys, first, second, strict=True)
        ],
        shard_of_key[first],
        shards,
    )
    ops = pd.DataFrame(
        {
            "op_id": [f"op-{i}" for i in range(pending)],
            "keys": op_keys,
            "ts": START + rng.integers(0, 60_000, pending),
            "timeout_ms": 86_400_000,
            "condition": "count",
            "target": 3.0,
        }
    )
    ops["home"] = home
    config = PurgatoryConfig(shards=shards, state_path=os.path.join(chk, "purgatory-state"))
    store = SegmentStore(config.state_path, segment_rows=config.state_segment_rows)
    labels = shard_labels(shards + 1)
    groups: dict[int, list] = {p: [] for p in range(shards + 1)}
    no_events = pd.DataFrame({"key": [], "ts": []})
    for s in range(shards + 1):
        p = Purgatory(config)
        p.shard = s
        mine = ops.loc[ops["home"] == s].drop(columns=["home"])
        if s == shards:
            p.process(mine, no_events, watermark_ms=START)
        else:  # the primaries hold their own and the stubs of the cross-shard ones
            cross = ops.loc[ops["home"] == shards].drop(columns=["home"])
            here = cross["keys"].map(lambda ks, s=s: [k for k in ks if shard_of_key[int(k[4:])] == s])
            stubs = cross.assign(keys=here, stub=True).loc[here.str.len() > 0]
            p.process(
                pd.concat([mine.assign(stub=False), stubs], ignore_index=True), no_events, watermark_ms=START
            )
        value = to_group_state(save_state(p, store), "text")
        groups[spark_hash_int(labels[s]) % (shards + 1)].append(
            state_files.GroupValue(labels[s], value, START)
        )
    fs = pafs.LocalFileSystem()
    for partition, entries in groups.items():
        state_files.write_version(fs, f"{chk}/state/0", partition, 1, entries)  # batch 0 leaves version 1
    conf = {
        "spark.sql.shuffle.partitions": str(shards + 1),
        "spark.sql.streaming.stateStore.providerClass": _HDFS,
        "spark.sql.streaming.stateStore.compression.codec": "lz4",
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    }
    for log, meta in (
        ("offsets", {"batchWatermarkMs": START, "batchTimestampMs": START, "conf": conf}),
        ("commits", {"nextBatchWatermarkMs": START}),
    ):
        os.makedirs(f"{chk}/{log}", exist_ok=True)
        with open(f"{chk}/{log}/0", "w") as f:
            f.write("v1\n" + json.dumps(meta) + ("\n{}" if log == "offsets" else ""))
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--from", dest="old", type=int, default=2)
    parser.add_argument("--to", type=int, nargs="+", default=[8, 3])
    parser.add_argument("--multi-key", type=float, default=0.1, help="share of two-key operations")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        chk = os.path.join(tmp, "chk")
        built = build(chk, args.pending, args.old, args.multi_key)
        print(json.dumps({"built": args.pending, "shards": args.old, "seconds": round(built, 1)}), flush=True)
        for shards in args.to:
            cpu = time.process_time()
            done = rescale(chk, shards)
            cpu = time.process_time() - cpu
            line = {
                "pending": args.pending,
                "from": done.from_shards,
                "to": done.to_shards,
                "seconds": done.seconds,
                "cpu_seconds": round(cpu, 1),
                "load": round(os.getloadavg()[0], 1),
                "operations_and_stubs": done.pending,
                "rss_mb": _rss_mb(),
            }
            print(json.dumps(line), flush=True)
    return 0


def _rss_mb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


if __name__ == "__main__":
    sys.exit(main())
