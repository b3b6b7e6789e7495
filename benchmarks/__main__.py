"""The benchmarks' runner: ``python -m benchmarks NAME [options]`` from the project's root.

Without a name it lists the benchmarks, one line each; ``python -m benchmarks NAME --help``
gives a benchmark's options and how it measures.  Every benchmark prints its table (each
contender's figures, the ratios side by side) and, with ``--json PATH``, writes its figures
as JSON too.  The figures themselves, with the commands that gave them, are in
docs/performance.md.

``python -m benchmarks smoke [--json DIR] [NAME ...]`` runs each named benchmark (all by
default) at a tiny size (``Benchmark.smoke``), one after another in this process, the runs a
benchmark makes in fresh processes made here too (``harness.IN_PROCESS``): a check that each
still runs, in one JVM, each benchmark taking over the session the one before left running
(``harness.stop``; one with Spark's event log starts its own); its figures (in
``DIR/NAME.json``) mean nothing.
"""

from __future__ import annotations

import os
import shlex
import sys

from benchmarks.registry import BENCHMARKS, Benchmark, run

__all__ = ["BENCHMARKS", "Benchmark", "listing", "main", "run", "smoke"]


def listing() -> str:
    """The benchmarks, one line each."""
    width = max(len(name) for name in BENCHMARKS) + 2
    lines = ["python -m benchmarks NAME [options]   (NAME --help: its options)"]
    lines += ["python -m benchmarks smoke [--json DIR] [NAME ...]  (each at a tiny size, in one process)", ""]
    lines += [f"  {name:<{width}}{b.summary}" for name, b in BENCHMARKS.items()]
    return "\n".join(lines)


def smoke(names: list[str], figures: str | None = None) -> int:
    """Each of ``names`` (every benchmark if empty) at its tiny size, one after another in this
    process, each one's figures into ``figures``/NAME.json when given; 1 when any failed (each
    failure's traceback printed, the others still run)."""
    import time
    import traceback

    from benchmarks.harness import IN_PROCESS, stop_running

    os.environ[IN_PROCESS] = "1"
    failed = []
    for name in names or list(BENCHMARKS):
        argv = shlex.split(BENCHMARKS[name].smoke)
        if figures:
            argv += ["--json", os.path.join(figures, f"{name}.json")]
        print(f"\n== {name} {' '.join(argv)}", flush=True)
        began = time.perf_counter()
        try:
            status = run(name, argv)
        except BaseException:  # a benchmark's SystemExit or error: the next one still runs
            traceback.print_exc()
            status = 1
        verdict = "ok" if status == 0 else "FAILED"
        print(f"== {name}: {verdict} in {time.perf_counter() - began:.0f} s", flush=True)
        if status:
            failed.append(name)
    stop_running()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    if argv[0] == "smoke":
        names, figures = argv[1:], None
        if names[:1] == ["--json"] and len(names) > 1:  # a folder for each benchmark's figures
            figures, names = names[1], names[2:]
        unknown = [name for name in names if name not in BENCHMARKS]
        if unknown:
            print(f"no benchmark {unknown}\n\n{listing()}", file=sys.stderr)
            return 2
        return smoke(names, figures)
    if argv[0] not in BENCHMARKS:
        print(f"no benchmark {argv[0]!r}\n\n{listing()}", file=sys.stderr)
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
