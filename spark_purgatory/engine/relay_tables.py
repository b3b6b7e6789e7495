"""A shard's side of the cross-shard hand-off (``relay``), on the shard's live tables.

Invariant: nothing here holds state of its own; every table read or written is the one passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from . import progress, relay, watchers
from .arrays import distinct, hash_strings
from .rows import Rows

if TYPE_CHECKING:
    from .snapshot import LiveTables


def of_stubs(t: LiveTables) -> np.ndarray:
    """Which ``matches`` belong to stubs (every match's operation is pending)."""
    held = t.matches["handle"]
    if held.size == 0:
        return np.zeros(0, dtype=bool)
    return t.pending.stub(held)


def outgoing(
    t: LiveTables, new_from: int, new_eseq_from: int, stub_matches: np.ndarray, new_stubs: bool
) -> Rows:
    """``relay.outgoing`` on the rows it reads (``stub_matches``: ``of_stubs(t)``)."""
    if not new_stubs and not stub_matches.any():
        return relay.NOTHING
    held = t.matches["handle"]
    ops, watch = t.pending.since(new_from)
    if held.size:
        ops = t.pending.rows(np.concatenate([held, ops["handle"]]))
    return relay.outgoing(ops, watch, t.matches, t.events, new_from=new_from, new_eseq_from=new_eseq_from)


def receive(
    t: LiveTables, relayed: Rows | None, batch_id: int, try_complete: Callable[[np.ndarray], None]
) -> Rows:
    """Relayed rows as matches, step by step; returns the noticed events nothing counted."""
    lost = Rows.empty(progress.UNMATCHED)
    for rows in relay.steps(relayed):
        if rows["stage"][0] == relay.FINAL:
            pending = t.matches["eseq"]
            noticed, after, t.relayed = relay.decide(rows, t.relayed, pending)
            lost = lost.stack(progress.unmatched_rows(noticed, after, batch_id))
            continue
        for_op = rows["for_op"].astype(object, copy=False)
        named = t.pending.by_op_id(for_op)
        # only the keys the operation held here watches: a refused copy may have left stubs
        held = t.pending.rows(named[1], keys=True)
        watched = watchers.watching(held, named[1], rows["key"][named[0]])
        named = (named[0][watched], named[1][watched])
        # a pair of no pending operation and no window here is a refused copy's
        ours = np.zeros(len(rows), dtype=bool)
        ours[named[0]] = True
        mine = Rows({"khash": hash_strings(rows["key"]), "ts": rows["ts"], "op_id": for_op}, len(rows))
        spurious = ~ours & ~t.windows.covers(mine)
        ops = t.pending.rows(named[1])
        new, record = relay.matches_of(ops, named, rows, t.next_eseq, spurious)
        t.next_eseq += len(rows)
        t.relayed = t.relayed.stack(record)
        if len(new):
            t.matches = t.matches.stack(new)
            try_complete(distinct(new["handle"]))
    return lost
