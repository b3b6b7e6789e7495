"""The JVM extras: JAR sets the project declares in ``jvm/<set>/pom.xml`` and ``make jars`` fetches.

Each set's JARs and runtime dependencies go into ``.jars/<set>/``: ``delta``, ``s3a``,
``kafka`` (Spark's Kafka source and sink), ``kafka-broker`` (never on Spark's classpath).
Without a checkout the Kafka sets are resolved into the user cache (``runtime.maven``).
``checks`` is the project's own JARs (``jar_files``).

The project's JARs call Spark's internal APIs, stable within a feature release only: JARs
built for another ``major.minor`` than the running pyspark's are left out (``fits``), and the
library then reads its inputs with SQL.  A missing set is an empty list, never an error.

>>> jar_paths("no-such-set")
[]
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

from . import maven

#: the sets a local session puts on Spark's classpath when they are there
SPARK_SETS = ("delta", "s3a", "kafka", "checks")
#: Delta's connector for the pyspark the project is tested with (``jvm/delta/pom.xml``): what
#: a cluster adds with ``--packages`` or a cluster library
DELTA_COORDINATES = "io.delta:delta-spark_2.13:4.4.0"

#: ``artifact-1.2.3[-classifier].jar`` -> ``artifact``: the version is the first ``-`` part
#: that starts with a digit and has a dot (``spark-sql-kafka-0-10_2.13-4.2.0.jar``)
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d+\.\d[^/]*\.jar$")


#: the package's own folder of the project's JARs (``jar_files``)
PACKAGE_JARS = Path(__file__).resolve().parents[1] / "jars"
#: the build's record beside the JARs, written last: ``{"jars": [names], "spark": version, ...}``
MANIFEST = "manifest.json"


def _manifest() -> dict:
    """What the build of the project's JARs recorded; empty when there was none."""
    try:
        return json.loads((PACKAGE_JARS / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def jar_files() -> list[str]:
    """The project's own JARs, as absolute paths: what a cluster or ``spark-submit`` adds for
    the JVM half of spark-purgatory.

    They come with the wheel; in a checkout, ``make checks-jar`` builds them.  Empty when
    there are none: the library then reads its inputs with SQL, the same rows with more
    planning per micro-batch.  ``spark_purgatory.session`` uses them by itself; this is for
    the sessions the library does not start (``spark-purgatory jars`` prints the same).

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


def jar_paths(set_name: str, *, resolve: bool = False) -> list[str]:
    """The JAR files of one set, sorted; empty when the set was not fetched.

    Args:
        set_name: ``"delta"``, ``"s3a"``, ``"kafka"``, ``"kafka-broker"``, or ``"checks"``: the
            project's own (``jar_files``).
        resolve: a Kafka set not there is resolved now (``maven.resolve``: ``ConfigError``
            when it cannot be).

    A set counts once ``make jars`` finished copying it (its ``.stamp``), or a Kafka set once
    resolved into the user cache for this pyspark."""
    import pyspark

    if set_name == "checks":
        return sorted(jar_files()) if fits(pyspark.__version__) else []
    folder = jars_root() / set_name
    if not (folder / ".stamp").is_file():
        return (maven.resolve if resolve else maven.resolved)(set_name, pyspark.__version__)
    return sorted(str(p) for p in folder.glob("*.jar"))


def kafka_jars() -> list[str]:
    """Spark's Kafka source for this pyspark and its dependencies, less what pyspark ships:
    paths for ``spark.jars`` or ``--jars`` (``spark-purgatory jars --kafka`` prints them),
    resolved from Maven Central on first use, then from the user cache."""
    jar_paths("kafka", resolve=True)
    return spark_jars(("kafka",))


def _artifact(file_name: str) -> str:
    match = _VERSIONED.match(file_name)
    return match.group("artifact") if match else file_name


@lru_cache(maxsize=1)
def _shipped_by_pyspark() -> frozenset[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return frozenset(_artifact(p.name) for p in jars.glob("*.jar"))


def spark_jars(sets: tuple[str, ...] = SPARK_SETS) -> list[str]:
    """The JARs of ``sets`` that are there, less those pyspark ships itself (by artifact): two
    versions of one library on a classpath is a bug waiting for a class that moved."""
    shipped = _shipped_by_pyspark()
    return [p for name in sets for p in jar_paths(name) if _artifact(Path(p).name) not in shipped]
