"""Where one shard's micro-batch goes, without Spark: the shard step on the engine directly.

Runs the operator's shard step (``operator._stateful_shard``: state load, input split, the
engine's ``process``, ``output_rows``, state save) on the benchmark's workload, routed as
the routing module routes it, one shard, micro-batch after micro-batch, with the watermark
a per-input watermark would give.  Around it, the hand-over PySpark itself does: the routed
rows from Arrow to pandas (``ArrowBatchTransformer.to_pandas``, in chunks of
``spark.sql.execution.arrow.maxRecordsPerBatch``) and the output rows back to Arrow
(``PandasToArrowConversion.convert``).  Prints seconds per step, the shard step's parts
(state load, input, the engine, output rows, state save) and, with ``--cprofile``, the
functions that cost most.

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
import spark_purgatory.spark.operator as operator
from benchmarks import harness
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.delta.staging import ShardStaging
from spark_purgatory.spark.operator import STAGED_SCHEMA
from spark_purgatory.spark.output import OUTPUT_SCHEMA
from spark_purgatory.spark.routed_rows import ROLE_EVENT, ROLE_OPERATION, ROLES, ROUTED_SCHEMA, SIDES
from spark_purgatory.state import WORKER_CACHE
from spark_purgatory.storage import Storage
from spark_purgatory.workload import generate_confirmations

SECONDS: dict[str, float] = defaultdict(float)


@contextmanager
def step(name: str):
    start = time.perf_counter()
    yield
    SECONDS[name] += time.perf_counter() - start


class FakeState:
    """The part of ``GroupState`` the shard step uses."""

    def __init__(self) -> None:
        self.value: bytes | None = None
        self.watermark = 0

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple:
        return (self.value,)

    def update(self, value: tuple) -> None:
        self.value = value[0]

    def remove(self) -> None:
        self.value = None

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark

    def getCurrentProcessingTimeMs(self) -> int:
        return int(time.time() * 1000)

    def setTimeoutTimestamp(self, ms: int) -> None:
        pass


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


#: the shard step's own parts, timed inside it (the names the operator module calls)
_PARTS = {
    "load_state": "  load_state",
    "routed_rows": "  input chunks stacked",
    "split_input": "  input split",
    "output_rows": "  output_rows",
    "output_table": "  output_table (staged)",
    "save_state": "  save_state",
}

#: the staged path's output calls of a run, kept for ``compare_output``
CALLS: list[tuple[tuple, dict]] = []


def compare_output(rounds: int = 3) -> None:
    """The staged output of the run's shard calls both ways, alternated: as the shard made it
    before ``output_table`` (``output_rows``' pandas frame, then ``Table.from_pandas``) and
    as it makes it now; milliseconds per call, each round."""
    from spark_purgatory.contract import OPERATOR_OUTPUT
    from spark_purgatory.spark.output import output_rows, output_table

    def stacked(*args, **kwargs):
        frame = output_rows(*args, **kwargs)
        return pa.Table.from_pandas(frame, schema=OPERATOR_OUTPUT, preserve_index=False, nthreads=1)

    for r in range(rounds):
        took = {}
        for name, make in (("output_rows + from_pandas", stacked), ("output_table", output_table)):
            began = time.perf_counter()
            for args, kwargs in CALLS:
                make(*args, **kwargs)
            took[name] = (time.perf_counter() - began) * 1000 / max(len(CALLS), 1)
        print(
            f"  staged output, round {r + 1}: "
            + ", ".join(f"{k} {v:.1f} ms" for k, v in took.items())
            + " a call"
        )


def _timed(name: str, function):
    def timed(*args, **kwargs):
        with step(name):
            return function(*args, **kwargs)

    return timed


def time_parts() -> None:
    """Time the shard step's parts (``_PARTS``, and the engine's ``process``) where it calls
    them; keep the staged output's calls (``CALLS``)."""
    for name, label in _PARTS.items():
        setattr(operator, name, _timed(label, getattr(operator, name)))
    timed_table = operator.output_table

    def kept(*args, **kwargs):
        CALLS.append((args, kwargs))
        return timed_table(*args, **kwargs)

    operator.output_table = kept
    operator.Purgatory.process = _timed("  Purgatory.process", operator.Purgatory.process)


def run(
    n_ops: int,
    batches: int,
    chunk: int,
    state_path: str | None,
    cached: bool = True,
    staged: str | None = None,
) -> None:
    config = PurgatoryConfig(shards=1, cross_shard_operations=False, state_path=state_path or "")
    staging = _timed("  staging (split, Parquet)", ShardStaging(staged, Storage())) if staged else None
    shard_step = operator._stateful_shard(config, staging)
    state = FakeState()
    out_schema = STAGED_SCHEMA if staged else OUTPUT_SCHEMA
    for batch_id, (table, wm) in enumerate(routed_batches(n_ops, batches, config.watermark_delay_ms)):
        staging_module.micro_batch_id = lambda batch_id=batch_id: batch_id  # no Spark task here
        state.watermark = wm
        with step("arrow -> pandas (input)"):
            frames = []
            for batch in table.to_batches(max_chunksize=chunk):
                series = ArrowBatchTransformer.to_pandas(batch, timezone="UTC", schema=ROUTED_SCHEMA)
                frames.append(pd.concat(series, axis=1))
        if not cached:  # as when Spark hands the shard to another Python worker
            WORKER_CACHE.clear()
        with step("shard step"):
            out = list(shard_step((0,), iter(frames), state))
        with step("pandas -> arrow (output)"):
            for frame in out:
                PandasToArrowConversion.convert(frame, out_schema, timezone="UTC", arrow_cast=True)


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
    time_parts()
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
    parts = [*_PARTS.values(), "  Purgatory.process", "  staging (split, Parquet)"]
    order = ["arrow -> pandas (input)", "shard step", *parts]
    for name in [*order, "pandas -> arrow (output)"]:
        print(f"  {name:<28}{SECONDS[name]:7.2f} s")
    if CALLS:
        compare_output()
    if profile:
        stats = pstats.Stats(profile).sort_stats("cumulative")
        stats.print_stats(args.cprofile)
    harness.write_json(args.json, "profile-shard", args, {"seconds": total, "steps": dict(SECONDS)})
    return 0
