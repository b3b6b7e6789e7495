"""Spark's Python workers: make sure they run an interpreter that has the project.

The operator runs inside Spark's Python workers, which Spark starts with its own choice of
interpreter: ``PYSPARK_PYTHON`` when the driver process started with it, else ``python3``
from the ``PATH``.  A script run as ``.venv/bin/python example.py`` without activating the
virtual environment thus gets workers on the system's ``python3``, without pyarrow, and the
first micro-batch fails after a minute with ``ModuleNotFoundError`` inside a plan dump.  A
``spark.pyspark.python`` set on a plain ``SparkSession.builder`` does not help either: PySpark
reads only the environment variable when it creates the context.

``use_project_python`` (called by ``start``, so by the job too) therefore, on a classic
session:

* on a local master, honours ``spark.pyspark.python`` when the session sets it and the
  context ignored it, and with neither set gives the workers the driver's interpreter
  (``sys.executable``), which has the project since it imported it;
* checks that the interpreter it ends with imports ``spark_purgatory``, ``pyarrow`` and
  ``pandas`` (on a local master, where the workers' interpreter is this machine's; once per
  interpreter per process), and otherwise stops with a one-line ``ConfigError`` naming the
  settings and the interpreter to use.

``end_python_workers`` (called by the job before it exits) ends the local Python workers'
daemon, so that the context's stop at the JVM's exit prints no worker's traceback.

On a cluster the executors' interpreter is the cluster's business (it is set when the
cluster starts); Spark Connect has no context here.  Nothing is changed there.

``advise_unix_sockets`` (called by ``start``) logs, once per process, when the context talks
to its Python workers over TCP (``spark.python.unix.domain.socket.enabled`` unset or false,
Spark 4.1+): each Python task then waits on delayed acknowledgements
(``runtime.session``); the setting is the context's, so it can only be named, not changed.
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

__all__ = ["use_project_python", "warm_python_workers", "advise_unix_sockets", "end_python_workers"]

log = logging.getLogger(__name__)

_CONF = "spark.pyspark.python"
_ENV = "PYSPARK_PYTHON"
_NEEDED = ("spark_purgatory", "pyarrow", "pandas")


def use_project_python(spark: Any) -> str | None:
    """The interpreter Spark's Python workers will run (None where this cannot be told: Spark
    Connect); fixed or checked as the module docstring says.

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
    """True when the session's Python workers talk to the JVM over TCP (Spark's default); the
    first time in a process, say at INFO what to set (module docstring).  False on Spark
    Connect, whose workers are the server's."""
    sc = _context(spark)
    if sc is None or not hasattr(sc, "_conf"):
        return False
    from .session import UNIX_SOCKETS

    # the context's own settings, one key read (``getConf`` copies every setting, two round
    # trips each)
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
    having imported ``modules`` (the caller's: the shard step's, for ``start``).

    A new local session has no Python worker yet: the first micro-batch forks one per task
    slot, and each imports pandas, pyarrow and the operator's modules after Spark has
    planned the batch (docs/performance-history.md, "The Python workers' start").  Spark
    reuses its workers (``spark.python.worker.reuse``, on by default), so a tiny job that imports the
    same modules while ``start`` builds the query (seconds of py4j calls on the driver)
    hands the first micro-batch warm workers.  Local masters only (on a cluster the
    executors are not the driver's to warm); any failure is the first micro-batch's to
    report, never this.
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


def end_python_workers(sc: Any) -> list[int]:
    """End the local Python workers of the SparkContext ``sc`` (None: nothing runs) before the
    process exits; the pids of the daemons ended.  Never fails.

    At the JVM's exit Spark stops its context: it closes the sockets of its idle Python
    workers, then ends their daemon.  A worker that sees its socket close first fails to
    write its goodbye, and PySpark's daemon prints that worker's ``BrokenPipeError``
    traceback on the driver's stderr (since PySpark 4.1,
    ``spark.python.daemon.killWorkerOnFlushFailure``), though nothing failed (some clean stops
    of the job ended so: docs/performance-history.md, "eighth round").  A SIGTERM to the daemon first is its
    own shutdown: it ends its workers (SIGHUP) before any socket closes, silently.  Local
    masters on Linux only (the daemon is the driver JVM's child there); elsewhere nothing
    is done.  Only for a process about to exit: Spark does not start the daemon again, so
    the context's next Python task would fail ("Stream closed").
    """
    if sc is None or not str(getattr(sc, "master", "")).startswith("local"):
        return []
    try:
        return _end_daemons(int(sc._jvm.java.lang.ProcessHandle.current().pid()))
    except Exception:  # noqa: BLE001 - the caller is exiting; the JVM's exit stops what is left
        log.debug("ending the Python workers failed", exc_info=True)
        return []


def _end_daemons(jvm_pid: int) -> list[int]:
    """SIGTERM each ``pyspark.daemon`` process whose parent is ``jvm_pid``; their pids."""
    import signal

    ended = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # not Linux
        return ended
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            if parent != jvm_pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().split(b"\0")
            if b"pyspark.daemon" in command:
                os.kill(int(entry), signal.SIGTERM)
                ended.append(int(entry))
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
            continue
    return ended
