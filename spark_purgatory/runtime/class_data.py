"""A class-data archive for the local driver's JVM: Spark's classes mapped, not loaded.

A local JVM spends most of its first seconds loading Spark's classes, the same ones on every
start.  HotSpot's class-data sharing dumps them into an archive
(``-XX:ArchiveClassesAtExit``) that later JVMs map (``-XX:SharedArchiveFile``).

One archive per class path, ``spark-<hash>.jsa`` in ``$XDG_CACHE_HOME/spark-purgatory/class-data``
(``~/.cache/...`` without it), beside the record of what it was made for.
``SPARK_PURGATORY_CLASS_DATA`` names another folder, ``off`` for none, or ``use`` to make none.

It is made on first use (one dump at a time per class path) or by ``make class-data``.  A
dump counts once its JVM has exited and the file has HotSpot's magic; HotSpot refuses an
archive whose JVM or class path changed.  Clusters, Databricks and your own
``spark.driver.extraJavaOptions`` never use one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import jars
from .maven import user_cache
from .processes import alive

#: HotSpot's own warnings about an archive it cannot use (a JVM or JAR that changed since)
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: the environment variable naming the archives' folder, or ``off``
SWITCH = "SPARK_PURGATORY_CLASS_DATA"
#: the first bytes of a dynamic archive HotSpot wrote to the end (its header: magic 0xf00baba8)
_MAGIC = bytes.fromhex("a8ab0bf0")
#: a dump whose session never said which JVM writes it is given up after this long
_UNCLAIMED_S = 3600


def archive_dir() -> Path | None:
    """The archives' folder; None when ``SPARK_PURGATORY_CLASS_DATA=off``."""
    given = os.environ.get(SWITCH, "").strip()
    if given.lower() in ("off", "0", "false", "no"):
        return None
    if given and given.lower() not in ("on", "use"):
        return Path(given)
    return user_cache() / "class-data"


def archive_path(classpath: list[str] | None = None) -> Path | None:
    """The archive for ``classpath`` (the JARs a local session puts before Spark's; by default
    ``runtime.jars.spark_jars()``); None when archives are off."""
    folder = archive_dir()
    if folder is None:
        return None
    if classpath is None:
        classpath = jars.spark_jars()
    digest = hashlib.sha256("\n".join(classpath).encode()).hexdigest()[:16]
    return folder / f"spark-{digest}.jsa"


def _record(archive: Path) -> Path:
    return archive.with_suffix(".json")


def _read(record: Path) -> dict | None:
    try:
        return json.loads(record.read_text())
    except (OSError, ValueError):
        return None


def _write(record: Path, content: dict) -> None:
    """``content`` into ``record``, whole or not at all (written beside it, then renamed)."""
    partial = record.with_name(f"{record.name}.{uuid.uuid4().hex}.partial")
    partial.write_text(json.dumps(content))
    os.replace(partial, record)


def _java() -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    if os.environ.get("JAVA_HOME"):
        return os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    return shutil.which("java")


def _stat(path: str | None) -> list[int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return None if st is None else [st.st_size, st.st_mtime_ns]


def _key(classpath: list[str]) -> dict:
    """What an archive is valid for: the JARs before Spark's (each as its size and time: a JAR
    rebuilt at the same path is another JAR to the JVM), this pyspark, this ``java``."""
    import pyspark

    java = _java()
    real = os.path.realpath(java) if java else None
    return {
        "classpath": classpath,
        "jars": [_stat(j) for j in classpath],
        "pyspark": pyspark.__version__,
        "java": [real, _stat(real)],
    }


def _settle(archive: Path) -> bool:
    """Put a finished dump for ``archive`` in place, drop the failed ones; True while another
    session's dump is still to come (its JVM runs, or its session is starting)."""
    pending = False
    for record in sorted(archive.parent.glob(f"{archive.stem}.*.json")):
        dump = record.with_suffix(".dump")
        claimed = _read(record) or {}
        pid = claimed.get("jvm")
        if pid is None and time.time() - claimed.get("created", 0) < _UNCLAIMED_S:
            pending = True  # a session starting its JVM now
            continue
        if pid is not None and alive(pid):
            pending = True  # its JVM will dump when it exits
            continue
        try:
            with open(dump, "rb") as made:
                finished = made.read(len(_MAGIC)) == _MAGIC
            if finished and "key" in claimed:
                _record(archive).unlink(missing_ok=True)  # never a record beside another archive
                os.replace(dump, archive)
                _write(_record(archive), claimed["key"])
                _prune(archive)
        except OSError:  # no dump (a JVM killed, or another session took it): nothing to use
            pass
        dump.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
    return pending


def _prune(made: Path) -> None:
    """Beside the archive just ``made``, drop those no session can map again: their class path
    names a JAR that is gone (a deleted checkout or venv; about 200 MB each)."""
    for record in made.parent.glob("spark-*.json"):
        if "." in record.stem or record == _record(made):  # a dump's claim, or the one just made
            continue
        classpath = (_read(record) or {}).get("classpath")
        if isinstance(classpath, list) and not all(os.path.exists(jar) for jar in classpath):
            record.with_suffix(".jsa").unlink(missing_ok=True)
            record.unlink(missing_ok=True)


def java_options(base: str, classpath: list[str]) -> str:
    """``base`` plus the archive's options when there is an archive made for ``classpath``
    before Spark's own JARs (``spark.driver.extraClassPath``), these JARs, pyspark and
    ``java``; ``base`` alone otherwise.

    >>> java_options("-XX:TieredStopAtLevel=1", ["/no/such.jar"])
    '-XX:TieredStopAtLevel=1'
    """
    return session_options(base, classpath, first_use=False)[0]


@dataclass(frozen=True)
class FirstUse:
    """A dump the session's JVM makes at exit (``session_options``): ``started`` records which
    JVM, for a later session to put the dump in place once it has exited."""

    record: Path

    def started(self, spark: Any) -> None:
        """Record the JVM of ``spark`` (started by this process with the dump's option);
        without one (a JVM that was already running), forget the dump."""
        proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
        try:
            if proc is None:
                self.record.unlink(missing_ok=True)
                return
            claimed = _read(self.record) or {}
            _write(self.record, {**claimed, "jvm": proc.pid})  # Spark's launcher execs java
        except OSError:  # an archive only saves time
            pass


def session_options(
    base: str, classpath: list[str], *, first_use: bool = True
) -> tuple[str, FirstUse | None]:
    """The driver's Java options for a new local JVM with ``classpath`` before Spark's: ``base``
    and the archive's, or (``first_use``, no archive for this class path, none being dumped)
    ``base`` and the option that dumps one at exit, with the ``FirstUse`` to tell when the JVM
    started.  Never fails: without a usable cache folder the options are ``base``."""
    archive = archive_path(classpath)
    if archive is None or any(c.isspace() for c in str(archive)):  # Spark splits the options at spaces
        return base, None
    try:
        pending = _settle(archive) if archive.parent.is_dir() else False
        key = _key(classpath)
        if archive.is_file() and _read(_record(archive)) == key:
            return f"{base} -XX:SharedArchiveFile={archive} {QUIET}", None
        if not first_use or pending or os.environ.get(SWITCH, "").strip().lower() == "use":
            return base, None
        archive.parent.mkdir(parents=True, exist_ok=True)
        record = archive.with_name(f"{archive.stem}.{uuid.uuid4().hex[:12]}.json")
        _write(record, {"key": key, "created": time.time()})
    except OSError:
        return base, None
    return f"{base} -XX:ArchiveClassesAtExit={record.with_suffix('.dump')} {QUIET}", FirstUse(record)


def make_archive(archive: Path | None = None) -> Path:
    """Run a small stream in a child JVM that dumps its classes at exit into ``archive`` (by
    default the one for ``spark_jars()``), moved into place once whole."""
    import subprocess

    archive = archive or archive_path()
    if archive is None:
        raise RuntimeError(f"{SWITCH}=off")
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
    _write(_record(archive), _key(jars.spark_jars()))  # the child's class path: the same
    _prune(archive)
    return archive


def up_to_date(archive: Path | None = None) -> bool:
    """Is there an archive made for this class path, pyspark and ``java``?"""
    archive = archive or archive_path()
    return archive is not None and archive.is_file() and _read(_record(archive)) == _key(jars.spark_jars())
