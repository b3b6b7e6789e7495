"""The Python worker process, settled once: its heap frozen, a closed socket its quiet end.

PySpark's daemon calls ``gc.collect()`` after every task, walking every tracked object, most
of them functions, classes and modules that live as long as the worker.  ``freeze_heap()``
collects once, then freezes what is there (``gc.freeze()``); objects made afterwards are
collected as before.

When a local JVM stops (the end of a script, a stopped query, ``spark.stop()``), it closes
its idle workers' sockets; a worker that writes into its closed socket before the daemon
ends it makes PySpark's daemon print a ``BrokenPipeError`` traceback, though nothing failed.
``quiet_worker()``, run when a worker imports the package, lets a write into a closed
socket end the worker silently (``SIGPIPE``'s default), as the daemon would end it anyway.
"""

from __future__ import annotations

import gc
import signal
import sys

_settled = False


def freeze_heap() -> None:
    """Collect, then freeze the worker's heap; once per process (later calls do nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()


def quiet_worker() -> bool:
    """In a PySpark worker (its daemon's fork, or a worker run alone), a write into a closed
    socket ends the process with ``SIGPIPE``, no traceback; elsewhere (a driver, a test)
    nothing changes.  Whether it applied."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) not in ("pyspark.daemon", "pyspark.worker"):
        return False
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return True
