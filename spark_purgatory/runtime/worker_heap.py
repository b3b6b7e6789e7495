"""The Python worker's heap: the objects the cyclic garbage collector need not walk again.

PySpark reuses its Python workers, and its daemon calls ``gc.collect()`` after every task a
worker runs.  A full collection walks every object the collector tracks; in a worker that has
imported pandas, pyarrow, PySpark and the operator, those are mostly functions, classes and
module dictionaries that live as long as the process, walked again after every shard group's
task.

``freeze_heap()`` collects once, then freezes what is there (``gc.freeze()``: moved to a
permanent generation that later collections skip).  Objects made afterwards are collected as
before; reference counting still frees frozen objects, so only cyclic garbage that existed at
the freeze could stay (it was just collected).
"""

from __future__ import annotations

import gc

_settled = False


def freeze_heap() -> None:
    """Collect, then freeze the worker's heap; once per process (later calls do nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
