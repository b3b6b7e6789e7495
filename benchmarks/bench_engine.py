"""The engine without Spark: ``engine``, its cost per call and memory per pending operation;
``wheel``, its timing wheel against a pure-Python port of Kafka's.

Both drive the package's public API in this process, no JVM: ``Purgatory.process``,
``save_state`` / ``load_state``, ``TimingWheel``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks import harness

DAY_MS = 86_400_000
T0 = 1_700_000_000_000  # event time of the first operation (ms)
FILL_CHUNK = 100_000
SIZES = (10, 1_000, 10_000)
_MEMORY = ("rss_bytes", "live_bytes", "value_bytes")


def _ids(prefix: str, start: int, n: int) -> np.ndarray:
    """``n`` 12-character ids: the prefix letter and an 11-digit number."""
    return np.array([f"{prefix}{i:011d}" for i in range(start, start + n)], dtype=object)


def _ops(start: int, n: int, ts: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "op_id": _ids("o", start, n),
            "key": _ids("k", start, n),
            "ts": np.full(n, ts, np.int64),
            "timeout_ms": np.full(n, 7 * DAY_MS, np.int64),
            "condition": "any",
        }
    )


def _events(start: int, n: int, ts: int) -> pd.DataFrame:
    return pd.DataFrame({"key": _ids("k", start, n), "ts": np.full(n, ts, np.int64)})


def _mapped() -> int:
    """Bytes the engine holds in its own memory mappings (``engine.memory``, which
    ``tracemalloc`` does not see); 0 for a checkout without them."""
    try:
        from spark_purgatory.engine import memory
    except ImportError:
        return 0
    return memory.mapped_bytes()


def _rss() -> int:
    """Resident set size of this process, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Driver:
    """One shard and its clock: fills the backlog, then times calls at it."""

    def __init__(self, validated: bool = False) -> None:
        from spark_purgatory import Purgatory
        from spark_purgatory.config import PurgatoryConfig

        self.p = Purgatory(PurgatoryConfig())
        self.validated = validated
        self.next_id = 0  # ids below are used
        self.clock = T0  # event time of the next call's operations
        self.cpu_s = 0.0  # CPU seconds of this process in the last call (``call``)
        self.p.process(None, None, watermark_ms=T0 - 1_000)

    def fill(self, pending: int) -> None:
        """Add backlog operations (no events) until ``pending`` are pending."""
        while self.p.pending < pending:
            n = min(FILL_CHUNK, pending - self.p.pending)
            self.p.process(_ops(self.next_id, n, self.clock), None, watermark_ms=self.clock - 1_000)
            self.next_id += n

    def call(self, n: int) -> float:
        """One call with ``n`` new operations and ``n`` events completing them; seconds."""
        ops = _ops(self.next_id, n, self.clock)
        evs = _events(self.next_id, n, self.clock + 1)
        self.next_id += n
        wm = self.clock - 500
        self.clock += 1_000
        if self.validated:  # as the Spark host sends them
            from spark_purgatory.engine.batch import with_keys
            from spark_purgatory.engine.validation import validate_events, validate_operations

            ops = validate_operations(with_keys(ops), max_timeout_ms=self.p.config.max_timeout_ms)[0]
            ops = _hinted(ops)
            evs = validate_events(evs)[0]
        start, cpu = time.perf_counter(), time.process_time()
        out = self.p.process(ops, evs, watermark_ms=wm, validated=self.validated)
        took = time.perf_counter() - start
        self.cpu_s = time.process_time() - cpu
        if len(out.outcomes) != n or len(out.rejected):
            got = f"{len(out.outcomes)} outcomes, {len(out.rejected)} rejected"
            raise AssertionError(f"expected {n} outcomes, got {got}")
        return took


def _hinted(ops: pd.DataFrame) -> pd.DataFrame:
    """Validated operations with the hints the Spark host's split gives (``shard.input.
    split_input``; ``engine.batch.KEY_HINTS``): each list's member count, and the one key of
    each operation where every one has exactly one.  A checkout whose engine does not read
    them takes them as extra columns."""
    keys = ops["keys"].tolist()
    n_members = np.array([0 if m is None else len(m) for m in ops["members"].tolist()], np.int64)
    hints = {"n_members": n_members}
    if all(len(k) == 1 for k in keys):
        hints["one_key"] = np.array([k[0] for k in keys], dtype=object)
    return ops.assign(**hints)


def measure_resolved(resolved: int, repeat: int, validated: bool) -> float:
    """The median 10-row call with ``resolved`` operations completed early and none pending."""
    d = Driver(validated)
    d.fill(resolved)
    for start in range(0, resolved, FILL_CHUNK):
        n = min(FILL_CHUNK, resolved - start)
        d.p.process(None, _events(start, n, d.clock + 1), watermark_ms=d.clock - 500)
    d.call(10)
    return statistics.median([d.call(10) for _ in range(repeat)])


def measure(pending_levels: list[int], repeat: int, memory: bool, validated: bool) -> dict:
    """The table for the ``spark_purgatory`` this process imports, as a dict (JSON-able)."""
    from spark_purgatory import load_state, save_state

    d = Driver(validated)
    for size in SIZES:  # the engine imported and its first calls made: a worker's fixed cost
        d.call(size)
    gc.collect()
    rss0 = _rss()
    rows = []
    for pending in pending_levels:
        start = time.perf_counter()
        d.fill(pending)
        fill_s = time.perf_counter() - start
        row: dict = {"pending": pending, "fill_s": fill_s, "calls": {}, "ranges": {}, "cpu": {}}
        for size in SIZES:
            reps = max(3, repeat // max(1, size // 1_000)) if size > 10 else repeat
            d.call(size)  # warm
            times, cpu = [], []
            for _ in range(reps):
                times.append(d.call(size))
                cpu.append(d.cpu_s)
            row["calls"][str(size)] = statistics.median(times)
            row["ranges"][str(size)] = [min(times), max(times)]
            row["cpu"][str(size)] = statistics.median(cpu)
        if memory and pending:
            gc.collect()
            row["rss_bytes"] = _rss() - rss0
            value = save_state(d.p)
            row["value_bytes"] = len(value)
            gc.collect()
            mapped0 = _mapped()
            tracemalloc.start()
            loaded = load_state(value)
            gc.collect()
            row["live_bytes"] = tracemalloc.get_traced_memory()[0] + _mapped() - mapped0
            tracemalloc.stop()
            del loaded, value
        rows.append(row)
        print(f"  [{_which()}] {pending:,} pending done (fill {fill_s:.1f} s)", file=sys.stderr, flush=True)
    return {"checkout": _which(), "rows": rows}


def _which() -> str:
    import spark_purgatory

    return str(Path(spark_purgatory.__file__).resolve().parent.parent)


def _run_checkout(root: str | None, args: argparse.Namespace) -> dict:
    """``measure`` in a fresh interpreter with the checkout at ``root``'s package (this
    checkout's if None)."""
    argv = ["--measure", "--pending", args.pending, "--repeat", str(args.repeat)]
    argv += ["--resolved", str(args.resolved)] + (["--validated"] if args.validated else [])
    if args.no_memory:
        argv.append("--no-memory")
    return harness.child("engine", argv, checkout=root)


def _fmt_ms(seconds: float | None, span: list[float] | None = None) -> str:
    """A median in ms, with the range of the calls when known (``1.4 ms (1.1-2.0)``)."""
    if seconds is None:
        return ""
    text = f"{seconds * 1e3:,.1f} ms"
    return text if span is None else f"{text} ({span[0] * 1e3:,.1f}-{span[1] * 1e3:,.1f})"


def _cpu_per_row(cpu: float | None) -> str:
    """A 10,000 + 10,000 call's CPU seconds (this process's: a loaded machine stretches wall
    time more) as µs per row; empty for a result without it."""
    return "" if cpu is None else f"{cpu / 20_000 * 1e6:.2f}"


def render(results: list[dict]) -> str:
    """The issue's table, one block per checkout, then the ratios (first / each other)."""
    lines = []
    for result in results:
        lines.append(f"\n{result['checkout']}")
        lines.append(
            "| pending | 10 + 10 | 1,000 + 1,000 | 10,000 + 10,000 | µs/row @10k | CPU µs/row @10k "
            "| mem rss B/op | mem live B/op | value B/op |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for row in result["rows"]:
            c, r = row["calls"], row.get("ranges", {})
            per_op = {k: row[k] / row["pending"] if row.get(k) else None for k in _MEMORY}
            cells = " | ".join(_fmt_ms(c[s], r.get(s)) for s in ("10", "1000", "10000"))
            lines.append(
                f"| {row['pending']:,} | {cells} "
                f"| {c['10000'] / 20_000 * 1e6:.1f} | {_cpu_per_row(row.get('cpu', {}).get('10000'))} "
                + " ".join(f"| {'' if v is None else f'{v:,.0f}'}" for v in per_op.values())
                + " |"
            )
    for result in results:
        if "resolved" in result:
            r = result["resolved"]
            lines.append(
                f"\n{result['checkout']}: 0 pending, {r['n']:,} resolved early: 10 + 10 {_fmt_ms(r['call'])}"
            )
    if len(results) > 1:
        base = results[0]
        for other in results[1:]:
            lines.append(f"\nratio: {other['checkout']} / {base['checkout']} (below 1: faster or smaller)")
            lines.append("| pending | 10 + 10 | 1,000 + 1,000 | 10,000 + 10,000 | rss | live | value |")
            lines.append("|---|---|---|---|---|---|---|")
            for a, b in zip(base["rows"], other["rows"], strict=True):
                cells = [f"{b['calls'][s] / a['calls'][s]:.2f}x" for s in ("10", "1000", "10000")]
                for k in _MEMORY:
                    cells.append(f"{b[k] / a[k]:.2f}x" if a.get(k) and b.get(k) else "")
                lines.append(f"| {a['pending']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def engine(argv: list[str] | None = None) -> int:
    """The engine alone: per-call cost against the backlog, per-row cost, memory per pending operation.

    Issue 25's table, on ``Purgatory.process`` without Spark, one shard, ``any`` operations with
    one key each (12-character op_ids and keys, 7-day timeouts), driven as a new user would
    drive it (canonical pandas frames, validated by the engine):

    * the shard is filled to each backlog (0, 100k, 1M pending; ``--pending`` adds 5M), then
    * calls of 10, 1,000 and 10,000 operations *plus* as many events are timed; each call's
      events complete that call's operations (so outcomes are included) and the watermark moves
      on by a second per call (the wheel advances, the events are finalised), so the backlog
      stays where it is.  A call's time is the median of ``--repeat`` calls (fewer for the big
      ones), with their range in brackets; µs per row divides the median by operations +
      events.
    * memory: ``rss`` is the worker's resident-set growth from before the fill to after it
      (``gc.collect()`` first; what a Python worker pays, allocator slack included), counted
      from after the engine's import and a first call of each size (a worker's fixed cost,
      about 38 MB, which is not the backlog's: counted from before the import, as up to
      bench_engine of 9e23da1, it adds about 38 bytes per operation at 1M);
      ``live`` is what ``tracemalloc`` counts as allocated by ``load_state(save_state(p))`` and
      still alive (numpy and Python objects; the state of a freshly loaded shard), plus the
      bytes of the memory mappings the load made and kept (``engine.memory``: the big arrays'
      own mappings, since branch rss, which ``tracemalloc`` does not see); ``value`` is
      ``len(save_state(p))`` (no segment store: the whole state in the value).  Each divided by
      the backlog.

    ``--validated`` validates each call's frames before the timer and passes them as the Spark
    host does (``process(..., validated=True)``: the host validates in Spark SQL, and its split
    adds the key hints, ``engine.batch.KEY_HINTS``), so the figures are the engine's own work;
    by default the engine's pandas validation is included.

    ``--resolved N`` adds one more row: no operation pending, but N operations completed early
    (their keys retained until their 7-day deadlines, their op_ids for the dedup retention), the
    state a shard reaches when operations complete well before their timeout; 10-row calls timed.

    ``--against REF`` runs the same measurements for the checkout at REF (a directory with
    ``spark_purgatory/``) in a subprocess with REF first on ``PYTHONPATH``, and this checkout in
    another, one after the other, and prints the two side by side with their ratio.  Only the
    public API is used (``Purgatory.process``, ``save_state``, ``load_state``), so any checkout
    since the state layer can be compared.  ``--rounds N`` repeats that N times, the order
    alternated (REF first in odd rounds, this checkout in even ones), and ends with each
    ratio's range over the rounds and the machine's load average in each.

        python -m benchmarks engine                       # this checkout
        python -m benchmarks engine --against /tmp/engine-base
        python -m benchmarks engine --against /tmp/engine-base --rounds 2 --validated --no-memory
        python -m benchmarks engine --pending 0,100000,1000000,5000000
        python -m benchmarks engine --pending 0 --resolved 1000000 --no-memory
    """
    parser = harness.parser("engine", engine.__doc__, repeat=20, repeat_help="timed 10-row calls per backlog")
    parser.add_argument("--pending", default="0,100000,1000000", help="backlogs, comma-separated")
    parser.add_argument("--against", metavar="REF", help="another checkout, measured side by side")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --against: rounds, the two alternated (REF first in odd ones)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory and state-value columns")
    parser.add_argument(
        "--resolved", type=int, default=0, help="also: 10-row calls after N early completions"
    )
    parser.add_argument("--validated", action="store_true", help="frames validated as the Spark host sends")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # in this process
    args = parser.parse_args(argv)
    if args.measure:
        levels = [int(x) for x in harness.names(args.pending)]
        result = measure(levels, args.repeat, not args.no_memory, args.validated)
        if args.resolved:
            call = measure_resolved(args.resolved, args.repeat, args.validated)
            result["resolved"] = {"n": args.resolved, "call": call}
        print(json.dumps(result))
        return 0
    if not args.against:
        results = [_run_checkout(None, args)]
        print(render(results))
        harness.write_json(args.json, "engine", args, {"checkouts": results})
        return 0
    rounds = []
    for number in range(args.rounds):  # alternated: REF first in odd rounds, this checkout in even
        order = [args.against, None] if number % 2 == 0 else [None, args.against]
        load = os.getloadavg()[0]
        ran = {root: _run_checkout(root, args) for root in order}
        pair = [ran[args.against], ran[None]]
        rounds.append({"load_before": load, "load_after": os.getloadavg()[0], "checkouts": pair})
        print(
            f"\nround {number + 1} (first: {'REF' if number % 2 == 0 else 'this'}, load average {load:.1f})"
        )
        print(render(pair))
    if len(rounds) > 1:
        print(render_rounds(rounds))
    harness.write_json(args.json, "engine", args, {"checkouts": rounds[-1]["checkouts"], "rounds": rounds})
    return 0


def render_rounds(rounds: list[dict]) -> str:
    """The ratios (this checkout / REF) as ranges over the rounds, with each round's load; the
    10,000-row calls' µs per row, wall and CPU, as REF's range -> this one's."""
    loads = ", ".join(f"{r['load_before']:.1f}-{r['load_after']:.1f}" for r in rounds)
    lines = [f"\nratio this / REF over {len(rounds)} rounds (load average per round: {loads})"]
    lines.append(
        "| pending | 10 + 10 | 1,000 + 1,000 | 10,000 + 10,000 | CPU @10k "
        "| µs/row @10k, REF -> this | CPU µs/row @10k, REF -> this |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for i, row in enumerate(rounds[0]["checkouts"][0]["rows"]):
        pairs = [(r["checkouts"][0]["rows"][i], r["checkouts"][1]["rows"][i]) for r in rounds]
        sizes = {
            size: [(a["calls"][size], b["calls"][size]) for a, b in pairs] for size in ("10", "1000", "10000")
        }
        cpu = [(a.get("cpu", {}).get("10000"), b.get("cpu", {}).get("10000")) for a, b in pairs]
        has_cpu = all(a is not None and b is not None for a, b in cpu)
        cells = [_ratio_span(sizes[size]) for size in sizes]
        cells.append(_ratio_span(cpu) if has_cpu else "")
        cells.append(_span_pair(sizes["10000"]))
        cells.append(_span_pair(cpu) if has_cpu else "")
        lines.append(f"| {row['pending']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ratio_span(pairs: list[tuple[float, float]]) -> str:
    """The range of b / a over (a, b) pairs, as ``0.61-0.70x``."""
    ratios = [b / a for a, b in pairs]
    return f"{min(ratios):.2f}-{max(ratios):.2f}x"


def _span_pair(pairs: list[tuple[float, float]]) -> str:
    """A 10,000 + 10,000 call's seconds over (REF, this) pairs as µs per row, ``a-b -> c-d``."""
    per_row = [[pair[k] / 20_000 * 1e6 for pair in pairs] for k in (0, 1)]
    return " -> ".join(f"{min(v):.2f}-{max(v):.2f}" for v in per_row)


# -- the timing wheel ------------------------------------------------------------------------------


def workload(n: int, batch: int, timeout: int, step: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    offsets = rng.integers(0, timeout, n)
    for b, lo in enumerate(range(0, n, batch)):
        now = b * step
        ids = np.arange(lo, min(lo + batch, n), dtype=np.int64)
        yield now, ids, now + offsets[lo : lo + batch], now + step


def run_columnar(n, batch, timeout, step, tick, size, fresh_ids=True):
    """The columnar wheel; ``fresh_ids``: as the purgatory makes it (no record of its ids),
    else as ``TimingWheel``'s default (the pending ids recorded: an id may be added again)."""
    from spark_purgatory import TimingWheel

    w = TimingWheel(tick, size, 0, fresh_ids=fresh_ids)
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


def wheel(argv: list[str] | None = None) -> int:
    """Vectorised timing wheel vs a pure-Python port of Kafka's linked-list wheel.

    Same workload for both: N timers with deadlines up to TIMEOUT ms ahead, added in batches of
    BATCH (one micro-batch each), the clock advanced by STEP ms after each batch, then drained.
    Prints both throughputs (adds + expiries per second) and the ratio; the columnar wheel as
    the purgatory makes it (``fresh_ids``: each id added once), and beside it as
    ``TimingWheel``'s default (the pending ids recorded, so that an id may be added again).

        python -m benchmarks wheel [--n 1000000] [--batch 10000]
    """
    parser = harness.parser("wheel", wheel.__doc__, repeat=3, repeat_help="columnar runs, the best reported")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--timeout", type=int, default=30_000, help="deadlines up to this many ms ahead")
    parser.add_argument("--step", type=int, default=300, help="ms the clock advances per batch")
    parser.add_argument("--tick", type=int, default=100)
    parser.add_argument("--wheel-size", type=int, default=512)
    args = parser.parse_args(argv)
    shape = (args.n, args.batch, args.timeout, args.step, args.tick, args.wheel_size)

    col = min((run_columnar(*shape) for _ in range(args.repeat)), key=lambda r: r[0])
    recorded = min((run_columnar(*shape, fresh_ids=False) for _ in range(args.repeat)), key=lambda r: r[0])
    ref = run_kafka_port(*shape)
    assert col[1] == args.n and recorded[1] == args.n and ref[1] == args.n, (col, recorded, ref)

    ops = 2 * args.n  # one add and one expiry per timer
    col_rate, ref_rate = ops / col[0], ops / ref[0]
    print(f"machine: {platform.machine()} python {platform.python_version()} numpy {np.__version__}")
    print(
        f"workload: {args.n:,} timers, batches of {args.batch:,}, timeouts < {args.timeout} ms, "
        f"advance {args.step} ms/batch, tick {args.tick} ms, wheel size {args.wheel_size}"
    )
    print(f"{'implementation':<34}{'seconds':>10}{'add+expire/s':>16}")
    print(f"{'columnar wheel (spark_purgatory)':<34}{col[0]:>10.3f}{col_rate:>16,.0f}")
    print(f"{'  same, ids recorded (default)':<34}{recorded[0]:>10.3f}{ops / recorded[0]:>16,.0f}")
    print(f"{'Kafka linked-list port (Python)':<34}{ref[0]:>10.3f}{ref_rate:>16,.0f}")
    print(f"ratio: {col_rate / ref_rate:.1f}x faster   (targets: >= 50x, >= 5,000,000 add+expire/s)")
    print(
        f"targets met: ratio {'yes' if col_rate / ref_rate >= 50 else 'NO'}, "
        f"throughput {'yes' if col_rate >= 5_000_000 else 'NO'}"
    )
    figures = {
        "columnar_s": col[0],
        "recorded_s": recorded[0],
        "kafka_port_s": ref[0],
        "columnar_per_s": col_rate,
        "ratio": col_rate / ref_rate,
    }
    harness.write_json(args.json, "wheel", args, figures)
    return 0


# -- Kafka's timer, ported: the baseline -----------------------------------------------------------
#
# A plain pure-Python port of Kafka's timer (TimingWheel, TimerTaskList, SystemTimer): linked
# lists of entries per bucket, a heap of buckets standing in for the DelayQueue, one Python
# object per task.  Semantics as in Kafka: a task fires when its bucket expires (up to one tick
# early).


class TimerTaskEntry:
    __slots__ = ("task_id", "expiration_ms", "list", "next", "prev")

    def __init__(self, task_id: int, expiration_ms: int) -> None:
        self.task_id = task_id
        self.expiration_ms = expiration_ms
        self.list: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None

    def remove(self) -> None:
        if self.list is not None:
            self.list.remove(self)


class TimerTaskList:
    __slots__ = ("root", "expiration", "counter")

    def __init__(self, counter: list[int]) -> None:
        self.root = TimerTaskEntry(-1, -1)
        self.root.next = self.root
        self.root.prev = self.root
        self.expiration = -1
        self.counter = counter

    def set_expiration(self, expiration_ms: int) -> bool:
        changed = self.expiration != expiration_ms
        self.expiration = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        tail = self.root.prev
        entry.next = self.root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        self.root.prev = entry
        self.counter[0] += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        entry.next.prev = entry.prev
        entry.prev.next = entry.next
        entry.next = entry.prev = None
        entry.list = None
        self.counter[0] -= 1

    def flush(self, reinsert) -> None:
        head = self.root.next
        while head is not self.root:
            self.remove(head)
            reinsert(head)
            head = self.root.next
        self.expiration = -1

    def __lt__(self, other: TimerTaskList) -> bool:
        return self.expiration < other.expiration


class KafkaTimingWheel:
    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, counter: list[int], queue: list) -> None:
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval = tick_ms * wheel_size
        self.counter = counter
        self.queue = queue
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.current_time = start_ms - start_ms % tick_ms
        self.overflow: KafkaTimingWheel | None = None

    def add(self, entry: TimerTaskEntry) -> bool:
        expiration = entry.expiration_ms
        if expiration < self.current_time + self.tick_ms:
            return False
        if expiration < self.current_time + self.interval:
            virtual_id = expiration // self.tick_ms
            bucket = self.buckets[virtual_id % self.wheel_size]
            bucket.add(entry)
            if bucket.set_expiration(virtual_id * self.tick_ms):
                heapq.heappush(self.queue, (bucket.expiration, id(bucket), bucket))
            return True
        if self.overflow is None:
            self.overflow = KafkaTimingWheel(
                self.interval, self.wheel_size, self.current_time, self.counter, self.queue
            )
        return self.overflow.add(entry)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current_time + self.tick_ms:
            self.current_time = time_ms - time_ms % self.tick_ms
            if self.overflow is not None:
                self.overflow.advance_clock(self.current_time)


class SystemTimer:
    """Kafka's SystemTimer without threads: advance_clock(to) fires every due bucket."""

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int) -> None:
        self.counter = [0]
        self.queue: list = []
        self.wheel = KafkaTimingWheel(tick_ms, wheel_size, start_ms, self.counter, self.queue)
        self.fired: list[int] = []

    def add(self, task_id: int, expiration_ms: int) -> None:
        self._add_entry(TimerTaskEntry(task_id, expiration_ms))

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self.wheel.add(entry):
            self.fired.append(entry.task_id)

    def advance_clock(self, to_ms: int) -> None:
        queue = self.queue
        while queue and queue[0][0] <= to_ms:
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration != expiration:
                continue  # stale heap entry: the bucket was reused
            self.wheel.advance_clock(expiration)
            bucket.flush(self._add_entry)

    def size(self) -> int:
        return self.counter[0]
