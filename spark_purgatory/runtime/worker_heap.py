"""The Python worker's heap: the objects the cyclic garbage collector need not walk again.

PySpark's daemon calls ``gc.collect()`` after every task, walking every tracked object, most
of them functions, classes and modules that live as long as the worker.  ``freeze_heap()``
collects once, then freezes what is there (``gc.freeze()``); objects made afterwards are
collected as before.
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
