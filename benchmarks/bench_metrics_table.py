"""What the ``metrics`` table costs the driver: per micro-batch, and on a restart.

``--batches`` micro-batches of ``--shards`` shard calls (metrics rows only) go through a
``PurgatorySink`` with ``batch.size`` 1 byte, so every batch commits (the worst case: one
metrics commit per batch).  Prints the median time the sink spends making and staging the
batch's metrics rows against the median of the whole ``process`` call, then the time a
restarted sink takes to read each input's watermark back (from the table's file statistics;
a replayed batch's file is read).

    .venv/bin/python benchmarks/bench_metrics_table.py [--batches 300 --shards 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the root: tests.support, tests.delta
from spark_purgatory.contract import OPERATOR_OUTPUT  # noqa: E402
from tests.delta.test_accumulator import Clock, make_sink  # noqa: E402
from tests.support.stream_helpers import T0  # noqa: E402


def calls(batch: int, shards: int) -> pa.Table:
    """One micro-batch's metrics rows, as the shards emit them."""
    rows = [
        {
            "kind": "metrics",
            "shard": shard,
            "batch_time_ms": T0 + 1000 * batch,
            "group_rows": 100 + shard,
            "pending": 1000,
            "completed": 3,
            "watermark_ms": T0 + 1000 * batch,
            "proposed_operations_watermark_ms": T0 + 1000 * batch,
            "proposed_events_watermark_ms": T0 + 900 * batch,
        }
        for shard in range(shards)
    ]
    return pa.Table.from_pylist(rows, schema=OPERATOR_OUTPUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--shards", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    clock = Clock()
    sink = make_sink(root, clock, linger_ms=0, batch_size=1)
    staging, whole = [], []
    stage = sink._stage_metrics

    def timed(rows: pa.Table, batch_id: int) -> pa.Table:
        started = time.perf_counter()
        out = stage(rows, batch_id)
        staging.append(time.perf_counter() - started)
        return out

    sink._stage_metrics = timed  # type: ignore[method-assign]
    for batch in range(args.batches):
        started = time.perf_counter()
        sink.process(calls(batch, args.shards), batch)
        whole.append(time.perf_counter() - started)
        clock.advance(1000)
    print(
        f"{args.batches} batches x {args.shards} shard calls: metrics rows made and staged in "
        f"{statistics.median(staging) * 1000:.1f} ms/batch (median) of "
        f"{statistics.median(whole) * 1000:.1f} ms for the whole sink.process (one commit per batch)"
    )
    for before in (args.batches, args.batches // 2):
        restarted = make_sink(root, clock)
        started = time.perf_counter()
        restarted._recorded_watermarks(before)
        elapsed = time.perf_counter() - started
        print(f"a restart at batch {before}: each input's watermark read back in {elapsed * 1000:.0f} ms")


if __name__ == "__main__":
    main()
