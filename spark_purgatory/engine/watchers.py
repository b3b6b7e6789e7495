"""Kafka's Watchers, as a hash-join index: which pending operations watch which keys.

Kafka keeps a ``Watchers`` list per key and walks it on ``checkAndComplete(key)``.  Here the
watch table holds one row per (operation, key), sorted by the key's 64-bit hash; a batch of
events finds its watchers with two ``searchsorted`` calls (``equal_ranges``), and equal
hashes are confirmed on the key strings.  An event found for an operation becomes a *match*
if it lies in the operation's window (``matches_in_window``).

Invariants: the watch table is sorted by ``hash``; a pair (event, operation) is a match only
if the operation watches the event's key, the event is in its window
(``o.ts <= e.ts < o.deadline``, or before ``o.ts`` for ``offset`` and an untargeted event),
and a targeted event names the operation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .conditions import ALL, OFFSET
from .frames import empty, equal_ranges, hash_strings, rows_by_handle
from .tables import MATCHES, WATCH

__all__ = ["watch_rows", "watchers_of", "watching", "watchers_of_keys", "matches_in_window"]

_NO_MATCHES = empty(MATCHES)


def watch_rows(new_ops: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    """The watch rows of newly registered operations (``handle``, ``keys``, ``cond``); an
    ``offset`` operation records each key's progress so far (``keys``) as it starts watching."""
    watch = new_ops[["handle", "keys", "cond"]].explode("keys").rename(columns={"keys": "key"})
    watch = watch.assign(hash=hash_strings(watch["key"].to_numpy(dtype=object)))
    progress = keys[["khash", "progress"]].rename(columns={"progress": "progress_at_watch"})
    watch = watch.merge(progress, left_on="hash", right_on="khash", how="left")
    watch.loc[watch["cond"].to_numpy() != OFFSET, "progress_at_watch"] = np.nan
    return watch[list(WATCH)].astype(WATCH)


def watchers_of(watch: pd.DataFrame, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``keys``, watching handle) for every operation watching each key."""
    probe, row = equal_ranges(watch["hash"].to_numpy(np.uint64), hash_strings(keys))
    same_key = keys[probe] == watch["key"].to_numpy(dtype=object)[row]
    return probe[same_key], watch["handle"].to_numpy(np.int64)[row[same_key]]


def watchers_of_keys(watch: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """The distinct handles watching any of ``keys``."""
    _, handles = watchers_of(watch, np.asarray(keys, dtype=object))
    return np.unique(handles)


def watching(ops: pd.DataFrame, handles: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each (handle, key) pair: does that pending operation watch that key?"""
    if handles.size == 0:
        return np.zeros(0, dtype=bool)
    pos = np.searchsorted(ops["handle"].to_numpy(np.int64), handles)
    op_keys = pd.Series(ops["keys"].to_numpy(dtype=object)[pos]).explode()
    pair = op_keys.index.to_numpy()
    hit = op_keys.to_numpy(dtype=object) == keys[pair]
    return np.bincount(pair[hit], minlength=handles.size) > 0


def matches_in_window(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The (event, operation) ``pairs`` inside the operation's window, as match rows.

    ``pairs`` are event rows (``key``, ``ts``, ``eseq``, ``op_id``, ``source``, ``value``)
    with the ``handle`` of a pending operation watching the key.
    """
    if len(pairs) == 0:
        return _NO_MATCHES
    pos = np.searchsorted(ops["handle"].to_numpy(np.int64), pairs["handle"].to_numpy(np.int64))
    op_ts = ops["ts"].to_numpy(np.int64)[pos]
    deadline = ops["deadline"].to_numpy(np.int64)[pos]
    cond = ops["cond"].to_numpy(np.int8)[pos]
    op_id = ops["op_id"].to_numpy(dtype=object)[pos]
    ts = pairs["ts"].to_numpy(np.int64)
    target_id = pairs["op_id"].to_numpy(dtype=object)
    untargeted = pd.isna(target_id)
    # offset counts a key's progress from before the operation; targeted events never do
    ok = (ts < deadline) & ((ts >= op_ts) | ((cond == OFFSET) & untargeted))
    ok &= untargeted | (target_id == op_id)
    pairs = pairs.loc[ok]
    if len(pairs) == 0:
        return _NO_MATCHES
    involved = np.unique(pairs["handle"].to_numpy(np.int64)[cond[ok] == ALL])
    members = rows_by_handle(ops, involved)[["handle", "members"]]
    members = members.explode("members").rename(columns={"members": "source"}).assign(is_member=True)
    pairs = pairs.drop(columns=[c for c in ("is_member",) if c in pairs.columns])
    pairs = pairs.merge(members.drop_duplicates(["handle", "source"]), on=["handle", "source"], how="left")
    pairs["is_member"] = pairs["is_member"].notna().to_numpy()
    pairs["khash"] = hash_strings(pairs["key"].to_numpy(dtype=object))
    return pairs[list(MATCHES)].astype(MATCHES)
