"""Changes as layers: consecutive changes of a shard's big tables combined, and applied.

A *layer* is one Arrow IPC file's (or value's) ``tail_*`` parts: the operations and
watchers added since the layer before it (rows from a handle on), the handles resolved
since (``tail_dead``) and the dedup rows added (``tail_resolved``).  Change segments and
delta files are layers (``shard_state``, ``deltas``); a shard at a version is its base (or
nothing) with its layers applied in order.

Invariant: ``apply_change(t, since, [], change_of(layers))`` gives the tables the shard had
when the last layer was written, for ``t`` the tables right below handle ``since``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.frames import empty, isin, rows_where, stack
from ..engine.pending import OPS_ARROW, WATCH_ARROW, Pending
from ..engine.tables import OPS, RESOLVED, WATCH, ShardTables
from .codec import frame_from, handles_from, table_from

__all__ = ["TAILS", "pending_tables", "change_of", "apply_change"]

#: the big tables whose rows carry a handle
TAILS = ("ops", "watch")


def pending_tables(parts: dict, prefix: str, meta: dict[str, str]) -> tuple[pa.Table, pa.Table]:
    """The ``ops`` and ``watch`` parts (``prefix``: "" or "tail_") of a value or segment as
    ``OPS_ARROW`` and ``WATCH_ARROW`` tables; those of formats 2 and 3 (frames, with the keys
    in ``ops`` and the watchers by hash; a segment's ``meta`` then names no format) converted."""
    ops, watch = parts[f"{prefix}ops"], parts[f"{prefix}watch"]
    if meta.get("format") in ("2", "3") or "format" not in meta:
        return Pending(frame_from(ops, OPS), frame_from(watch, WATCH)).arrow()
    return table_from(ops, OPS_ARROW), table_from(watch, WATCH_ARROW)


def change_of(layers: list[tuple[dict, dict[str, str]]]) -> dict:
    """Consecutive changes (``tail_*`` parts and their metadata, oldest first) as one: their
    new rows, less the handles any of them resolved, and all those handles."""
    dead = np.concatenate([handles_from(parts["tail_dead"]) for parts, _ in layers])
    change: dict = {"dead": dead}
    tails = [pending_tables(parts, "tail_", meta) for parts, meta in layers]
    for i, name in enumerate(TAILS):
        table = pa.concat_tables([tail[i] for tail in tails])
        if len(dead):
            table = table.filter(pa.array(~isin(table.column("handle").to_numpy(), dead)))
        change[name] = table
    resolved = empty(RESOLVED)
    for parts, _ in layers:
        resolved = stack(resolved, frame_from(parts["tail_resolved"], RESOLVED))
    change["resolved"] = resolved
    return change


def apply_change(t: ShardTables, since: int, replaced: list[pd.DataFrame], change: dict) -> None:
    """Replace the big tables' rows from handle ``since`` on, and the dedup rows ``replaced``,
    by ``change`` (``_change_of``)."""
    for name in TAILS:
        table = getattr(t, name)
        h = table.column("handle").to_numpy()
        kept = table.filter(pa.array((h < since) & ~isin(h, change["dead"])))
        setattr(t, name, pa.concat_tables([kept, change[name]]))  # in handle order
    if replaced:  # rows added since the last segment: the change has them (or fewer)
        old = pd.concat(replaced)
        t.resolved = rows_where(t.resolved, ~np.isin(row_key(t.resolved), row_key(old)))
    t.resolved = stack(t.resolved, change["resolved"])


def row_key(resolved: pd.DataFrame) -> np.ndarray:
    """One 64-bit key per dedup row (op_id hash mixed with its expiry)."""
    mix = resolved["expire_at"].to_numpy(np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return resolved["hash"].to_numpy(np.uint64) ^ mix
