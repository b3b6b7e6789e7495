"""Every benchmark by the name the runner takes (``python -m benchmarks NAME``): the module and
function that run it, what it answers, its options at a tiny size; and ``run``, which runs one.
The runner (``__main__``) and the harness (a smoke run's children, run in its process) both ask it.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

__all__ = ["BENCHMARKS", "Benchmark", "run"]


class Benchmark(NamedTuple):
    """A benchmark: the module and function that run it, what it answers in one line, and
    its options at a tiny size (split as a shell splits them)."""

    module: str
    function: str
    summary: str
    smoke: str = ""


#: every benchmark, by the name the runner takes
BENCHMARKS: dict[str, Benchmark] = {
    "operator": Benchmark(
        "bench_operator",
        "main",
        "the job beside Spark's join, the stateful floor and transformWithStateInPandas on the same "
        "files; its scaling with pending operations",
        "--smoke --workloads typed,json --contenders floor,stateful,job,tws,join-delta,job-native"
        " --other-contenders join,job",
    ),
    "pending": Benchmark(
        "bench_pending",
        "main",
        "time and peak memory as pending operations grow (~1.2M): the job, the join, the stateful floor",
        "--files 2 --per-file 300 --repeat 1 --contenders job --sample 0.2",
    ),
    "latency": Benchmark(
        "bench_latency",
        "main",
        "outcome latency on a live processing-time query: under load, on a quiet stream, on a trickle",
        "--output kafka --configs trickle --trigger 0.5 --load-seconds 3 --rate 5 --complete 0.5"
        " --timeout-min 2 --timeout-max 4 --trickle-gap 1.5 --give-up 120",
    ),
    "trickle": Benchmark(
        "bench_trickle",
        "main",
        "a trickle's micro-batch from Spark's event log: the job beside the join and the stateful floor",
        "--smoke --contenders job",
    ),
    "stages": Benchmark(
        "bench_stages",
        "main",
        "a benchmark's event log (operator --event-log DIR) per micro-batch: each stage's span, the shard "
        "tasks' JVM CPU and Python time, the cross-shard group's task",
        "--operator \"--smoke --workloads typed --contenders stateful-routed --scaling ''\"",
    ),
    "kafka": Benchmark(
        "bench_kafka",
        "main",
        "from Kafka topics into Delta: the job against Spark's stream-stream join",
        "--ops 300 --partitions 1 --repeat 1",
    ),
    "engine": Benchmark(
        "bench_engine",
        "engine",
        "the engine without Spark: per-call cost against the backlog, memory per pending operation",
        "--pending 0,1000 --repeat 2",
    ),
    "wheel": Benchmark(
        "bench_engine",
        "wheel",
        "the columnar timing wheel against a pure-Python port of Kafka's linked-list wheel",
        "--n 20000 --repeat 1",
    ),
    "handoff": Benchmark(
        "bench_handoff",
        "main",
        "the routed rows' hand-off from the JVM to the Python workers, by layout",
        "--ops 300 --repeat 1 --layouts text,floor",
    ),
    "profile-shard": Benchmark(
        "profile_shard",
        "main",
        "one shard's micro-batches without Spark, by part (state, input, engine, output, save)",
        "--ops 2000 --batches 2 --staged --segments",
    ),
    "install": Benchmark(
        "bench_deploy",
        "install",
        "the job from its installed wheel against the job from the checkout",
        "--contenders checkout --ops 300 --files 2 --repeat 0",
    ),
    "connect": Benchmark(
        "bench_deploy",
        "connect",
        "the job over Spark Connect against a classic session, same files, same outputs",
        "--ops 400 --files 2 --contenders classic --repeat 0",
    ),
    "first-batch": Benchmark(
        "bench_startup",
        "first_batch",
        "start() to its first micro-batch done, beside Spark's join, each in a fresh process",
        "--repeat 1",
    ),
    "plan": Benchmark(
        "bench_startup",
        "plan",
        "what building start()'s plan costs: seconds, Py4J calls, Python and JVM CPU",
        "--repeat 1",
    ),
    "inspect": Benchmark(
        "bench_checkpoint",
        "inspect",
        "reading a big checkpoint's pending operations (the command line's pending, at-risk)",
        "--ops 500 --shards 2 --files 2 --repeat 1",
    ),
    "rescale": Benchmark(
        "bench_checkpoint",
        "rescale",
        "spark-purgatory rescale of a stopped checkpoint of N pending operations (no Spark)",
        "--pending 2000 --from 2 --to 3",
    ),
    "soak": Benchmark(
        "soak",
        "main",
        "the job on Kafka for minutes at steady load while faults are injected (not in CI)",
        "--minutes 0.05 --input files --faults '' --rate 20 --report 2",
    ),
}


def run(name: str, argv: list[str]) -> int:
    """Benchmark ``name`` with ``argv``; its exit status."""
    benchmark = BENCHMARKS[name]
    module = importlib.import_module(f"benchmarks.{benchmark.module}")
    return int(getattr(module, benchmark.function)(argv) or 0)
