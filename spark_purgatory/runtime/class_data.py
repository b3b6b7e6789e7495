"""A class-data archive for the local driver's JVM: Spark's classes mapped, not loaded.

A local session's JVM spends most of its first seconds loading and verifying Spark's classes
(about 20,000 of them before a stream's first micro-batch), the same ones on every start.
HotSpot's class-data sharing (AppCDS, JDK 13+) dumps the classes a run loaded into an
archive (``-XX:ArchiveClassesAtExit``) that later JVMs map at start
(``-XX:SharedArchiveFile``), so a session and its first jobs start sooner (docs/development.md,
"Tests").

``make class-data`` (run by ``make test``) writes the archive through the command
``python -m spark_purgatory.class_data_dump``, ``.jars/class-data/spark.jsa``,
which runs a small stream of the project's (JSON files in, Delta out through delta-rs) and
Spark's Delta writer's calls in a JVM that dumps at exit.
``local_session`` adds it to the driver's options (``java_options``) when it was made for the
same class path: the archive records the JARs it was dumped with, and HotSpot refuses it when
the JVM, a JAR or the class path's order changed (the JVM's complaint is silenced: it starts
as it would without).  Nothing else uses it: clusters, Databricks and your own
``spark.driver.extraJavaOptions`` start their JVMs as they always do.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .jars import jars_root

__all__ = ["QUIET", "archive_path", "java_options", "make_archive", "up_to_date"]

#: HotSpot's own warnings about an archive it cannot use (a JVM or JAR that changed since)
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


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
    """What an archive is valid for: the JARs before Spark's (each as its size and time: a JAR
    rebuilt at the same path, as ``make checks-jar`` does, is another JAR to the JVM, which
    then does not map the archive), this pyspark, this ``java``."""
    import subprocess

    import pyspark

    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.strip()
    stats = [[(st := os.stat(j)).st_size, st.st_mtime_ns] if os.path.exists(j) else None for j in classpath]
    return {"classpath": classpath, "jars": stats, "pyspark": pyspark.__version__, "java": version}


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
    return f"{base} -XX:SharedArchiveFile={archive} {QUIET}"


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
        [sys.executable, "-m", "spark_purgatory.class_data_dump", "--dump", str(partial)],
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
