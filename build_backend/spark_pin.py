"""The Spark the project's JARs are built for, read from ``pyproject.toml`` without setuptools.

The build backend (``spark_purgatory_build``) builds the wheel's JARs for it, and ``make
checks-jar`` runs this file with any Python 3.11 (``python3 build_backend/spark_pin.py``) to
build the checkout's JARs for it while the venv is still being installed: the venv's pyspark is
this pin, which ``make test``'s extras install.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the build requirements install tomli
    import tomli as tomllib

#: the project's metadata, beside this file's folder
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
#: the dev extra's pyspark pin: ``pyspark==4.2.0`` or ``pyspark[connect]==4.2.0``
_PIN = re.compile(r"^pyspark(\[[^\]]*\])?==(?P<version>[0-9][^;\s]*)")


def pinned_spark(pyproject: Path = PYPROJECT) -> str:
    """The Spark the JARs are built for: ``$SPARK_PURGATORY_SPARK_VERSION``, else the pyspark
    pin of ``pyproject.toml``'s ``dev`` extra (the release's tests run on it)."""
    given = os.environ.get("SPARK_PURGATORY_SPARK_VERSION")
    if given:
        return given
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for requirement in extras["dev"]:
        match = _PIN.match(requirement.replace(" ", ""))
        if match:
            return match.group("version")
    raise RuntimeError("pyproject.toml's dev extra pins no pyspark==VERSION: which Spark are the JARs for?")


if __name__ == "__main__":
    print(pinned_spark())
