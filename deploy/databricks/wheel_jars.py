"""The project's JARs out of the wheel ``make dist`` built, for the bundle's ``jar`` libraries.

    python3 deploy/databricks/wheel_jars.py DIST OUT

The wheel carries the project's own JARs as package data (``spark_purgatory/jars/*.jar``: the
checks and routes as JVM functions, the sink, the checkpoint file manager; an installed
package names them with ``spark-purgatory jars``).  A cluster library is a file of its own, so
the bundle's build (``databricks.yml``, ``artifacts``) takes them out of the one wheel in
``DIST`` into ``OUT``, replacing what an earlier deploy left there: the JARs and the Python
code the job runs then come from one build.  Standard library only: it runs before any
environment exists.  Exit status 1, with one line, when ``DIST`` holds no wheel or several, or
the wheel carries no JAR.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path, PurePosixPath

#: where the wheel keeps the project's JARs (spark_purgatory/runtime/jars.py, PACKAGE_JARS)
JARS_IN_WHEEL = PurePosixPath("spark_purgatory/jars")


def extract_jars(dist: Path, out: Path) -> list[Path]:
    """The JARs of the one ``spark_purgatory`` wheel in ``dist``, written to ``out`` (its
    earlier ``*.jar`` removed first); their paths.

    Raises:
        ValueError: ``dist`` holds no such wheel or several, or the wheel carries no JAR.
    """
    wheels = sorted(dist.glob("spark_purgatory-*.whl"))
    if len(wheels) != 1:
        found = ", ".join(w.name for w in wheels) or "none"
        raise ValueError(f"{dist} must hold one spark_purgatory wheel (make dist), found {found}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        members = [m for m in wheel.namelist() if PurePosixPath(m).parent == JARS_IN_WHEEL]
        members = [m for m in members if m.endswith(".jar")]
        if not members:
            raise ValueError(f"{wheels[0].name} carries no JAR under {JARS_IN_WHEEL}/ (built without mvn?)")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.jar"):
            old.unlink()
        written = []
        for member in sorted(members):
            target = out / PurePosixPath(member).name
            target.write_bytes(wheel.read(member))
            written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    try:
        written = extract_jars(Path(argv[0]), Path(argv[1]))
    except (ValueError, OSError, zipfile.BadZipFile) as error:
        print(f"wheel_jars: {error}", file=sys.stderr)
        return 1
    print("\n".join(str(path) for path in written))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
