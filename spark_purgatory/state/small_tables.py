"""The small tables in delta files: whole in one file, as changes in the next ones.

Two of a shard's "small" tables grow with a busy shard's traffic: the buffered events and the
windows of completed operations.  A delta file holds them whole once every ``MAX_DELTAS``
files, and in the files after it what changed since the file before: the new events, the
eseqs that left and those newly ``used``; the windows remembered since (those at or below
the file's ``retired_wm`` are dropped on load, as the engine drops them).

Each file names its *small chain* (metadata ``small_chain``), from the last file holding them
whole to itself; a file that names none holds both whole.  The other small tables and the
scalars stay whole in every file.

Invariant: the events and windows of a small chain's files, applied in order, are those the
shard held when its last file was written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..engine.arrays import isin
from ..engine.frames import empty, rows_where, stack
from ..engine.purgatory import Purgatory
from ..engine.tables import EVENTS, SMALL_TABLES, WINDOWS, ShardTables
from .codec import Encoded, frame_bytes, frame_from, handles_bytes, handles_from

#: the metadata key of a delta file's small chain (module docstring)
SMALL_CHAIN = "small_chain"
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
) -> tuple[dict[str, Encoded], bool, SmallMark]:
    """The small tables' parts of a delta file: every table whole when ``since`` is None (or
    the change cannot be told), else the events and windows as their change since ``since``;
    whether they are whole, and the mark of what was written.  The windows are ``p``'s."""
    parts = {name: frame_bytes(getattr(t, name)) for name in SMALL_TABLES if name not in _CHANGING}
    parts["due"] = handles_bytes(t.due)
    mark = small_mark(p, t.events, t.next_eseq)
    change = None if since is None else _events_change(t.events, mark, since)
    if change is None:  # every window the shard keeps, in the order they came (``t``'s may be none)
        parts.update(events=frame_bytes(t.events), windows=frame_bytes(p.windows_added(0)[0]))
        return parts, True, mark
    windows, _ = p.windows_added(since.windows)
    parts.update(change)
    parts["windows_new"] = frame_bytes(windows)
    return parts, False, mark


def _events_change(events: pd.DataFrame, now: SmallMark, since: SmallMark) -> dict[str, Encoded] | None:
    """The events' change from ``since`` to ``now`` as parts; None when it cannot be told."""
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
        "events_new": frame_bytes(events, int(np.count_nonzero(old))),
        "events_gone": handles_bytes(since.eseq[~isin(since.eseq, now.eseq)]),
        "events_used": handles_bytes(now.eseq[old][now.used[old] & ~was_used]),
    }


def small_chain(meta: dict[str, str]) -> list[str]:
    """The small chain a delta file names (empty: it holds the events and windows whole)."""
    return json.loads(meta.get(SMALL_CHAIN, "[]"))


File = tuple[dict, dict]


def small_tables(
    parts: dict,
    meta: dict[str, str],
    read: Callable[[str], File],
    *,
    live_events: Callable[[], pd.DataFrame] | None = None,
    since: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """The events and windows of the delta file ``(parts, meta)``: its small chain's first
    file's with the later files' changes applied, and False.  With ``live_events`` and
    ``since`` (the chain's file the live shard holds): the live events with the changes
    after ``since``, the windows added since, and True."""
    chain = small_chain(meta)
    if not chain:  # whole here
        return frame_from(parts["events"], EVENTS), frame_from(parts["windows"], WINDOWS), False
    live = live_events is not None and since in chain
    if live:
        events, windows = live_events(), empty(WINDOWS)
        changes = chain[chain.index(since) + 1 :]
    else:
        first, _ = read(chain[0])
        events, windows = frame_from(first["events"], EVENTS), frame_from(first["windows"], WINDOWS)
        changes = chain[1:]
    for name in changes:
        change = parts if name == chain[-1] else read(name)[0]
        gone, used = handles_from(change["events_gone"]), handles_from(change["events_used"])
        eseq = events["eseq"].to_numpy(np.int64)
        kept = ~isin(eseq, gone)
        flags = events["used"].to_numpy(bool) | isin(eseq, used)
        events = stack(rows_where(events.assign(used=flags), kept), frame_from(change["events_new"], EVENTS))
        windows = stack(windows, frame_from(change["windows_new"], WINDOWS))
    retired = int(meta["retired_wm"])
    windows = rows_where(windows, windows["end"].to_numpy(np.int64) > retired)
    return events.reset_index(drop=True), windows.reset_index(drop=True), live
