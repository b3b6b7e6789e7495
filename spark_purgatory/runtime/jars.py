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
* ``checks``: not fetched, the project's own JARs (``jar_files``), built by ``mvn package``
  from the Maven module ``jvm/spark-purgatory`` (``jvm/package.sh``): a typed operation's
  checks in one JVM function (``spark.checks``), the checkpoint file manager of local sessions
  (``runtime.settings.checkpoint_files``) and the sink's small rows (``runtime.small_rows``).

The project's own JARs live in one place, the package's ``jars/`` folder (``PACKAGE_JARS``):
the wheel carries them there as package data (``make dist`` builds them with Maven against
the Spark the wheel is for), and in a checkout ``make checks-jar`` builds them into the same
folder, so an installed wheel and an editable checkout find them the same way.  Beside them,
``manifest.json`` (written last: a folder without it holds no usable JAR) names the JARs and
the Spark they were compiled against (``built_for``).  They call Spark's internal APIs
(Catalyst's expressions, the streaming sink's interfaces), which hold within a feature release
(4.2.x), not across: JARs built for another ``major.minor`` than the running pyspark's are
left out (``fits``), the library then reading its inputs with SQL, and ``spark_notice`` is the
one line said at start when the versions differ at all.

Where a fetched set is looked for: ``$SPARK_PURGATORY_JARS/<set>`` when that variable is set
(a deployment that keeps its JARs elsewhere), else ``.jars/<set>`` of the source checkout the
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

import json
import os
import re
from functools import lru_cache
from pathlib import Path

__all__ = [
    "SETS",
    "SPARK_SETS",
    "PACKAGE_JARS",
    "jar_files",
    "built_for",
    "fits",
    "spark_notice",
    "jars_hint",
    "jar_paths",
    "jars_root",
    "spark_jars",
    "DELTA_COORDINATES",
]

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


#: the package's own folder of the project's JARs (module docstring): package data of the wheel
PACKAGE_JARS = Path(__file__).resolve().parents[1] / "jars"
#: the build's record beside the JARs: ``{"jars": [names], "spark": version, "sources": hash}``
MANIFEST = "manifest.json"


def _manifest() -> dict:
    """What the build of the project's JARs recorded; empty when there was none."""
    try:
        return json.loads((PACKAGE_JARS / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def jar_files() -> list[str]:
    """The project's own JARs, as absolute paths: what a cluster or ``spark-submit`` adds for
    the JVM half of spark-purgatory (the checks and routes as Spark SQL functions, the sink's
    small rows, the checkpoint file manager).

    They come with the wheel (package data, built against the Spark of the pyspark the
    release is tested with); in a checkout, ``make checks-jar`` builds them.  Empty when there
    are none (a checkout without ``mvn``): the library then reads its inputs with SQL, the
    same rows with more planning per micro-batch.  A local session
    (``spark_purgatory.session``) and ``start`` on a plain ``SparkSession.builder`` session
    use them by themselves; this is for the sessions the library does not start.  The
    command ``spark-purgatory jars`` prints the same paths.

    Example::

        import spark_purgatory
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder
                 .config("spark.jars", ",".join(spark_purgatory.jar_files()))
                 .getOrCreate())

    >>> all(path.endswith(".jar") for path in jar_files())
    True
    """
    names = _manifest().get("jars", [])
    return [str(PACKAGE_JARS / name) for name in names if (PACKAGE_JARS / name).is_file()]


def built_for() -> str | None:
    """The Spark version the project's JARs were compiled against (their manifest's), or None
    without JARs."""
    return _manifest().get("spark") if jar_files() else None


def _feature_release(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def fits(spark_version: str) -> bool:
    """Do the project's JARs run on ``spark_version``: built for the same feature release
    (``4.2.0`` fits ``4.2.1``, not ``4.1.1``)?  False without JARs.

    >>> fits("0.0.0")
    False
    """
    built = built_for()
    return built is not None and _feature_release(built) == _feature_release(spark_version)


def spark_notice(spark_version: str) -> str | None:
    """The line to say at start when the session's Spark is not the one the JARs were built
    for (None when it is, or without JARs): used within the feature release, left out across."""
    built = built_for()
    if built is None or built == spark_version:
        return None
    said = f"spark-purgatory's JARs were built for Spark {built}, this session runs Spark {spark_version}"
    if fits(spark_version):
        line = ".".join(_feature_release(built))
        return f"{said}: they are used (the Spark APIs they call hold within Spark {line}.x)"
    return (
        f"{said}: spark-purgatory leaves them out (the Spark APIs they call change between feature "
        f"releases) and reads its inputs as SQL (the same rows, more planning per micro-batch); "
        f"build them for this Spark from the sdist: SPARK_PURGATORY_SPARK_VERSION={spark_version} "
        "pip wheel spark_purgatory-<version>.tar.gz (needs mvn)"
    )


def jars_hint() -> str:
    """What a user can do when the project's JARs are not in a session (for one log line)."""
    if jar_files():
        return (
            "add them to the session: spark.jars or spark-submit --jars with the paths "
            "`spark-purgatory jars` prints (spark_purgatory.jar_files())"
        )
    if (PACKAGE_JARS.parents[1] / "jvm" / "package.sh").is_file():  # a checkout
        return "build them with `make checks-jar` in the checkout (it needs mvn and javac)"
    return f"this installation has none in {PACKAGE_JARS}: reinstall spark-purgatory from its wheel"


def jars_root() -> Path:
    """Where the sets live: ``$SPARK_PURGATORY_JARS``, else the checkout's ``.jars``."""
    given = os.environ.get("SPARK_PURGATORY_JARS")
    if given:
        return Path(given)
    return Path(__file__).resolve().parents[2] / ".jars"


def jar_paths(set_name: str) -> list[str]:
    """The JAR files of one set, sorted; empty when the set was not fetched.

    Args:
        set_name: one of ``SETS`` (``"delta"``, ``"s3a"``, ``"kafka"``, ``"kafka-broker"``),
            or ``"checks"``: the project's own (``jar_files``).

    A set counts only once ``make jars`` finished copying it (its ``.stamp`` is there), so
    an interrupted fetch never puts half a set on a classpath.
    """
    if set_name == "checks":  # left out where they do not fit this pyspark (module docstring)
        import pyspark

        return sorted(jar_files()) if fits(pyspark.__version__) else []
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
