"""The stream thread's call site, kept across a ``foreachBatch`` function's Spark actions.

PySpark's actions clear the thread's ``callSite.short`` when done, which from a
``foreachBatch`` function leaves the stream thread to walk its deep Java stack for every
later RDD.  ``kept_call_site`` puts the value back after the function's actions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .settings import is_connect

#: Spark's local property for the short form of the call site (``CallSite.SHORT_FORM``)
SHORT_FORM = "callSite.short"


@contextmanager
def kept_call_site(spark: Any) -> Iterator[None]:
    """Run a ``foreachBatch`` body and give the stream thread back the short call site it
    had at entry (nothing to keep on Spark Connect, whose function runs in another process,
    or when the thread had none)."""
    if is_connect(spark):
        yield
        return
    context = spark.sparkContext._jsc  # type: ignore[attr-defined]
    site = context.getLocalProperty(SHORT_FORM)
    try:
        yield
    finally:
        if site is not None:
            context.setLocalProperty(SHORT_FORM, site)
