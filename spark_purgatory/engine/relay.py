"""The relay: how a primary shard hands a cross-shard operation what its keys' watchers saw.

An operation whose keys hash to several shards lives in the cross-shard group; each primary
shard of its keys holds a *stub* of it: a watcher that never completes and reports nothing.
Kafka watches such an operation under each key in place; here the stubs are those watchers,
and the relay carries what they match to the one place that decides the operation:

* ``outgoing`` (a primary, each batch): every (event, stub) match made in this batch, as
  the event's fields and the stub's op_id, in two *stages*: 0, events buffered before a stub
  that arrived now (events may come before their operation), and 1, events new in this
  batch; and for each new ``offset`` stub each key's *floor*, the key's progress from events
  finalised before the stub (SPEC: a key's progress counts events before ``o.ts``), which
  only the primary knows.  Each pair is made once (matches are made once), so each is
  relayed once.
* ``Purgatory.process(relayed=...)`` (the cross-shard group): the pairs become matches of
  the operations they name (``matches_of``), batch by batch in the order they were made,
  registration stage first, each step evaluated as the primary's would have been.  The
  cross-shard group gets no events of its own, so its matches are exactly the primaries':
  the outcome equals one purgatory's holding every key (same ``resolved_at``, matched
  events and progress), up to one micro-batch later.

**Notices: whether a paired event was used.**  A primary cannot tell whether an event its
stubs matched is unmatched (SPEC: never silently dropped): only the cross-shard group knows
whether the operation was still pending and counted it, or had completed before it (then one
purgatory reports it ``after_resolution``).  So when such an event becomes final (the
watermark passed it), the primary reports it neither way but relays a *notice* (stage 2,
``notices``), ``counted`` if one of its own operations counted it.  The cross-shard group
records each pair it applies (``RELAYED``: the event's sender and ``sender_eseq``, the match
made of it), marks it *absorbed* when an operation counts it (``absorb``: a completion's
prefix, or an expiry) and, on the notice (``decide``), reports the event unless it was
counted there or here: absorbed, or still a match of a pending operation (one purgatory
counts an event its pending operation holds when it finalises it).  An unabsorbed pair's
operation had completed, with the event inside its window, before the event was final:
one purgatory's reason is ``after_resolution`` (its key's resolution time, or for a targeted
event its own operation's resolution).

*Why a notice comes after every pair of its event.*  Pairs of e are made only while e is
buffered: in the calls of its primary up to the one that finalises it (F).  In F matching
comes before finalisation, so F's pairs are in F's relay with stage 0 (a stub that came in
F; an event arriving in F is not final in F), and the notice with stage 2; ``steps`` applies
a batch's stages in order, and batches in order, so the notice finds every pair of e
applied, and no pair of a later batch (the cross-shard group's state is the one purgatory's
when it finalises e in F; its wheel is at most at F's watermark then, and an operation it
has not yet expired still holds e, which expiry would count: the same answer).

The host carries relay rows between the two (``spark_purgatory.state.mailbox``, which
explains why expiry still waits for every event that can count); the engine only produces
and consumes them.  Cost: a pair per (event, cross-shard operation) it counts for and a
notice per paired event; events no cross-shard operation watches never travel.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from . import dedup, watchers
from .conditions import FLOOR_ESEQ, OFFSET
from .frames import empty, hash_strings, rows_by_handle, rows_where
from .tables import I64_MIN, MATCHES, RELAY, RELAYED

__all__ = [
    "REGISTRATION",
    "ARRIVAL",
    "FINAL",
    "outgoing",
    "notices",
    "steps",
    "matches_of",
    "absorb",
    "decide",
]

#: a relay row's stage: a pair whose event was buffered when its stub arrived, or arrived
#: itself; a notice that a paired event became final
REGISTRATION, ARRIVAL, FINAL = 0, 1, 2
_STAGES = 3


def outgoing(
    ops: pd.DataFrame,
    watch: pd.DataFrame,
    matches: pd.DataFrame,
    events: pd.DataFrame,
    *,
    new_from: int,
    new_eseq_from: int,
) -> pd.DataFrame:
    """The relay rows of this batch: stub matches made in it and new ``offset`` stubs' floors.

    ``new_from`` / ``new_eseq_from``: the first handle / event sequence number of this batch
    (a match is new when its operation or its event is).
    """
    parts = [_pairs(ops, matches, events, new_from, new_eseq_from), _floors(ops, watch, new_from)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty(RELAY)
    return pd.concat(parts, ignore_index=True).astype(RELAY)


def _pairs(
    ops: pd.DataFrame, matches: pd.DataFrame, events: pd.DataFrame, new_from: int, new_eseq_from: int
) -> pd.DataFrame:
    if len(matches) == 0:
        return empty(RELAY)
    handle, eseq = matches["handle"].to_numpy(np.int64), matches["eseq"].to_numpy(np.int64)
    new = (handle >= new_from) | (eseq >= new_eseq_from)
    if not new.any():
        return empty(RELAY)
    handle, eseq = handle[new], eseq[new]
    of_op = rows_by_handle(ops, np.unique(handle))
    at = np.searchsorted(of_op["handle"].to_numpy(np.int64), handle)
    stub = of_op["stub"].to_numpy(bool)[at]
    handle, eseq, at = handle[stub], eseq[stub], at[stub]
    if handle.size == 0:
        return empty(RELAY)
    # the events of new matches are all still buffered: the relay is made before finalising
    row = np.searchsorted(events["eseq"].to_numpy(np.int64), eseq)
    ev = events.iloc[row]
    return pd.DataFrame(
        {
            "for_op": of_op["op_id"].to_numpy(dtype=object)[at],
            "key": ev["key"].to_numpy(dtype=object),
            "ts": ev["ts"].to_numpy(np.int64),
            "op_id": ev["op_id"].to_numpy(dtype=object),
            "source": ev["source"].to_numpy(dtype=object),
            "value": ev["value"].to_numpy(float),
            "stage": np.where(eseq >= new_eseq_from, ARRIVAL, REGISTRATION).astype(np.int8),
            "floor": False,
            "sender_eseq": eseq,
            "counted": False,
        }
    )


def _floors(ops: pd.DataFrame, watch: pd.DataFrame, new_from: int) -> pd.DataFrame:
    """The floors of the ``offset`` stubs registered from ``new_from`` on (keys with progress)."""
    new = ops.loc[ops["handle"].to_numpy(np.int64) >= new_from]  # ops are sorted by handle
    new = new.loc[new["stub"].to_numpy(bool) & (new["cond"].to_numpy() == OFFSET)]
    if len(new) == 0:
        return empty(RELAY)
    rows = watch.loc[watch["handle"].isin(new["handle"]) & watch["progress_at_watch"].notna()]
    at = np.searchsorted(new["handle"].to_numpy(np.int64), rows["handle"].to_numpy(np.int64))
    return pd.DataFrame(
        {
            "for_op": new["op_id"].to_numpy(dtype=object)[at],
            "key": rows["key"].to_numpy(dtype=object),
            "ts": I64_MIN,
            "op_id": None,
            "source": None,
            "value": rows["progress_at_watch"].to_numpy(float),
            "stage": np.int8(REGISTRATION),
            "floor": True,
            "sender_eseq": FLOOR_ESEQ,
            "counted": False,
        }
    )


def notices(final: pd.DataFrame, counted: np.ndarray) -> pd.DataFrame:
    """The notices of paired events that became final (``final``: event rows; ``counted``:
    per row, whether an operation of this shard counted it)."""
    if len(final) == 0:
        return empty(RELAY)
    return pd.DataFrame(
        {
            "for_op": None,
            "key": final["key"].to_numpy(dtype=object),
            "ts": final["ts"].to_numpy(np.int64),
            "op_id": final["op_id"].to_numpy(dtype=object),
            "source": final["source"].to_numpy(dtype=object),
            "value": final["value"].to_numpy(float),
            "stage": np.int8(FINAL),
            "floor": False,
            "sender_eseq": final["eseq"].to_numpy(np.int64),
            "counted": np.asarray(counted, bool),
        }
    ).astype(RELAY)


def steps(relayed: pd.DataFrame | None) -> Iterator[pd.DataFrame]:
    """Relay rows (with their ``batch``) in the order they were made: by batch, and in a
    batch the registration stage, the arrivals, then the notices (a loop over steps)."""
    if relayed is None or len(relayed) == 0:
        return
    order = np.lexsort((relayed["stage"].to_numpy(), relayed["batch"].to_numpy()))
    rows = relayed.iloc[order].reset_index(drop=True)
    step = rows["batch"].to_numpy(np.int64) * _STAGES + rows["stage"].to_numpy(np.int64)
    starts = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(rows)], strict=True):
        yield rows.iloc[start:end]


def matches_of(
    ops: pd.DataFrame, seen: pd.DataFrame, rows: pd.DataFrame, eseq_from: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Relay rows (pairs and floors, with their ``sender``) as match rows of the pending
    operations they name (others are dropped: resolved already), and the ``RELAYED`` record
    of every pair (a dropped one too: its notice is awaited all the same).  Pairs get fresh
    sequence numbers from ``eseq_from`` on, in row order.

    A floor is a match without an event (``eseq`` ``FLOOR_ESEQ``, at the earliest time):
    ``evaluate`` takes its value into the key's progress as it takes ``progress_at_watch``
    and does not count it among the matched events.
    """
    if len(rows) == 0:
        return empty(MATCHES), empty(RELAYED)
    is_pair = ~rows["floor"].to_numpy(bool)
    eseq = np.full(len(rows), FLOOR_ESEQ, dtype=np.int64)
    eseq[is_pair] = np.arange(eseq_from, eseq_from + int(is_pair.sum()), dtype=np.int64)
    record = pd.DataFrame(
        {"sender": rows["sender"].to_numpy(), "sender_eseq": rows["sender_eseq"].to_numpy()}
    )
    record = record.assign(eseq=eseq, absorbed=False).loc[is_pair].astype(RELAYED)
    if len(seen) == 0:
        return empty(MATCHES), record.reset_index(drop=True)
    probe, at = dedup.lookup_seen(seen, rows["for_op"].to_numpy(dtype=object))
    handles = seen["handle"].to_numpy(np.int64)[at]
    live = handles >= 0
    probe, handles = probe[live], handles[live]
    found = rows.iloc[probe].assign(handle=handles, eseq=eseq[probe]).reset_index(drop=True)
    floor = found["floor"].to_numpy(bool)
    floors = found.loc[floor]
    floor_rows = pd.DataFrame(
        {
            "handle": handles[floor],
            "khash": hash_strings(floors["key"].to_numpy(dtype=object)),
            "ts": I64_MIN,
            "eseq": FLOOR_ESEQ,
            "value": floors["value"].to_numpy(float),
            "source": None,
            "is_member": False,
        }
    ).astype(MATCHES)
    pairs = found.loc[~floor, ["key", "ts", "op_id", "source", "value", "handle", "eseq"]]
    made = watchers.matches_in_window(ops, pairs)
    matches = pd.concat([m for m in (made, floor_rows) if len(m)] or [made], ignore_index=True)
    return matches.astype(MATCHES), record.reset_index(drop=True)


def absorb(relayed: pd.DataFrame, eseqs: np.ndarray) -> pd.DataFrame:
    """``relayed`` with the pairs whose matches an operation counted (``eseqs``) absorbed."""
    if len(relayed) == 0 or eseqs.size == 0:
        return relayed
    hit = np.isin(relayed["eseq"].to_numpy(np.int64), eseqs)
    if not hit.any():
        return relayed
    relayed = relayed.copy()
    relayed.loc[hit, "absorbed"] = True
    return relayed


def decide(
    notes: pd.DataFrame, relayed: pd.DataFrame, pending: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cross-shard group's answer to notices (with their ``sender``): the notices of the
    events nothing counted (their event fields, to report ``after_resolution``), and
    ``relayed`` without the noticed events.  ``pending``: the ``eseq`` of the matches the
    pending operations hold."""
    ids = ["sender", "sender_eseq"]
    held = relayed["absorbed"].to_numpy(bool) | np.isin(relayed["eseq"].to_numpy(np.int64), pending)
    used = relayed.loc[held, ids].drop_duplicates().assign(absorbed=True)
    answer = notes[ids].merge(used, on=ids, how="left")["absorbed"].notna().to_numpy()
    lost = notes.loc[~answer & ~notes["counted"].to_numpy(bool)]
    noticed = pd.MultiIndex.from_frame(relayed[ids]).isin(pd.MultiIndex.from_frame(notes[ids]))
    return lost.reset_index(drop=True), rows_where(relayed, ~noticed)
