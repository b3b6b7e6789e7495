"""The JVM extras: JAR sets the project declares in ``jvm/<set>/pom.xml`` and ``make jars`` fetches.

Each set is a pinned Maven file; ``make jars`` (run by ``make test`` and ``make demo``) copies
its JARs and their runtime dependencies into ``.jars/<set>/`` with ``mvn
dependency:copy-dependencies``.  The sets:

* ``delta``: Delta Lake's Spark connector (``io.delta:delta-spark_2.13``), for the native
  ``format("delta")`` writer and Delta's SQL extension and catalog;
* ``s3a``: ``org.apache.hadoop:hadoop-aws`` at the Hadoop inside the pyspark wheel, with the
  AWS SDK v2 bundle, for ``s3a://`` paths in Spark itself (checkpoints, ``spark.read``);
* ``kafka``: Spark's Kafka source and sink (``org.apache.spark:spark-sql-kafka-0-10_2.13``);
* ``kafka-broker``: an Apache Kafka broker (``org.apache.kafka:kafka_2.13``) the tests and the
  demo start on loopback with plain ``java``; never on Spark's classpath;
* ``checks``: not fetched, the project's own JARs, built by ``mvn package`` from the Maven
  module ``jvm/spark-purgatory`` (``jvm/package.sh``, ``make checks-jar``): a typed
  operation's checks in one JVM function (``spark.checks``) and the checkpoint file manager
  of local sessions (``runtime.settings.checkpoint_files``).

Where a set is looked for: ``$SPARK_PURGATORY_JARS/<set>`` when that variable is set (a
deployment that keeps its JARs elsewhere), else ``.jars/<set>`` of the source checkout the
package runs from.  A set that is not there is an empty list, never an error: the embedded
default (delta-rs) needs no JVM JARs.

``spark_jars()`` is what a local session puts on Spark's classpath: the ``SPARK_SETS`` found,
less the JARs the pyspark wheel already ships under another version (Delta's pom pulls in
Hadoop, Parquet, Jackson, Scala and logging JARs that Spark has; two versions of one
library on a classpath is a bug waiting for a class that moved).

>>> jar_paths("no-such-set")
[]
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

__all__ = ["SETS", "SPARK_SETS", "jar_paths", "jars_root", "spark_jars", "DELTA_COORDINATES"]

#: every set ``make jars`` fetches (one ``jvm/<set>/pom.xml`` each)
SETS = ("delta", "s3a", "kafka", "kafka-broker")
#: the sets a local session puts on Spark's classpath when they are there (``checks`` is
#: compiled, not fetched: ``SETS`` are the Maven ones)
SPARK_SETS = ("delta", "s3a", "kafka", "checks")
#: Delta's connector for the pyspark the project is tested with (``jvm/delta/pom.xml``): what
#: a cluster adds with ``--packages`` or a cluster library
DELTA_COORDINATES = "io.delta:delta-spark_2.13:4.4.0"

#: ``artifact-1.2.3[-classifier].jar`` -> ``artifact``: the version is the first ``-`` part
#: that starts with a digit and has a dot (``spark-sql-kafka-0-10_2.13-4.2.0.jar``)
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d+\.\d[^/]*\.jar$")


def jars_root() -> Path:
    """Where the sets live: ``$SPARK_PURGATORY_JARS``, else the checkout's ``.jars``."""
    given = os.environ.get("SPARK_PURGATORY_JARS")
    if given:
        return Path(given)
    return Path(__file__).resolve().parents[2] / ".jars"


def jar_paths(set_name: str) -> list[str]:
    """The JAR files of one set, sorted; empty when the set was not fetched.

    Args:
        set_name: one of ``SETS`` (``"delta"``, ``"s3a"``, ``"kafka"``, ``"kafka-broker"``).

    A set counts only once ``make jars`` finished copying it (its ``.stamp`` is there), so
    an interrupted fetch never puts half a set on a classpath.
    """
    folder = jars_root() / set_name
    if not (folder / ".stamp").is_file():
        return []
    return sorted(str(p) for p in folder.glob("*.jar"))


def _artifact(file_name: str) -> str:
    match = _VERSIONED.match(file_name)
    return match.group("artifact") if match else file_name


@lru_cache(maxsize=1)
def _shipped_by_pyspark() -> frozenset[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return frozenset(_artifact(p.name) for p in jars.glob("*.jar"))


def spark_jars(sets: tuple[str, ...] = SPARK_SETS) -> list[str]:
    """The JARs of ``sets`` that are there, less those pyspark ships itself (by artifact)."""
    shipped = _shipped_by_pyspark()
    return [p for name in sets for p in jar_paths(name) if _artifact(Path(p).name) not in shipped]
