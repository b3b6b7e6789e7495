"""The relay: how a primary shard hands a cross-shard operation the events of its keys.

An operation whose keys hash to several shards lives in the cross-shard group; each primary
shard of its keys holds a *stub* of it (a watcher that never completes and reports nothing,
so the primary does not report the events it matches as unmatched).  Kafka watches such an
operation under each key in place; here the stubs are those watchers and the relay is how
what they see reaches the one place that decides the operation:

* ``outgoing``: after a batch's operations and events are matched, every buffered event a
  stub matched that has not been relayed yet (new events, and events buffered before a stub
  arriving now: events may come before their operation) is relayed, once: the event keeps a
  ``relayed`` flag, so a later stub matching it again does not relay it twice (the
  cross-shard group buffers relayed events like a shard buffers its own, so a later
  cross-shard operation finds them there).  A new ``offset`` stub also relays each key's
  *floor*, the key's progress from events finalised before it started watching, which the
  cross-shard group cannot know (SPEC: a key's progress includes events before ``o.ts``).
* ``received``: the cross-shard group splits what it received into events (``replica``:
  counted, never reported, never late: their home shard judged them) and floors, which
  ``floor_matches`` turns into matches of the operations they name.

The host carries relay rows between the two (``spark_purgatory.state.mailbox``); the engine
only produces and consumes them.  Invariant: every event that can count for a cross-shard
operation reaches the cross-shard group exactly once, and its floors once per stub.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import dedup, watchers
from .conditions import FLOOR_ESEQ, OFFSET
from .frames import empty, hash_strings, rows_by_handle
from .tables import I64_MIN, MATCHES, RELAY

__all__ = ["outgoing", "received", "floor_matches", "empty_relay"]


def empty_relay() -> pd.DataFrame:
    return empty(RELAY)


def outgoing(
    ops: pd.DataFrame, watch: pd.DataFrame, matches: pd.DataFrame, events: pd.DataFrame, new_from: int
) -> tuple[pd.DataFrame, np.ndarray]:
    """(relay rows, which ``events`` are relayed now) for a shard's stubs.

    ``new_from``: the first handle registered in this batch (stubs from it on are new and
    relay their floors).
    """
    relayed_now = np.zeros(len(events), dtype=bool)
    if len(matches) == 0 or len(ops) == 0:
        return empty_relay(), relayed_now
    handles = np.unique(matches["handle"].to_numpy(np.int64))
    stub = rows_by_handle(ops, handles)["stub"].to_numpy(bool)
    if not stub.any():
        return empty_relay(), relayed_now
    by_stub = matches["handle"].isin(handles[stub]).to_numpy()
    eseqs = matches["eseq"].to_numpy(np.int64)[by_stub]
    relayed_now = np.isin(events["eseq"].to_numpy(np.int64), eseqs) & ~events["relayed"].to_numpy(bool)
    sent = events.loc[relayed_now, ["key", "ts", "op_id", "source", "value"]].assign(floor=False)
    return pd.concat([sent, _floors(ops, watch, new_from)], ignore_index=True).astype(RELAY), relayed_now


def _floors(ops: pd.DataFrame, watch: pd.DataFrame, new_from: int) -> pd.DataFrame:
    """The floors of the ``offset`` stubs registered from ``new_from`` on (keys with progress)."""
    new = ops.loc[ops["handle"].to_numpy(np.int64) >= new_from]
    new = new.loc[new["stub"].to_numpy(bool) & (new["cond"].to_numpy() == OFFSET)]
    if len(new) == 0:
        return empty_relay()
    rows = watch.loc[watch["handle"].isin(new["handle"]) & watch["progress_at_watch"].notna()]
    op_id = rows_by_handle(new, rows["handle"].to_numpy(np.int64))["op_id"].to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "key": rows["key"].to_numpy(dtype=object),
            "ts": 0,
            "op_id": op_id,
            "source": None,
            "value": rows["progress_at_watch"].to_numpy(float),
            "floor": True,
        }
    ).astype(RELAY)


def received(relay: pd.DataFrame | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Relay rows as (events to count as replicas, floors)."""
    if relay is None or len(relay) == 0:
        return empty(RELAY).drop(columns="floor").assign(replica=True, relayed=True), empty_relay()
    floor = relay["floor"].to_numpy(bool)
    events = relay.loc[~floor].drop(columns="floor").assign(replica=True, relayed=True)
    return events.reset_index(drop=True), relay.loc[floor].reset_index(drop=True)


def floor_matches(ops: pd.DataFrame, seen: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    """The floors of pending operations (by op_id, on a key they watch) as match rows.

    A floor is a match without an event (``eseq`` -1, at the earliest time): ``evaluate``
    takes its value into the key's progress as it takes ``progress_at_watch``, and does not
    count it among the matched events.  Matches are a small table, stored whole with the
    state, so a floor needs nothing from the big tables.
    """
    if len(floors) == 0 or len(seen) == 0:
        return empty(MATCHES)
    probe, row = dedup.lookup_seen(seen, floors["op_id"].to_numpy(dtype=object))
    handles = seen["handle"].to_numpy(np.int64)[row]
    keys = floors["key"].to_numpy(dtype=object)[probe]
    ok = handles >= 0
    ok[ok] = watchers.watching(ops, handles[ok], keys[ok])
    probe, handles, keys = probe[ok], handles[ok], keys[ok]
    return pd.DataFrame(
        {
            "handle": handles,
            "khash": hash_strings(keys),
            "ts": I64_MIN,
            "eseq": FLOOR_ESEQ,
            "value": floors["value"].to_numpy(float)[probe],
            "source": None,
            "is_member": False,
        }
    ).astype(MATCHES)
