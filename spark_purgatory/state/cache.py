"""The worker cache: live shards parked in a Python worker between micro-batches.

Spark reuses Python workers between micro-batches.  After a shard saves its state it may
*park* its live ``Purgatory`` here, under its lineage (one entry per shard history), tagged
with the token of the version it saved.  The next load of that shard in this worker
*claims* it: the loader decides whether the object is that version, an ancestor it can bring
forward, or neither (see ``shard_state``).

Invariant: a parked object is taken out on claim, so a failed task attempt leaves nothing
half-changed behind: the cache changes the speed, never the result.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["WorkerCache", "WORKER_CACHE"]


class WorkerCache:
    """At most ``entries`` parked shards, the least recently parked evicted first."""

    def __init__(self, entries: int = 64) -> None:
        self.entries = entries
        self._parked: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def park(self, lineage: str, token: str, obj: Any) -> None:
        """Keep ``obj`` (the state saved with ``token``) for the next load of its lineage."""
        with self._lock:
            self._parked[lineage] = (token, obj)
            self._parked.move_to_end(lineage)
            while len(self._parked) > self.entries:
                self._parked.popitem(last=False)

    def claim(self, lineage: str) -> Any | None:
        """The object parked for ``lineage``, taken out of the cache (the caller checks its version)."""
        with self._lock:
            entry = self._parked.pop(lineage, None)
        return None if entry is None else entry[1]

    def clear(self) -> None:
        with self._lock:
            self._parked.clear()


#: this Python worker's cache (shards of one worker process share it)
WORKER_CACHE = WorkerCache()
