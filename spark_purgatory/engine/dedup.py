"""Op_id memory: which op_ids were resolved recently (``duplicate_op_id``).

``ResolvedTable`` holds the hashes of op_ids resolved within ``purgatory.dedup.retention.ms``,
with the watermark at which each is forgotten.  Forgetting is logical, as in
``progress.KeyTable``.

Invariant: an op_id is accepted at most once while it is pending or remembered as resolved;
a hash collision may refuse a new op_id, never admit a second copy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import hash_strings, pair_order
from .columns import Columns
from .rows import Rows
from .tables import I64_MIN, RESOLVED

__all__ = ["ResolvedTable", "resolved_rows"]


def resolved_rows(
    op_ids: np.ndarray,
    deadlines: np.ndarray,
    watermark: int,
    retention_ms: int,
    hashes: np.ndarray | None = None,
) -> Rows:
    """Dedup rows (``RESOLVED``) for resolved op_ids: remembered for ``retention_ms`` after the
    later of their deadline and the watermark."""
    until = np.maximum(watermark, deadlines) + retention_ms
    hashes = hash_strings(op_ids) if hashes is None else hashes
    return Rows({"hash": hashes, "expire_at": until.astype(np.int64, copy=False)}, len(op_ids))


class ResolvedTable:
    """Op_ids resolved within the dedup retention (``tables.RESOLVED`` rows), by hash; a
    retirement forgets the rows whose ``expire_at`` the watermark reached."""

    _COLUMNS = {**RESOLVED, "handle": "int64", "epoch": "int64"}

    def __init__(self, frame: pd.DataFrame | Rows | None = None) -> None:
        self._rows = Columns(self._COLUMNS, indexed=("hash",))
        self._next = 0  # the next row's handle
        self._epoch = 0  # retirements so far, as of each row's add
        self._retired_wm = I64_MIN
        self._next_sweep = I64_MIN
        self._swept = 0
        # the earliest ``expire_at`` remembered, once asked, kept until a retirement forgets it
        self._earliest: int | None = None
        self._earliest_known = False
        if frame is not None and len(frame):
            self.add(frame)

    def __len__(self) -> int:
        return int(self._remembered(self._rows.live_positions()).sum()) if len(self._rows) else 0

    def add(self, rows: pd.DataFrame | Rows) -> None:
        """Remember these ``resolved_rows`` (``RESOLVED`` columns)."""
        n = len(rows)
        if n == 0:
            return
        handles = np.arange(self._next, self._next + n, dtype=np.int64)
        self._next += n
        columns = {c: np.asarray(rows[c]) for c in RESOLVED}
        self._rows.append({**columns, "handle": handles, "epoch": np.full(n, self._epoch, np.int64)})
        if self._earliest_known:
            added = int(columns["expire_at"].min())
            self._earliest = added if self._earliest is None else min(self._earliest, added)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Per op_id hash: was such an op_id resolved within the retention?"""
        probe, pos = self._rows.lookup("hash", np.asarray(hashes, np.uint64))
        found = np.zeros(len(hashes), dtype=bool)
        found[probe[self._remembered(pos)]] = True
        return found

    def frame(self) -> pd.DataFrame:
        """The remembered rows, sorted by hash then expiry (one order, however they came)."""
        pos = self._rows.live_positions()
        pos = pos[self._remembered(pos)]
        order = pair_order(self._rows.column("hash")[pos], self._rows.column("expire_at")[pos])
        return self._rows.frame(pos[order], list(RESOLVED))

    def wakeup(self) -> int | None:
        """The earliest watermark that forgets a remembered row (None if none)."""
        if not self._earliest_known:
            pos = self._rows.live_positions()
            pos = pos[self._remembered(pos)]
            self._earliest = int(self._rows.column("expire_at")[pos].min()) if pos.size else None
            self._earliest_known = True
        return None if self._earliest is None else self._earliest + 1

    def retire(self, watermark: int) -> None:
        """Forget the rows whose ``expire_at`` the watermark reached (the rows in bulk)."""
        self._retired_wm = max(self._retired_wm, int(watermark))
        self._epoch += 1
        if self._earliest is not None and self._earliest <= self._retired_wm:
            self._earliest_known = False
        grown = len(self._rows) >= 2 * max(self._swept, 1024)
        if len(self._rows) == 0 or (self._retired_wm < self._next_sweep and not grown):
            return
        pos = self._rows.live_positions()
        forgotten = ~self._remembered(pos)
        due = self._rows.column("expire_at")[pos[~forgotten]]  # before the kill moves rows
        self._rows.kill(pos[forgotten])
        self._swept = due.size
        self._next_sweep = int(np.partition(due, due.size // 8)[due.size // 8]) if due.size else I64_MIN

    def _remembered(self, pos: np.ndarray) -> np.ndarray:
        keep = self._rows.column("expire_at")[pos] > self._retired_wm
        return keep | (self._rows.column("epoch")[pos] == self._epoch)
