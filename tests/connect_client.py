"""Runs the operator through a Spark Connect session (a separate process: a Python process
can hold a classic session or a remote one, not both, and the test suite holds a classic one).

    python tests/connect_client.py sc://127.0.0.1:PORT ROOT
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyspark.sql import SparkSession  # noqa: E402

from spark_purgatory import PurgatoryConfig, purgatory_stream, read_stream  # noqa: E402
from spark_purgatory.delta.accumulator import RecordAccumulator  # noqa: E402
from spark_purgatory.delta.sinks import PurgatorySink, choose_writer  # noqa: E402


def main(url: str, root: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        config = PurgatoryConfig(shards=2, watermark_delay="2 seconds")
        out = purgatory_stream(
            read_stream(spark, f"{root}/ops", kind="operations", max_files_per_trigger=1),
            read_stream(spark, f"{root}/events", kind="events", max_files_per_trigger=1),
            config,
        )
        writer = choose_writer(spark, f"{root}/out")
        acc = RecordAccumulator(
            f"{root}/chk/acc", app_id="connect", batch_size=1 << 20, linger_ms=60_000, buffer_memory=1 << 28
        )
        sink = PurgatorySink(acc, writer)  # pickled and run in the server's Python process
        query = (
            out.writeStream.foreachBatch(sink)
            .option("checkpointLocation", f"{root}/chk")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        sink.close()
        print(json.dumps({"session": type(spark).__module__, "writer": type(writer).__name__}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
