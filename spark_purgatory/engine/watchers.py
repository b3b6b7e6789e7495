"""Kafka's Watchers: which pending operations watch which keys, and which events match them.

A watch row is one (operation, key) with the key's 64-bit hash; events meet watchers by a
hash join, always confirmed on the key strings.

Invariants: a pair (event, operation) is a match only if the operation watches the event's
key, the event is in its window (``o.ts <= e.ts < o.deadline``, or before ``o.ts`` for
``offset`` and an untargeted event), and a targeted event names the operation.
"""

from __future__ import annotations

import numpy as np

from .arrays import equal_pairs, flatten, hash_strings, present, search
from .conditions import NEEDS_MEMBERS, OFFSET
from .progress import KeyTable
from .rows import Rows
from .tables import MATCHES

#: an (event, operation) pair before the window check
PAIR = ("handle", "khash", "key", "ts", "eseq", "op_id", "source", "value", "cancel")
_NO_MATCHES = Rows.empty(MATCHES)


def watch_rows(new_ops: Rows, key_table: KeyTable) -> Rows:
    """The watch rows of newly registered operations, one per (operation, key) in their
    order; an ``offset`` operation records each key's progress so far (``key_table``)."""
    one_key = new_ops.get("one_key")
    if one_key is not None:
        lengths, key = np.ones(len(new_ops), np.int64), one_key
    else:
        lengths, key = flatten(new_ops["keys"], nonempty=True)
    khash = hash_strings(key)
    progress = np.full(key.size, np.nan)
    offset = np.repeat(new_ops["cond"] == OFFSET, lengths)
    if offset.any():
        progress[offset] = key_table.values(khash[offset], "progress", np.nan)
    columns = {
        "hash": khash,
        "key": key,
        "handle": np.repeat(new_ops["handle"], lengths),
        "progress_at_watch": progress,
    }
    return Rows(columns, key.size)


def _by_key(watch: Rows, events: Rows) -> Rows:
    """``PAIR`` rows of the watch rows and the events on the same key, by watch row then event."""
    w_hash = watch["hash"]
    w_row, e_row = equal_pairs(events["khash"], w_hash)  # by watch row, then event
    key = watch["key"][w_row]
    same = key == events["key"][e_row]
    if not same.all():  # a hash collision
        w_row, e_row, key = w_row[same], e_row[same], key[same]
    columns = {"handle": watch["handle"][w_row], "khash": w_hash[w_row], "key": key}
    columns.update({c: events[c][e_row] for c in PAIR[3:]})
    return Rows(columns, w_row.size)


def buffered_pairs(new_ops: Rows, ohash: np.ndarray, watch: Rows, buffered: Rows) -> Rows:
    """``PAIR`` rows of buffered events and newly registered operations: untargeted events by
    a key the operation watches, targeted ones by op_id if it watches their key."""
    op_id = buffered["op_id"]
    targeted = present(op_id)
    if not targeted.any():
        return _by_key(watch, buffered)
    untargeted = _by_key(watch, buffered.where(~targeted))
    t_rows = np.flatnonzero(targeted)
    o_row, at = equal_pairs(hash_strings(op_id[t_rows]), ohash)
    e_row = t_rows[at]
    same = new_ops["op_id"][o_row] == op_id[e_row]
    o_row, e_row = o_row[same], e_row[same]
    handle, key = new_ops["handle"][o_row], buffered["key"][e_row]
    keep = watching(new_ops, handle, key)
    e_row = e_row[keep]
    columns = {"handle": handle[keep], "khash": buffered["khash"][e_row], "key": key[keep]}
    columns.update({c: buffered[c][e_row] for c in PAIR[3:]})
    return untargeted.stack(Rows(columns, e_row.size))


def watching(ops: Rows, handles: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each (handle, key) pair: does that operation (of ``ops``, by handle) watch that key?"""
    if handles.size == 0:
        return np.zeros(0, dtype=bool)
    pos = search(ops["handle"], handles)
    lengths, op_keys = flatten(ops["keys"][pos])
    pair = np.repeat(np.arange(handles.size), lengths)
    hit = op_keys == keys[pair]
    return np.bincount(pair[hit], minlength=handles.size) > 0


def matches_in_window(ops: Rows, pairs: Rows, at: np.ndarray | None = None) -> Rows:
    """The ``pairs`` inside their operation's window (``ops``: sorted by handle), as match rows."""
    if len(pairs) == 0:
        return _NO_MATCHES
    handle = pairs["handle"]
    pos = search(ops["handle"], handle) if at is None else at
    cond = ops["cond"][pos]
    ts = pairs["ts"]
    target_id = pairs["op_id"]
    untargeted = ~present(target_id)
    # offset counts a key's progress from before the operation; targeted events never do
    ok = (ts < ops["deadline"][pos]) & ((ts >= ops["ts"][pos]) | ((cond == OFFSET) & untargeted))
    if not untargeted.all():
        ok &= untargeted | (target_id == ops["op_id"][pos])
    keep = np.flatnonzero(ok)
    if keep.size == 0:
        return _NO_MATCHES
    handle, source = handle[keep], pairs["source"][keep]
    if "khash" in pairs:
        khash = pairs["khash"][keep]
    else:
        khash = hash_strings(pairs["key"][keep])
    columns = {
        "handle": handle,
        "khash": khash,
        "ts": ts[keep],
        "eseq": pairs["eseq"][keep],
        "value": pairs["value"][keep].astype(np.float64, copy=False),
        "source": source,
        "is_member": _is_member(ops, handle, source, np.isin(cond[keep], NEEDS_MEMBERS)),
        "cancel": pairs["cancel"][keep],
    }
    return Rows(columns, keep.size)


def needs_members(ops: Rows) -> bool:
    """Does the window check of these operations' matches read their members?"""
    return bool(np.isin(ops["cond"], NEEDS_MEMBERS).any())


def _is_member(ops: Rows, handle: np.ndarray, source: np.ndarray, of_members: np.ndarray) -> np.ndarray:
    member = np.zeros(handle.size, dtype=bool)
    if not of_members.any():
        return member
    rows = np.flatnonzero(of_members)
    lengths, members = flatten(ops["members"][search(ops["handle"], handle[rows])])
    pair = np.repeat(np.arange(rows.size), lengths)
    hit = members == source[rows][pair]
    member[rows] = np.bincount(pair[hit], minlength=rows.size) > 0
    return member
