"""The op_id registry's decision for one shard call (``engine.registry.decide``), without Spark.

With two shards about half of a micro-batch's operations have their registry in the other
shard, so a registry shard decides its own operations and as many claims from the other
home in every call.  This times ``decide`` on ``n`` own operations and ``n`` claims (a
quarter of the claims' op_ids repeat own ones, so some copies lose), the median of
``--runs`` calls per size.  To compare with another checkout, run it with that checkout's
package first on ``PYTHONPATH``.

    .venv/bin/python benchmarks/bench_registry.py [--sizes 1000,5000,20000] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000", help="own operations (and claims) per call")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)

    import spark_purgatory
    from spark_purgatory.engine.arrays import hash_strings
    from spark_purgatory.engine.registry import decide
    from spark_purgatory.engine.rows import Rows

    rng = np.random.default_rng(0)
    print(f"registry.decide, median of {args.runs} calls ({spark_purgatory.__file__})")
    for n in (int(s) for s in args.sizes.split(",")):
        own_ids = np.array([f"op-{i:09d}" for i in range(n)], dtype=object)
        claim_ids = np.array([f"op-{i:09d}" for i in range(3 * n // 4, 3 * n // 4 + n)], dtype=object)
        own = Rows(
            {
                "op_id": own_ids,
                "ohash": hash_strings(own_ids),
                "ts": rng.integers(0, 10**6, n).astype(np.int64),
                "deadline": rng.integers(10**6, 2 * 10**6, n).astype(np.int64),
            },
            n,
        )
        claims = Rows(
            {
                "op_id": claim_ids,
                "ts": rng.integers(0, 10**6, n).astype(np.int64),
                "deadline": rng.integers(10**6, 2 * 10**6, n).astype(np.int64),
                "home": np.ones(n, dtype=np.int64),
            },
            n,
        )
        none = np.zeros(n, dtype=bool)
        took = []
        for _ in range(args.runs):
            began = time.perf_counter()
            decide(own, claims, 0, none, none, watermark=0, retention_ms=600_000)
            took.append(time.perf_counter() - began)
        print(f"  {n:>7,} own + {n:>7,} claims   {statistics.median(took) * 1000:8.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
