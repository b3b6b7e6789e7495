"""The job against Spark's stream-stream join, both reading the same Kafka topics, writing Delta.

What a Kafka user would run instead of this project: Spark's stream-stream left-outer join
with a time-range condition, its input parsed from the topics' JSON with ``from_json`` and its
output written with Spark's own Delta sink (``writeStream.format("delta")``, the ``delta`` JARs
of ``make jars``).  Against it, the job (``--source-format kafka``: operator, RecordAccumulator,
Delta tables through delta-rs).  Both read two topics of ``--partitions`` partitions on a
broker on loopback (``spark_purgatory.kafka_broker``) holding ``generate_confirmations``'
orders and confirmations (one event per completed order, the shape the join expresses too),
from the earliest offsets, ``maxOffsetsPerTrigger`` records per topic and micro-batch, with
``availableNow``; each from an empty checkpoint, alternated ``--repeat`` times (every other
round in the reverse order).  Printed per run: wall time, rows/s, micro-batches, the median and
largest micro-batch time (Spark's ``triggerExecution``), and the completed orders (which must
agree: the exit status is 1 when they do not); then the join's time over the job's, round by
round.

    python -m benchmarks kafka --ops 200000 --repeat 2
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

from pyspark.sql import functions as F

from benchmarks import harness
from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.job import JobSettings, run
from spark_purgatory.kafka_broker import KafkaBroker
from spark_purgatory.runtime.session import local_session
from spark_purgatory.spark.formats import EVENTS_PARQUET_SCHEMA, OPERATIONS_PARQUET_SCHEMA
from spark_purgatory.workload import _json_lines, generate_confirmations

TIMEOUT_MS = 30_000


def _batch_times(progress: list) -> list[int]:
    """Each micro-batch's ``triggerExecution`` ms, those that read input."""
    return [int(p["durationMs"].get("triggerExecution", 0)) for p in progress if p["numInputRows"]]


def _line(name: str, seconds: float, rows: int, times: list[int], completed: int) -> str:
    median = statistics.median(times) / 1000 if times else float("nan")
    return (
        f"{name:<34}{seconds:>8.1f} s {rows / seconds:>10,.0f} rows/s {len(times):>4} batches "
        f"median {median:>5.1f} s max {max(times, default=0) / 1000:>5.1f} s {completed:>9,} completed"
    )


def run_join(spark, servers: str, topics: dict, options: dict, root: str, config: PurgatoryConfig) -> tuple:
    """Spark's own answer, as a user writes it: from_json, the join, Spark's Delta sink."""
    frames = []
    for kind, schema in (("ops", OPERATIONS_PARQUET_SCHEMA), ("events", EVENTS_PARQUET_SCHEMA)):
        raw = spark.readStream.format("kafka").options(**options).option("subscribe", topics[kind]).load()
        frames.append(raw.select(F.from_json(F.col("value").cast("string"), schema).alias("j")).select("j.*"))
    ops = frames[0].select("op_id", F.col("keys")[0].alias("okey"), F.col("ts").alias("ots"))
    evs = frames[1].select(F.col("key").alias("ekey"), F.col("ts").alias("ets"))
    joined = ops.withWatermark("ots", config.watermark_delay).join(
        evs.withWatermark("ets", config.watermark_delay),
        F.expr(f"okey = ekey AND ets >= ots AND ets < ots + INTERVAL {TIMEOUT_MS} MILLISECONDS"),
        "leftOuter",
    )
    out = f"{root}/join-out"
    started = time.perf_counter()
    query = (
        joined.writeStream.format("delta")
        .option("checkpointLocation", f"{root}/join-chk")
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    completed = (
        spark.read.format("delta").load(out).where("ekey IS NOT NULL").select("op_id").distinct().count()
    )
    return seconds, _batch_times(query.recentProgress), completed


def run_job(spark, servers: str, topics: dict, options: dict, root: str, config: PurgatoryConfig) -> tuple:
    """The job as users run it on topics: operator, RecordAccumulator, Delta tables (delta-rs)."""
    from deltalake import DeltaTable

    from spark_purgatory.spark.metrics import ProgressListener

    listener = ProgressListener()
    spark.streams.addListener(listener)
    settings = JobSettings(
        ops_path=topics["ops"],
        events_path=topics["events"],
        output_path=f"{root}/job-out",
        checkpoint_path=f"{root}/job-chk",
        config=config,
        source_format="kafka",
        writer="delta-rs",
        master="local[2]",
        kafka_options=options,
    )
    started = time.perf_counter()
    run(settings)
    seconds = time.perf_counter() - started
    spark.streams.removeListener(listener)
    times = [h["duration_ms"] for h in listener.history if h["input_rows"]]
    outcomes = DeltaTable(f"{root}/job-out/outcomes").to_pandas(columns=["op_id", "status"])
    return seconds, times, int((outcomes["status"] == "completed").sum())


LABELS = {"join": "stream-stream join -> Delta", "job": "job (operator + Delta)"}


def main(argv: list[str] | None = None) -> int:
    parser = harness.parser("kafka", __doc__)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args(argv)
    config = PurgatoryConfig(shards=args.shards, watermark_delay="10 seconds", max_timeout_ms=60_000)
    work = generate_confirmations(args.ops, timeout_ms=TIMEOUT_MS)
    rows = len(work.operations) + len(work.events)
    root = tempfile.mkdtemp(prefix="bench-kafka-")
    rounds = harness.Rounds(["join", "job"], args.repeat)
    contenders = {"join": run_join, "job": run_job}
    with KafkaBroker() as broker:
        topics = {}
        for kind, frame in (("ops", work.operations), ("events", work.events)):
            topics[kind] = broker.create_topic(f"bench-{kind}", partitions=args.partitions)
            lines = _json_lines(frame)
            broker.produce(topics[kind], lines, partitions=[i % args.partitions for i in range(len(lines))])
        print(
            f"{len(work.operations):,} orders + {len(work.events):,} confirmations in two topics of "
            f"{args.partitions} partitions, maxOffsetsPerTrigger {args.max_offsets_per_trigger:,}"
        )
        options = {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger),
        }
        spark = local_session(
            "bench-kafka", master="local[2]", shuffle_partitions=PurgatoryConfig(shards=args.shards).groups
        )
        spark.sparkContext.setLogLevel("ERROR")
        for _round, name in rounds:
            for d in ("join-out", "join-chk", "job-out", "job-chk"):
                shutil.rmtree(f"{root}/{d}", ignore_errors=True)
            seconds, times, completed = contenders[name](
                spark, broker.bootstrap_servers, topics, options, root, config
            )
            print(_line(LABELS[name], seconds, rows, times, completed), flush=True)
            rounds.add(name, {"seconds": seconds, "batches": times, "completed": completed})
        harness.stop(spark)
    shutil.rmtree(root, ignore_errors=True)
    ratios = rounds.ratios("join", "job", "seconds")
    print(harness.ratio_line("join / job, wall time", ratios))
    agree = len({run["completed"] for runs in rounds.runs.values() for run in runs}) == 1
    print("completed orders: " + ("the same from every run" if agree else "DIFFER between runs"))
    harness.write_json(args.json, "kafka", args, {"join_vs_job": ratios, **rounds.json()})
    return 0 if agree else 1
