"""The pending operations and their watchers, indexed by handle, op_id and key.

Kafka's purgatory keeps its operations in ``Watchers`` lists, one per key.  Here one
``Pending`` holds every pending operation (``tables.OPS`` rows) and every (operation, key)
watcher (``tables.WATCH`` rows) of a shard, in ``columns.Columns``: rows in handle order,
appended and tombstoned in place, with a ``columns.HashIndex`` on the op_id hash and one on
the key hash.  Every read takes a batch of handles, op_ids or keys and costs what it
touches; what the matching and condition code reads comes out as ``rows.Rows`` of just
those rows, in handle order (``rows``), which ``watchers``, ``conditions`` and ``relay``
take as they would take the whole table.

Invariants: an operation's rows (its own and its watchers') are all live or all gone; an
op_id or key found by hash is confirmed on the string before it is returned.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Columns
from .frames import distinct, hash_strings
from .rows import Rows
from .tables import OPS, WATCH

__all__ = ["Pending", "HELD"]

#: the pending operations as held: ``OPS`` and each op_id's 64-bit hash
HELD = {**OPS, "ohash": "uint64"}
_EMPTY = np.empty(0, np.int64)


class Pending:
    """A shard's pending operations and watchers (see the module docstring).

    Args:
        ops: ``OPS`` rows, in any order.
        watch: ``WATCH`` rows of those operations, in any order.
    """

    def __init__(self, ops: pd.DataFrame, watch: pd.DataFrame) -> None:
        self._ops = Columns(HELD, indexed=("ohash",))
        self._watch = Columns(WATCH, indexed=("hash",))
        ops = Rows.of(ops, OPS).take(np.argsort(ops["handle"].to_numpy(np.int64), kind="stable"))
        watch = Rows.of(watch, WATCH).take(np.argsort(watch["handle"].to_numpy(np.int64), kind="stable"))
        self.add(ops.assign(ohash=hash_strings(ops["op_id"])), watch)

    def __len__(self) -> int:
        """Pending operations."""
        return len(self._ops)

    @property
    def watched(self) -> int:
        """Watcher rows, one per (operation, key)."""
        return len(self._watch)

    # -- changes -------------------------------------------------------------------------------

    def add(self, ops: Rows, watch: Rows) -> None:
        """Register operations (``HELD`` columns: ``OPS`` and the op_ids' hashes; handles above
        every pending one) and their watchers (``WATCH`` columns, in handle order)."""
        self._ops.append(ops)
        self._watch.append(watch)

    def remove(self, handles: np.ndarray) -> None:
        """Drop these pending operations (distinct handles) and their watchers."""
        self._ops.kill(self._ops.positions(handles))
        self._watch.kill(self._watch.ranges(handles)[1])

    # -- reads ---------------------------------------------------------------------------------

    def rows(self, handles: np.ndarray) -> Rows:
        """The ``HELD`` rows of these pending operations, in handle order, once each."""
        return self._ops.rows(self._ops.positions(distinct(handles)))

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every pending operation and watcher, as ``OPS`` and ``WATCH`` frames in handle order."""
        return self._ops.frame(columns=list(OPS)), self._watch.frame(columns=list(WATCH))

    def since(self, handle: int) -> tuple[Rows, Rows]:
        """The operations (``HELD``) and watchers registered from ``handle`` on (still pending)."""
        return self._ops.rows(self._ops.since(handle)), self._watch.rows(self._watch.since(handle))

    def contains(self, handles: np.ndarray) -> np.ndarray:
        """Per handle: is that operation pending?"""
        return self._ops.contains(handles)

    def stub(self, handles: np.ndarray) -> np.ndarray:
        """Per (pending) handle: is the operation a stub?"""
        return self._ops.column("stub")[self._ops.positions(handles)]

    def watch_rows(self, handles: np.ndarray, columns: list[str]) -> Rows:
        """The watcher rows of these pending operations, in handle order."""
        return self._watch.rows(self._watch.ranges(handles)[1], columns)

    def by_op_id(self, op_ids: np.ndarray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``op_ids``, handle) of the pending operations with these op_ids, in
        ``op_ids`` order (``hashes``: the op_ids' ``hash_strings``, if the caller has them)."""
        if len(self._ops) == 0 or len(op_ids) == 0:
            return _EMPTY, _EMPTY
        hashes = hash_strings(op_ids) if hashes is None else hashes
        probe, pos = self._ops.lookup("ohash", hashes)
        same = self._ops.column("op_id")[pos] == op_ids[probe]
        probe, pos = probe[same], pos[same]
        if probe.size > 1:  # by op_id (each names one operation at most)
            order = np.argsort(probe)
            probe, pos = probe[order], pos[order]
        return probe, self._ops.column("handle")[pos]

    def watchers_of(self, keys: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``keys``, handle) for every pending operation watching each key (Kafka's
        ``Watchers`` of the key), by key then handle (``hashes``: the keys' hashes)."""
        if len(self._watch) == 0 or len(keys) == 0:
            return _EMPTY, _EMPTY
        probe, pos = self._watch.lookup("hash", hashes)
        same = self._watch.column("key")[pos] == keys[probe]
        probe, pos = probe[same], pos[same]
        if probe.size > 1:  # by key, then handle (positions follow handles): one int64 sort
            order = np.argsort(probe * np.int64(self._watch.occupied) + pos)
            probe, pos = probe[order], pos[order]
        return probe, self._watch.column("handle")[pos]
