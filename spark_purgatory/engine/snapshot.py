"""What a state layer reads of a ``Purgatory`` and gives back: its tables, its changes.

The engine persists nothing (Kafka's purgatory does not either).  A state layer
(``spark_purgatory.state``) reads the whole shard as plain tables (``tables``), puts a
shard back from them (``load_tables``), and between the two asks what the big tables gained
and lost (``take_changes``), so it can store only that.  The pending operations and their
watchers come out as frames for people and tests, or as Arrow tables for storage
(``tables(arrow=True)``: strings copied as bytes, never as Python objects); ``since`` gives
only the rows registered from a handle on, what a save with segment files writes, so such a
save costs what changed, not what is pending.

Invariant: ``load_tables(tables())`` (either form) behaves exactly as the shard did; the
mixin holds nothing of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import dedup, progress
from .frames import empty, hash_strings, isin
from .pending import Pending
from .rows import Rows
from .tables import EVENTS, MATCHES, PARKED, RELAYED, RESOLVED, ChangeLog, Changes, ShardTables
from .wheel import TimingWheel
from .windows import ResolvedWindows

if TYPE_CHECKING:
    from ..config import PurgatoryConfig

__all__ = ["ShardSnapshot"]


class ShardSnapshot:
    """The state layer's reads and writes of a ``Purgatory`` (mixed into it)."""

    config: PurgatoryConfig
    _changes: ChangeLog
    _pending: Pending
    _resolved: dedup.ResolvedTable
    _matches: Rows
    _events: Rows
    _relayed: Rows
    _keys: progress.KeyTable
    _windows: ResolvedWindows
    _parked: Rows
    _due: np.ndarray
    _wheel: TimingWheel
    _watermark: int
    _retired_wm: int
    _next_handle: int
    _next_eseq: int

    def tables(self, *, arrow: bool = False, since: int | None = None) -> ShardTables:
        """The whole state as plain tables: the pending operations and their watchers copied
        out of the engine's columns (in handle order; ``arrow``: as ``pending.OPS_ARROW`` and
        ``WATCH_ARROW`` tables, with no Python string made), the small tables as they are
        (read them, never modify them).  ``since`` (with ``arrow``): only the operations and
        watchers registered from that handle on, and no dedup rows (``take_changes`` lists
        the new ones): what a save that extends segment files needs."""
        if since is not None and not arrow:
            raise ValueError("tables(since=...) gives Arrow tables: pass arrow=True")
        ops, watch = self._pending.arrow(since) if arrow else self._pending.frames()
        return ShardTables(
            ops=ops,
            watch=watch,
            resolved=self._resolved.frame() if since is None else empty(RESOLVED),
            matches=self._matches.to_frame(MATCHES),
            events=self._events.to_frame(EVENTS),
            keys=self._keys.frame(),
            relayed=self._relayed.to_frame(RELAYED),
            windows=self._windows.frame(),
            parked=self._parked.to_frame(PARKED),
            due=self._due,
            watermark=self._watermark,
            next_handle=self._next_handle,
            next_eseq=self._next_eseq,
            retired_wm=self._retired_wm,
            wheel=self._wheel,
            wheel_now=self._wheel.current_time_ms,
        )

    def pending_operations(self) -> pd.DataFrame:
        """The pending operations (``tables.OPS`` columns), one row each, in handle order."""
        return self._pending.frames()[0]

    def load_tables(self, tables: ShardTables) -> None:
        """Replace the whole state by ``tables`` (``ops`` and ``watch`` in any order, frames or
        Arrow tables); a ``wheel`` of None is rebuilt from the pending deadlines.  The change
        log restarts: every row counts as added."""
        t = tables
        self._pending = Pending(t.ops, t.watch)
        self._resolved = dedup.ResolvedTable(t.resolved)
        self._matches, self._due = Rows.of(t.matches, MATCHES), t.due
        events = Rows.of(t.events, EVENTS)
        self._events = events.assign(khash=hash_strings(events["key"]))
        self._keys = progress.KeyTable(self.config.progress_retention_ms, t.keys)
        self._watermark, self._retired_wm = t.watermark, t.retired_wm
        self._relayed = Rows.of(t.relayed, RELAYED)
        self._windows = ResolvedWindows(t.windows)
        self._parked = Rows.of(t.parked, PARKED)
        self._next_handle, self._next_eseq = t.next_handle, t.next_eseq
        if t.wheel is not None:
            self._wheel = t.wheel
        else:  # the wheel holds every pending operation not already due
            config = self.config
            self._wheel = TimingWheel(config.tick_ms, config.wheel_size, t.wheel_now, fresh_ids=True)
            handles, deadlines = self._pending.deadlines()
            timed = ~isin(handles, self._due)
            already = self._wheel.add(handles[timed], deadlines[timed])
            self._due = np.concatenate([self._due, handles[timed][already]])
        self._changes.restart()

    def take_changes(self) -> Changes:
        """What the big tables gained and lost since the last call (see ``tables.Changes``)."""
        return self._changes.take(self._next_handle, self._resolved.frame)
