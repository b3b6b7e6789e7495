"""``make class-data``: dump the class-data archive of the local driver's JVM.

A command, not a module the package depends on: it runs a small stream through ``start`` in a
JVM that dumps the classes it loaded at exit.  ``python -m spark_purgatory.class_data_dump``
(re)makes the archive unless it is up to date; ``--dump FILE`` is the child process that dumps.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from .runtime.class_data import QUIET, make_archive, up_to_date


def _dump(into: str) -> None:
    """The child: a session dumping at exit, a stream through delta-rs, Spark's Delta writer's
    own calls when Delta is there (not a second stream: the stream's classes are the same),
    a clean stop."""
    from .query import start
    from .runtime.jars import spark_jars
    from .runtime.session import C1_ONLY, local_session
    from .workload import generate, write_json_lines

    extras = spark_jars()
    spark = local_session(
        "spark-purgatory-class-data",
        master="local[2]",
        conf={"spark.driver.extraJavaOptions": f"{C1_ONLY} -XX:ArchiveClassesAtExit={into} {QUIET}"},
    )
    base = tempfile.mkdtemp(prefix="purgatory-class-data-")
    try:
        write_json_lines(generate(200, seed=1, ops_per_second=100), f"{base}/ops", f"{base}/events", files=2)
        with start(
            f"{base}/ops",
            f"{base}/events",
            output=f"{base}/tables",
            checkpoint=f"{base}/checkpoint",
            writer="delta-rs",
            spark=spark,
            end_of_input=True,
        ) as purgatory:
            purgatory.await_termination()
        if any("delta-spark" in Path(p).name for p in extras):
            _spark_delta_calls(spark, f"{base}/spark")
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


def _spark_delta_calls(spark, root: str) -> None:
    """What a job on Spark's Delta writer does to a table: append staged Parquet files with
    ``(txnAppId, txnVersion)`` (the first append creates the table, the second replays the log
    to check the version), read it back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .contract import TABLES
    from .delta.writers import SparkDeltaWriter

    writer = SparkDeltaWriter(spark, root)
    schema = TABLES["rejected"].schema
    given = {
        "source": ["operations"] * 2,
        "raw": ["{", "["],
        "reason": ["malformed_json"] * 2,
        "batch_id": [0, 0],
    }
    rows = pa.table({f.name: given.get(f.name, pa.nulls(2, f.type)) for f in schema}).cast(schema)
    os.makedirs(root, exist_ok=True)
    staged = f"{root}/staged.parquet"
    pq.write_table(rows, staged)
    for version in (0, 1):
        writer.commit_staged(
            "rejected", [staged], app_id="class-data", version=version, target_file_size=1 << 20
        )
    spark.read.format("delta").load(writer.path("rejected")).count()


def main() -> int:
    """``make class-data``: (re)make the archive unless it is up to date; never fails the make."""
    import time

    if up_to_date():
        return 0
    started = time.monotonic()
    try:
        made = make_archive()
    except Exception as exc:  # noqa: BLE001 - an archive only saves time: say why, go on
        print(f"make class-data: no class-data archive, JVMs start without one ({str(exc).splitlines()[0]})")
        return 0
    size = made.stat().st_size >> 20
    print(f"make class-data: {made} ({size} MB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":  # python -m spark_purgatory.class_data_dump [--dump FILE]
    if sys.argv[1:2] == ["--dump"]:
        _dump(sys.argv[2])
    else:
        sys.exit(main())
