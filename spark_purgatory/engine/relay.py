"""The relay: how a primary shard hands a cross-shard operation what its keys' watchers saw.

Each primary shard of a cross-shard operation's keys holds a *stub* of it: a watcher that
never completes and reports nothing.  What the stubs match is relayed to the cross-shard
group, which decides the operation:

* ``outgoing`` (a primary, each batch): every (event, stub) match made in the batch, in two
  stages (0: events buffered before a stub that arrived now; 1: events new in the batch),
  and each new ``offset`` stub's key *floors*.  Each pair is made, so relayed, once.
* ``matches_of`` (the cross-shard group): the pairs become matches of their operations,
  batch by batch (``steps``).  The outcome equals one purgatory's holding every key, up to
  one micro-batch later.

**Notices.**  Only the cross-shard group knows whether a paired event was counted, so when
such an event becomes final the primary relays a *notice* (stage 2) instead of reporting it.
The group marks a pair *absorbed* when an operation counts it and, on the notice
(``decide``), reports the event unless it was counted.  A notice comes after every pair of
its event: pairs are made only while the event is buffered, and batches and stages are
applied in order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from . import watchers
from .arrays import hash_strings, isin, pairs_in, search
from .conditions import FLOOR_ESEQ, OFFSET
from .rows import Rows
from .tables import I64_MIN, MATCHES, RELAY, RELAYED

#: a relay row's stage
REGISTRATION, ARRIVAL, FINAL = 0, 1, 2
_STAGES = 3
#: no relay rows
NOTHING = Rows.empty(RELAY)
_FLAGS = ("floor", "counted", "covered", "cancel")
#: a relay row's fields where its kind leaves them unsaid
_UNSAID = {**dict.fromkeys(("for_op", "op_id", "source")), **dict.fromkeys(_FLAGS, False)}


def outgoing(
    ops: Rows, watch: Rows, matches: Rows, events: Rows, *, new_from: int, new_eseq_from: int
) -> Rows:
    """The relay rows of this batch (its first handle ``new_from``, first event
    ``new_eseq_from``): stub matches made in it and new ``offset`` stubs' floors."""
    parts = [_pairs(ops, matches, events, new_from, new_eseq_from), _floors(ops, watch, new_from)]
    return Rows.concat(parts, RELAY).cast(RELAY)


def _pairs(ops: Rows, matches: Rows, events: Rows, new_from: int, new_eseq_from: int) -> Rows:
    if len(matches) == 0:
        return NOTHING
    handle, eseq = matches["handle"], matches["eseq"]
    new = (handle >= new_from) | (eseq >= new_eseq_from)
    if not new.any():
        return NOTHING
    handle, eseq = handle[new], eseq[new]
    at = search(ops["handle"], handle)
    stub = ops["stub"][at]
    if not stub.any():
        return NOTHING
    eseq, at = eseq[stub], at[stub]
    row = search(events["eseq"], eseq)
    ts = events["ts"][row]
    # an event before its (offset) operation only raises the key's progress: it goes as a
    # floor, which awaits no notice; a cancel there does neither
    floor = ts < ops["ts"][at]
    dropped = floor & events["cancel"][row]
    if dropped.any():
        keep = ~dropped
        eseq, at, row, ts, floor = eseq[keep], at[keep], row[keep], ts[keep], floor[keep]
    columns = {
        "for_op": ops["op_id"][at],
        "key": events["key"][row],
        "ts": np.where(floor, I64_MIN, ts),
        "op_id": events["op_id"][row],
        "source": events["source"][row],
        "value": events["value"][row],
        "cancel": events["cancel"][row],
        "stage": np.where(eseq >= new_eseq_from, ARRIVAL, REGISTRATION).astype(np.int8),
        "floor": floor,
        "sender_eseq": np.where(floor, FLOOR_ESEQ, eseq),
    }
    return Rows({**_UNSAID, **columns}, eseq.size)


def _floors(ops: Rows, watch: Rows, new_from: int) -> Rows:
    """The floors of the ``offset`` stubs registered from ``new_from`` on (keys with progress)."""
    new = (ops["handle"] >= new_from) & ops["stub"] & (ops["cond"] == OFFSET)
    if not new.any():
        return NOTHING
    handles = ops["handle"][new]
    rows = np.flatnonzero(isin(watch["handle"], handles) & ~np.isnan(watch["progress_at_watch"]))
    at = search(handles, watch["handle"][rows])
    columns = {
        "for_op": ops["op_id"][new][at],
        "key": watch["key"][rows],
        "ts": I64_MIN,
        "value": watch["progress_at_watch"][rows],
        "stage": np.int8(REGISTRATION),
        "floor": True,
        "sender_eseq": np.int64(FLOOR_ESEQ),
    }
    return Rows({**_UNSAID, **columns}, rows.size)


def notices(final: Rows, counted: np.ndarray, covered: np.ndarray | None = None) -> Rows:
    """The notices of paired events that became final: whether an operation of this shard
    ``counted`` each, and whether a window of one of its completed operations ``covered`` it."""
    if len(final) == 0:
        return NOTHING
    columns = {
        "key": final["key"],
        "ts": final["ts"],
        "op_id": final["op_id"],
        "source": final["source"],
        "value": final["value"],
        "cancel": final["cancel"],
        "stage": np.int8(FINAL),
        "sender_eseq": final["eseq"],
        "counted": np.asarray(counted, bool),
        "covered": np.zeros(len(final), bool) if covered is None else np.asarray(covered, bool),
    }
    return Rows({**_UNSAID, **columns}, len(final)).cast(RELAY)


def steps(relayed: Rows | None) -> Iterator[Rows]:
    """Relay rows in the order they were made: per ``batch``, its pairs and floors of both
    stages as one step (the primary decided them at once), then its notices."""
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
    """Relay rows as match rows of the pending operations they name (``named``: row, handle;
    ``ops``: theirs), and the ``RELAYED`` record of every pair, whose notice is awaited even
    when its operation is gone (``spurious``: its stub belongs to no operation held here)."""
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
    order = np.argsort(probe, kind="stable")
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
            "cancel": False,
        },
        f_row.size,
    ).cast(MATCHES)
    p_row = probe[~floor]
    found = Rows({c: rows[c][p_row] for c in watchers.PAIR[2:] if c != "eseq"}, p_row.size)
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
    """The notices of the events nothing counted, whether each is ``after_resolution`` (an
    event only ``spurious`` pairs name: the sender's ``covered``), and ``relayed`` without them."""
    sender, sender_eseq = notes["sender"].astype(np.int64), notes["sender_eseq"].astype(np.int64)
    held = np.flatnonzero(relayed["absorbed"] | isin(relayed["eseq"], pending))
    used = pairs_in(sender, sender_eseq, relayed["sender"][held], relayed["sender_eseq"][held])
    lost = ~used & ~notes["counted"].astype(bool)
    real = np.flatnonzero(~relayed["spurious"].astype(bool))
    matched = pairs_in(sender, sender_eseq, relayed["sender"][real], relayed["sender_eseq"][real])
    after = (matched | notes["covered"].astype(bool))[lost]
    noticed = pairs_in(relayed["sender"], relayed["sender_eseq"], sender, sender_eseq)
    return notes.where(lost), after, relayed.where(~noticed)
