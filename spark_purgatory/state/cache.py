"""The worker cache: live shards parked in a Python worker between micro-batches.

After a shard saves its state it may *park* its live ``Purgatory`` here, under its lineage,
tagged with the saved version's token; the next load of that shard in this worker *claims*
it and decides whether it can use it.  The read-ahead may *take* a parked shard meanwhile.

Invariant: a parked object is taken out on claim (or take), so a failed task attempt (or
read-ahead) leaves nothing half-changed behind: the cache changes the speed, never the result.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class WorkerCache:
    """At most ``entries`` parked shards, the least recently parked evicted first; ``wait``:
    the longest a claim waits (seconds) for a lineage the read-ahead has taken."""

    def __init__(self, entries: int = 64, *, wait: float = 60.0) -> None:
        self.entries = entries
        self.wait = wait
        self._parked: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self._taken: set[str] = set()  # lineages the read-ahead holds
        self._changed = threading.Condition(threading.Lock())

    def park(self, lineage: str, token: str, obj: Any) -> None:
        """Keep ``obj`` (the state saved with ``token``) for the next load of its lineage."""
        with self._changed:
            self._put(lineage, token, obj)

    def claim(self, lineage: str) -> Any | None:
        """The object parked for ``lineage``, taken out (waits while the read-ahead holds it)."""
        with self._changed:
            self._changed.wait_for(lambda: lineage not in self._taken, timeout=self.wait)
            entry = self._parked.pop(lineage, None)
        return None if entry is None else entry[1]

    def parked(self) -> list[tuple[str, str, Any]]:
        """(lineage, token, object) of every parked shard, the least recently parked first."""
        with self._changed:
            return [(lineage, token, obj) for lineage, (token, obj) in self._parked.items()]

    def take(self, lineage: str, token: str) -> Any | None:
        """The object parked for ``lineage`` when it is still the version ``token``, taken out
        for the read-ahead (claims wait until ``give_back``); else None."""
        with self._changed:
            entry = self._parked.get(lineage)
            if entry is None or entry[0] != token or lineage in self._taken:
                return None
            del self._parked[lineage]
            self._taken.add(lineage)
            return entry[1]

    def give_back(self, lineage: str, token: str | None = None, obj: Any = None) -> None:
        """End the read-ahead's hold of ``lineage``, parking ``obj`` (if any) as ``token``."""
        with self._changed:
            self._taken.discard(lineage)
            if obj is not None and token is not None:
                self._put(lineage, token, obj)
            self._changed.notify_all()

    def clear(self) -> None:
        with self._changed:
            self._parked.clear()

    def _put(self, lineage: str, token: str, obj: Any) -> None:
        self._parked[lineage] = (token, obj)
        self._parked.move_to_end(lineage)
        while len(self._parked) > self.entries:
            self._parked.popitem(last=False)


#: this Python worker's cache (shards of one worker process share it)
WORKER_CACHE = WorkerCache()
