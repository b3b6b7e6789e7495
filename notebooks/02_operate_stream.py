# Databricks notebook source
# MAGIC %md
# MAGIC # spark-purgatory: operating a running stream
# MAGIC
# MAGIC Start the purgatory as a long-running query, watch its per-micro-batch figures (pending,
# MAGIC completed, expired, unmatched, rejected, watermark), see what the accumulator is holding,
# MAGIC stop it cleanly, and keep the Delta tables healthy.
# MAGIC
# MAGIC Set `trigger` to `available-now` to run the same cells as a one-shot catch-up.

# COMMAND ----------

dbutils.widgets.text("base_path", "/tmp/spark-purgatory/operate", "Base path")
dbutils.widgets.dropdown("trigger", "processing-time", ["processing-time", "available-now"], "Trigger")
dbutils.widgets.text("operations", "2000", "Operations to generate (demo input)")

# COMMAND ----------

import shutil

from spark_purgatory import PurgatoryConfig, purgatory_stream, read_stream
from spark_purgatory.delta.accumulator import RecordAccumulator
from spark_purgatory.delta.sinks import PurgatorySink, choose_writer, maintain_tables
from spark_purgatory.spark.metrics import ProgressListener, format_line, observe_purgatory
from spark_purgatory.workload import generate, write_json_lines

base = dbutils.widgets.get("base_path")
shutil.rmtree(base, ignore_errors=True)
write_json_lines(
    generate(int(dbutils.widgets.get("operations")), seed=3, ops_per_second=100),
    f"{base}/input/ops",
    f"{base}/input/events",
    files=8,
)

config = PurgatoryConfig(shards=2, watermark_delay="5 seconds", accumulator_linger_ms=20_000)
listener = ProgressListener()
spark.streams.addListener(listener)  # the same figures reach any listener via observedMetrics

ops = read_stream(spark, f"{base}/input/ops", kind="operations", max_files_per_trigger=2)
events = read_stream(spark, f"{base}/input/events", kind="events", max_files_per_trigger=2)
accumulator = RecordAccumulator(
    f"{base}/checkpoint/accumulator",
    app_id="operate",
    batch_size=config.accumulator_batch_size,
    linger_ms=config.accumulator_linger_ms,
    buffer_memory=config.accumulator_buffer_memory,
)
sink = PurgatorySink(accumulator, choose_writer(spark, f"{base}/tables"))
writer = (
    observe_purgatory(purgatory_stream(ops, events, config))
    .writeStream.foreachBatch(sink)
    .option("checkpointLocation", f"{base}/checkpoint")
    .queryName("purgatory")
)
if dbutils.widgets.get("trigger") == "available-now":
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
else:
    query = writer.trigger(processingTime="2 seconds").start()
    query.processAllAvailable()  # wait until the input present now is processed

# COMMAND ----------

# MAGIC %md
# MAGIC ## Progress: one line per micro-batch

# COMMAND ----------

import pandas as pd  # noqa: E402

for figures in listener.history:
    print(format_line(figures))
display(pd.DataFrame(listener.history))

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the accumulator is holding (rows waiting for batch.size or linger.ms)

# COMMAND ----------

staged = [
    {"table": d.table, "partition": d.partition, "rows": d.rows, "bytes": d.nbytes}
    for d in accumulator.destinations()
]
print(staged or "nothing staged")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Stop cleanly, flush, and keep the tables healthy
# MAGIC Stopping the query is safe at any time (the checkpoint and the staged rows survive); `close()`
# MAGIC commits what is still lingering.  Compaction and a log checkpoint keep reads fast.

# COMMAND ----------

query.stop()
flushed = sink.close()
print("flushed:", [(c["table"], c["rows"]) for c in flushed])
print(maintain_tables(f"{base}/tables"))
spark.streams.removeListener(listener)
