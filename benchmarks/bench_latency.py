"""Outcome latency on a live ``processing-time`` query: under load, then on a quiet stream.

How long after an outcome became decidable is its row committed to the ``outcomes`` table?
A live query (``start()``, ``processing-time``) reads two inputs written while it runs,
event time = the wall clock at writing (so event time maps to wall time one to one):

* **phase 1, load**: for ``--load-seconds`` a steady trickle: every ``--file-interval`` one
  file (``--source kafka``: one batch of records) of operations (``--rate`` per second,
  timeouts drawn in ``--timeout-min``..``--timeout-max``) and one of the completion events
  due by then (``--complete`` of the operations get one, at a random point of their window);
* **phase 2, quiet**: both inputs silent; the operations still pending have their deadlines
  inside it and nothing completes them: they must expire on the operator's clock;
  **trickle** instead (``--configs trickle``, with the idle timeout): the operations silent,
  the events input writes one file every ``--trickle-gap`` seconds (the completions due by
  then, else one row no operation waits for; 3.3 s by default, not a multiple of the trigger
  interval, so the rows fall at every point of it): the input holds the watermark back from
  each row until its next or until it turns idle, and an expiry waits for whichever comes first.

Each outcome's **lag**: the moment its row was committed to the ``outcomes`` Delta table (its
commit file's modification time; the table's new commits are read every ``--poll`` seconds)
minus the moment it became decidable:

* a completion: its completing event's file written (renamed into place; for Kafka, the
  records acknowledged by the broker);
* an expiry: its deadline passing on the wall clock plus the watermark delay (the earliest a
  watermark of "event time read minus the delay" can pass it).

With ``--output kafka`` the outcomes also go to an output topic (``output.kafka.topic``,
statuses ``expired,completed``, on the local broker ``--source kafka`` uses too), and a
``read_committed`` consumer of it (a thread here, Kafka's default fetch settings) notes the
wall time it receives each ``op_id``: the **topic's lag** is that minus the moment it became
decidable, printed beside the table's.  A line per config splits the topic's lag (medians):
decidable to the operator's decision (the row's ``emitted_at``), that to the record handed to
the producer (its ``CreateTime``: the rest of the micro-batch, the send's Spark job and its
set-up), that to its receipt (the rest of the send, the transaction's commit, the consumer's
fetch).  The sink's ``record`` step per micro-batch (``driver_step``'s timings: the send and its
Spark job in it) is printed too.

An outcome counts as **load** when it became decidable before phase 1 ended, **quiet** (or
**trickle**) after.  Printed for expiries and completions separately, by phase: how many,
p50 / p99 / max lag in seconds, and how many never came.  The query runs once with
``watermark.idle.timeout`` (``--idle-timeout``) and once without it (``--configs``; the
trickle on request); without it the expiries of the quiet stream never come (Spark's
watermark waits for input): the run waits ``--give-up`` seconds past the last deadline plus
the delay, then counts them missing.
The documented bound on the quiet stream (docs/contract.md, the operator's clock): the
reaper's listing margin (none where Spark lists the wake first, as on a new checkpoint) +
one trigger interval (a micro-batch when they take longer) + the micro-batch's own time +
``linger.ms``; printed beside the figures with the largest micro-batch time of the run
(Spark's ``triggerExecution``).  On a trickle of gap G (docs/contract.md): that bound + one
trigger interval + min(G, idle timeout + one trigger interval), each interval the largest
micro-batch time when that is longer: the trickle's next row is read by a micro-batch and
applied by the next, or the input turns idle after the micro-batch that read its last row.

One warm-up operation, completed end to end before phase 1, keeps the first micro-batches'
start-up (Python workers, the sender's first job) out of the figures.  The load average is
printed: the lag is mostly waiting for micro-batches, and a loaded machine makes them slow.

    python -m benchmarks latency                      # files, with and without idle timeout
    python -m benchmarks latency --load-seconds 120 --rate 20
    python -m benchmarks latency --source kafka       # topics on a local broker
    python -m benchmarks latency --configs idle --trigger 2 --linger-ms 1000
    python -m benchmarks latency --configs idle,trickle --trickle-gap 3.3
    python -m benchmarks latency --configs idle --output kafka --trigger 0.5   # the topic too
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from benchmarks import harness
from benchmarks.arrivals import Poller, TopicReader
from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.handle import _waiting_for_data
from spark_purgatory.runtime.session import local_session

CONFIGS = ("idle", "none", "trickle")
DEFAULT_CONFIGS = ("idle", "none")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _now_ms() -> int:
    return int(time.time() * 1000)


class FileInput:
    """Two directories written live, one whole file per call (written, then renamed)."""

    def __init__(self, root: str) -> None:
        self.ops, self.events = os.path.join(root, "ops"), os.path.join(root, "events")
        os.makedirs(self.ops), os.makedirs(self.events)
        self.files = 0

    def sources(self) -> tuple[str, str]:
        return self.ops, self.events

    def start_options(self) -> dict:
        return {"source_format": "json"}

    def write(self, kind: str, rows: list[dict]) -> float:
        """Write ``rows`` to ``kind`` (``ops`` or ``events``); return when they were in place."""
        directory = self.ops if kind == "ops" else self.events
        path = os.path.join(directory, f"part-{self.files:05d}.json")
        self.files += 1
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.write("".join(json.dumps(row) + "\n" for row in rows))
        os.rename(path + ".tmp", path)
        return time.time()


class KafkaInput:
    """Two topics of ``partitions`` partitions on a local broker, records spread round-robin."""

    def __init__(self, broker, tag: str, partitions: int) -> None:
        self.broker, self.partitions = broker, partitions
        self.topics = {
            k: broker.create_topic(f"latency-{tag}-{k}", partitions=partitions) for k in ("ops", "events")
        }
        self.sent = 0

    def sources(self) -> tuple[str, str]:
        return self.topics["ops"], self.topics["events"]

    def start_options(self) -> dict:
        options = {"kafka.bootstrap.servers": self.broker.bootstrap_servers, "startingOffsets": "earliest"}
        return {"source_format": "kafka", "kafka_options": options}

    def write(self, kind: str, rows: list[dict]) -> float:
        parts = [(self.sent + i) % self.partitions for i in range(len(rows))]
        self.sent += len(rows)
        self.broker.produce(self.topics[kind], [json.dumps(r) for r in rows], partitions=parts)
        return time.time()


class SinkSteps(logging.Handler):
    """Each micro-batch's ``record`` step in the sink, as ``driver_step`` logs it
    (``PurgatorySink.timings``): the batch recorded, then the output topic's send, its Spark
    job included."""

    def __init__(self) -> None:
        super().__init__()
        self.record_ms: dict[int, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        steps = getattr(record, "sink_ms", None)
        if steps is not None:
            self.record_ms[steps["batch_id"]] = steps["record"]


@dataclass
class Op:
    op_id: str
    ts_ms: int
    timeout_ms: int
    complete_at: float | None  # wall time at which its completing event is due, or None
    event_written: float | None = None

    @property
    def deadline_s(self) -> float:
        return (self.ts_ms + self.timeout_ms) / 1000


@dataclass
class Lags:
    """One output's lags (the table's, or the topic's), by outcome kind and phase."""

    lags: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    missing: dict[tuple[str, str], int] = field(default_factory=dict)
    wrong: int = 0


@dataclass
class Result:
    config: str
    table: Lags = field(default_factory=Lags)  # committed to the outcomes table
    topic: Lags | None = None  # ``--output kafka``: received by the read_committed consumer
    duplicates: int = 0  # records of an op_id the topic had already given
    split: dict[str, float] = field(default_factory=dict)  # the topic's lag by part, medians
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average when the run began, ended
    record_ms: list[float] = field(default_factory=list)  # the sink's record step, per micro-batch
    batch_max_s: float = 0.0
    margin_s: float = 0.0  # the reaper's listing margin (``ExpirationReaper.margin_ms``)
    when: list[tuple[float, float, str]] = field(default_factory=list)  # decidable, committed, kind
    batches: int = 0
    load_end: float = 0.0


def _after_load(config: str) -> str:
    """The name of phase 2 in a config's figures."""
    return "trickle" if config == "trickle" else "quiet"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def _write_due(data, ops: list[Op]) -> bool:
    """Write the completing events due by now (in their operation's window) in one file, if
    any; whether there were."""
    now = _now_ms()
    due = [
        o
        for o in ops
        if o.complete_at is not None
        and o.event_written is None
        and o.complete_at <= now / 1000
        and o.ts_ms < now < o.ts_ms + o.timeout_ms  # in its window, after its operation
    ]
    if due:
        written = data.write("events", [{"key": f"k-{o.op_id}", "ts": _iso(now)} for o in due])
        for o in due:
            o.event_written = written
    return bool(due)


def run_once(spark, args, config_name: str, work: str, broker=None) -> Result:
    """One config's live query; ``broker``: the local broker of ``--source kafka`` and
    ``--output kafka``."""
    root = os.path.join(work, config_name)
    os.makedirs(root)
    tag = f"{config_name}-{int(time.time())}"
    data = KafkaInput(broker, tag, args.partitions) if args.source == "kafka" else FileInput(root)
    out = os.path.join(root, "out")
    topic, reader = {}, None
    if args.output == "kafka":
        name = broker.create_topic(f"latency-{tag}-outcomes", partitions=args.partitions)
        topic = {
            "output_kafka_topic": name,
            "output_kafka_statuses": "expired,completed",
            "output_kafka_settings": (("bootstrap.servers", broker.bootstrap_servers),),
        }
        reader = TopicReader(broker.bootstrap_servers, name, args.partitions)
    config = PurgatoryConfig(
        shards=args.shards,
        tick_ms=100,
        watermark_delay=f"{args.delay} seconds",
        accumulator_linger_ms=args.linger_ms,
        watermark_idle_timeout=f"{int(args.idle_timeout * 1000)} ms" if config_name != "none" else "",
        **topic,
    )
    rng = random.Random(args.seed)
    ops: list[Op] = []
    result = Result(config_name, load=(os.getloadavg()[0], 0.0))
    poller = Poller(os.path.join(out, "outcomes"), args.poll)
    outputs = [poller] if reader is None else [poller, reader]
    steps, sink_log = SinkSteps(), logging.getLogger("spark_purgatory.driver_step")
    level = sink_log.level
    sink_log.addHandler(steps)
    sink_log.setLevel(logging.DEBUG)
    ops_src, events_src = data.sources()
    with start(
        ops_src,
        events_src,
        output=out,
        checkpoint=os.path.join(root, "chk"),
        config=config,
        trigger=f"processing-time={round(args.trigger * 1000)} milliseconds",
        spark=spark,
        **data.start_options(),
    ) as q:
        limit = time.time() + 180
        while not _waiting_for_data(q.query.status):
            if time.time() > limit:
                raise RuntimeError(f"the query did not start: {q.query.status}")
            time.sleep(0.2)
        for output in outputs:
            output.start()
        now = _now_ms()  # warm-up: the first micro-batches are not the clock's
        data.write("ops", [{"op_id": "warm-up", "key": "k-warm-up", "ts": _iso(now), "timeout_ms": 120_000}])
        data.write("events", [{"key": "k-warm-up", "ts": _iso(now)}])
        limit = time.time() + 180
        while any("warm-up" not in output.seen for output in outputs):
            if time.time() > limit:
                raise RuntimeError("the warm-up operation was not committed in 180 s")
            time.sleep(0.1)
        first_batch = q.query.lastProgress["batchId"] + 1

        # phase 1: a steady trickle
        began = time.time()
        carry, n = 0.0, 0
        while time.time() - began < args.load_seconds:
            tick = time.time()
            now = _now_ms()
            carry += args.rate * args.file_interval
            fresh = []
            while carry >= 1:
                carry -= 1
                timeout = rng.randint(int(args.timeout_min * 1000), int(args.timeout_max * 1000))
                due = (
                    now / 1000 + rng.uniform(0.1, 0.9) * timeout / 1000
                    if rng.random() < args.complete
                    else None
                )
                fresh.append(Op(f"op-{n:06d}", now, timeout, due))
                n += 1
            if fresh:
                data.write(
                    "ops",
                    [
                        {
                            "op_id": o.op_id,
                            "key": f"k-{o.op_id}",
                            "ts": _iso(o.ts_ms),
                            "timeout_ms": o.timeout_ms,
                        }
                        for o in fresh
                    ],
                )
                ops.extend(fresh)
            _write_due(data, ops)
            time.sleep(max(0.0, args.file_interval - (time.time() - tick)))
        result.load_end = time.time()

        # phase 2: quiet (or a trickle of events); wait for every outcome, or give up past the
        # last deadline
        last = max(o.deadline_s for o in ops) + args.delay
        give_up = max(last, result.load_end) + args.give_up
        trickle = result.load_end if config_name == "trickle" else None
        while time.time() < give_up and any(len(output.seen) < len(ops) + 1 for output in outputs):
            if trickle is not None and time.time() >= trickle:
                if not _write_due(data, ops):  # a row nobody waits for: the input is not silent
                    data.write("events", [{"key": "k-trickle", "ts": _iso(_now_ms())}])
                trickle += args.trickle_gap
            time.sleep(0.05 if trickle is not None else 0.2)
        poller.halt.set()
        poller.join()
        poller.poll()
        if reader is not None:
            reader.stop()
        progress = [p for p in q.query.recentProgress if p["batchId"] >= first_batch]
        if os.environ.get("BENCH_PROGRESS"):  # each micro-batch's durations, for a closer look
            with open(f"{os.environ['BENCH_PROGRESS']}-{config_name}.json", "w", encoding="utf-8") as f:
                json.dump(progress, f, default=str)
        times = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress]
        result.batch_max_s = max(times, default=0.0)
        result.batches = len(progress)
        result.margin_s = q.clock_margin_ms / 1000
    sink_log.removeHandler(steps)
    sink_log.setLevel(level)
    result.record_ms = [ms for batch, ms in sorted(steps.record_ms.items()) if batch >= first_batch]
    result.load = (result.load[0], os.getloadavg()[0])

    result.table = _lags(ops, poller, args, result)
    result.when = [
        (_decidable(o, args), poller.seen[o.op_id], _kind(o)) for o in ops if o.op_id in poller.seen
    ]
    if reader is not None:
        result.topic = _lags(ops, reader, args, result)
        result.duplicates = reader.duplicates
        result.split = _split(ops, reader, args)
    if os.environ.get("BENCH_PROGRESS"):  # each outcome's moments, beside the micro-batches'
        with open(f"{os.environ['BENCH_PROGRESS']}-{config_name}-lags.json", "w", encoding="utf-8") as f:
            json.dump({"load_end": result.load_end, "outcomes": sorted(result.when)}, f)
    if os.path.isdir(root):
        shutil.rmtree(root, ignore_errors=True)
    return result


def _kind(op: Op) -> str:
    return "completion" if op.event_written is not None else "expiry"


def _decidable(op: Op, args) -> float:
    """When ``op``'s outcome became decidable: its event written, or deadline + delay passed."""
    return op.event_written if op.event_written is not None else op.deadline_s + args.delay


def _lags(ops: list[Op], seen_by, args, result: Result) -> Lags:
    """Each operation's lag in one output (``seen_by``: a ``Poller`` or a ``TopicReader``)."""
    out = Lags()
    for o in ops:
        kind, decidable = _kind(o), _decidable(o, args)
        phase = "load" if decidable < result.load_end else _after_load(result.config)
        key = (kind, phase)
        out.lags.setdefault(key, [])
        out.missing.setdefault(key, 0)
        row = seen_by.rows.get(o.op_id)
        if row is None:
            out.missing[key] += 1
        elif row["status"] != ("completed" if kind == "completion" else "expired"):
            out.wrong += 1
        else:
            out.lags[key].append(seen_by.seen[o.op_id] - decidable)
    return out


#: the topic's lag in parts (``_split``)
SPLIT = ("decided", "produced", "received")


def _split(ops: list[Op], reader: TopicReader, args) -> dict[str, float]:
    """The topic's lag in three parts, medians in seconds: decidable to the row's
    ``emitted_at`` (the operator's micro-batch), that to the record's ``CreateTime`` (handed
    to the producer: the send's job and set-up), that to its receipt (commit and fetch)."""
    parts: dict[str, list[float]] = {"decided": [], "produced": [], "received": []}
    for o in ops:
        row = reader.rows.get(o.op_id)
        if row is None:
            continue
        parts["decided"].append(row["emitted"] - _decidable(o, args))
        parts["produced"].append(row["created"] - row["emitted"])
        parts["received"].append(reader.seen[o.op_id] - row["created"])
    return {name: _percentile(values, 0.5) for name, values in parts.items() if values}


def _cells(lags: list[float], missing: int) -> str:
    """p50 / p99 / max and missing, in the table's columns."""
    if not lags:
        return f"{'-':>8}{'-':>8}{'-':>8}{missing:>9}"
    return f"{_percentile(lags, 0.5):>8.2f}{_percentile(lags, 0.99):>8.2f}{max(lags):>8.2f}{missing:>9}"


def _table(results: list[Result], args) -> str:
    """Each config's lags by outcome and phase: the table's, then the topic's when there is one."""
    topic = any(r.topic is not None for r in results)
    head = f"{'p50 s':>8}{'p99 s':>8}{'max s':>8}{'missing':>9}"
    lines = [f"{'config':<22}{'outcome':<12}{'phase':<7}{'rows':>6}{head}" + (f"   topic:{head}" * topic)]
    for r in results:
        label = {
            "idle": f"idle.timeout={args.idle_timeout:g}s",
            "none": "no idle timeout",
            "trickle": f"trickle every {args.trickle_gap:g}s",
        }[r.config]
        for kind in ("expiry", "completion"):
            for phase in ("load", _after_load(r.config)):
                key = (kind, phase)
                lags, missing = r.table.lags.get(key, []), r.table.missing.get(key, 0)
                line = f"{label:<22}{kind:<12}{phase:<7}{len(lags):>6}{_cells(lags, missing)}"
                if r.topic is not None:
                    line += f"{'':<9}{_cells(r.topic.lags.get(key, []), r.topic.missing.get(key, 0))}"
                lines.append(line)
        interval = max(args.trigger, r.batch_max_s)  # a trigger interval, or a micro-batch if longer
        bound = r.margin_s + interval + r.batch_max_s + args.linger_ms / 1000
        lines.append(
            f"{'':<22}{r.batches} micro-batches, the largest {r.batch_max_s:.2f} s; quiet-stream bound "
            f"margin {r.margin_s:g} s + max(trigger, batch) + batch + linger = {bound:.2f} s; "
            f"wrong status: {r.table.wrong}; load average {r.load[0]:.1f} before, {r.load[1]:.1f} after"
        )
        if r.config == "trickle":  # its next row read and applied, or its idle timeout (docstring)
            waited = min(args.trickle_gap, args.idle_timeout + interval)
            lines.append(
                f"{'':<22}trickle bound: quiet-stream bound + max(trigger, batch) + min(gap, idle "
                f"timeout + max(trigger, batch)) = {bound + interval + waited:.2f} s"
            )
        if r.topic is not None:
            split = " + ".join(f"{name} {r.split.get(name, float('nan')):.2f} s" for name in SPLIT)
            lines.append(
                f"{'':<22}topic, medians: {split}; wrong status: {r.topic.wrong}, duplicates: {r.duplicates}"
            )
            if r.record_ms:
                lines.append(
                    f"{'':<22}the sink's record step (the send and its Spark job in it): median "
                    f"{_percentile(r.record_ms, 0.5):.0f} ms, max {max(r.record_ms):.0f} ms"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser("latency", __doc__, repeat=None)
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument(
        "--output",
        choices=("delta", "kafka"),
        default="delta",
        help="kafka: an output topic too, read by a read_committed consumer",
    )
    parser.add_argument(
        "--configs", default=",".join(DEFAULT_CONFIGS), help="idle, none, trickle (comma-separated)"
    )
    parser.add_argument("--load-seconds", type=float, default=30.0, help="phase 1's length")
    parser.add_argument("--rate", type=float, default=10.0, help="operations per second in phase 1")
    parser.add_argument("--file-interval", type=float, default=0.5, help="seconds between input files")
    parser.add_argument("--complete", type=float, default=0.7, help="share of operations completed")
    parser.add_argument("--timeout-min", type=float, default=3.0, help="seconds")
    parser.add_argument("--timeout-max", type=float, default=10.0, help="seconds")
    parser.add_argument("--trigger", type=float, default=1.0, help="processing-time interval, seconds")
    parser.add_argument("--delay", type=int, default=2, help="watermark.delay, seconds")
    parser.add_argument("--idle-timeout", type=float, default=1.0, help="watermark.idle.timeout, seconds")
    parser.add_argument(
        "--trickle-gap", type=float, default=3.3, help="seconds between events files, trickle phase"
    )
    parser.add_argument("--linger-ms", type=int, default=500, help="accumulator.linger.ms")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2, help="Kafka partitions per topic")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between reads of outcomes")
    parser.add_argument(
        "--give-up",
        type=float,
        default=20.0,
        help="seconds past the last deadline + delay to wait for the quiet stream's outcomes",
    )
    parser.add_argument("--seed", type=int, default=47)
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configs {sorted(unknown)}; choose from {CONFIGS}")

    load_before = os.getloadavg()
    broker = None
    work = tempfile.mkdtemp(prefix="bench-latency-")
    spark = local_session(
        "bench-latency", master="local[2]", shuffle_partitions=PurgatoryConfig(shards=args.shards).groups
    )
    results = []
    try:
        if "kafka" in (args.source, args.output):
            from spark_purgatory.kafka_broker import KafkaBroker

            broker = KafkaBroker(data_dir=os.path.join(work, "broker")).start()
        for name in configs:
            r = run_once(spark, args, name, work, broker)
            results.append(r)
            print(f"# {name}: done, load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
        harness.stop(spark)
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"source {args.source}, output {args.output}, trigger {args.trigger:g} s, delay {args.delay} s, "
        f"linger {args.linger_ms} ms, "
        f"{args.rate:g} ops/s for {args.load_seconds:g} s "
        f"(timeouts {args.timeout_min:g}-{args.timeout_max:g} s, "
        f"{args.complete:.0%} completed), {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (1 min)"
    )
    print(
        "lag = committed to outcomes - decidable (completion: its event written; "
        "expiry: deadline + delay on the wall clock)"
        + ("; topic: received by the read_committed consumer - decidable" if args.output == "kafka" else "")
    )
    print(_table(results, args))
    harness.write_json(args.json, "latency", args, {"configs": [_figures(r) for r in results]})
    return 0


def _figures(result: Result) -> dict:
    """A config's figures as JSON: per outcome kind and phase, how many, p50 / p99 / max lag
    (``topic_``: the topic's)."""
    figures: dict = {"config": result.config, "batches": result.batches, "batch_max_s": result.batch_max_s}
    figures["load"] = list(result.load)
    outputs = [("", result.table)] + ([("topic_", result.topic)] if result.topic is not None else [])
    for prefix, out in outputs:
        for (kind, phase), lags in out.lags.items():
            figures[f"{prefix}{kind}_{phase}"] = {
                "rows": len(lags),
                "missing": out.missing.get((kind, phase), 0),
                **(
                    {"p50_s": _percentile(lags, 0.5), "p99_s": _percentile(lags, 0.99), "max_s": max(lags)}
                    if lags
                    else {}
                ),
            }
        figures[f"{prefix}wrong_status"] = out.wrong
    if result.topic is not None:
        figures["topic_duplicates"] = result.duplicates
        figures["topic_split_p50_s"] = result.split
    if result.record_ms:
        figures["record_ms_p50"] = _percentile(result.record_ms, 0.5)
    return figures
