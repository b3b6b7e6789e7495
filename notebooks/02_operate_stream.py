# Databricks notebook source
# MAGIC %md
# MAGIC # spark-purgatory: operating a running stream
# MAGIC
# MAGIC Start the purgatory as a long-running query, watch its per-micro-batch figures (pending,
# MAGIC completed, expired, unmatched, rejected, watermark), see what the accumulator is holding,
# MAGIC stop it cleanly, and keep the Delta tables healthy.
# MAGIC
# MAGIC Set `trigger` to `available-now` to run the same cells as a one-shot catch-up.
# MAGIC
# MAGIC Platform rules (see the quickstart): the package comes from the wheel in the `wheel`
# MAGIC widget, and `base_path` is a Unity Catalog volume (`/Volumes/...`), the one kind of path
# MAGIC that Python on the driver (which writes the demo input) and Spark (which reads it, keeps
# MAGIC the checkpoint and writes the tables) both see the same.

# COMMAND ----------

dbutils.widgets.text(
    "wheel", "/Volumes/main/default/spark_purgatory/wheels/spark_purgatory-0.3.0.dev0-py3-none-any.whl",
    "Wheel",
)
dbutils.widgets.text("base_path", "/Volumes/main/default/spark_purgatory/operate", "Base path (a volume)")
dbutils.widgets.dropdown("trigger", "processing-time", ["processing-time", "available-now"], "Trigger")
dbutils.widgets.text("operations", "2000", "Operations to generate (demo input)")
wheel = dbutils.widgets.get("wheel")

# COMMAND ----------

# MAGIC %pip install $wheel

# COMMAND ----------

dbutils.library.restartPython()  # the freshly installed package is importable from here on

# COMMAND ----------

import os

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.delta.writers import maintain_tables
from spark_purgatory.spark.metrics import format_line
from spark_purgatory.workload import generate, write_json_lines

base = dbutils.widgets.get("base_path")
if "DATABRICKS_RUNTIME_VERSION" in os.environ and not base.startswith("/Volumes/"):
    raise ValueError(f"base_path must be a Unity Catalog volume path (/Volumes/...), got {base!r}")
dbutils.fs.rm(base, True)  # a fresh run: input, tables and checkpoint
write_json_lines(
    generate(int(dbutils.widgets.get("operations")), seed=3, ops_per_second=100),
    f"{base}/input/ops",
    f"{base}/input/events",
    files=8,
)

config = PurgatoryConfig(
    shards=2, watermark_delay="5 seconds", accumulator_linger_ms=20_000, source_max_files_per_trigger=2
)
one_shot = dbutils.widgets.get("trigger") == "available-now"
purgatory = start(
    f"{base}/input/ops",
    f"{base}/input/events",
    output=f"{base}/tables",
    checkpoint=f"{base}/checkpoint",
    config=config,
    trigger="available-now" if one_shot else "processing-time=2s",
    name="purgatory",
    spark=spark,
)
if one_shot:
    purgatory.await_termination()
else:
    purgatory.process_all_available()  # wait until the input present now is processed

# COMMAND ----------

# MAGIC %md
# MAGIC ## Progress: one line per micro-batch

# COMMAND ----------

import pandas as pd  # noqa: E402

history = purgatory.history  # from the query's progress: any StreamingQueryListener sees the same
for figures in history:
    print(format_line(figures))
display(pd.DataFrame(history))

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the accumulator is holding (rows waiting for batch.size or linger.ms)

# COMMAND ----------

staged = [
    {"table": d.table, "partition": d.partition, "rows": d.rows, "bytes": d.nbytes}
    for d in purgatory.accumulator.destinations()
]
print(staged or "nothing staged")

# COMMAND ----------

# MAGIC %md
# MAGIC ## At risk: what expires next, and how far each operation is from its condition
# MAGIC Read beside the running query from its checkpoint (the last committed micro-batch; each row
# MAGIC says which): the pending operations whose deadline is within the horizon of the watermark,
# MAGIC earliest first, with their progress ("2 of 3 sources", "1 of 3 members, missing a, c").
# MAGIC `explain` tells one operation's whole story (pending, outcome, rejections, its events that
# MAGIC matched nothing).  The same answers from a terminal: `spark-purgatory at-risk --within 1h
# MAGIC --checkpoint ...` (see docs/operating.md).

# COMMAND ----------

from spark_purgatory import at_risk, explain  # noqa: E402

risky = at_risk(f"{base}/checkpoint", within="1h", config=config, spark=spark)
display(risky.select("op_id", "condition", "deadline", "time_left_ms", "progress_text", "payload").limit(20))
first = risky.select("op_id").first()
if first is not None:
    tables, checkpoint = f"{base}/tables", f"{base}/checkpoint"
    for story in explain([first.op_id], output=tables, checkpoint=checkpoint, config=config, spark=spark):
        print(story.summary())

# COMMAND ----------

# MAGIC %md
# MAGIC ## Stop cleanly, flush, and keep the tables healthy
# MAGIC Stopping the query is safe at any time (the checkpoint and the staged rows survive); `stop()`
# MAGIC also commits what is still lingering (Kafka's `close()`).  Compaction and a log checkpoint keep
# MAGIC reads fast.

# COMMAND ----------

flushed = purgatory.stop()
print("flushed:", [(c["table"], c["rows"]) for c in flushed])
print(maintain_tables(f"{base}/tables"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## How it ran: the `metrics` table
# MAGIC One row per micro-batch and shard, committed exactly once beside the other tables (a
# MAGIC replayed micro-batch adds nothing): pending, input and outcome counts, latency percentiles,
# MAGIC the global watermark and each input's.  It outlives the driver, so chart it and put SQL
# MAGIC alerts on it (more queries in `docs/metrics.md`).

# COMMAND ----------

import matplotlib.pyplot as plt  # noqa: E402

from spark_purgatory.charts import metrics_by_batch  # noqa: E402

batches = metrics_by_batch(f"{base}/tables")  # one row per micro-batch (gauges: each shard's last)
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
left.plot(batches["batch_id"], batches["pending"], drawstyle="steps-post", label="pending")
for name in ("completed", "expired", "rejected"):
    left.plot(batches["batch_id"], batches[name], drawstyle="steps-post", label=f"{name} per batch")
left.set(title="Pending and outcomes", xlabel="micro-batch", ylabel="operations")
left.legend()
for name in ("operations", "events"):
    lag = batches[f"{name}_watermark"] - batches["watermark"]
    right.plot(batches["batch_id"], lag.dt.total_seconds(), drawstyle="steps-post", label=name)
right.set(title="Each input's watermark ahead of the global one", xlabel="micro-batch", ylabel="seconds")
right.legend()
display(fig)

# COMMAND ----------

# MAGIC %md
# MAGIC ### A SQL alert
# MAGIC A Databricks SQL alert runs a query on a schedule and fires on its result: here, rejected
# MAGIC input in the last hour (alert when > 0) and the worst input's watermark lag behind
# MAGIC processing time (a silent input holds expiries back; alert when > 600 s).  Point it at
# MAGIC ``delta.`<output>/metrics` `` (or a table registered over it).

# COMMAND ----------

from spark_purgatory import read_table  # noqa: E402
from spark_purgatory.runtime.session import delta_classes_available  # noqa: E402

metrics_table = f"delta.`{base}/tables/metrics`"
if not delta_classes_available(spark):  # a session without Delta: the same rows, read with delta-rs
    spark.createDataFrame(read_table(f"{base}/tables/metrics").to_pandas()).createOrReplaceTempView("metrics")
    metrics_table = "metrics"
alert = spark.sql(
    f"""
    SELECT coalesce(sum(rejected), 0) AS rejected_last_hour,
           max(greatest(timestampdiff(SECOND, operations_watermark, batch_time),
                        timestampdiff(SECOND, events_watermark, batch_time))) AS worst_input_lag_s
    FROM {metrics_table}
    WHERE metrics_date >= date_sub(current_date(), 1)
      AND batch_time > current_timestamp() - INTERVAL 1 HOUR
    """
)
display(alert)
