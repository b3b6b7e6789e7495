"""The benchmarks' runner: ``python -m benchmarks NAME [options]`` from the project's root.

Without a name it lists the benchmarks, one line each; ``python -m benchmarks NAME --help``
gives a benchmark's options and how it measures.  Every benchmark prints its table (each
contender's figures, the ratios side by side) and, with ``--json PATH``, writes its figures
as JSON too.  The figures themselves, with the commands that gave them, are in
docs/performance.md.
"""

from __future__ import annotations

import importlib
import sys
from typing import NamedTuple


class Benchmark(NamedTuple):
    """A benchmark: the module and function that run it, what it answers in one line."""

    module: str
    function: str
    summary: str


#: every benchmark, by the name the runner takes
BENCHMARKS: dict[str, Benchmark] = {
    "operator": Benchmark(
        "bench_operator",
        "main",
        "the job beside Spark's join, the stateful floor and transformWithStateInPandas on the same "
        "files; its scaling with pending operations",
    ),
    "pending": Benchmark(
        "bench_pending",
        "main",
        "time and peak memory as pending operations grow (~1.2M): the job, the join, the stateful floor",
    ),
    "latency": Benchmark(
        "bench_latency",
        "main",
        "outcome latency on a live processing-time query: under load, on a quiet stream, on a trickle",
    ),
    "trickle": Benchmark(
        "bench_trickle",
        "main",
        "a trickle's micro-batch from Spark's event log: the job beside the join and the stateful floor",
    ),
    "kafka": Benchmark(
        "bench_kafka",
        "main",
        "from Kafka topics into Delta: the job against Spark's stream-stream join",
    ),
    "engine": Benchmark(
        "bench_engine",
        "engine",
        "the engine without Spark: per-call cost against the backlog, memory per pending operation",
    ),
    "wheel": Benchmark(
        "bench_engine",
        "wheel",
        "the columnar timing wheel against a pure-Python port of Kafka's linked-list wheel",
    ),
    "handoff": Benchmark(
        "bench_handoff",
        "main",
        "the routed rows' hand-off from the JVM to the Python workers, by layout",
    ),
    "profile-shard": Benchmark(
        "profile_shard",
        "main",
        "one shard's micro-batches without Spark, by part (state, input, engine, output, save)",
    ),
    "install": Benchmark(
        "bench_deploy",
        "install",
        "the job from its installed wheel against the job from the checkout",
    ),
    "connect": Benchmark(
        "bench_deploy",
        "connect",
        "the job over Spark Connect against a classic session, same files, same outputs",
    ),
    "first-batch": Benchmark(
        "bench_startup",
        "first_batch",
        "start() to its first micro-batch done, beside Spark's join, each in a fresh process",
    ),
    "plan": Benchmark(
        "bench_startup",
        "plan",
        "what building start()'s plan costs: seconds, Py4J calls, Python and JVM CPU",
    ),
    "inspect": Benchmark(
        "bench_checkpoint",
        "inspect",
        "reading a big checkpoint's pending operations (the command line's pending, at-risk)",
    ),
    "rescale": Benchmark(
        "bench_checkpoint",
        "rescale",
        "spark-purgatory rescale of a stopped checkpoint of N pending operations (no Spark)",
    ),
    "soak": Benchmark(
        "soak",
        "main",
        "the job on Kafka for minutes at steady load while faults are injected (not in CI)",
    ),
}


def listing() -> str:
    """The benchmarks, one line each."""
    width = max(len(name) for name in BENCHMARKS) + 2
    lines = ["python -m benchmarks NAME [options]   (NAME --help: its options)", ""]
    lines += [f"  {name:<{width}}{b.summary}" for name, b in BENCHMARKS.items()]
    return "\n".join(lines)


def run(name: str, argv: list[str]) -> int:
    """Benchmark ``name`` with ``argv``; its exit status."""
    benchmark = BENCHMARKS[name]
    module = importlib.import_module(f"benchmarks.{benchmark.module}")
    return int(getattr(module, benchmark.function)(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    if argv[0] not in BENCHMARKS:
        print(f"no benchmark {argv[0]!r}\n\n{listing()}", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
