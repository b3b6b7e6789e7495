"""Op_id memory: which op_ids are pending or were resolved recently (``duplicate_op_id``).

Two tables sorted by 64-bit op_id hash: ``seen`` holds every pending op_id with its handle
(strings kept, so a hash collision never merges two operations); ``resolved`` holds the
hashes of op_ids resolved within ``purgatory.dedup.retention.ms`` of event time, with the
watermark at which each is forgotten (no strings: it can be large).

Invariant: an op_id is accepted at most once while it is pending or remembered as resolved;
a resolved op_id may be refused by a hash collision (rare, conservative), never a pending
one mistaken.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .frames import equal_ranges, hash_strings

__all__ = ["lookup_seen", "recently_resolved", "duplicates", "resolved_rows"]


def lookup_seen(
    seen: pd.DataFrame, op_ids: np.ndarray, hashes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(index into op_ids, row of ``seen``) for the op_ids of pending operations
    (``hashes``: the op_ids' ``hash_strings``, if the caller has them)."""
    if len(seen) == 0 or len(op_ids) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    hashes = hash_strings(op_ids) if hashes is None else hashes
    probe, row = equal_ranges(seen["hash"].to_numpy(np.uint64), hashes)
    same = seen["op_id"].to_numpy(dtype=object)[row] == op_ids[probe]
    return probe[same], row[same]


def recently_resolved(
    resolved: pd.DataFrame, op_ids: np.ndarray, hashes: np.ndarray | None = None
) -> np.ndarray:
    """Which op_ids were resolved within the dedup retention (by 64-bit hash; ``hashes``:
    the op_ids' ``hash_strings``, if the caller has them)."""
    if len(resolved) == 0 or len(op_ids) == 0:
        return np.zeros(len(op_ids), dtype=bool)
    table = resolved["hash"].to_numpy(np.uint64)
    hashes = hash_strings(op_ids) if hashes is None else hashes
    pos = np.minimum(np.searchsorted(table, hashes), table.size - 1)
    return table[pos] == hashes


def duplicates(ops: pd.DataFrame, seen: pd.DataFrame, resolved: pd.DataFrame) -> np.ndarray:
    """Per operation: is its op_id already pending, recently resolved, or repeated in ``ops``?"""
    dup = ops["op_id"].duplicated().to_numpy()
    ids = ops["op_id"].to_numpy(dtype=object)
    hashes = hash_strings(ids) if len(seen) or len(resolved) else None
    probe, _ = lookup_seen(seen, ids, hashes)
    dup[probe] = True
    return dup | recently_resolved(resolved, ids, hashes)


def resolved_rows(
    op_ids: np.ndarray, deadlines: np.ndarray, watermark: int, retention_ms: int
) -> pd.DataFrame:
    """Dedup rows for resolved op_ids: remembered for ``retention_ms`` of event time after
    the later of their deadline and the watermark."""
    until = np.maximum(watermark, deadlines) + retention_ms
    return pd.DataFrame({"hash": hash_strings(op_ids), "expire_at": until})
