"""A long stream's Delta commits: tables kept open between drains against reopened at each use.

A stream that drains every micro-batch (``batch.size`` reached, or a short ``linger.ms``)
commits to each table it has rows for, every micro-batch, for days.  Opening a Delta table
reads its last checkpoint and every commit after it (a checkpoint every 100 commits by
default), so a writer that opens the table at each use pays more the longer the log has run
since its checkpoint; the writer keeps its tables open instead and reads only what changed
(``writers.OpenTables``).  Both contenders here drive the real sink (``PurgatorySink``,
delta-rs, no Spark) through the same micro-batches, each into its own tables, alternated in
chunks of ``--chunk`` micro-batches: **kept** (the writer as it is) and **reopened** (the
same writer opening each table afresh at every use, as it did before).  Prints each one's
drain time (the sink's ``drain`` timing: sender, commits) per stretch of the log, and their
ratio.

    .venv/bin/python benchmarks/bench_commits.py                   # 300 micro-batches
    .venv/bin/python benchmarks/bench_commits.py --batches 1000 --rows 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the root: tests.delta
from spark_purgatory.delta.accumulator import RecordAccumulator  # noqa: E402
from spark_purgatory.delta.sink import PurgatorySink  # noqa: E402
from spark_purgatory.delta.writers import DeltaRsWriter, OpenTables, open_table  # noqa: E402
from tests.delta.test_accumulator import Clock, output_rows  # noqa: E402  (the operator-shaped rows)


class Reopened(OpenTables):
    """Every table opened afresh at each use: the writer before it kept them open."""

    def get(self, path, storage_options, *, fresh=True):  # noqa: ANN001, ANN201 - OpenTables'
        return open_table(path, storage_options)


def sink(root: str, clock: Clock, reopen: bool) -> PurgatorySink:
    acc = RecordAccumulator(
        f"{root}/staging", app_id="bench", clock=clock, batch_size=1, linger_ms=0, buffer_memory=1 << 30
    )
    writer = DeltaRsWriter(f"{root}/out")
    if reopen:
        writer.opened = Reopened(writer.storage)
    return PurgatorySink(acc, writer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300, help="micro-batches, each drained")
    parser.add_argument("--rows", type=int, default=100, help="outcomes a micro-batch")
    parser.add_argument("--chunk", type=int, default=10, help="micro-batches per turn")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="bench-commits-")
    clock = Clock()
    names = ("kept", "reopened")
    sinks = {name: sink(f"{root}/{name}", clock, name == "reopened") for name in names}
    drains: dict[str, list[float]] = {name: [] for name in names}
    for start in range(0, args.batches, args.chunk):
        for name in names:  # alternated: a chunk of micro-batches each
            for batch_id in range(start, min(start + args.chunk, args.batches)):
                rows = output_rows(args.rows, start=batch_id * args.rows, n_unmatched=5, n_rejected=1)
                sinks[name].process(rows, batch_id)
                drains[name].append(sinks[name].timings["drain"])
        clock.advance(1000)
    print(
        f"{args.batches} micro-batches of {args.rows} outcomes, 5 unmatched events and 1 rejected row, "
        f"each drained (batch.size 1): three tables committed a micro-batch, delta-rs, one process"
    )
    print(
        f"{'micro-batches':<16}" + "".join(f"{name + ' ms':>16}" for name in names) + f"{'reopened/kept':>16}"
    )
    step = max(args.batches // 6, 1)
    for lo in range(0, args.batches, step):
        medians = [statistics.median(drains[name][lo : lo + step]) for name in names]
        print(
            f"{lo:>5}-{min(lo + step, args.batches) - 1:<10}"
            + "".join(f"{m:>16.1f}" for m in medians)
            + f"{medians[1] / medians[0]:>15.2f}x"
        )
    totals = [sum(drains[name]) / 1000 for name in names]
    print(f"{'all (s)':<16}" + "".join(f"{t:>16.2f}" for t in totals) + f"{totals[1] / totals[0]:>15.2f}x")
    for name in names:  # every outcome committed once (the files' statistics, no scan)
        out = open_table(f"{root}/{name}/out/outcomes", None)
        records = out.get_add_actions(flatten=True).column("num_records") if out is not None else None
        assert records is not None and sum(records.to_pylist()) == args.batches * args.rows, name
    return 0


if __name__ == "__main__":
    sys.exit(main())
