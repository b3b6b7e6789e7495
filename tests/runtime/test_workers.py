"""``runtime.worker_heap.quiet_worker``: a PySpark worker that imported the package ends
silently when it writes into a socket its JVM has closed (the end of a script, a stopped query,
``spark.stop()``), where PySpark's daemon would print a ``BrokenPipeError`` traceback; any
other process keeps Python's ``BrokenPipeError``."""

from __future__ import annotations

import signal
import subprocess
import sys

#: write into a socket whose other end is closed, as a worker does when its JVM has gone
_WRITE_INTO_CLOSED = """
import socket, sys, types
from spark_purgatory.runtime.worker_heap import quiet_worker
if sys.argv[1] == "worker":  # as PySpark's daemon runs it: python -m pyspark.daemon
    sys.modules["__main__"].__spec__ = types.SimpleNamespace(name="pyspark.daemon")
print(quiet_worker(), flush=True)
ours, theirs = socket.socketpair()
theirs.close()
ours.makefile("wb").write(b"x" * 100_000)
"""


def _run(role: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WRITE_INTO_CLOSED, role], capture_output=True, text=True, timeout=60
    )


def test_a_worker_ends_quietly_on_a_closed_socket_and_anything_else_raises():
    worker = _run("worker")
    assert worker.stdout == "True\n"
    assert worker.returncode == -signal.SIGPIPE and worker.stderr == ""  # ended, no traceback
    driver = _run("driver")
    assert driver.stdout == "False\n"
    assert driver.returncode == 1 and "BrokenPipeError" in driver.stderr  # Python's, unchanged


def test_importing_the_package_outside_a_worker_changes_nothing():
    import spark_purgatory  # noqa: F401 - imported: its quiet_worker ran

    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
