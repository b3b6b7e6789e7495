"""The small tables in delta files: whole at the head of a chain, as changes after it.

Two of a shard's "small" tables grow with a busy shard's traffic: the buffered events (events
the watermark has not passed yet, by ``eseq``) and the windows of completed operations (kept
until the watermark passes their end).  Written whole by every save, they made a save cost
the shard's size rather than its batch.  So a delta file (``deltas``) holds them whole only
when it heads its chain, and after that what changed since the file before it:

* **events**: the rows from the last save's ``next_eseq`` on (a lineage's eseqs only grow),
  the eseqs that left (finalised), the eseqs newly ``used`` (never unset);
* **windows**: the rows remembered since the last save (``Purgatory.windows_added``); those
  the watermark has since passed are dropped on load (``end`` at or below the file's
  ``retired_wm``, as the engine drops them).

The other small tables (matches, key progress, relayed pairs, parked operations) and the
scalars stay whole in every file.  A file whose metadata says nothing (``small`` absent: a
chain's head, a whole value, any file written before this scheme) holds both whole; a load
starts from the last such file of the chain it read, or from the live shard it brings
forward, and applies the changes after it in order.

Invariant: the events and windows of a chain's files, applied in order, are those the shard
held when the last file was written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.frames import empty, isin
from ..engine.purgatory import Purgatory
from ..engine.tables import EVENTS, SMALL_TABLES, WINDOWS, ShardTables
from .codec import frame_bytes, frame_from, handles_bytes, handles_from

__all__ = ["SmallMark", "small_mark", "small_parts", "small_tables"]

#: the metadata key of a file that holds the events and windows as changes
_CHANGES = "small"
#: the small tables a file after its chain's head holds as changes
_CHANGING = ("events", "windows")


@dataclass(frozen=True)
class SmallMark:
    """The events and windows as the last save (or load) left them: what a change is from."""

    eseq: np.ndarray  # the events' eseqs, ascending
    used: np.ndarray  # their ``used`` flags
    next_eseq: int
    windows: int  # ``Purgatory.windows_added``'s mark


def small_mark(p: Purgatory, events: pd.DataFrame, next_eseq: int) -> SmallMark:
    """The mark of ``p`` whose buffered events are ``events`` (``EVENTS``)."""
    return SmallMark(
        events["eseq"].to_numpy(np.int64),
        events["used"].to_numpy(bool),
        int(next_eseq),
        p.windows_added()[1],
    )


def small_parts(
    p: Purgatory, t: ShardTables, since: SmallMark | None
) -> tuple[dict[str, bytes], dict[str, str], SmallMark]:
    """The small tables' parts of a delta file (and its metadata): every table whole when
    ``since`` is None (a chain's head), else the events and windows as their change since
    ``since``, the other tables whole; and the mark of what was written."""
    parts = {name: frame_bytes(getattr(t, name)) for name in SMALL_TABLES if name not in _CHANGING}
    parts["due"] = handles_bytes(t.due)
    mark = small_mark(p, t.events, t.next_eseq)
    change = None if since is None else _events_change(t.events, mark, since)
    if change is None:
        parts.update(events=frame_bytes(t.events), windows=frame_bytes(t.windows))
        return parts, {}, mark
    windows, _ = p.windows_added(since.windows)
    parts.update(change)
    parts["windows_new"] = frame_bytes(windows)
    return parts, {_CHANGES: "changes"}, mark


def _events_change(events: pd.DataFrame, now: SmallMark, since: SmallMark) -> dict[str, bytes] | None:
    """The events' change from ``since`` to ``now`` as parts; None when it cannot be told
    (eseqs out of order, a flag unset): the caller writes them whole."""
    if np.any(np.diff(now.eseq) <= 0) or np.any(np.diff(since.eseq) <= 0):
        return None
    old = now.eseq < since.next_eseq
    at = np.searchsorted(since.eseq, now.eseq[old])
    held = at < since.eseq.size
    if not held.all() or np.any(since.eseq[at[held]] != now.eseq[old]):
        return None  # an old eseq the last save did not hold
    was_used = since.used[at]
    if np.any(was_used & ~now.used[old]):
        return None
    return {
        "events_new": frame_bytes(events.iloc[int(np.count_nonzero(old)) :]),
        "events_gone": handles_bytes(since.eseq[~isin(since.eseq, now.eseq)]),
        "events_used": handles_bytes(now.eseq[old][now.used[old] & ~was_used]),
    }


Frames = tuple[pd.DataFrame, pd.DataFrame]


def small_tables(files: list[tuple[dict, dict]], live: Callable[[], Frames] | None = None) -> Frames:
    """The events and windows of the last of ``files`` (a chain's files read, oldest first):
    from the last file holding them whole, or, when none of them does, from ``live()`` (the
    live shard's, at the version right before the first file), with the changes after it
    applied.  Windows the last file's ``retired_wm`` passed are dropped."""
    heads = [i for i, (_, meta) in enumerate(files) if meta.get(_CHANGES) != "changes"]
    if heads:
        parts, _ = files[heads[-1]]
        events, windows = frame_from(parts["events"], EVENTS), frame_from(parts["windows"], WINDOWS)
        files = files[heads[-1] + 1 :]
    elif live is not None:
        events, windows = live()
    else:
        raise ValueError("a chain of delta files without its head: the state files are incomplete")
    added = [windows]
    for parts, _ in files:
        gone, used = handles_from(parts["events_gone"]), handles_from(parts["events_used"])
        eseq = events["eseq"].to_numpy(np.int64)
        kept = ~isin(eseq, gone)
        flags = events["used"].to_numpy(bool) | isin(eseq, used)
        events = pd.concat(
            [events.assign(used=flags).loc[kept], frame_from(parts["events_new"], EVENTS)], ignore_index=True
        )
        added.append(frame_from(parts["windows_new"], WINDOWS))
    if len(added) > 1:
        windows = pd.concat(added, ignore_index=True) if any(len(w) for w in added) else empty(WINDOWS)
    if files:
        retired = int(files[-1][1]["retired_wm"])
        windows = windows.loc[windows["end"].to_numpy(np.int64) > retired].reset_index(drop=True)
    return events.reset_index(drop=True), windows
