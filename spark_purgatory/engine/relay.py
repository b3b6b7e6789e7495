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
  a batch's pairs of both stages in one step, evaluated as the primary's were (once, an
  operation against the events buffered before it and those of its micro-batch).  The
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

The host carries relay rows between the two (``spark_purgatory.handoff.mailbox``, which
explains why expiry still waits for every event that can count); the engine only produces
and consumes them.  Cost: a pair per (event, cross-shard operation) it counts for and a
notice per paired event; events no cross-shard operation watches never travel.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from . import watchers
from .arrays import hash_strings, isin, pairs_in, search
from .conditions import FLOOR_ESEQ, OFFSET
from .rows import Rows
from .tables import I64_MIN, MATCHES, RELAY, RELAYED

__all__ = [
    "REGISTRATION",
    "ARRIVAL",
    "FINAL",
    "NOTHING",
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
#: no relay rows
NOTHING = Rows.empty(RELAY)
_NONE = NOTHING


def outgoing(
    ops: Rows, watch: Rows, matches: Rows, events: Rows, *, new_from: int, new_eseq_from: int
) -> Rows:
    """The relay rows of this batch: stub matches made in it and new ``offset`` stubs' floors.

    ``ops``: the rows (sorted by handle, once each) of the operations of ``matches`` and of
    those registered from ``new_from`` on, whose watchers are ``watch``.  ``new_from`` /
    ``new_eseq_from``: the first handle / event sequence number of this batch (a match is
    new when its operation or its event is).
    """
    parts = [_pairs(ops, matches, events, new_from, new_eseq_from), _floors(ops, watch, new_from)]
    return Rows.concat(parts, RELAY).cast(RELAY)


def _pairs(ops: Rows, matches: Rows, events: Rows, new_from: int, new_eseq_from: int) -> Rows:
    if len(matches) == 0:
        return _NONE
    handle, eseq = matches["handle"], matches["eseq"]
    new = (handle >= new_from) | (eseq >= new_eseq_from)
    if not new.any():
        return _NONE
    handle, eseq = handle[new], eseq[new]
    at = search(ops["handle"], handle)
    stub = ops["stub"][at]
    if not stub.any():
        return _NONE
    eseq, at = eseq[stub], at[stub]
    # the events of new matches are all still buffered: the relay is made before finalising
    row = search(events["eseq"], eseq)
    ts = events["ts"][row]
    # an event before its (offset) operation only raises the key's progress there: it goes as a
    # floor, which counts no event and awaits no notice (the primary reports the event itself)
    floor = ts < ops["ts"][at]
    columns = {
        "for_op": ops["op_id"][at],
        "key": events["key"][row],
        "ts": np.where(floor, I64_MIN, ts),
        "op_id": events["op_id"][row],
        "source": events["source"][row],
        "value": events["value"][row],
        "stage": np.where(eseq >= new_eseq_from, ARRIVAL, REGISTRATION).astype(np.int8),
        "floor": floor,
        "sender_eseq": np.where(floor, FLOOR_ESEQ, eseq),
        "counted": False,
        "covered": False,
    }
    return Rows(columns, eseq.size)


def _floors(ops: Rows, watch: Rows, new_from: int) -> Rows:
    """The floors of the ``offset`` stubs registered from ``new_from`` on (keys with progress)."""
    new = (ops["handle"] >= new_from) & ops["stub"] & (ops["cond"] == OFFSET)
    if not new.any():
        return _NONE
    handles = ops["handle"][new]
    rows = np.flatnonzero(isin(watch["handle"], handles) & ~np.isnan(watch["progress_at_watch"]))
    at = search(handles, watch["handle"][rows])
    columns = {
        "for_op": ops["op_id"][new][at],
        "key": watch["key"][rows],
        "ts": I64_MIN,
        "op_id": None,
        "source": None,
        "value": watch["progress_at_watch"][rows],
        "stage": np.int8(REGISTRATION),
        "floor": True,
        "sender_eseq": np.int64(FLOOR_ESEQ),
        "counted": False,
        "covered": False,
    }
    return Rows(columns, rows.size)


def notices(final: Rows, counted: np.ndarray, covered: np.ndarray | None = None) -> Rows:
    """The notices of paired events that became final (``final``: event rows; ``counted``:
    per row, whether an operation of this shard counted it; ``covered``: whether a window of
    one of its completed operations holds it)."""
    if len(final) == 0:
        return _NONE
    columns = {
        "for_op": None,
        "key": final["key"],
        "ts": final["ts"],
        "op_id": final["op_id"],
        "source": final["source"],
        "value": final["value"],
        "stage": np.int8(FINAL),
        "floor": False,
        "sender_eseq": final["eseq"],
        "counted": np.asarray(counted, bool),
        "covered": np.zeros(len(final), bool) if covered is None else np.asarray(covered, bool),
    }
    return Rows(columns, len(final)).cast(RELAY)


def steps(relayed: Rows | None) -> Iterator[Rows]:
    """Relay rows (with their ``batch``) in the order they were made: by batch, and in a
    batch its pairs and floors (the registration stage's rows, then the arrivals') as one
    step, then its notices (a loop over steps).  One step for both stages, as the primary
    decides an operation once against the events buffered before it and those of its own
    micro-batch, in event time: an ``any`` operation whose stubs pair it with a buffered
    event at 179 and a new one at 128 completes at 128, not at 179."""
    if relayed is None or len(relayed) == 0:
        return
    rows = relayed.take(np.lexsort((relayed["stage"], relayed["batch"])))
    step = rows["batch"].astype(np.int64) * _STAGES + (rows["stage"] == FINAL).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(rows)], strict=True):
        yield rows.take(np.arange(start, end))


def matches_of(
    ops: Rows,
    named: tuple[np.ndarray, np.ndarray],
    rows: Rows,
    eseq_from: int,
    spurious: np.ndarray | None = None,
) -> tuple[Rows, Rows]:
    """Relay rows (pairs and floors, with their ``sender``) as match rows of the pending
    operations they name (others are dropped: resolved already), and the ``RELAYED`` record
    of every pair (a dropped one too: its notice is awaited all the same).  Pairs get fresh
    sequence numbers from ``eseq_from`` on, in row order.

    ``named``: (row of ``rows``, handle) of the rows whose ``for_op`` is pending
    (``Pending.by_op_id``); ``ops``: those operations' rows, sorted by handle.  ``spurious``:
    per row, whether its stub belongs to no operation held here, pending or completed (a
    refused duplicate's: recorded so that its notice is answered with the sender's reason).

    A floor is a match without an event (``eseq`` ``FLOOR_ESEQ``, at the earliest time):
    ``evaluate`` takes its value into the key's progress as it takes ``progress_at_watch``
    and does not count it among the matched events.
    """
    if len(rows) == 0:
        return Rows.empty(MATCHES), Rows.empty(RELAYED)
    is_pair = ~rows["floor"].astype(bool)
    eseq = np.full(len(rows), FLOOR_ESEQ, dtype=np.int64)
    eseq[is_pair] = np.arange(eseq_from, eseq_from + int(is_pair.sum()), dtype=np.int64)
    pairs = np.flatnonzero(is_pair)
    record = Rows(
        {
            "sender": rows["sender"][pairs].astype(np.int64),
            "sender_eseq": rows["sender_eseq"][pairs].astype(np.int64),
            "eseq": eseq[pairs],
            "absorbed": False,
            "spurious": np.zeros(pairs.size, bool) if spurious is None else spurious[pairs],
        },
        pairs.size,
    )
    probe, handles = named
    order = np.argsort(probe, kind="stable")  # in row order
    probe, handles = probe[order], handles[order]
    if probe.size == 0:
        return Rows.empty(MATCHES), record
    floor = rows["floor"][probe].astype(bool)
    f_row = probe[floor]
    floor_rows = Rows(
        {
            "handle": handles[floor],
            "khash": hash_strings(rows["key"][f_row]),
            "ts": I64_MIN,
            "eseq": np.int64(FLOOR_ESEQ),
            "value": rows["value"][f_row].astype(float),
            "source": None,
            "is_member": False,
        },
        f_row.size,
    ).cast(MATCHES)
    p_row = probe[~floor]
    found = Rows({c: rows[c][p_row] for c in ("key", "ts", "op_id", "source", "value")}, p_row.size)
    made = watchers.matches_in_window(ops, found.assign(handle=handles[~floor], eseq=eseq[p_row]))
    return Rows.concat([made, floor_rows], MATCHES).cast(MATCHES), record


def absorb(relayed: Rows, eseqs: np.ndarray) -> Rows:
    """``relayed`` with the pairs whose matches an operation counted (``eseqs``) absorbed."""
    if len(relayed) == 0 or eseqs.size == 0:
        return relayed
    hit = isin(relayed["eseq"], eseqs)
    if not hit.any():
        return relayed
    return relayed.assign(absorbed=relayed["absorbed"] | hit)


def decide(notes: Rows, relayed: Rows, pending: np.ndarray) -> tuple[Rows, np.ndarray, Rows]:
    """The cross-shard group's answer to notices (with their ``sender``): the notices of the
    events nothing counted (their event fields), whether each is ``after_resolution``, and
    ``relayed`` without the noticed events.  ``pending``: the ``eseq`` of the matches the
    pending operations hold.

    An event one of this group's operations matched (not a ``spurious`` pair) and nothing
    counted was inside the window of an operation that completed without it:
    ``after_resolution``.  An event only spurious pairs name (stubs of a copy refused here as
    a duplicate) gets the sender's own reason (``covered``), as if the stubs never were."""
    sender, sender_eseq = notes["sender"].astype(np.int64), notes["sender_eseq"].astype(np.int64)
    held = np.flatnonzero(relayed["absorbed"] | isin(relayed["eseq"], pending))
    used = pairs_in(sender, sender_eseq, relayed["sender"][held], relayed["sender_eseq"][held])
    lost = ~used & ~notes["counted"].astype(bool)
    real = np.flatnonzero(~relayed["spurious"].astype(bool))
    matched = pairs_in(sender, sender_eseq, relayed["sender"][real], relayed["sender_eseq"][real])
    after = (matched | notes["covered"].astype(bool))[lost]
    noticed = pairs_in(relayed["sender"], relayed["sender_eseq"], sender, sender_eseq)
    return notes.where(lost), after, relayed.where(~noticed)
