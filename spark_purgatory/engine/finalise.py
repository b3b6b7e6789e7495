"""Events the watermark has passed, which no future operation can count: their values go
into their keys' progress, and an event nothing counted becomes an ``unmatched_events`` row,
unless a stub matched it (then the cross-shard group reports it on the stub's notice).

Invariant: every buffered event leaves the buffer exactly once, the first time the watermark
is past its ``ts``.
"""

from __future__ import annotations

import numpy as np

from . import progress, relay, relay_tables
from .arrays import isin
from .rows import Rows
from .snapshot import LiveTables

_NO_HANDLES = np.empty(0, dtype=np.int64)


def in_window(t: LiveTables) -> np.ndarray:
    """Which ``matches`` lie in their operation's window (not an ``offset`` key's earlier progress)."""
    if len(t.matches) == 0:
        return np.zeros(0, dtype=bool)
    return t.matches["ts"] >= t.pending.column("ts", t.matches["handle"])


def finalise_events(t: LiveTables, wm: int, paired: np.ndarray, batch_id: int) -> tuple[Rows, Rows]:
    """Take the events behind ``wm`` out of the buffer into key progress; return the
    ``unmatched_events`` rows of those nothing counted and the notices of the ``paired`` ones."""
    evs = t.events
    done = evs["ts"] < wm
    if not done.any():
        return Rows.empty(progress.UNMATCHED), relay.notices(evs.take(_NO_HANDLES), done[:0])
    final = evs.where(done)
    t.events = evs.where(~done)
    eseq = final["eseq"]
    # held by a pending operation of this shard: it counts
    used = final["used"]
    if len(t.matches):
        used = used | isin(eseq, t.matches["eseq"][~relay_tables.of_stubs(t) & in_window(t)])
    progress.final_progress(t.keys, final)
    mine = ~final["replica"]
    relayed = isin(eseq, paired) & mine if paired.size else np.zeros(len(final), bool)
    paired_final = final.where(relayed)
    notes = relay.notices(paired_final, used[relayed], t.windows.covers(paired_final))
    lost = final.where(~used & ~relayed & mine)
    if len(lost) == 0:
        return Rows.empty(progress.UNMATCHED), notes
    return progress.unmatched_rows(lost, t.windows.covers(lost), batch_id), notes
