"""Engine demo: a broker's worth of delayed operations through the Spark-free purgatory.

Generates produce / fetch / join / high-watermark waits with their completion events, feeds
them to ``Purgatory`` in micro-batches of event time (watermark = max event time seen minus
the watermark delay, as Spark computes it), and prints a per-batch progress line and a
summary.  ``make demo`` runs it; ``--ops`` sets the size.

    python -m spark_purgatory.demo --ops 200000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from .config import PurgatoryConfig
from .purgatory import Purgatory
from .workload import generate


def run(n_ops: int, batch_ms: int, config: PurgatoryConfig, quiet: bool = False) -> pd.DataFrame:
    work = generate(n_ops, seed=1)
    ops, events = work.operations, work.events
    p = Purgatory(config)
    delay = config.watermark_delay_ms
    start = int(min(ops["ts"].min(), events["ts"].min()))
    end = int(max(ops["ts"].max(), events["ts"].max()))
    outcomes, unmatched, rejected = [], [], []
    wm, batch_id, t0 = -(2**62), 0, time.perf_counter()
    for lo in range(start, end + batch_ms, batch_ms):
        hi = lo + batch_ms
        o = ops[(ops["ts"] >= lo) & (ops["ts"] < hi)]
        e = events[(events["ts"] >= lo) & (events["ts"] < hi)]
        r = p.process(o, e, watermark_ms=wm, batch_id=batch_id)
        outcomes.append(r.outcomes)
        unmatched.append(r.unmatched)
        rejected.append(r.rejected)
        if not quiet and batch_id % 10 == 0:
            print(
                f"batch {batch_id:>4}  in {len(o) + len(e):>6}  pending {p.pending:>7}  "
                f"completed {r.completed:>6}  expired {r.expired:>6}  unmatched {len(r.unmatched):>5}  "
                f"rejected {len(r.rejected):>3}  watermark {pd.Timestamp(max(wm, 0), unit='ms')}"
            )
        wm = max(wm, hi - 1 - delay)
        batch_id += 1
    final = p.process(None, None, watermark_ms=end + config.max_timeout_ms + 1, batch_id=batch_id)
    outcomes.append(final.outcomes)
    unmatched.append(final.unmatched)
    elapsed = time.perf_counter() - t0
    result = pd.concat([f for f in outcomes if len(f)], ignore_index=True)
    lost = sum(len(u) for u in unmatched)
    if not quiet:
        rate = (len(ops) + len(events)) / elapsed
        print(
            f"\n{len(ops):,} operations + {len(events):,} events in {elapsed:.2f} s "
            f"({rate:,.0f} rows/s, one core, {batch_id} micro-batches)"
        )
        print(f"unmatched events: {lost:,}   rejected rows: {sum(len(r) for r in rejected):,}\n")
        summary = result.groupby(["condition", "status"]).agg(
            operations=("op_id", "size"),
            p50_latency_ms=("latency_ms", "median"),
            p99_latency_ms=("latency_ms", lambda s: float(np.percentile(s, 99))),
        )
        print(summary.to_string())
        dupes = result["op_id"].duplicated().sum()
        print(f"\noutcomes: {len(result):,} for {len(ops):,} operations, duplicates: {dupes}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000, help="number of operations")
    parser.add_argument("--batch-ms", type=int, default=2_000, help="event time per micro-batch")
    args = parser.parse_args(argv)
    run(args.ops, args.batch_ms, PurgatoryConfig(max_timeout_ms=60_000))


if __name__ == "__main__":
    main()
