"""Runs the operator through a Spark Connect session (a separate process: a Python process
can hold a classic session or a remote one, not both, and the test suite holds a classic one).

    python tests/support/connect_client.py sc://127.0.0.1:PORT ROOT
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pyspark.sql import SparkSession  # noqa: E402

from spark_purgatory import PurgatoryConfig, read_stream, start  # noqa: E402


def main(url: str, root: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        config = PurgatoryConfig(shards=2, watermark_delay="2 seconds", source_max_files_per_trigger=1)
        events = read_stream(spark, f"{root}/events", kind="events", max_files_per_trigger=1)
        # one input a path, one a stream; the sink is pickled and run in the server's Python
        for attempt in range(1, 6):
            try:
                with start(
                    f"{root}/ops", events, output=f"{root}/out", checkpoint=f"{root}/chk", config=config
                ) as q:
                    q.await_termination()
                break
            except Exception as exc:
                # the server gives the Python process that runs foreachBatch 10 s (hard-coded in
                # Spark's PythonWorkerFactory) to start and connect back; on 2 cores shared by the
                # whole test suite its imports can take longer, and the query never starts (one
                # retry was not enough in 1 of 3 clean-clone runs: the load lasts minutes)
                if attempt == 5 or "waiting for the Python worker to connect back" not in str(exc):
                    raise
                print("the server's foreachBatch worker did not connect back in 10 s: again", file=sys.stderr)
                time.sleep(5)  # the load that delayed it may pass
        print(json.dumps({"session": type(spark).__module__, "writer": type(q.writer).__name__}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
