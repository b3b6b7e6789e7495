"""The command line's work on a big checkpoint: ``inspect``, reading its pending operations
(``pending_operations``, ``at_risk``) through Spark's state data source; ``rescale``,
``spark-purgatory rescale`` of a stopped checkpoint, without Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import threading
import time

import numpy as np
import pandas as pd
import pyarrow.fs as pafs

import spark_purgatory.rescale as rescaling
from benchmarks import harness
from spark_purgatory import PurgatoryConfig
from spark_purgatory.engine.purgatory import Purgatory
from spark_purgatory.shard.labels import shard_labels, spark_hash_int
from spark_purgatory.spark import state_files
from spark_purgatory.spark.group_state import to_group_state
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.state import SegmentStore, save_state

DAY_MS = 86_400_000
START = 1_767_225_600_000


# -- inspect ---------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def python_workers() -> list[int]:
    """Spark's Python worker processes (``pyspark.daemon`` and the workers it forks)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"pyspark.daemon" in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Peak:
    """Samples the driver, its JVM and the Python workers every 50 ms; keeps the peaks (kB)."""

    def __init__(self, jvm: int) -> None:
        self.jvm, self.peak = jvm, {"driver": 0, "jvm": 0, "worker": 0, "workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            workers = [rss_kib(pid) for pid in python_workers()]
            now = {
                "driver": rss_kib(os.getpid()),
                "jvm": rss_kib(self.jvm),
                "worker": max(workers, default=0),
                "workers": sum(workers),
            }
            self.peak = {k: max(v, now[k]) for k, v in self.peak.items()}

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def build(root: str, n_ops: int, shards: int, files: int, spark) -> tuple[str, float]:
    from benchmarks.contenders import write_parquet
    from spark_purgatory import start
    from spark_purgatory.workload import generate

    work = generate(n_ops, complete_ratio=0.05, timeout_ms=DAY_MS, seed=3)
    write_parquet(root, work.operations, work.events, files=files)
    config = PurgatoryConfig(shards=shards, source_max_files_per_trigger=1, max_timeout_ms=7 * DAY_MS)
    started = time.perf_counter()
    query = start(
        f"{root}/ops", f"{root}/events", output=f"{root}/out", checkpoint=f"{root}/chk",
        config=config, source_format="parquet", spark=spark,
    )  # fmt: skip
    query.await_termination()
    query.stop()
    return f"{root}/chk", time.perf_counter() - started


def inspect(argv: list[str] | None = None) -> int:
    """Reading a checkpoint's pending operations: seconds for a million, memory bounded by a shard.

    Builds a real checkpoint (``start``, available-now, local[2]) holding about ``--ops``
    pending operations of every condition (the broker workload of ``workload.generate`` with
    one-day timeouts, a few of them completed), then times, ``--repeat`` times each:

    * ``pending``: ``pending_operations(checkpoint).count()``: every shard's state read by
      Spark's state data source and decoded on the executors (segments included), every row
      built, nothing collected to the driver;
    * ``at-risk``: ``at_risk(checkpoint, within="1h")`` sorted, its first 20 rows to the driver
      (what the command line prints);
    * ``write``: the pending operations into Spark's ``noop`` sink (a full scan of every column).

    While each runs it samples the resident memory of the Python driver, the driver's JVM and
    the Python workers (``/proc``): the driver's must stay flat (no row reaches it), a worker's
    follows the largest shard it decodes, not the total.

        python -m benchmarks inspect                    # 1M operations, 4 shards
        python -m benchmarks inspect --ops 200000 --repeat 2
        python -m benchmarks inspect --keep /tmp/b1m   # build once; again: read only

    Read the figures of a reused checkpoint (a second run with ``--keep``): in the run that
    builds it, the Python workers still hold the query's parked shards (``state.cache``).
    """
    from spark_purgatory.inspect import at_risk, pending_operations, read_checkpoint
    from spark_purgatory.runtime.session import local_session

    parser = harness.parser("inspect", inspect.__doc__, repeat=3, repeat_help="runs of each read")
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--files", type=int, default=20, help="input files per stream (one per micro-batch)")
    parser.add_argument("--keep", help="build the checkpoint here and keep it (reused if it is there)")
    args = parser.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="bench-inspect-")
    spark = local_session(
        "bench-inspect", master="local[2]", shuffle_partitions=PurgatoryConfig(shards=args.shards).groups
    )
    try:
        if args.keep and os.path.isdir(f"{root}/chk"):  # a fresh process on a kept checkpoint:
            chk, built = f"{root}/chk", None  # fresh JVM and Python workers, as the CLI has
        else:
            chk, built = build(root, args.ops, args.shards, args.files, spark)
        info = read_checkpoint(chk)
        how = "reused" if built is None else f"built in {built:.1f} s"
        print(
            f"checkpoint: {args.ops:,} operations, {args.shards} shards, {how}, last batch {info.last_batch}"
        )
        pending = pending_operations(chk, spark=spark)
        steps = {
            "pending": lambda: pending_operations(chk, spark=spark).count(),
            "at-risk": lambda: len(at_risk(chk, within="1h", spark=spark).limit(20).collect()),
            "write": lambda: (
                pending_operations(chk, spark=spark).write.format("noop").mode("overwrite").save()
            ),
        }
        figures: dict = {"built_s": built, "steps": {}}
        for name, step in steps.items():
            times, peaks, result = [], [], None
            for _ in range(args.repeat):
                with Peak(spark.sparkContext._gateway.proc.pid) as peak:
                    started = time.perf_counter()
                    result = step()
                    times.append(time.perf_counter() - started)
                peaks.append(peak.peak)
            top = {k: max(p[k] for p in peaks) // 1024 for k in peaks[0]}
            figures["steps"][name] = {"seconds": times, "peak_mib": top}
            runs = ", ".join(f"{t:.2f}" for t in times)
            print(
                f"{name:>8}: median {statistics.median(times):6.2f} s  (runs {runs})"
                f"  result {result}  peak RSS MiB: driver {top['driver']}, JVM {top['jvm']}, "
                f"largest worker {top['worker']}, all workers {top['workers']}"
            )
        by_shard = sorted((r["shard"], r["count"]) for r in pending.groupBy("shard").count().collect())
        print("pending by shard:", ", ".join(f"{s}: {c:,}" for s, c in by_shard))
        harness.write_json(args.json, "inspect", args, figures | {"pending_by_shard": dict(by_shard)})
    finally:
        harness.stop(spark)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


# -- rescale ---------------------------------------------------------------------------------------


def build_stopped(chk: str, pending: int, shards: int, multi_key: float, seed: int = 0) -> float:
    """A stopped checkpoint of ``pending`` operations on ``shards`` shards; returns seconds."""
    began = time.perf_counter()
    rng = np.random.default_rng(seed)
    n_keys = max(1, pending // 4)
    keys = np.array([f"key-{i}" for i in range(n_keys)], dtype=object)
    shard_of_key = shards_of(keys, shards)
    first = rng.integers(0, n_keys, pending)
    second = rng.integers(0, n_keys, pending)
    multi = rng.random(pending) < multi_key
    op_keys = np.empty(pending, dtype=object)
    op_keys[:] = [
        [keys[a], keys[b]] if m and a != b else [keys[a]]
        for a, b, m in zip(first, second, multi, strict=True)
    ]
    home = np.where(
        [
            len(k) == 1 or shard_of_key[a] == shard_of_key[b]
            for k, a, b in zip(op_keys, first, second, strict=True)
        ],
        shard_of_key[first],
        shards,
    )
    ops = pd.DataFrame(
        {
            "op_id": [f"op-{i}" for i in range(pending)],
            "keys": op_keys,
            "ts": START + rng.integers(0, 60_000, pending),
            "timeout_ms": 86_400_000,
            "condition": "count",
            "target": 3.0,
        }
    )
    ops["home"] = home
    config = PurgatoryConfig(shards=shards, state_path=os.path.join(chk, "purgatory-state"))
    store = SegmentStore(config.state_path, segment_rows=config.state_segment_rows)
    labels = shard_labels(config.groups)
    groups: dict[int, list] = {p: [] for p in range(config.groups)}
    no_events = pd.DataFrame({"key": [], "ts": []})
    for s in range(config.groups):
        p = Purgatory(config)
        p.shard = s
        mine = ops.loc[ops["home"] == s].drop(columns=["home"])
        if s == shards:
            p.process(mine, no_events, watermark_ms=START)
        else:  # the primaries hold their own and the stubs of the cross-shard ones
            cross = ops.loc[ops["home"] == shards].drop(columns=["home"])
            here = cross["keys"].map(lambda ks, s=s: [k for k in ks if shard_of_key[int(k[4:])] == s])
            stubs = cross.assign(keys=here, stub=True).loc[here.str.len() > 0]
            p.process(
                pd.concat([mine.assign(stub=False), stubs], ignore_index=True), no_events, watermark_ms=START
            )
        value = to_group_state(save_state(p, store), "text")
        groups[spark_hash_int(labels[s]) % config.groups].append(
            state_files.GroupValue(labels[s], value, START)
        )
    fs = pafs.LocalFileSystem()
    for partition, entries in groups.items():
        state_files.write_version(fs, f"{chk}/state/0", partition, 1, entries)  # batch 0 leaves version 1
    conf = {
        "spark.sql.shuffle.partitions": str(config.groups),
        "spark.sql.streaming.stateStore.providerClass": state_files.HDFS_PROVIDER,
        "spark.sql.streaming.stateStore.compression.codec": "lz4",
        "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    }
    for log, meta in (
        ("offsets", {"batchWatermarkMs": START, "batchTimestampMs": START, "conf": conf}),
        ("commits", {"nextBatchWatermarkMs": START}),
    ):
        os.makedirs(f"{chk}/{log}", exist_ok=True)
        with open(f"{chk}/{log}/0", "w") as f:
            f.write("v1\n" + json.dumps(meta) + ("\n{}" if log == "offsets" else ""))
    return time.perf_counter() - began


def rescale(argv: list[str] | None = None) -> int:
    """How long ``spark-purgatory rescale`` takes for N pending operations (no Spark, no JVM).

    Builds a stopped checkpoint as ``start`` leaves it: N pending operations (a share of them
    multi-key, some across shards) and events buffered, in ``--from`` primary shards whose
    bulk is in segment files (``purgatory-state``), each shard group's value in Spark's state
    store files at the last committed micro-batch; then times ``rescale`` to ``--to`` shards,
    step by step (read and load, reshard, write), and checks that every operation is still
    pending once.

        python -m benchmarks rescale --pending 1000000 --from 2 --to 8

    Prints one JSON line per rescale: its wall time, its CPU time (the machine may be shared:
    ``load`` is the 1-minute load average), the operations and stubs it wrote, the peak RSS.
    """
    parser = harness.parser("rescale", rescale.__doc__, repeat=None)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--from", dest="old", type=int, default=2)
    parser.add_argument("--to", type=int, nargs="+", default=[8, 3])
    parser.add_argument("--multi-key", type=float, default=0.1, help="share of two-key operations")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        chk = os.path.join(tmp, "chk")
        built = build_stopped(chk, args.pending, args.old, args.multi_key)
        print(json.dumps({"built": args.pending, "shards": args.old, "seconds": round(built, 1)}), flush=True)
        for shards in args.to:
            cpu = time.process_time()
            done = rescaling.rescale(chk, shards)
            cpu = time.process_time() - cpu
            line = {
                "pending": args.pending,
                "from": done.from_shards,
                "to": done.to_shards,
                "seconds": done.seconds,
                "cpu_seconds": round(cpu, 1),
                "load": round(os.getloadavg()[0], 1),
                "operations_and_stubs": done.pending,
                "rss_mb": _rss_mb(),
            }
            runs.append(line)
            print(json.dumps(line), flush=True)
    harness.write_json(args.json, "rescale", args, {"built_s": built, "rescales": runs})
    return 0


def _rss_mb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
