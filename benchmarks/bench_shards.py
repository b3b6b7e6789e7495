"""Does any shard group get every event?  The busiest group's share of input rows per micro-batch.

Uniform keys, S = 8 and 16 shards, 0%, 1% and 10% multi-key operations (two random keys, so
almost always on two shards), local[2], a few micro-batches.  For each run it prints, per
micro-batch, the busiest group's share of the operator's input rows (``group_rows``, the
per-call gauge behind the ``max_group_rows`` / ``group_rows_total`` observed metrics) next
to 1/S and 2/S, and the run's time; and it asserts the outcomes equal one engine's
(``Purgatory.replay`` over all input at the stream's final watermark).

With the mailbox hand-off (``purgatory.state.path`` set, as ``query.start`` does) the
cross-shard group gets only the cross-shard operations and the (event, operation) pairs the
primaries relay (counted in its ``group_rows``); events go to their home shard only.  The
pairs of a micro-batch reach it in the next one, so in a quiet micro-batch after a busy one
(the tail of this workload) it can be the busiest group at 10 % multi-key operations.  The
last run shows the fallback without a state path: a replica of every event in the
cross-shard group, which then holds a third to a half of all rows (the funnel).

Measured here (local[2], 4000 operations, shared machine): busiest share per data
micro-batch 0.13-0.15 for S = 8 (1/S = 0.125) and 0.074-0.094 for S = 16 (1/S = 0.0625) at
0 % and 1 % multi-key operations; the replica fallback 0.34-0.50 for S = 8.

    .venv/bin/python benchmarks/bench_shards.py            # S = 8, 16; 0 / 1 / 10 %
    .venv/bin/python benchmarks/bench_shards.py --ops 2000 --shards 8 --multi 0.01
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.sources import read_stream
from spark_purgatory.testing import spark_session
from spark_purgatory.workload import START_MS

TIMEOUT_MS, SPAN_MS, FILES, DELAY_MS = 4_000, 20_000, 3, 1_000


def workload(n_ops: int, multi: float, seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Operations (``any`` / ``count`` 2) on uniform keys, a fraction with two keys; 1.5 events
    per operation key on average, each after its operation, about 60% within the deadline."""
    rng = np.random.default_rng(seed)
    n_keys = max(n_ops // 2, 16)
    ts = START_MS + np.sort(rng.integers(0, SPAN_MS - TIMEOUT_MS, n_ops))
    first = rng.integers(0, n_keys, n_ops)
    second = (first + 1 + rng.integers(0, n_keys - 1, n_ops)) % n_keys
    two = rng.random(n_ops) < multi
    keys = [[f"k{a}", f"k{b}"] if t else [f"k{a}"] for a, b, t in zip(first, second, two, strict=True)]
    count = rng.random(n_ops) < 0.5
    ops = pd.DataFrame(
        {
            "op_id": [f"o{i}" for i in range(n_ops)],
            "keys": keys,
            "ts": ts,
            "timeout_ms": TIMEOUT_MS,
            "condition": np.where(count, "count", "any"),
            "target": np.where(count, 2.0, np.nan),
        }
    )
    n_events = int(n_ops * 1.5)
    owner = rng.integers(0, n_ops, n_events)
    key_of = np.array([k[rng.integers(len(k))] for k in ops["keys"].to_numpy()[owner]], dtype=object)
    ev_ts = ts[owner] + rng.integers(0, int(TIMEOUT_MS * 1.6), n_events)
    events = pd.DataFrame({"key": key_of, "ts": ev_ts}).sort_values("ts", kind="stable", ignore_index=True)
    return ops, events


def write_files(ops: pd.DataFrame, events: pd.DataFrame, root: str) -> tuple[str, str, int]:
    """``FILES`` files per input cut by event time, plus a pad pair far ahead that moves the
    watermark past every deadline; returns the two directories and the pad's time."""
    pad = START_MS + SPAN_MS + 3 * TIMEOUT_MS + 10 * DELAY_MS
    dirs = []
    for name, frame, pad_row in (
        ("ops", ops, {"op_id": "pad", "keys": ["pad-op"], "ts": pad, "timeout_ms": 60_000}),
        ("events", events, {"key": "pad", "ts": pad}),
    ):
        directory = os.path.join(root, name)
        os.makedirs(directory)
        edges = START_MS + np.linspace(0, SPAN_MS + TIMEOUT_MS * 2, FILES + 1)
        part = np.clip(np.searchsorted(edges, frame["ts"].to_numpy(), side="right") - 1, 0, FILES - 1)
        stamp = time.time() - 1000
        for i in range(FILES + 1):
            rows = [pad_row] if i == FILES else frame.loc[part == i].to_dict("records")
            path = os.path.join(directory, f"part-{i:04d}.json")
            with open(path, "w", encoding="utf-8") as out:
                out.write("".join(_line(r) for r in rows))
            os.utime(path, (stamp + i, stamp + i))  # file sources order by modification time
        dirs.append(directory)
    return dirs[0], dirs[1], pad


def _line(row: dict) -> str:
    clean = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()}
    clean = {k: v for k, v in clean.items() if not (isinstance(v, float) and v != v)}
    clean["ts"] = int(clean["ts"])
    return json.dumps(clean, default=int) + "\n"


def run(spark, config: PurgatoryConfig, ops_dir: str, ev_dir: str, root: str) -> tuple[pd.DataFrame, float]:
    """One availableNow run; (every output row, seconds)."""
    ops = read_stream(spark, ops_dir, "json", kind="operations", max_files_per_trigger=1)
    evs = read_stream(spark, ev_dir, "json", kind="events", max_files_per_trigger=1)
    batches: list[pd.DataFrame] = []

    def sink(batch, batch_id: int) -> None:
        frame = batch.where("kind in ('outcome', 'metrics')").select(
            "kind",
            "shard",
            "op_id",
            "status",
            "resolved_at_ms",
            "matched_events",
            "group_rows",
            "watermark_ms",
        )
        batches.append(frame.toPandas().assign(batch_id=batch_id))

    started = time.perf_counter()
    query = (
        purgatory_stream(ops, evs, config)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", os.path.join(root, "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return pd.concat(batches, ignore_index=True), time.perf_counter() - started


def busiest_shares(rows: pd.DataFrame) -> pd.DataFrame:
    """Per micro-batch with input: the busiest group's rows, all rows, and its share."""
    metrics = rows[rows["kind"] == "metrics"]
    per = metrics.groupby("batch_id")["group_rows"].agg(["max", "sum"])
    per = per[per["sum"] > 0]
    return per.assign(share=per["max"] / per["sum"])


def check_outcomes(
    rows: pd.DataFrame, ops: pd.DataFrame, events: pd.DataFrame, config: PurgatoryConfig
) -> int:
    """The stream's outcomes equal one engine's over all input at the stream's final watermark."""
    final = int(rows.loc[rows["kind"] == "metrics", "watermark_ms"].max())
    engine = Purgatory(replace(config, shards=1)).replay(ops, events, final_watermark_ms=final).outcomes
    got = rows[(rows["kind"] == "outcome") & (rows["op_id"] != "pad")]
    assert got["op_id"].is_unique, "an operation was reported twice"
    want = {r.op_id: (r.status, int(r.resolved_at), int(r.matched_events)) for r in engine.itertuples()}
    have = {r.op_id: (r.status, int(r.resolved_at_ms), int(r.matched_events)) for r in got.itertuples()}
    assert have == want, f"{len(set(have.items()) ^ set(want.items()))} outcomes differ from the engine's"
    return len(have)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=4000)
    parser.add_argument("--shards", default="8,16")
    parser.add_argument("--multi", default="0,0.01,0.1")
    parser.add_argument("--no-replicas", action="store_true", help="skip the fallback run")
    args = parser.parse_args(argv)
    shard_counts = [int(s) for s in args.shards.split(",")]
    fractions = [float(f) for f in args.multi.split(",")]
    spark = spark_session(conf={"spark.sql.shuffle.partitions": str(max(shard_counts) + 1)})
    spark.sparkContext.setLogLevel("ERROR")
    runs = [(s, f, True) for s in shard_counts for f in fractions]
    if not args.no_replicas:
        runs.append((shard_counts[0], 0.01, False))
    failures = []
    for shards, multi, mailbox in runs:
        spark.conf.set("spark.sql.shuffle.partitions", str(shards + 1))  # one partition per group
        root = tempfile.mkdtemp(prefix="bench-shards-")
        ops, events = workload(args.ops, multi)
        ops_dir, ev_dir, _ = write_files(ops, events, root)
        config = PurgatoryConfig(
            shards=shards,
            tick_ms=100,
            watermark_delay=f"{DELAY_MS} ms",
            state_path=os.path.join(root, "state") if mailbox else "",
            cross_shard_handoff="mailbox" if mailbox else "replicas",
        )
        rows, seconds = run(spark, config, ops_dir, ev_dir, root)
        shares = busiest_shares(rows)
        resolved = check_outcomes(rows, ops, events, config)
        way = "mailbox" if mailbox else "replicas"
        print(
            f"S={shards:>2} multi-key={multi:>5.0%} {way:<8} {seconds:6.1f} s  "
            f"{resolved} outcomes = engine's  1/S={1 / shards:.3f} 2/S={2 / shards:.3f}"
        )
        for batch, r in shares.iterrows():
            print(
                f"    batch {batch:>2}: busiest group {int(r['max']):>6} of {int(r['sum']):>6} rows"
                f" = {r['share']:.3f}"
            )
        data = shares[shares["sum"] >= 0.05 * shares["sum"].sum()]  # not the pad's or the tail's few rows
        if mailbox and multi <= 0.01 and (data["share"] > 2 / shards).any():
            failures.append(
                f"S={shards} multi-key={multi:.0%}: busiest share {data['share'].max():.3f} > 2/S"
            )
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
