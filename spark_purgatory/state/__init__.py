"""Shard state: a ``Purgatory`` to and from one binary value, segment files, the worker cache.

The engine (``spark_purgatory.engine``) persists nothing; this package stores it.  It reads
the engine through two small interfaces: ``Purgatory.tables()`` / ``load_tables`` (the whole
state as plain tables) and ``Purgatory.take_changes()`` (what the big tables gained and lost
since the last save).  Modules:

* ``shard_state``: ``save_state``, and the segment (LSM) scheme explained; ``shard_load``: ``load_state``;
* ``segments``: ``SegmentStore``, the directory of immutable segment files;
* ``increments``: the delta files, one per save, and the pointer to them a group state holds;
* ``cache``: ``WorkerCache``, live shards parked in a Python worker between micro-batches;
* ``read_ahead``: a worker brings the other shards parked in it forward between its tasks;
* ``layout``: the checkpoint's shard count, rescale journal and run lease;
* ``codec``: Arrow IPC encoding of frames and named parts;
* ``reshard``: a stopped checkpoint's shards split or merged (``spark_purgatory.rescale``);
* ``pending_counts``: the pending operations per shard after each micro-batch.

The cross-shard hand-off's files (mailbox, wake) are ``spark_purgatory.handoff``'s.

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
