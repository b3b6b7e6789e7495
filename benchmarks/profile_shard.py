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
process, save, output) with the CPU seconds of each beside them (the process's, all its
threads: the load, save and output phases are the step's ``load``, ``save`` and ``emit``, the
process phase the rest of the step) and, with ``--cprofile``, the functions that cost most
(``--cprofile-phase``: of that phase only, by their own CPU time).

With ``--checkout`` each round runs this checkout and another one's ``spark_purgatory``
(a change's before and after) in a fresh process each, alternated, and prints their CPU
milliseconds a call by phase and the load beside each.

    python -m benchmarks profile-shard --ops 100000 --batches 10 [--staged] [--cprofile 25]
    python -m benchmarks profile-shard --ops 200000 --batches 10 --segments --staged \
        --checkout ../main --repeat 2
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
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
#: CPU seconds of the shard step's phases (``TimedStep``)
CPU: dict[str, float] = defaultdict(float)
#: the shard step's phases, as ``ShardResult.timings`` names them
PHASES = ("load", "process", "save", "output")


@contextmanager
def step(name: str):
    start = time.perf_counter()
    yield
    SECONDS[name] += time.perf_counter() - start


class TimedStep(ShardStep):
    """The shard step with the CPU seconds of its phases counted (``CPU``): its ``load``,
    ``save`` and ``emit`` (the output phase) each, the process phase the rest of the call;
    ``profile`` (a cProfile) on during the phase named ``profiled`` only."""

    profile: cProfile.Profile | None = None
    profiled = ""

    def __call__(self, *args, **kwargs):
        start = time.process_time()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            CPU["step"] += time.process_time() - start

    def load(self, *args, **kwargs):
        with self._phase("load"):
            return super().load(*args, **kwargs)

    def save(self, *args, **kwargs):
        with self._phase("save"):
            return super().save(*args, **kwargs)

    def emit(self, *args, **kwargs):
        with self._phase("output"):
            return super().emit(*args, **kwargs)

    @contextmanager
    def _phase(self, name: str):
        profile = self.profile if name == self.profiled else None
        start = time.process_time()
        if profile:
            profile.enable()
        try:
            yield
        finally:
            if profile:
                profile.disable()
            CPU[name] += time.process_time() - start


def cpu_by_phase() -> dict[str, float]:
    """CPU seconds by phase of the shard step (``PHASES``), process the step's rest."""
    return {
        **{name: CPU[name] for name in PHASES if name != "process"},
        "process": CPU["step"] - sum(CPU[name] for name in PHASES if name != "process"),
    }


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
    profile: cProfile.Profile | None = None,
    profiled: str = "",
) -> None:
    config = PurgatoryConfig(shards=1, cross_shard_operations=False, state_path=state_path or "")
    staging = ShardStaging(staged, Storage()) if staged else None
    shard_step = TimedStep(config, staging)
    shard_step.profile, shard_step.profiled = profile, profiled
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
    parser = harness.parser("profile-shard", __doc__, repeat=1, repeat_help="rounds with --checkout")
    parser.add_argument("--ops", type=int, default=100_000, help="operations (all in one shard)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=10_000, help="maxRecordsPerBatch")
    parser.add_argument("--segments", action="store_true", help="with a SegmentStore (the job's default)")
    parser.add_argument("--no-cache", action="store_true", help="every load misses the worker cache")
    parser.add_argument("--staged", action="store_true", help="the shard stages its output (start's path)")
    parser.add_argument("--cprofile", type=int, default=0, help="print the N costliest functions")
    parser.add_argument(
        "--cprofile-phase", choices=("load", "save", "output"), help="profile only this phase"
    )
    parser.add_argument("--checkout", help="also run another checkout's spark_purgatory, alternated")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.checkout:
        return compare(args, argv if argv is not None else sys.argv[1:])
    # a phase's profile counts CPU (the phases are compared by it), the whole run's wall time
    timer = time.process_time if args.cprofile_phase else time.perf_counter
    profile = cProfile.Profile(timer) if args.cprofile else None
    with tempfile.TemporaryDirectory() as tmp:
        if profile and not args.cprofile_phase:
            profile.enable()
        start = time.perf_counter()
        state = f"{tmp}/state" if args.segments else None
        staged = f"{tmp}/staging" if args.staged else None
        run(
            args.ops,
            args.batches,
            args.chunk,
            state,
            cached=not args.no_cache,
            staged=staged,
            profile=profile,
            profiled=args.cprofile_phase or "",
        )
        total = time.perf_counter() - start
        if profile and not args.cprofile_phase:
            profile.disable()
    cpu = cpu_by_phase()
    figures = {"seconds": total, "steps": dict(SECONDS), "cpu": cpu, "calls": args.batches}
    if args.child:
        print(json.dumps(figures))
        return 0
    print(f"{args.ops:,} operations, {args.batches} micro-batches, one shard: {total:.2f} s")
    print(f"  {'':<28}{'wall':>7}  {'CPU':>6}")
    for name in [
        "arrow -> pandas (input)",
        "shard step",
        *(f"  {p}" for p in PHASES),
        "pandas -> arrow (output)",
    ]:
        phase = name.strip()
        used = f"{cpu[phase]:6.2f} s" if phase in cpu else ""
        print(f"  {name:<28}{SECONDS[name]:7.2f} s{used:>9}")
    if profile:
        stats = pstats.Stats(profile).sort_stats("tottime" if args.cprofile_phase else "cumulative")
        stats.print_stats(args.cprofile)
    harness.write_json(args.json, "profile-shard", args, figures)
    return 0


def compare(args: argparse.Namespace, argv: list[str]) -> int:
    """``--checkout``: this checkout and the other one, alternated round by round, each in a
    fresh process; the CPU milliseconds a call of each phase."""
    own = _without(argv, "--checkout", "--repeat", "--json", "--cprofile", "--cprofile-phase")
    checkouts = [None, args.checkout]
    runs: dict[str, list[dict]] = defaultdict(list)
    print(f"profile-shard {' '.join(own)}: CPU ms a call by phase (wall of the step beside)")
    for number in range(args.repeat):
        for checkout in checkouts if number % 2 == 0 else checkouts[::-1]:
            load = os.getloadavg()[0]
            out = harness.child("profile-shard", [*own, "--child"], checkout=checkout)
            name = checkout or "this checkout"
            runs[name].append({**out, "load": load})
            ms = {p: 1000 * out["cpu"][p] / out["calls"] for p in PHASES}
            step_ms = 1000 * out["steps"]["shard step"] / out["calls"]
            print(
                f"  {name:<16} (load {load:4.1f}): "
                + ", ".join(f"{p} {ms[p]:5.1f}" for p in PHASES)
                + f"; step wall {step_ms:5.1f}",
                flush=True,
            )
    harness.write_json(args.json, "profile-shard", args, {"runs": dict(runs)})
    return 0


def _without(argv: list[str], *options: str) -> list[str]:
    """``argv`` without ``options`` and their values (``--x v`` or ``--x=v``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in options)):
            out.append(arg)
    return out
