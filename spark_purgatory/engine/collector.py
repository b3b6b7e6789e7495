"""The collector pause: Python's cyclic garbage collector off around code that makes a
container per row."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, back as it was after: a container per
    row would make it walk them all, alive, every 700.  Cyclic garbage made inside waits.

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
