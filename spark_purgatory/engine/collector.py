"""The collector pause: Python's cyclic garbage collector off around code that makes a
container per row.

Invariant: the collector is back as it was after the block, whatever the block raised.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, back as it was after.

    For code that makes a container per row (a list of keys per operation: lists of text hold
    no cycles): every 700 new containers the collector walks the young ones, every tenth time
    the older ones too, all of them alive, which costs as much as making the lists
    (docs/performance-history.md, "The operator's weight, seventh round").  Cyclic garbage made inside
    waits for the next collection; reference counting frees the rest as before.

    >>> with collector_paused():
    ...     gc.isenabled()
    False
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
