"""Shard state: a ``Purgatory`` to and from one binary value, segment files, the worker cache.

The engine persists nothing; this package stores it through ``Purgatory.tables()`` /
``load_tables`` and ``Purgatory.take_changes()``.

Invariant: a loaded state behaves exactly as the saved one would have, whether it came from
the value alone, from segment files, or from the worker cache.

>>> import pandas as pd
>>> from spark_purgatory import Purgatory
>>> p = Purgatory()
>>> _ = p.process(pd.DataFrame({"op_id": ["a"], "key": ["k"], "ts": [0], "timeout_ms": [50]}),
...               None, watermark_ms=0)
>>> again = load_state(save_state(p))
>>> again.pending, loaded_by(again)
(1, 'rebuilt')
"""

from __future__ import annotations

from .cache import WORKER_CACHE, WorkerCache
from .segments import SegmentStore
from .shard_load import load_state
from .shard_state import STATE_VERSION, loaded_by, save_state, saved_bytes

__all__ = [
    "save_state",
    "load_state",
    "loaded_by",
    "saved_bytes",
    "SegmentStore",
    "WorkerCache",
    "WORKER_CACHE",
    "STATE_VERSION",
]
