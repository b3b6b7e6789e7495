"""What a shard's save writes and costs, and a load on another worker, as windows pile up.

Spark-free.  One shard preloaded with ``--pending`` operations of 1-day timeouts (none
expire), then ``--batches`` micro-batches of ``--batch-ops`` new operations and events
completing as many preloaded ones (each completion leaves a window the day long,
``engine.windows``).  The micro-batches alternate between two workers' caches, as Spark's
Python workers take a shard's tasks in turn, so each load brings a parked version forward
(``caught-up``) or rebuilds it.  Prints per save its milliseconds and the delta file's size,
per load how and in how many milliseconds, and the medians.  Run it with an older checkout's
package first on ``PYTHONPATH`` for the before:

    .venv/bin/python benchmarks/bench_state_save.py --pending 250000 --batches 12
    PYTHONPATH=<older checkout> .venv/bin/python benchmarks/bench_state_save.py --pending 250000 --batches 12
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import numpy as np
import pandas as pd

from spark_purgatory import Purgatory, PurgatoryConfig
from spark_purgatory.state import SegmentStore, WorkerCache, load_state, loaded_by, save_state
from spark_purgatory.state.increments import pointed

DAY = 86_400_000


def _ops(prefix: str, n: int, ts: np.ndarray) -> pd.DataFrame:
    keys = np.empty(n, dtype=object)
    keys[:] = [[f"{prefix}k{i}"] for i in range(n)]
    return pd.DataFrame(
        {
            "op_id": [f"{prefix}{i}" for i in range(n)],
            "keys": keys,
            "ts": ts,
            "timeout_ms": DAY,
            "condition": "any",
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=250_000)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-ops", type=int, default=10_000)
    args = parser.parse_args(argv)
    p = Purgatory(PurgatoryConfig(shards=1))
    p.shard = 0
    no_events = pd.DataFrame({"key": pd.Series([], dtype=object), "ts": pd.Series([], dtype=np.int64)})
    p.process(_ops("p", args.pending, np.arange(args.pending) + 1_000), no_events, watermark_ms=0)
    store = SegmentStore(tempfile.mkdtemp(prefix="bench-state-save-"), segment_rows=100_000)
    workers = [WorkerCache(), WorkerCache()]
    value = save_state(p, store, version=1, park=True, cache=workers[1])
    hits = np.random.default_rng(0).permutation(args.pending)
    saves, sizes, loads = [], [], []
    for b in range(2, args.batches + 2):
        cache = workers[b % 2]
        began = time.perf_counter()
        p = load_state(value, p.config, store, cache=cache)
        loads.append((loaded_by(p), (time.perf_counter() - began) * 1000))
        t = 10_000_000 + b * 1_000
        done = hits[(b - 2) * args.batch_ops : (b - 1) * args.batch_ops]
        events = pd.DataFrame({"key": [f"pk{i}" for i in done], "ts": np.full(len(done), t + 5)})
        p.process(_ops(f"n{b}-", args.batch_ops, np.full(args.batch_ops, t)), events, watermark_ms=t)
        began = time.perf_counter()
        value = save_state(p, store, version=b, park=True, cache=cache)
        saves.append((time.perf_counter() - began) * 1000)
        parts, _ = store.read(pointed(value).name)
        sizes.append(sum(len(part) for part in parts.values()))
        print(
            f"  batch {b - 1:>2}: load {loads[-1][0]:<9} {loads[-1][1]:7.1f} ms, save {saves[-1]:6.1f} ms, "
            f"delta file {sizes[-1] / 1e3:8.1f} KB, windows {len(p.tables().windows):,}",
            flush=True,
        )
    forward = [ms for how, ms in loads if how == "caught-up"] or [0.0]
    print(
        f"{args.pending:,} pending: save median {statistics.median(saves):.1f} ms, delta file median "
        f"{statistics.median(sizes) / 1e3:.0f} KB, caught-up load median {statistics.median(forward):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
