"""A shard's live tables, and the plain form a state layer reads and gives back.

``LiveTables`` is everything a shard holds between calls.

Invariant: ``live_from(plain(t))`` (either form) behaves exactly as the shard did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from . import dedup, progress, relay
from .arrays import distinct, hash_strings, isin
from .frames import empty
from .pending import Pending
from .rows import Rows
from .tables import EVENTS, MATCHES, PARKED, RELAYED, RESOLVED, SMALL_TABLES, WINDOWS, ChangeLog, ShardTables
from .wheel import TimingWheel
from .windows import ResolvedWindows

if TYPE_CHECKING:
    from ..config import PurgatoryConfig


@dataclass
class LiveTables:
    """A shard's tables between calls (``tables.ShardTables`` is their plain form)."""

    pending: Pending
    resolved: dedup.ResolvedTable
    matches: Rows
    events: Rows
    relayed: Rows
    keys: progress.KeyTable
    windows: ResolvedWindows
    parked: Rows
    due: np.ndarray
    wheel: TimingWheel
    watermark: int
    retired_wm: int
    next_handle: int
    next_eseq: int
    changes: ChangeLog

    def next_expiration(self) -> int:
        times = [self.wheel.next_expiration()]
        warn_at = self.pending.warn_times()[1]
        warn_at = warn_at[warn_at > self.wheel.current_time_ms]  # not warned yet (``delayed``)
        if warn_at.size:
            times.append(int(warn_at.min()))
        if len(self.due):
            times.append(self.watermark)
        if len(self.events):
            times.append(int(self.events["ts"].min()) + 1)
        return min(times)

    def next_wakeup(self) -> int:
        times = [self.next_expiration(), self.keys.wakeup(), self.resolved.wakeup()]
        return min(t for t in times if t is not None)

    def is_empty(self) -> bool:
        return not (
            len(self.pending)
            or len(self.events)
            or len(self.due)
            or len(self.relayed)
            or len(self.windows)
            or len(self.parked)
            or len(self.resolved)  # last: these two count their rows
            or len(self.keys)
        )

    def mark_used(self, eseqs: np.ndarray) -> None:
        """Operations of this shard counted these events (buffered or relayed)."""
        if eseqs.size and len(self.events):
            hit = isin(self.events["eseq"], eseqs)
            if hit.any():
                self.events = self.events.assign(used=self.events["used"] | hit)
        self.relayed = relay.absorb(self.relayed, eseqs)

    def retire(self, wm: int) -> None:
        """Drop what the watermark made useless: old key progress, old dedup entries."""
        self.retired_wm = max(self.retired_wm, int(wm))
        self.keys.retire(wm)
        self.resolved.retire(wm)
        self.windows.retire(wm)


def plain(t: LiveTables, *, arrow: bool = False, since: int | None = None, small: bool = True) -> ShardTables:
    """The whole state as plain tables, to read only: frames, or Arrow tables (``arrow``) of
    the operations registered from handle ``since`` on (no dedup rows or windows then);
    ``small`` False: the small tables empty."""
    if since is not None and not arrow:
        raise ValueError("tables(since=...) gives Arrow tables: pass arrow=True")
    ops, watch = t.pending.arrow(since) if arrow else t.pending.frames()
    if small:
        tables = {
            "matches": t.matches.to_frame(MATCHES),
            "events": t.events.to_frame(EVENTS),
            "keys": t.keys.frame(),
            "relayed": t.relayed.to_frame(RELAYED),
            "windows": t.windows.frame() if since is None else empty(WINDOWS),
            "parked": t.parked.to_frame(PARKED),
        }
    else:
        tables = {name: empty(dtypes) for name, dtypes in SMALL_TABLES.items()}
    return ShardTables(
        ops=ops,
        watch=watch,
        resolved=t.resolved.frame() if since is None else empty(RESOLVED),
        **tables,
        due=t.due,
        watermark=t.watermark,
        next_handle=t.next_handle,
        next_eseq=t.next_eseq,
        retired_wm=t.retired_wm,
        wheel=t.wheel,
        wheel_now=t.wheel.current_time_ms,
    )


def live_from(t: ShardTables, config: PurgatoryConfig, changes: ChangeLog) -> LiveTables:
    """The live tables of plain ``t`` (frames or Arrow tables); a ``wheel`` of None is rebuilt
    from the pending deadlines.  ``changes`` restarts: every row counts as added."""
    pending = Pending(t.ops, t.watch)
    due = t.due
    wheel = t.wheel
    if wheel is None:  # the wheel holds every pending operation not already due
        wheel = TimingWheel(config.tick_ms, config.wheel_size, t.wheel_now, fresh_ids=True)
        handles, deadlines = pending.deadlines()
        timed = ~isin(handles, due)
        already = wheel.add(handles[timed], deadlines[timed])
        due = np.concatenate([due, handles[timed][already]])
    changes.restart()
    return LiveTables(
        pending=pending,
        resolved=dedup.ResolvedTable(t.resolved),
        **_small(t, config),
        due=due,
        wheel=wheel,
        watermark=t.watermark,
        retired_wm=t.retired_wm,
        next_handle=t.next_handle,
        next_eseq=t.next_eseq,
        changes=changes,
    )


def forward(
    live: LiveTables,
    to: ShardTables,
    added: tuple[pa.Table, pa.Table],
    removed: np.ndarray,
    resolved: pd.DataFrame,
    config: PurgatoryConfig,
    *,
    windows_added: pd.DataFrame | None = None,
) -> bool:
    """Bring ``live`` forward to a later version ``to`` of the same shard by what changed in
    between (operations and watchers ``added``, handles ``removed``, dedup rows ``resolved``,
    ``windows_added`` if given) and ``to``'s small tables.  The wheel moves to ``to``'s clock
    without a single expiry; False when it disagrees with ``to`` (``live`` is then unusable)."""
    ops, watch = added
    leaving = distinct(np.concatenate([removed, to.due]).astype(np.int64))
    leaving = leaving[live.pending.contains(leaving) & ~isin(leaving, live.due)]
    live.wheel.cancel(leaving)
    removed = distinct(removed.astype(np.int64))
    live.pending.remove(removed[live.pending.contains(removed)])
    live.pending.append_arrow(ops, watch)
    handles, deadlines = ops.column("handle").to_numpy(), ops.column("deadline").to_numpy()
    timed = ~isin(handles, to.due)
    if live.wheel.add(handles[timed], deadlines[timed]).any() or live.wheel.advance(to.wheel_now).size:
        return False
    live.due = to.due
    if live.wheel.size() != len(live.pending) - len(to.due):
        return False
    live.resolved.add(resolved)
    live.resolved.retire(to.retired_wm)
    live.watermark, live.retired_wm = to.watermark, to.retired_wm
    live.next_handle, live.next_eseq = to.next_handle, to.next_eseq
    windows = live.windows
    for name, table in _small(to, config).items():
        setattr(live, name, table)
    if windows_added is not None:
        w = {c: windows_added[c].to_numpy() for c in ("khash", "ohash", "start", "end")}
        windows.add(w["khash"], w["ohash"], w["start"], w["end"])
        windows.retire(to.retired_wm)
        live.windows = windows
    return True


def _small(t: ShardTables, config: PurgatoryConfig) -> dict:
    events = Rows.of(t.events, EVENTS)
    return {
        "matches": Rows.of(t.matches, MATCHES),
        "events": events.assign(khash=hash_strings(events["key"])),
        "relayed": Rows.of(t.relayed, RELAYED),
        "keys": progress.KeyTable(config.progress_retention_ms, t.keys),
        "windows": ResolvedWindows(t.windows),
        "parked": Rows.of(t.parked, PARKED),
    }
