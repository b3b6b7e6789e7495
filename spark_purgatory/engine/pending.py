"""The pending operations and their watchers, indexed by handle, op_id and key.

Kafka's purgatory keeps its operations in ``Watchers`` lists, one per key.  Here one
``Pending`` holds every pending operation (``tables.OPS`` rows) and every (operation, key)
watcher (``tables.WATCH`` rows) of a shard, in ``columns.Columns``: rows in handle order,
appended and tombstoned in place, with a ``columns.HashIndex`` on the op_id hash and one on
the key hash.  Every read takes a batch of handles, op_ids or keys and costs what it
touches; what the matching and condition code reads comes out as small frames of just those
rows, in handle order (``rows``), which ``watchers``, ``conditions`` and ``relay`` take as
they would take the whole table.

Invariants: an operation's rows (its own and its watchers') are all live or all gone; an
op_id or key found by hash is confirmed on the string before it is returned.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .columns import Columns
from .frames import distinct, hash_strings, sorted_by_hash
from .tables import OPS, WATCH

__all__ = ["Pending"]

#: the pending operations as held: ``OPS`` and each op_id's 64-bit hash
_OPS_HELD = {**OPS, "ohash": "uint64"}


class Pending:
    """A shard's pending operations and watchers (see the module docstring).

    Args:
        ops: ``OPS`` rows, in any order.
        watch: ``WATCH`` rows of those operations, in any order.
    """

    def __init__(self, ops: pd.DataFrame, watch: pd.DataFrame) -> None:
        ops = ops.iloc[np.argsort(ops["handle"].to_numpy(np.int64), kind="stable")]
        self._ops = Columns(_OPS_HELD, indexed=("ohash",))
        self._watch = Columns(WATCH, indexed=("hash",))
        columns = {c: ops[c].to_numpy() for c in OPS}
        watch = watch.iloc[np.argsort(watch["handle"].to_numpy(np.int64), kind="stable")]
        self.add(columns, hash_strings(columns["op_id"]), {c: watch[c].to_numpy() for c in WATCH})

    def __len__(self) -> int:
        """Pending operations."""
        return len(self._ops)

    @property
    def watched(self) -> int:
        """Watcher rows, one per (operation, key)."""
        return len(self._watch)

    # -- changes -------------------------------------------------------------------------------

    def add(self, ops: dict[str, np.ndarray], ohash: np.ndarray, watch: dict[str, np.ndarray]) -> None:
        """Register operations (``OPS`` columns, handles above every pending one), their
        op_ids' hashes and their watchers (``WATCH`` columns, in handle order)."""
        self._ops.append({**ops, "ohash": ohash})
        self._watch.append(watch)

    def remove(self, handles: np.ndarray) -> None:
        """Drop these pending operations (distinct handles) and their watchers."""
        self._ops.kill(self._ops.positions(handles))
        self._watch.kill(self._watch.ranges(handles)[1])

    # -- reads ---------------------------------------------------------------------------------

    def rows(self, handles: np.ndarray) -> pd.DataFrame:
        """The ``OPS`` rows of these pending operations, in handle order, once each."""
        return self._ops.frame(self._ops.positions(distinct(handles)), list(OPS))

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every pending operation and watcher, as ``OPS`` and ``WATCH`` frames in handle order."""
        return self._ops.frame(columns=list(OPS)), self._watch.frame(columns=list(WATCH))

    def since(self, handle: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The operations and watchers registered from ``handle`` on (still pending)."""
        return (
            self._ops.frame(self._ops.since(handle), list(OPS)),
            self._watch.frame(self._watch.since(handle), list(WATCH)),
        )

    def contains(self, handles: np.ndarray) -> np.ndarray:
        """Per handle: is that operation pending?"""
        return self._ops.contains(handles)

    def stub(self, handles: np.ndarray) -> np.ndarray:
        """Per (pending) handle: is the operation a stub?"""
        return self._ops.column("stub")[self._ops.positions(handles)]

    def watch_rows(self, handles: np.ndarray, columns: list[str]) -> pd.DataFrame:
        """The watcher rows of these pending operations, in handle order."""
        return self._watch.frame(self._watch.ranges(handles)[1], columns)

    def by_op_id(self, op_ids: np.ndarray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``op_ids``, handle) of the pending operations with these op_ids
        (``hashes``: the op_ids' ``hash_strings``, if the caller has them)."""
        if len(self._ops) == 0 or len(op_ids) == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        hashes = hash_strings(op_ids) if hashes is None else hashes
        probe, pos = self._ops.lookup("ohash", hashes)
        same = self._ops.column("op_id")[pos] == op_ids[probe]
        return probe[same], self._ops.column("handle")[pos[same]]

    def watchers_of(self, keys: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``keys``, handle) for every pending operation watching each key (Kafka's
        ``Watchers`` of the key), by key then handle (``hashes``: the keys' hashes)."""
        probe, pos = self._watch.lookup("hash", hashes)
        same = self._watch.column("key")[pos] == keys[probe]
        probe, pos = probe[same], pos[same]
        order = np.lexsort((pos, probe))  # positions follow handles
        return probe[order], self._watch.column("handle")[pos[order]]

    def named_by(self, op_ids: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The rows of the pending operations among ``op_ids``, and their op_ids as a
        ``tables.SEEN`` frame (what ``relay.matches_of`` looks them up in)."""
        handles = distinct(self.by_op_id(op_ids)[1])
        ops = self.rows(handles)
        ids = ops["op_id"].to_numpy(dtype=object)
        seen = pd.DataFrame({"hash": hash_strings(ids), "op_id": ids, "handle": handles})
        return ops, sorted_by_hash(seen)
