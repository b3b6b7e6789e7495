"""A trickle stream into Delta: the RecordAccumulator against a plain per-micro-batch append.

200 micro-batches of 500 outcome rows, one trigger per second (an injected clock, no sleeping),
written with delta-rs twice: once appending every micro-batch as it comes (what a plain
``foreachBatch`` append does), once through the accumulator (``batch.size``, ``linger.ms``).
Prints files written, p50/p99 file size, commits, and the latency the accumulator adds.

    .venv/bin/python benchmarks/bench_accumulator.py [--batches 200 --rows 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the root: tests.support, tests.delta
from spark_purgatory.delta.accumulator import RecordAccumulator  # noqa: E402
from spark_purgatory.delta.sink import PurgatorySink, split_tables  # noqa: E402
from spark_purgatory.delta.writers import DeltaRsWriter  # noqa: E402
from tests.delta.test_accumulator import Clock, output_rows  # noqa: E402  (the operator-shaped rows)


def file_sizes(path: str) -> list[int]:
    return pa.table(DeltaTable(path).get_add_actions(flatten=True)).column("size_bytes").to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--trigger-ms", type=int, default=1_000)
    parser.add_argument("--batch-size", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--linger-ms", type=int, default=60_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-acc-"))

    # plain: one commit per micro-batch
    import datetime as dt

    plain = DeltaRsWriter(str(root / "plain"))
    start = time.perf_counter()
    for b in range(args.batches):
        rows = split_tables(output_rows(args.rows, start=b * args.rows), b, dt.datetime.now(dt.timezone.utc))
        plain.commit(
            "outcomes", rows["outcomes"], app_id="plain", version=b, target_file_size=args.batch_size
        )
    t_plain = time.perf_counter() - start

    # accumulator
    clock = Clock()
    acc = RecordAccumulator(
        str(root / "staging"),
        app_id="acc",
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        buffer_memory=64 * args.batch_size,
        clock=clock,
    )
    sink = PurgatorySink(acc, DeltaRsWriter(str(root / "acc")))
    staged_at: dict[int, float] = {}
    waits: list[float] = []
    start = time.perf_counter()
    for b in range(args.batches):
        staged_at[b] = clock()
        figures = sink.process(output_rows(args.rows, start=b * args.rows), b)
        for _commit in figures["committed"]:
            # every staged batch not yet committed is in this commit (one destination here)
            for sb in sorted(staged_at):
                waits += [(clock() - staged_at.pop(sb)) * 1000] * args.rows
        clock.advance(args.trigger_ms)
    for _commit in sink.close():
        for sb in sorted(staged_at):
            waits += [(clock() - staged_at.pop(sb)) * 1000] * args.rows
    t_acc = time.perf_counter() - start

    p, a = file_sizes(str(root / "plain" / "outcomes")), file_sizes(str(root / "acc" / "outcomes"))
    n_plain = DeltaTable(str(root / "plain" / "outcomes")).to_pyarrow_table().num_rows
    n_acc = DeltaTable(str(root / "acc" / "outcomes")).to_pyarrow_table().num_rows
    assert n_plain == n_acc == args.batches * args.rows, (n_plain, n_acc)
    print(
        f"trickle: {args.batches} micro-batches x {args.rows} rows, one every {args.trigger_ms} ms; "
        f"batch.size {args.batch_size:,} B, linger.ms {args.linger_ms:,}"
    )
    print(f"{'':28}{'files':>8}{'p50 size':>12}{'p99 size':>12}{'wall s':>9}")
    for name, sizes, t in (("plain append per batch", p, t_plain), ("RecordAccumulator", a, t_acc)):
        p50, p99 = np.percentile(sizes, 50), np.percentile(sizes, 99)
        print(f"{name:28}{len(sizes):>8}{p50:>12,.0f}{p99:>12,.0f}{t:>9.2f}")
    print(f"files: {len(p) / len(a):.1f}x fewer (target >= 10x)")
    print(
        f"added latency: p50 {np.percentile(waits, 50):,.0f} ms, p99 {np.percentile(waits, 99):,.0f} ms, "
        f"max {max(waits):,.0f} ms (target: p99 within linger.ms = {args.linger_ms:,} ms, "
        f"except rows flushed at close)"
    )


if __name__ == "__main__":
    main()
