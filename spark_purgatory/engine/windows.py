"""Resolved windows: why an event nothing counted is ``after_resolution`` or ``no_operation``.

An unmatched event is ``after_resolution`` exactly when it lies in the window
``o.ts <= e.ts < o.deadline`` of a *completed* operation that could have counted it; else
``no_operation``.  (An expired operation counted every event of its window.)

Worked example: ``a`` watches ``k`` over [100, 1100) and completes at 300.  An event on ``k``
at 500 is ``after_resolution``; one at 50 is ``no_operation``, and so is one at 1200.

``ResolvedWindows`` keeps one row per (completed operation, watched key) by hash only: a
collision could change an unmatched event's reason, never an outcome.  A window is forgotten
once the watermark reaches its end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import distinct, hash_strings, pair_order, present
from .columns import Retiring
from .rows import Rows
from .tables import I64_MIN, WINDOWS


class ResolvedWindows(Retiring):
    """Windows of completed operations, per watched key (``tables.WINDOWS`` rows)."""

    def __init__(self, frame: pd.DataFrame | None = None) -> None:
        super().__init__(WINDOWS, ("khash", "ohash"), epochs=False, regrow=False)
        if frame is not None and len(frame):
            self._add({c: frame[c].to_numpy() for c in WINDOWS})

    def add(self, khash: np.ndarray, ohash: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Remember the windows [start, end) of completed operations (one row per watched key)."""
        keep = end > np.maximum(start, self._retired_wm)
        if keep.any():
            self._add({"khash": khash[keep], "ohash": ohash[keep], "start": start[keep], "end": end[keep]})

    def covers(self, lost: Rows) -> np.ndarray:
        """Per event: does a completed operation's window (a targeted event's: its own) hold it?"""
        out = np.zeros(len(lost), dtype=bool)
        if len(lost) == 0 or len(self._rows) == 0:
            return out
        targets = lost["op_id"]
        given = present(targets)
        targeted = np.flatnonzero(given)
        untargeted = np.flatnonzero(~given)
        if untargeted.size:
            out[untargeted] = self._by_key(lost["khash"][untargeted], lost["ts"][untargeted])
        if targeted.size:
            ohash = hash_strings(targets[targeted].astype(object))
            probe, pos = self._rows.lookup("ohash", ohash)
            pos_ok = self._remembered(pos)
            probe, pos = probe[pos_ok], pos[pos_ok]
            ts = lost["ts"][targeted][probe]
            hit = (
                (self._rows.column("khash")[pos] == lost["khash"][targeted][probe])
                & (self._rows.column("start")[pos] <= ts)
                & (ts < self._rows.column("end")[pos])
            )
            out[targeted[distinct(probe[hit])]] = True
        return out

    def _by_key(self, khash: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Per (key hash, time): is it inside a window of its key?  Windows and times sorted
        together by (key, time): a time is covered when the running max of its key's window
        ends before it lies after it."""
        _, pos = self._rows.lookup("khash", np.unique(khash))
        pos = pos[self._remembered(pos)]
        out = np.zeros(khash.size, dtype=bool)
        if pos.size == 0:
            return out
        w_key, w_start = self._rows.column("khash")[pos], self._rows.column("start")[pos]
        w_end = self._rows.column("end")[pos]
        n_w = pos.size
        key = np.concatenate([w_key, khash])
        order = np.lexsort(
            (np.r_[np.zeros(n_w, np.int8), np.ones(khash.size, np.int8)], np.r_[w_start, ts], key)
        )
        is_window = order < n_w
        ends = np.where(is_window, np.r_[w_end, np.zeros(khash.size, np.int64)][order], I64_MIN)
        reach = pd.Series(ends).groupby(key[order]).cummax().to_numpy()
        asked = order[~is_window] - n_w
        out[asked] = reach[~is_window] > ts[asked]
        return out

    def frame(self) -> pd.DataFrame:
        pos = self._rows.live_positions()
        pos = pos[self._remembered(pos)]
        order = pair_order(self._rows.column("khash")[pos], self._rows.column("start")[pos])
        return self._rows.frame(pos[order], list(WINDOWS))

    @property
    def mark(self) -> int:
        """The mark from which ``added`` gives the windows remembered from now on."""
        return self._next

    def added(self, mark: int) -> pd.DataFrame:
        """The windows remembered from ``mark`` on and still kept, in the order they came."""
        pos = self._rows.since(mark)
        return self._rows.frame(pos[self._remembered(pos)], list(WINDOWS))

    def _remembered(self, pos: np.ndarray) -> np.ndarray:
        return self._rows.column("end")[pos] > self._retired_wm

    def _due(self, pos: np.ndarray) -> np.ndarray:
        return self._rows.column("end")[pos]

    def _add(self, columns: dict[str, np.ndarray]) -> None:
        self._append({c: np.asarray(columns[c], dtype=t) for c, t in WINDOWS.items()})
