"""Spark's Python workers: make sure they run an interpreter that has the project.

Spark starts its workers with ``PYSPARK_PYTHON``, else ``python3`` from the ``PATH``: a script
run as ``.venv/bin/python example.py`` gets workers without pyarrow, and the first micro-batch
fails deep inside a plan dump.  On a cluster the executors' interpreter is the cluster's.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import threading
from typing import Any

from ..config import ConfigError
from .settings import is_connect

log = logging.getLogger(__name__)

_CONF = "spark.pyspark.python"
_ENV = "PYSPARK_PYTHON"
_NEEDED = ("spark_purgatory", "pyarrow", "pandas")


def use_project_python(spark: Any) -> str | None:
    """The interpreter Spark's Python workers will run, checked (None on Spark Connect).

    Raises:
        ConfigError: the workers' interpreter cannot import the project, pyarrow or pandas.
    """
    sc = _context(spark)
    if sc is None or not hasattr(sc, "pythonExec"):
        return None
    local = str(sc.master).startswith("local")
    conf = spark.conf.get(_CONF, None)
    if local and conf and sc.pythonExec != conf:
        log.info("Python workers: %s from %s (was %s)", conf, _CONF, sc.pythonExec)
        sc.pythonExec = conf
    elif local and not conf and _ENV not in os.environ and not _same(sc.pythonExec, sys.executable):
        log.info("Python workers: %s, the driver's interpreter (was %s)", sys.executable, sc.pythonExec)
        sc.pythonExec = sys.executable
    if local and not _same(sc.pythonExec, sys.executable):
        missing = _missing(sc.pythonExec, os.environ.get("PYTHONPATH", ""))
        if missing:
            source = _CONF if conf else _ENV if _ENV in os.environ else "the default"
            raise ConfigError(
                f"Spark's Python workers would run {sc.pythonExec} ({source}), which cannot import "
                f"{missing}: set {_CONF} (or {_ENV}) to {sys.executable}, the interpreter running this "
                "driver, or install spark-purgatory into that interpreter"
            )
    return sc.pythonExec


def _context(spark: Any) -> Any:
    """The session's SparkContext; None on Spark Connect, which has none in this process."""
    return None if is_connect(spark) else getattr(spark, "sparkContext", None)


def _same(a: str, b: str) -> bool:
    """Do the two commands name one interpreter?  (A venv's python is a symlink: compare the
    paths as given first, since the venv is told by the link's own location.)"""
    found = shutil.which(a) or a
    return os.path.abspath(found) == os.path.abspath(b)


@functools.lru_cache(maxsize=8)
def _missing(python: str, pythonpath: str) -> str | None:
    """The first of ``_NEEDED`` that ``python`` cannot find (found, not imported: importing is slow)."""
    probe = (
        "import importlib.util,sys;"
        "print(next((m for m in sys.argv[1:] if not importlib.util.find_spec(m)),''))"
    )
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        done = subprocess.run(
            [python, "-c", probe, *_NEEDED], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "anything (it does not run)"
    if done.returncode != 0:
        return "anything (it does not run)"
    return done.stdout.strip() or None


def advise_unix_sockets(spark: Any) -> bool:
    """True when the session's Python workers talk to the JVM over TCP (Spark's default), where
    each task waits on delayed acknowledgements; the first time in a process, say at INFO what
    to set (the context's setting: it can only be named, not changed).  False on Spark Connect."""
    sc = _context(spark)
    if sc is None or not hasattr(sc, "_conf"):
        return False
    from .session import UNIX_SOCKETS

    # one key read: ``getConf`` copies every setting
    if str(sc._conf.get(UNIX_SOCKETS, "false")).lower() == "true":
        return False
    if not _ADVISED.is_set():
        _ADVISED.set()
        log.info(
            "the Python workers talk to the JVM over TCP: each task of the shard step waits "
            "~100 ms on delayed acknowledgements; build the session with %s=true (Spark 4.1+)",
            UNIX_SOCKETS,
        )
    return True


_ADVISED = threading.Event()


def warm_python_workers(spark: Any, modules: tuple[str, ...] = ()) -> threading.Thread | None:
    """Start, in the background, the Python workers the first micro-batch will use, each
    having imported ``modules``.

    Spark reuses its workers, so a tiny job that imports the operator's modules while ``start``
    builds the query hands the first micro-batch warm workers.  Local masters only; any failure
    is the first micro-batch's to report, never this.
    """
    sc = _context(spark)
    if sc is None or not str(sc.master).startswith("local"):
        return None
    slots = max(int(sc.defaultParallelism), 1)

    def warm() -> None:
        try:
            imported = functools.partial(_import_modules, modules)
            spark.range(slots, numPartitions=slots).mapInPandas(imported, "id long").count()
        except Exception:  # noqa: BLE001 - the query's own micro-batch reports real problems
            log.debug("warming the Python workers failed", exc_info=True)

    thread = threading.Thread(target=warm, name="purgatory-warm-workers", daemon=True)
    thread.start()
    return thread


def _import_modules(modules: tuple[str, ...], batches):  # runs in a Python worker
    import importlib

    import pyspark.testing.utils  # noqa: F401 - PySpark's GroupState.update imports it on first use

    for name in modules:
        importlib.import_module(name)
    yield from batches
