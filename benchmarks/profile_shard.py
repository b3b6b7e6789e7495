"""Where one shard's micro-batch goes, without Spark: the shard step on the engine directly.

Runs the operator's shard step (``shard.step.ShardStep``: state load, input split, the
engine's ``process``, output rows, state save) on the benchmark's workload, routed as
the routing module routes it, one shard, micro-batch after micro-batch, with the watermark
a per-input watermark would give.  Around it, the hand-over PySpark itself does: the routed
rows from Arrow to pandas (``ArrowBatchTransformer.to_pandas``, in chunks of
``spark.sql.execution.arrow.maxRecordsPerBatch``) and the output rows back to Arrow
(``PandasToArrowConversion.convert``).  The shard step runs with Python's cyclic collector
paused, as the operator runs it (``spark.operator``: a container per operation).  Prints
seconds per step, the shard step's phases as it times them (``ShardResult.timings``: load,
process, save, output) and, with ``--cprofile``, the functions that cost most.

    python -m benchmarks profile-shard --ops 100000 --batches 10 [--staged] [--cprofile 25]
"""

from __future__ import annotations

import cProfile
import json
import pstats
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion
from pyspark.sql.pandas.types import to_arrow_schema

import spark_purgatory.delta.staging as staging_module
from benchmarks import harness
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.delta.staging import ShardStaging
from spark_purgatory.engine.collector import collector_paused
from spark_purgatory.shard.input import routed_rows
from spark_purgatory.shard.roles import ROLE_EVENT, ROLE_OPERATION, ROLES, SIDES
from spark_purgatory.shard.step import ShardStep
from spark_purgatory.spark.operator import STAGED_SCHEMA
from spark_purgatory.spark.output import OUTPUT_SCHEMA
from spark_purgatory.spark.routed_rows import ROUTED_SCHEMA
from spark_purgatory.state import WORKER_CACHE
from spark_purgatory.storage import Storage
from spark_purgatory.workload import generate_confirmations

SECONDS: dict[str, float] = defaultdict(float)


@contextmanager
def step(name: str):
    start = time.perf_counter()
    yield
    SECONDS[name] += time.perf_counter() - start


def routed_batches(n_ops: int, batches: int, delay_ms: int) -> list[tuple[pa.Table, int]]:
    """The workload's rows as one shard's routed input per micro-batch (Arrow, as Spark sends
    them), each with the watermark of its micro-batch (the slower input's newest time less
    the delay, as of the batch before)."""
    work = generate_confirmations(n_ops)
    ops, evs = work.operations, work.events
    ops_rows = pd.DataFrame(
        {
            "role": ROLES.index(ROLE_OPERATION),  # roles and sides travel as numbers (routed_rows.ROLES)
            "side": SIDES.index("operations"),
            "op_id": ops["op_id"],
            # the lists as routing sends them (routed_rows.LIST_COLUMNS): one key in key, several as JSON
            "key": [k[0] if len(k) == 1 else None for k in ops["keys"]],
            "keys": [json.dumps(list(k)) if len(k) > 1 else None for k in ops["keys"]],
            "ts_ms": ops["ts"],
            "timeout_ms": ops["timeout_ms"],
            "condition": "any",
        }
    )
    ev_rows = pd.DataFrame(
        {
            "role": ROLES.index(ROLE_EVENT),
            "side": SIDES.index("events"),
            "key": evs["key"],
            "ts_ms": evs["ts"],
        }
    )
    edges = np.linspace(ops["ts"].min(), evs["ts"].max() + 1, batches + 1)
    schema = to_arrow_schema(ROUTED_SCHEMA)
    out, wm = [], 0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        o = ops_rows[(ops_rows["ts_ms"] >= lo) & (ops_rows["ts_ms"] < hi)]
        e = ev_rows[(ev_rows["ts_ms"] >= lo) & (ev_rows["ts_ms"] < hi)]
        rows = pd.concat([o, e], ignore_index=True).assign(shard=0)
        rows = rows.assign(**{c: np.full(len(rows), None, object) for c in schema.names if c not in rows})
        out.append((pa.Table.from_pandas(rows[schema.names], schema=schema, preserve_index=False), wm))
        if len(o) and len(e):
            wm = max(wm, int(min(o["ts_ms"].max(), e["ts_ms"].max())) - delay_ms)
    return out


def run(
    n_ops: int,
    batches: int,
    chunk: int,
    state_path: str | None,
    cached: bool = True,
    staged: str | None = None,
) -> None:
    config = PurgatoryConfig(shards=1, cross_shard_operations=False, state_path=state_path or "")
    staging = ShardStaging(staged, Storage()) if staged else None
    shard_step = ShardStep(config, staging)
    value = None
    out_schema = STAGED_SCHEMA if staged else OUTPUT_SCHEMA
    for batch_id, (table, wm) in enumerate(routed_batches(n_ops, batches, config.watermark_delay_ms)):
        staging_module.micro_batch_id = lambda batch_id=batch_id: batch_id  # no Spark task here
        with step("arrow -> pandas (input)"):
            frames = []
            for batch in table.to_batches(max_chunksize=chunk):
                series = ArrowBatchTransformer.to_pandas(batch, timezone="UTC", schema=ROUTED_SCHEMA)
                frames.append(pd.concat(series, axis=1))
        if not cached:  # as when Spark hands the shard to another Python worker
            WORKER_CACHE.clear()
        with step("shard step"), collector_paused():  # as ``spark.operator``'s shard_step runs it
            done = shard_step(
                0, routed_rows(iter(frames)), value, watermark_ms=wm, batch_time_ms=batch_id + 1
            )
            value = done.value
        for phase, seconds in done.timings.items():
            SECONDS[f"  {phase}"] += seconds
        with step("pandas -> arrow (output)"):
            PandasToArrowConversion.convert(done.output, out_schema, timezone="UTC", arrow_cast=True)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser("profile-shard", __doc__, repeat=None)
    parser.add_argument("--ops", type=int, default=100_000, help="operations (all in one shard)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=10_000, help="maxRecordsPerBatch")
    parser.add_argument("--segments", action="store_true", help="with a SegmentStore (the job's default)")
    parser.add_argument("--no-cache", action="store_true", help="every load misses the worker cache")
    parser.add_argument("--staged", action="store_true", help="the shard stages its output (start's path)")
    parser.add_argument("--cprofile", type=int, default=0, help="print the N costliest functions")
    args = parser.parse_args(argv)
    profile = cProfile.Profile() if args.cprofile else None
    with tempfile.TemporaryDirectory() as tmp:
        if profile:
            profile.enable()
        start = time.perf_counter()
        state = f"{tmp}/state" if args.segments else None
        staged = f"{tmp}/staging" if args.staged else None
        run(args.ops, args.batches, args.chunk, state, cached=not args.no_cache, staged=staged)
        total = time.perf_counter() - start
        if profile:
            profile.disable()
    print(f"{args.ops:,} operations, {args.batches} micro-batches, one shard: {total:.2f} s")
    phases = ["  load", "  process", "  save", "  output"]  # ``ShardResult.timings``
    for name in ["arrow -> pandas (input)", "shard step", *phases, "pandas -> arrow (output)"]:
        print(f"  {name:<28}{SECONDS[name]:7.2f} s")
    if profile:
        stats = pstats.Stats(profile).sort_stats("cumulative")
        stats.print_stats(args.cprofile)
    harness.write_json(args.json, "profile-shard", args, {"seconds": total, "steps": dict(SECONDS)})
    return 0
