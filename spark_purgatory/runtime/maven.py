"""The JVM sets a Kafka user needs, from Maven Central on first use, kept in the user cache.

``kafka`` and ``kafka-broker`` are declared once, in ``jvm/<set>/pom.xml``, which the wheel
carries.  ``resolve`` copies a set's JARs into ``user_cache()/jars/<set>-<key>/`` with
``mvn`` where it is installed, else with Spark's ``spark.jars.packages`` in a JVM started for
it.  A folder counts once whole (its ``.stamp`` is written last).  Where Central has no
connector for the session's patch release, the pin of its feature release is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from ..config import ConfigError

#: the sets resolved here (``make jars`` fetches every set of a checkout into ``.jars/``)
RESOLVED = ("kafka", "kafka-broker")
_PACKAGE = Path(__file__).resolve().parents[1]
#: a dependency of the poms, its elements in Maven's order
_DEPENDENCY = re.compile(
    r"<dependency>\s*" + r"\s*".join(rf"<{e}>([^<]+)</{e}>" for e in ("groupId", "artifactId", "version"))
)
_SPARK = "spark.version"


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/spark-purgatory`` (``~/.cache/spark-purgatory`` without it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "spark-purgatory"


def pom(set_name: str) -> Path:
    """The set's Maven file: the checkout's ``jvm/<set>/pom.xml``, else the wheel's copy."""
    checkout = _PACKAGE.parent / "jvm" / set_name / "pom.xml"
    return checkout if checkout.is_file() else _PACKAGE / "jars" / f"{set_name}.pom.xml"


def _pin(set_name: str) -> str | None:
    """The Spark version the set's pom pins (its ``spark.version`` property), if any."""
    found = re.search(rf"<{_SPARK}>([^<]+)</{_SPARK}>", pom(set_name).read_text())
    return found.group(1) if found else None


def coordinates(set_name: str, spark_version: str | None = None) -> list[str]:
    """What ``spark.jars.packages`` and ``--packages`` take: each dependency the set's pom
    declares, ``${spark.version}`` the given Spark's (the pom's pin without one).

    >>> coordinates("kafka", "4.2.1")
    ['org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.1']
    """
    text = pom(set_name).read_text().replace(f"${{{_SPARK}}}", spark_version or _pin(set_name) or "")
    return [":".join(found) for found in _DEPENDENCY.findall(text)]


def _folder(set_name: str, spark_version: str) -> Path:
    text = pom(set_name).read_bytes()
    follows = f"${{{_SPARK}}}".encode() in text  # the key holds the Spark version it follows
    digest = hashlib.sha256(text + (spark_version.encode() if follows else b"")).hexdigest()[:12]
    return user_cache() / "jars" / f"{set_name}-{digest}"


def resolved(set_name: str, spark_version: str) -> list[str]:
    """The set's JARs in the user cache, sorted; empty when not resolved yet (nothing runs)."""
    if set_name not in RESOLVED or not pom(set_name).is_file():
        return []
    folder = _folder(set_name, spark_version)
    return sorted(str(p) for p in folder.glob("*.jar")) if (folder / ".stamp").is_file() else []


def resolve(set_name: str, spark_version: str) -> list[str]:
    """The set's JARs for ``spark_version``, resolved into the user cache on first use;
    ``ConfigError`` naming the tool and its first error when they cannot be (offline)."""
    found = resolved(set_name, spark_version)
    if found or set_name not in RESOLVED:
        return found
    folder = _folder(set_name, spark_version)
    pin = _pin(set_name)
    same_line = pin and pin != spark_version and pin.split(".")[:2] == spark_version.split(".")[:2]
    tries = [spark_version, pin] if same_line else [spark_version]
    fetch, tool = (_with_mvn, "mvn") if shutil.which("mvn") else (_with_spark, "Spark's spark.jars.packages")
    for version in tries:  # the session's Spark, then the pin of its feature release
        scratch = folder.with_name(f".{folder.name}.{uuid.uuid4().hex[:8]}")
        scratch.mkdir(parents=True)
        said = fetch(set_name, version, scratch)
        if not said:
            (scratch / ".stamp").write_text("\n".join(coordinates(set_name, version)) + "\n")
            with contextlib.suppress(OSError):  # else another process resolved it first
                os.replace(scratch, folder)
        shutil.rmtree(scratch, ignore_errors=True)
        if not said:
            return resolved(set_name, spark_version)
    wanted = ", ".join(coordinates(set_name, spark_version))
    raise ConfigError(f"could not resolve {wanted} from Maven Central with {tool}: {said}")


def _with_mvn(set_name: str, spark_version: str, out: Path) -> str:
    """Maven's ``copy-dependencies`` of the pom for ``spark_version``; "" when done, else the
    first error line."""
    command = ["mvn", "-q", "-B", "-f", str(pom(set_name)), "dependency:copy-dependencies"]
    command += ["-DincludeScope=runtime", f"-DoutputDirectory={out}", f"-D{_SPARK}={spark_version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    errors = [line for line in done.stdout.splitlines() if line.startswith("[ERROR]")]
    return "" if done.returncode == 0 else (errors or [done.stderr.strip() or "failed"])[0]


def _with_spark(set_name: str, spark_version: str, out: Path) -> str:
    """Spark's launcher resolves the set (``spark.jars.packages``, the user's Ivy settings)
    in a JVM of its own, which names the files it got in ``spark.jars``; copied into ``out``.
    Spark leaves out ``scala-library`` (its own): a set run with plain ``java`` gets pyspark's."""
    import pyspark
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    wanted = ",".join(coordinates(set_name, spark_version))
    conf = SparkConf(loadDefaults=False).set("spark.jars.packages", wanted)
    with tempfile.TemporaryFile() as log:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        except Exception:  # noqa: BLE001 - the launcher exited: its log says why
            log.seek(0)
            lines = log.read().decode(errors="replace").splitlines()  # Ivy's error: "[unresolved ..."
            return next((line.strip() for line in lines if "Exception" in line), "the launcher failed")
        try:
            files = (gateway.jvm.java.lang.System.getProperty("spark.jars") or "").split(",")
        finally:
            gateway.shutdown()
            gateway.proc.communicate()  # stdin closed: the JVM exits
    if set_name == "kafka-broker":
        files += [str(p) for p in (Path(pyspark.__file__).parent / "jars").glob("scala-library-*.jar")]
    for file in filter(None, files):  # Ivy names them group_artifact-version.jar: Maven's name
        shutil.copy(file.removeprefix("file://"), out / Path(file).name.split("_", 1)[-1])
    return ""
