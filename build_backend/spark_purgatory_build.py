"""The PEP 517 build backend of spark-purgatory: setuptools', with the project's JARs built first.

The wheel is the product, and its JVM half is three JARs (``jvm/spark-purgatory``: the checks
and routes as Spark SQL functions, the sink's small rows, the checkpoint file manager) that
``spark_purgatory/runtime/jars.py`` looks for in the package's own ``jars/`` folder.  Before
setuptools builds a wheel or an sdist, ``jvm/package.sh --spark VERSION`` builds them there
with Maven (compiled and unit-tested; skipped when the folder's manifest says they were built
from these sources for that Spark), so both carry them as package data:

* the Spark is the one the release is tested with: the ``pyspark[...]==X`` pin of the ``dev``
  extra in ``pyproject.toml``; ``SPARK_PURGATORY_SPARK_VERSION`` builds for another (a
  cluster's Spark, from the sdist);
* an sdist holds the JVM sources and the JARs built from them, so a wheel built from it needs
  no Maven (the manifest's hash matches) unless the Spark version asked for differs;
* an editable install (``make setup``) builds no JARs: ``make checks-jar`` does, into the same
  folder, and a checkout without ``mvn`` still installs;
* beside them go the poms of the Kafka sets (``jvm/kafka``, ``jvm/kafka-broker``: one place
  for their coordinates), copied as ``<set>.pom.xml``: a wheel's library resolves them from
  Maven Central on first use (``spark_purgatory/runtime/maven.py``).

Used through ``[build-system] backend-path`` (an in-tree backend): ``pip wheel .``,
``uv build`` and ``python -m build`` all run it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook is setuptools' own

try:  # the build backend: backend-path puts this folder on sys.path
    from spark_pin import PYPROJECT, pinned_spark
except ModuleNotFoundError:  # imported from a checkout as build_backend.spark_purgatory_build (tests)
    from build_backend.spark_pin import PYPROJECT, pinned_spark

#: the JVM sets whose poms the package carries (``runtime.maven.RESOLVED``)
RESOLVED = ("kafka", "kafka-broker")


def _build_jars() -> None:
    done = subprocess.run(["bash", "jvm/package.sh", "--spark", pinned_spark()], stdout=sys.stderr)
    if done.returncode != 0:
        raise RuntimeError("the project's JARs were not built (jvm/package.sh says why, above)")
    root = PYPROJECT.parent
    for name in RESOLVED:  # an unpacked sdist has no jvm/<set>/: its package holds the copies
        pom = root / "jvm" / name / "pom.xml"
        if pom.is_file():
            shutil.copyfile(pom, root / "spark_purgatory" / "jars" / f"{name}.pom.xml")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: F811
    _build_jars()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):  # noqa: F811
    _build_jars()
    return _setuptools.build_sdist(sdist_directory, config_settings)
