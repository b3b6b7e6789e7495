"""Vectorised timing wheel vs a pure-Python port of Kafka's linked-list wheel.

Same workload for both: N timers with deadlines up to TIMEOUT ms ahead, added in batches of
BATCH (one micro-batch each), the clock advanced by STEP ms after each batch, then drained.
Prints both throughputs (adds + expiries per second) and the ratio.

    .venv/bin/python benchmarks/bench_wheel.py [--n 1000000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from kafka_wheel_port import SystemTimer

from spark_purgatory import TimingWheel


def workload(n: int, batch: int, timeout: int, step: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, timeout, n)
    for b, lo in enumerate(range(0, n, batch)):
        now = b * step
        ids = np.arange(lo, min(lo + batch, n), dtype=np.int64)
        yield now, ids, now + offsets[lo : lo + batch], now + step


def run_columnar(n, batch, timeout, step, tick, size):
    w = TimingWheel(tick, size, 0)
    fired = 0
    start = time.perf_counter()
    last = 0
    for _now, ids, deadlines, advance_to in workload(n, batch, timeout, step):
        fired += int(w.add(ids, deadlines).sum())
        fired += w.advance(advance_to).size
        last = advance_to
    fired += w.advance(last + timeout + tick).size
    return time.perf_counter() - start, fired


def run_kafka_port(n, batch, timeout, step, tick, size):
    t = SystemTimer(tick, size, 0)
    start = time.perf_counter()
    last = 0
    for _now, ids, deadlines, advance_to in workload(n, batch, timeout, step):
        for i, d in zip(ids.tolist(), deadlines.tolist(), strict=False):
            t.add(i, d)
        t.advance_clock(advance_to)
        last = advance_to
    t.advance_clock(last + timeout + tick)
    return time.perf_counter() - start, len(t.fired)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--timeout", type=int, default=30_000, help="deadlines up to this many ms ahead")
    parser.add_argument("--step", type=int, default=300, help="ms the clock advances per batch")
    parser.add_argument("--tick", type=int, default=100)
    parser.add_argument("--wheel-size", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3, help="columnar runs (best is reported)")
    args = parser.parse_args()
    shape = (args.n, args.batch, args.timeout, args.step, args.tick, args.wheel_size)

    col = min((run_columnar(*shape) for _ in range(args.repeat)), key=lambda r: r[0])
    ref = run_kafka_port(*shape)
    assert col[1] == args.n and ref[1] == args.n, (col, ref)

    ops = 2 * args.n  # one add and one expiry per timer
    col_rate, ref_rate = ops / col[0], ops / ref[0]
    print(f"machine: {platform.machine()} python {platform.python_version()} numpy {np.__version__}")
    print(
        f"workload: {args.n:,} timers, batches of {args.batch:,}, timeouts < {args.timeout} ms, "
        f"advance {args.step} ms/batch, tick {args.tick} ms, wheel size {args.wheel_size}"
    )
    print(f"{'implementation':<34}{'seconds':>10}{'add+expire/s':>16}")
    print(f"{'columnar wheel (spark_purgatory)':<34}{col[0]:>10.3f}{col_rate:>16,.0f}")
    print(f"{'Kafka linked-list port (Python)':<34}{ref[0]:>10.3f}{ref_rate:>16,.0f}")
    print(f"ratio: {col_rate / ref_rate:.1f}x faster   (targets: >= 50x, >= 5,000,000 add+expire/s)")
    print(
        f"targets met: ratio {'yes' if col_rate / ref_rate >= 50 else 'NO'}, "
        f"throughput {'yes' if col_rate >= 5_000_000 else 'NO'}"
    )


if __name__ == "__main__":
    main()
