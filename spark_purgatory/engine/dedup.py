"""Op_id memory: which op_ids were resolved recently (``duplicate_op_id``).

``ResolvedTable`` holds the hashes of op_ids resolved within ``purgatory.dedup.retention.ms``,
with the watermark at which each is forgotten (``columns.Retiring``).

Invariant: an op_id is accepted at most once while it is pending or remembered as resolved;
a hash collision may refuse a new op_id, never admit a second copy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .arrays import hash_strings, pair_order
from .columns import Retiring
from .rows import Rows
from .tables import RESOLVED


def resolved_rows(
    op_ids: np.ndarray,
    deadlines: np.ndarray,
    watermark: int,
    retention_ms: int,
    hashes: np.ndarray | None = None,
) -> Rows:
    """Dedup rows for resolved op_ids: kept ``retention_ms`` past their deadline or the watermark."""
    until = np.maximum(watermark, deadlines) + retention_ms
    hashes = hash_strings(op_ids) if hashes is None else hashes
    return Rows({"hash": hashes, "expire_at": until.astype(np.int64, copy=False)}, len(op_ids))


class ResolvedTable(Retiring):
    """Op_ids resolved within the dedup retention (``tables.RESOLVED`` rows), by hash."""

    def __init__(self, frame: pd.DataFrame | Rows | None = None) -> None:
        super().__init__(RESOLVED, ("hash",), epochs=True, regrow=True)
        # the earliest ``expire_at`` remembered, once asked, kept until a retirement forgets it
        self._earliest: int | None = None
        self._earliest_known = False
        if frame is not None and len(frame):
            self.add(frame)

    def add(self, rows: pd.DataFrame | Rows) -> None:
        if len(rows) == 0:
            return
        columns = {c: np.asarray(rows[c]) for c in RESOLVED}
        self._append(columns)
        if self._earliest_known:
            added = int(columns["expire_at"].min())
            self._earliest = added if self._earliest is None else min(self._earliest, added)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
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
        if self._earliest is not None and self._earliest <= max(self._retired_wm, int(watermark)):
            self._earliest_known = False
        super().retire(watermark)

    def _due(self, pos: np.ndarray) -> np.ndarray:
        return self._rows.column("expire_at")[pos]

    def _remembered(self, pos: np.ndarray) -> np.ndarray:
        keep = self._rows.column("expire_at")[pos] > self._retired_wm
        return keep | (self._rows.column("epoch")[pos] == self._epoch)
