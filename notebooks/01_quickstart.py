# Databricks notebook source
# MAGIC %md
# MAGIC # spark-purgatory: quickstart
# MAGIC
# MAGIC Kafka's delayed-operation purgatory on Structured Streaming.  This notebook generates a small
# MAGIC broker workload (produce requests waiting for replica acks, fetches waiting for min.bytes, group
# MAGIC joins, high-watermark waits), runs the purgatory over it into three Delta tables, and shows the
# MAGIC outcomes and two plots.
# MAGIC
# MAGIC ## Before you run it: the platform's rules
# MAGIC * **Install from a wheel.** `spark-purgatory` is not on PyPI: build the wheel with
# MAGIC   `make dist` in the repository (it carries the project's JARs), upload it to a Unity
# MAGIC   Catalog volume (`databricks fs cp dist/spark_purgatory-0.3.0.dev0-py3-none-any.whl
# MAGIC   dbfs:/Volumes/main/default/spark_purgatory/wheels/`) and put its path, or the folder
# MAGIC   that holds it (the newest `spark_purgatory-*.whl` there is taken), in the `wheel` widget;
# MAGIC   the next cells `%pip install` it into this notebook and restart Python.  (Or attach the
# MAGIC   wheel as a cluster library / in the serverless environment panel and leave the `%pip`
# MAGIC   cell out.  The bundle in `deploy/databricks/` runs this notebook as a job with the wheel
# MAGIC   it built.)
# MAGIC * **Serverless and standard access mode: Spark Connect.** There no JAR of the project
# MAGIC   reaches the driver: `start()` checks and routes the input with SQL and hands each
# MAGIC   micro-batch to its sink through `foreachBatch`.  The same tables, at some cost in time
# MAGIC   (`docs/deployment.md`, "Spark Connect"); a dedicated cluster with the JARs as libraries
# MAGIC   runs the JVM parts.
# MAGIC * **Paths on a volume.** Everything this notebook writes (input, Delta tables, checkpoint)
# MAGIC   lives under `base_path`, by default on the volume `/Volumes/main/default/spark_purgatory`
# MAGIC   (create it, or point the widget at one you can write).  A `/Volumes/...` path is the same
# MAGIC   path on both sides: a local path for Python on the driver (the input files are written
# MAGIC   with plain file I/O) and a path Spark reads and writes.  Do not use `/tmp/...` or a
# MAGIC   scheme-less `/...` path: Python on the driver writes the driver's local disk there, while
# MAGIC   Spark resolves the same string on DBFS, so the query would never see the input.
# MAGIC * **Delta writer.** On Databricks the tables are written by Spark's own Delta writer (chosen
# MAGIC   automatically); elsewhere by delta-rs.

# COMMAND ----------

import glob
import os

dbutils.widgets.text(
    "wheel", "/Volumes/main/default/spark_purgatory/wheels/spark_purgatory-0.3.0.dev0-py3-none-any.whl",
    "Wheel",
)
dbutils.widgets.text("operations", "3000", "Operations to generate")
dbutils.widgets.text("base_path", "/Volumes/main/default/spark_purgatory/quickstart", "Base path (a volume)")
dbutils.widgets.dropdown("shards", "2", ["1", "2", "4", "8", "16"], "Shards")
wheel = dbutils.widgets.get("wheel")
if os.path.isdir(wheel):  # a folder of wheels (the bundle's synced dist/): the newest
    found = sorted(glob.glob(f"{wheel}/spark_purgatory-*.whl"), key=os.path.getmtime)
    if not found:
        raise FileNotFoundError(f"no spark_purgatory-*.whl in {wheel}: build it with make dist")
    wheel = found[-1]

# COMMAND ----------

# MAGIC %pip install $wheel

# COMMAND ----------

dbutils.library.restartPython()  # the freshly installed package is importable from here on

# COMMAND ----------

import os

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.runtime.session import delta_classes_available
from spark_purgatory.workload import generate, write_json_lines

n_ops = int(dbutils.widgets.get("operations"))
base = dbutils.widgets.get("base_path")
if "DATABRICKS_RUNTIME_VERSION" in os.environ and not base.startswith("/Volumes/"):
    raise ValueError(f"base_path must be a Unity Catalog volume path (/Volumes/...), got {base!r}")
dbutils.fs.rm(base, True)  # a fresh run: input, tables and checkpoint
work = generate(n_ops, seed=7, ops_per_second=max(50.0, n_ops / 60))
write_json_lines(work, f"{base}/input/ops", f"{base}/input/events", files=12, malformed=6)
print(f"{len(work.operations):,} operations and {len(work.events):,} events written under {base}/input")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Run the purgatory
# MAGIC One stateful operator over both streams; each micro-batch is split into `outcomes`,
# MAGIC `unmatched_events` and `rejected`, staged in the RecordAccumulator and committed to Delta.
# MAGIC `start` wires all of it; leaving the `with` block stops the query and flushes what is staged.

# COMMAND ----------

config = PurgatoryConfig.from_mapping(
    {
        "purgatory.shards": dbutils.widgets.get("shards"),
        "watermark.delay": "5 seconds",
        "accumulator.batch.size": 8 * 1024 * 1024,
        "accumulator.linger.ms": 30_000,
        "source.max.files.per.trigger": 3,
    }
)
tables = f"{base}/tables"
with start(
    f"{base}/input/ops",
    f"{base}/input/events",
    output=tables,
    checkpoint=f"{base}/checkpoint",
    config=config,
    trigger="available-now",
    spark=spark,
) as purgatory:
    purgatory.await_termination()
print(f"writer: {type(purgatory.writer).__name__}; batches: {len(purgatory.history)}")

# COMMAND ----------


def read_table(name):
    """A Delta table as a Spark DataFrame, natively when Delta is on the classpath."""
    path = os.path.join(tables, name)
    if delta_classes_available(spark):
        return spark.read.format("delta").load(path)
    import spark_purgatory  # delta-rs through pyarrow's own filesystem: the kernel exits cleanly

    return spark.createDataFrame(spark_purgatory.read_table(path).to_pandas())


outcomes = read_table("outcomes")
display(outcomes.groupBy("condition", "status").count().orderBy("condition", "status"))

# COMMAND ----------

display(outcomes.orderBy("resolved_at").limit(20))

# COMMAND ----------

display(read_table("rejected"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Latency and outcomes over time

# COMMAND ----------

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

frame = outcomes.select("condition", "status", "latency_ms", "resolved_at").toPandas()
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
for condition, group in frame[frame.status == "completed"].groupby("condition"):
    left.hist(group.latency_ms / 1000, bins=40, histtype="step", linewidth=1.5, label=condition)
left.set(title="completion latency (s)", xlabel="seconds of event time")
left.legend()
per_second = frame.assign(second=frame.resolved_at.dt.floor("s")).groupby(["second", "status"]).size()
per_second.unstack(fill_value=0).plot(ax=right, drawstyle="steps-post", title="outcomes per second")
fig.tight_layout()
display(fig)
