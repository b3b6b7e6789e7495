"""A class-data archive for the local driver's JVM: Spark's classes mapped, not loaded.

A local session's JVM spends most of its first seconds loading and verifying Spark's classes
(about 20,000 of them before a stream's first micro-batch), the same ones on every start.
HotSpot's class-data sharing (AppCDS, JDK 13+) dumps the classes a run loaded into an
archive (``-XX:ArchiveClassesAtExit``) that later JVMs map at start
(``-XX:SharedArchiveFile``), so a session and its first jobs start sooner (docs/development.md,
"Tests").

``make class-data`` (run by ``make test``) writes the archive, ``.jars/class-data/spark.jsa``,
by running a small stream of the project's (JSON files in, Delta out through delta-rs) and
Spark's Delta writer's calls in a JVM that dumps at exit: ``python -m spark_purgatory.spark.class_data``.
``local_session`` adds it to the driver's options (``java_options``) when it was made for the
same class path: the archive records the JARs it was dumped with, and HotSpot refuses it when
the JVM, a JAR or the class path's order changed (the JVM's complaint is silenced: it starts
as it would without).  Nothing else uses it: clusters, Databricks and your own
``spark.driver.extraJavaOptions`` start their JVMs as they always do.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .jars import jars_root

__all__ = ["archive_path", "java_options", "make_archive", "up_to_date"]

#: HotSpot's own warnings about an archive it cannot use (a JVM or JAR that changed since)
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path() -> Path:
    """Where ``make class-data`` keeps the archive: ``<jars_root>/class-data/spark.jsa``."""
    return jars_root() / "class-data" / "spark.jsa"


def _record(archive: Path) -> Path:
    return archive.with_suffix(".classpath.json")


def _recorded(archive: Path) -> dict | None:
    """What the archive was made for (``_key``), or None without a usable archive."""
    try:
        recorded = json.loads(_record(archive).read_text())
    except (OSError, ValueError):
        return None
    return recorded if archive.is_file() else None


def _key(classpath: list[str]) -> dict:
    """What an archive is valid for: the JARs before Spark's, this pyspark, this ``java``."""
    import subprocess

    import pyspark

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.strip()
    return {"classpath": classpath, "pyspark": pyspark.__version__, "java": version}


def java_options(base: str, classpath: list[str]) -> str:
    """``base`` plus the archive's options when an archive was dumped with ``classpath``
    before Spark's own JARs (``spark.driver.extraClassPath``); ``base`` alone otherwise.

    >>> java_options("-XX:TieredStopAtLevel=1", ["/no/such.jar"])
    '-XX:TieredStopAtLevel=1'
    """
    archive = archive_path()
    recorded = _recorded(archive)
    if recorded is None or recorded.get("classpath") != classpath:
        return base
    return f"{base} -XX:SharedArchiveFile={archive} {_QUIET}"


def make_archive(archive: Path | None = None) -> Path:
    """Run a small stream in a JVM that dumps its classes at exit into ``archive``.

    The JVM must exit normally for the dump: the stream runs in a child process whose session
    is stopped before Python exits.  The archive is written beside its final name and moved
    into place with the record of its class path, so a half-written one is never used.
    """
    import subprocess

    from .jars import spark_jars

    archive = archive or archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "spark_purgatory.spark.class_data", "--dump", str(partial)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or not partial.is_file():
        raise RuntimeError(f"no class-data archive ({done.returncode}): {done.stderr[-2000:]}")
    _record(archive).unlink(missing_ok=True)
    os.replace(partial, archive)
    _record(archive).write_text(json.dumps(_key(spark_jars())))  # the child's class path: the same
    return archive


def up_to_date(archive: Path | None = None) -> bool:
    """Is there an archive made for this class path, pyspark and ``java``?"""
    from .jars import spark_jars

    recorded = _recorded(archive or archive_path())
    return recorded is not None and recorded == _key(spark_jars())


def _dump(into: str) -> None:
    """The child: a session dumping at exit, a stream through delta-rs, Spark's Delta writer's
    own calls when Delta is there (a table made, staged Parquet appended with ``txnAppId``
    twice, the table read back), a clean stop.

    Spark's Delta writer is exercised by its calls, not by a second stream: the stream's
    classes are the same, and a second stream only made the dump longer
    (docs/performance-history.md, "The class-data dump")."""
    from ..query import start
    from ..workload import generate, write_json_lines
    from .jars import spark_jars
    from .session import C1_ONLY, local_session

    extras = spark_jars()
    spark = local_session(
        "spark-purgatory-class-data",
        master="local[2]",
        conf={"spark.driver.extraJavaOptions": f"{C1_ONLY} -XX:ArchiveClassesAtExit={into} {_QUIET}"},
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

    from ..contract import TABLES
    from ..delta.writers import SparkDeltaWriter

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


if __name__ == "__main__":  # python -m spark_purgatory.spark.class_data [--dump FILE]
    if sys.argv[1:2] == ["--dump"]:
        _dump(sys.argv[2])
    else:
        sys.exit(main())
