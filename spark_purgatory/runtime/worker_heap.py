"""The Python worker's heap: the objects the cyclic garbage collector need not walk again.

PySpark reuses its Python workers (``spark.python.worker.reuse``, on by default), and its
daemon (``pyspark/daemon.py``, pyspark 4.2.0) calls ``gc.collect()`` after every task a worker
runs.  A full collection walks every object the collector tracks; in a worker that has
imported pandas, pyarrow, PySpark's SQL modules and the operator, that is ~78,000 objects
(functions, classes, module dictionaries) that live as long as the process.  The operator's
micro-batch runs a task per shard group, so a micro-batch paid several walks of objects that can
never be garbage (docs/performance-history.md, "The Python workers' heap, and a thin projection for the
batch's time").

``freeze_heap()`` (called by the shard step, once per process) collects once, then freezes what is
there (``gc.freeze()``: moved to a permanent generation that later collections skip).  Objects
made afterwards are collected as before; reference counting still frees frozen objects that
are no longer referenced, so only cyclic garbage that existed at the freeze could stay (it was
just collected; what is left is the interpreter's modules and the first call's input).

The shard step also keeps the collector off for the length of its call
(``engine.collector.collector_paused``): a call makes a container per operation, and the call's
cyclic garbage, if any, waits for the collection the daemon runs after the task.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_heap"]

_settled = False


def freeze_heap() -> None:
    """Collect, then freeze the worker's heap; once per process (later calls do nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
