"""What Catalyst's optimizer spends on each part of the operator's plan, every micro-batch.

Spark optimizes a streaming query's whole plan again in every micro-batch
(``IncrementalExecution``), so each expression and projection the operator adds costs
optimizer time on every trigger (``bench_batch.py`` meters the rules JVM-wide: the job's
optimizer ~31 ms per micro-batch against the stateful floor's ~8).  This builds the plan
``start()`` runs (typed Parquet inputs, the staged shards, the observed metrics, the wake
input) and its parts, and runs the session's optimizer on each analysed plan repeatedly in
one local[2] C1-only session (every plan optimized once before any is timed): the median
milliseconds per optimization, and the optimized plan's tree nodes (operators and
expressions); for ``start()``'s plan also its optimized plan optimized again, the bound of
what building it as the optimizer leaves it can give (``plan_rewrites.py`` names what the
optimizer still rewrites).  The stateful floor's plan
(``contenders.stateful_floor``) is printed beside them.

    .venv/bin/python benchmarks/bench_optimizer.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent


class _Optimized:
    """A plan already optimized, in the shape ``_optimize_ms`` takes (``frame._jdf...``)."""

    def __init__(self, plan):
        self._plan = plan

    @property
    def _jdf(self):
        return self

    def queryExecution(self):  # noqa: N802 - the JVM's name
        return self

    def analyzed(self):
        return self._plan


def _optimized(spark, frame) -> _Optimized:
    """``frame``'s plan as the session's optimizer leaves it: optimizing it again is what a
    plan built at the optimizer's fixed point would cost (its time check is a constant there,
    so it is a bound, not a plan a stream could run)."""
    analysed = frame._jdf.queryExecution().analyzed()
    return _Optimized(spark._jsparkSession.sessionState().optimizer().execute(analysed))


def _optimize_ms(spark, frame, runs: int) -> float:
    """Median ms of the session's optimizer over ``frame``'s analysed plan (after 5 warm runs)."""
    analyzed = frame._jdf.queryExecution().analyzed()
    optimizer = spark._jsparkSession.sessionState().optimizer()
    for _ in range(5):
        optimizer.execute(analyzed)
    took = []
    for _ in range(runs):
        began = time.perf_counter()
        optimizer.execute(analyzed)
        took.append(time.perf_counter() - began)
    return statistics.median(took) * 1000


def _nodes(spark, frame) -> int:
    """The optimized plan's tree nodes, operators and expressions (its JSON's classes)."""
    optimized = (
        spark._jsparkSession.sessionState().optimizer().execute(frame._jdf.queryExecution().analyzed())
    )
    return optimized.toJSON().count('"class":')


class StartPlan(NamedTuple):
    """``start()``'s plan and what it is built of (``start_plan``)."""

    spark: Any
    config: Any
    staging: Any
    files: Any
    ops: Any
    evs: Any
    wake: str
    plan: Any


@contextmanager
def start_plan(name: str) -> Iterator[StartPlan]:
    """A local[2] C1-only session (``name``) and ``start()``'s plan in it, over typed Parquet
    inputs in a scratch folder: the staged shards, the observed metrics, the wake input
    (``plan_rewrites.py`` reads the same plan).  On leaving, the session is stopped and the
    folder removed."""
    root = tempfile.mkdtemp(prefix=f"{name}-")
    built = None
    try:
        built = _start_plan(root, name)
        yield built
    finally:
        if built is not None:
            built.spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _start_plan(root: str, name: str) -> StartPlan:
    sys.path.insert(0, str(HERE))
    from contenders import typed_inputs, write_workload

    from spark_purgatory import PurgatoryConfig
    from spark_purgatory.delta.staging import ShardStaging
    from spark_purgatory.runtime.session import local_session
    from spark_purgatory.spark.metrics import observe_purgatory
    from spark_purgatory.spark.operator import staged_stream
    from spark_purgatory.storage import Storage

    files = write_workload(f"{root}/w", 600, 2, "parquet")
    wake = f"{root}/wake"
    os.makedirs(wake)
    spark = local_session(name, master="local[2]", shuffle_partitions=3)
    spark.sparkContext.setLogLevel("ERROR")
    config = PurgatoryConfig(shards=2, watermark_delay="5 seconds", state_path=f"{root}/state")
    staging = ShardStaging(f"{root}/staging", Storage())
    ops, evs = typed_inputs(spark, files, 1)
    staged = staged_stream(ops, evs, config, staging, source_format="parquet", wake_path=wake)
    return StartPlan(spark, config, staging, files, ops, evs, wake, observe_purgatory(staged))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="optimizations per plan (median)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from contenders import stateful_floor

    from spark_purgatory.runtime.settings import optimizer_rules
    from spark_purgatory.spark import routing
    from spark_purgatory.spark.operator import staged_stream
    from spark_purgatory.spark.routing import route_events, route_operations
    from spark_purgatory.spark.sources import parse_events, parse_operations

    with start_plan("bench-optimizer") as built:
        spark, config, staging, files, ops, evs, wake, start = built
        parsed_ops = parse_operations(
            ops, "parquet", max_timeout_ms=config.max_timeout_ms, max_future_ms=config.max_future_ms
        )
        parsed_events = parse_events(evs, "parquet", max_future_ms=config.max_future_ms)
        # an older checkout (``PYTHONPATH``) has no one-call reading
        one_call = getattr(routing, "route_typed_operations", lambda *args, **kwargs: None)
        events_call = getattr(routing, "route_typed_events", lambda *args, **kwargs: None)
        lines = spark.readStream.format("text").load(wake)
        parts = {
            "start()'s plan (observed, staged, wake input)": start,
            "  without the observed metrics": staged_stream(
                ops, evs, config, staging, source_format="parquet", wake_path=wake
            ),
            "  without the wake input": staged_stream(ops, evs, config, staging, source_format="parquet"),
            "operations parsed": parsed_ops,
            "operations parsed and routed": route_operations(parsed_ops, config),
            "operations checked and routed in one call": one_call(
                ops,
                config,
                max_timeout_ms=config.max_timeout_ms,
                max_future_ms=config.max_future_ms,
                limits=config.input_limits,
            ),
            "events parsed": parsed_events,
            "events parsed and routed": route_events(parsed_events, config),
            "events checked and routed in one call": events_call(
                evs, config, max_future_ms=config.max_future_ms
            ),
            "the wake input": routing.route_wake(lines, config),
            "the operations' scan alone": ops,
            "the stateful floor's plan": stateful_floor(spark, files, config, 1),
        }
        print(
            f"the optimizer per plan, median of {args.runs} runs (local[2], C1-only JVM; "
            f"load {os.getloadavg()[0]:.1f}); start()'s rule exclusions applied",
            flush=True,
        )
        with optimizer_rules(spark):
            for frame in parts.values():  # every plan once first: the first timed is not the JVM's first
                if frame is not None:
                    _optimize_ms(spark, frame, 1)
            for name, frame in parts.items():
                if frame is None:  # no checks JAR: no one-call reading
                    continue
                ms, nodes = _optimize_ms(spark, frame, args.runs), _nodes(spark, frame)
                print(f"  {name:<48} {ms:6.1f} ms  {nodes:5d} nodes", flush=True)
                if frame is start:  # the bound of building it better: the plan as optimized
                    optimized = _optimized(spark, frame)
                    ms = _optimize_ms(spark, optimized, args.runs)
                    print(f"  {'  the same plan, already optimized':<48} {ms:6.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
