"""Key progress, and the rows of final events nothing counted (``finalise``).

A final untargeted event's ``value`` feeds its key's offset progress: the running max, kept
``purgatory.progress.retention.ms`` after the key's last such event.

Invariant: a key is retained while its progress or its resolution time can still matter.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contract import (
    AFTER_RESOLUTION,
    CANCEL_AFTER_RESOLUTION,
    CANCEL_NO_OPERATION,
    NO_OPERATION,
    UNMATCHED_COLUMNS,
)
from .arrays import distinct, present, run_starts
from .columns import Retiring
from .rows import Rows
from .tables import EVENTS, I64_MIN, KEYS

#: an unmatched event's own fields (the columns before ``reason`` and ``batch_id``)
_EVENT_FIELDS = UNMATCHED_COLUMNS[: UNMATCHED_COLUMNS.index("reason")]


def _per_key(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``KEYS`` rows combined per key (running maxima), keys in the order of their first row."""
    if rows["khash"].size < 2:
        return rows
    order = np.argsort(rows["khash"])
    khash = rows["khash"][order]
    first = run_starts(khash)
    if first.all():  # no key twice (the usual case): the rows as they are
        return rows
    starts = np.flatnonzero(first)
    place = np.argsort(np.minimum.reduceat(order, starts))  # keys in the order of their first row
    out = {"khash": khash[starts][place]}
    out["progress"] = np.fmax.reduceat(rows["progress"][order], starts)[place]
    for c in ("last_event_ts", "resolved_until"):
        out[c] = np.maximum.reduceat(rows[c][order], starts)[place]
    return out


def final_progress(keys: KeyTable, final: Rows) -> None:
    """Raise ``keys``' offset progress by the final events' untargeted values (a cancel's none)."""
    value = final["value"]
    untargeted = np.flatnonzero(~present(final["op_id"]) & ~np.isnan(value) & ~final["cancel"])
    if untargeted.size == 0:
        return
    keys.touch(final["khash"][untargeted], progress=value[untargeted], last_event_ts=final["ts"][untargeted])


def unmatched_rows(lost: Rows, after: np.ndarray, batch_id: int) -> Rows:
    """``unmatched_events`` rows; ``after``: per event, did a completed operation's window hold it?
    A cancel event has reasons of its own."""
    reason = _REASONS[lost["cancel"].astype(np.intp), np.asarray(after, np.intp)].astype(object)
    out = lost.cast({n: EVENTS[n] for n in _EVENT_FIELDS})
    return out.assign(reason=reason, batch_id=np.full(len(lost), batch_id, np.int64))


#: an unmatched event's reason by (is it a cancel, did a window hold it)
_REASONS = np.array([[NO_OPERATION, AFTER_RESOLUTION], [CANCEL_NO_OPERATION, CANCEL_AFTER_RESOLUTION]])
#: ``unmatched_events``' engine columns
UNMATCHED = {**{name: EVENTS[name] for name in _EVENT_FIELDS}, "reason": "object", "batch_id": "int64"}


#: how ``touch`` combines a retained key's columns with new values
_MAXIMA = (("progress", np.fmax), ("last_event_ts", np.maximum), ("resolved_until", np.maximum))


class KeyTable(Retiring):
    """Per-key offset progress and resolution times (``tables.KEYS``), by key hash, in place.

    A key is forgotten once the watermark passed both its progress retention
    (``retention_ms`` after its last event) and its ``resolved_until``.  ``frame``: initial
    rows (unique ``khash``).
    """

    def __init__(self, retention_ms: int, frame: pd.DataFrame | None = None) -> None:
        super().__init__(KEYS, ("khash",), epochs=True, regrow=True)
        self.retention_ms = int(retention_ms)
        if frame is not None and len(frame):
            self._append({c: frame[c].to_numpy() for c in KEYS})

    def frame(self, khash: np.ndarray | None = None) -> pd.DataFrame:
        if khash is None:
            pos = self._rows.live_positions()
        else:
            pos = distinct(self._rows.lookup("khash", np.asarray(khash, np.uint64))[1])
        return self._rows.frame(pos[self._remembered(pos)], list(KEYS))

    def values(self, khash: np.ndarray, name: str, missing: float | int) -> np.ndarray:
        """Per key hash, the retained key's ``name`` column (``missing`` if not retained)."""
        out = np.full(len(khash), missing, dtype=self._rows.dtypes[name])
        probe, pos = self._rows.lookup("khash", np.asarray(khash, np.uint64))
        kept = self._remembered(pos)
        out[probe[kept]] = self._rows.column(name)[pos[kept]]
        return out

    def touch(
        self,
        khash: np.ndarray,
        *,
        progress: np.ndarray | None = None,
        last_event_ts: np.ndarray | None = None,
        resolved_until: np.ndarray | None = None,
    ) -> None:
        """Raise these keys' columns to the given values (running maxima)."""
        if len(khash) == 0:
            return
        n = len(khash)  # a column not given: the value that changes nothing
        update = _per_key(
            {
                "khash": np.asarray(khash).astype(np.uint64, copy=False),
                "progress": progress if progress is not None else np.full(n, np.nan),
                "last_event_ts": last_event_ts if last_event_ts is not None else np.full(n, I64_MIN),
                "resolved_until": resolved_until if resolved_until is not None else np.full(n, I64_MIN),
            }
        )
        new_hash = update["khash"]
        probe, pos = self._rows.lookup("khash", new_hash)
        fresh = np.ones(new_hash.size, bool)
        fresh[probe] = False
        if pos.size:
            # a forgotten row starts afresh, as if it had been dropped; a retained one takes maxima
            kept = self._remembered(pos)
            for name, combine in _MAXIMA:
                column, value = self._rows.column(name), update[name][probe]
                column[pos] = np.where(kept, combine(column[pos], value), value)
            self._rows.column("epoch")[pos] = self._epoch
        if fresh.any():
            self._append({c: update[c][fresh] for c in KEYS})

    def wakeup(self) -> int | None:
        """The earliest watermark that forgets a retained key (None if none)."""
        pos = self._rows.live_positions()
        pos = pos[self._remembered(pos)]
        return int(self._due(pos).min()) + 1 if pos.size else None

    def _due(self, pos: np.ndarray) -> np.ndarray:
        last = self._rows.column("last_event_ts")[pos]
        progress_until = np.where(last > I64_MIN, last + self.retention_ms, I64_MIN)
        return np.maximum(progress_until, self._rows.column("resolved_until")[pos])

    def _remembered(self, pos: np.ndarray) -> np.ndarray:
        """Per row: not forgotten by a retirement since its last touch."""
        wm = self._retired_wm
        keep = self._rows.column("resolved_until")[pos] > wm
        if wm - self.retention_ms >= I64_MIN:
            keep |= self._rows.column("last_event_ts")[pos] > wm - self.retention_ms
        else:
            keep[:] = True
        return keep | (self._rows.column("epoch")[pos] == self._epoch)
