"""Kafka's Watchers: which pending operations watch which keys, and which events match them.

Kafka keeps a ``Watchers`` list per key and walks it on ``checkAndComplete(key)``.  Here a
watch row is one (operation, key) with the key's 64-bit hash (``watch_rows``); the pending
operations' watch rows are indexed by that hash (``pending.Pending.watchers_of``), and the
buffered events a new operation meets are found by a hash join (``buffered_pairs``: two
``searchsorted`` calls, ``equal_ranges``).  Equal hashes are always confirmed on the key
strings.  An event found for an operation becomes a *match* if it lies in the operation's
window (``matches_in_window``).

Invariants: a pair (event, operation) is a match only if the operation watches the event's
key, the event is in its window (``o.ts <= e.ts < o.deadline``, or before ``o.ts`` for
``offset`` and an untargeted event), and a targeted event names the operation.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .conditions import ALL, OFFSET
from .frames import empty, equal_ranges, flatten, hash_strings, rows_by_handle, stack
from .progress import KeyTable
from .tables import MATCHES

__all__ = ["watch_rows", "buffered_pairs", "watching", "matches_in_window"]

_NO_MATCHES = empty(MATCHES)


def watch_rows(new_ops: pd.DataFrame, key_table: KeyTable) -> pd.DataFrame:
    """The watch rows of newly registered operations (``handle``, ``keys``, ``cond``), one per
    (operation, key) in their order; an ``offset`` operation records each key's progress so
    far (``key_table``) as it starts watching.  Every valid operation has a key (validation)."""
    lengths, key = flatten(new_ops["keys"].to_numpy(dtype=object))
    khash = hash_strings(key)
    progress = np.full(key.size, np.nan)
    offset = np.repeat(new_ops["cond"].to_numpy(np.int8) == OFFSET, lengths)
    keys = key_table.frame(khash[offset]) if offset.any() else None
    if keys is not None and len(keys):
        known = keys["khash"].to_numpy(np.uint64)  # unique
        order = np.argsort(known)
        at = np.minimum(np.searchsorted(known, khash[offset], sorter=order), known.size - 1)
        row = order[at]
        found = known[row] == khash[offset]
        progress[np.flatnonzero(offset)[found]] = keys["progress"].to_numpy(float)[row[found]]
    columns = {
        "hash": khash,
        "key": key,
        "handle": np.repeat(new_ops["handle"].to_numpy(np.int64), lengths),
        "progress_at_watch": progress,
    }
    return pd.DataFrame(columns, copy=False)


def _by_key(watch: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``watch[["key", "handle"]].merge(events, on="key")``, with the key's hash
    (``khash``), by a hash join: watch rows in order, each with its key's events in order."""
    w_hash = watch["hash"].to_numpy(np.uint64)
    e_hash = hash_strings(events["key"].to_numpy(dtype=object))
    order = np.argsort(e_hash, kind="stable")
    w_row, at = equal_ranges(e_hash[order], w_hash)
    e_row = order[at]
    w_key = watch["key"].to_numpy(dtype=object)
    same = w_key[w_row] == events["key"].to_numpy(dtype=object)[e_row]
    w_row, e_row = w_row[same], e_row[same]
    columns = {"key": w_key[w_row], "handle": watch["handle"].to_numpy(np.int64)[w_row]}
    columns.update({c: events[c].to_numpy()[e_row] for c in events.columns if c not in columns})
    columns["khash"] = w_hash[w_row]
    return pd.DataFrame(columns, copy=False)


def buffered_pairs(
    ops: pd.DataFrame, new_ops: pd.DataFrame, watch: pd.DataFrame, buffered: pd.DataFrame
) -> pd.DataFrame:
    """(buffered event, newly registered operation) pairs, before the window check: untargeted
    events by a key the operation watches (``watch``: its watch rows), targeted ones by op_id
    if the operation (a row of ``ops``) watches their key."""
    targeted = buffered["op_id"].notna().to_numpy()
    untargeted = _by_key(watch, buffered.loc[~targeted])
    if not targeted.any():
        return untargeted
    by_id = new_ops[["op_id", "handle"]].merge(buffered.loc[targeted], on="op_id")
    keep = watching(ops, by_id["handle"].to_numpy(np.int64), by_id["key"].to_numpy(dtype=object))
    by_id = by_id.loc[keep].assign(khash=hash_strings(by_id["key"].to_numpy(dtype=object)[keep]))
    return stack(untargeted, by_id[list(untargeted.columns)])


def watching(ops: pd.DataFrame, handles: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each (handle, key) pair: does that pending operation watch that key?"""
    if handles.size == 0:
        return np.zeros(0, dtype=bool)
    pos = np.searchsorted(ops["handle"].to_numpy(np.int64), handles)
    lengths, op_keys = flatten(ops["keys"].to_numpy(dtype=object)[pos])
    pair = np.repeat(np.arange(handles.size), lengths)
    hit = op_keys == keys[pair]
    return np.bincount(pair[hit], minlength=handles.size) > 0


def matches_in_window(ops: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The (event, operation) ``pairs`` inside the operation's window, as match rows.

    ``pairs`` are event rows (``key``, ``ts``, ``eseq``, ``op_id``, ``source``, ``value``)
    with the ``handle`` of a pending operation watching the key, and the key's hash
    (``khash``) if the caller has it already.
    """
    if len(pairs) == 0:
        return _NO_MATCHES
    handle = pairs["handle"].to_numpy(np.int64)
    pos = np.searchsorted(ops["handle"].to_numpy(np.int64), handle)
    cond = ops["cond"].to_numpy(np.int8)[pos]
    ts = pairs["ts"].to_numpy(np.int64)
    target_id = pairs["op_id"].to_numpy(dtype=object)
    untargeted = pd.isna(target_id)
    # offset counts a key's progress from before the operation; targeted events never do
    ok = (ts < ops["deadline"].to_numpy(np.int64)[pos]) & (
        (ts >= ops["ts"].to_numpy(np.int64)[pos]) | ((cond == OFFSET) & untargeted)
    )
    ok &= untargeted | (target_id == ops["op_id"].to_numpy(dtype=object)[pos])
    keep = np.flatnonzero(ok)
    if keep.size == 0:
        return _NO_MATCHES
    handle, source = handle[keep], pairs["source"].to_numpy(dtype=object)[keep]
    if "khash" in pairs.columns:
        khash = pairs["khash"].to_numpy(np.uint64)[keep]
    else:
        khash = hash_strings(pairs["key"].to_numpy(dtype=object)[keep])
    columns = {
        "handle": handle,
        "khash": khash,
        "ts": ts[keep],
        "eseq": pairs["eseq"].to_numpy(np.int64)[keep],
        "value": pairs["value"].to_numpy(np.float64)[keep],
        "source": source,
        "is_member": _is_member(ops, handle, source, cond[keep] == ALL),
    }
    return pd.DataFrame(columns, copy=False)


def _is_member(ops: pd.DataFrame, handle: np.ndarray, source: np.ndarray, of_all: np.ndarray) -> np.ndarray:
    """Per match: is its ``source`` one of the members of its operation (an ``all`` one)?"""
    if not of_all.any():
        return np.zeros(handle.size, dtype=bool)
    members = rows_by_handle(ops, np.unique(handle[of_all]))[["handle", "members"]]
    members = members.explode("members").rename(columns={"members": "source"}).assign(is_member=True)
    pairs = pd.DataFrame({"handle": handle, "source": source})
    pairs = pairs.merge(members.drop_duplicates(["handle", "source"]), on=["handle", "source"], how="left")
    return pairs["is_member"].notna().to_numpy()
