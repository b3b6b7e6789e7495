"""Changes as layers: consecutive changes of a shard's big tables combined, and applied.

A *layer* is one file's ``tail_*`` parts: the rows added since the layer before, the handles
resolved (``tail_dead``) and the dedup rows added (``tail_resolved``).  A shard at a version
is its base with its layers applied in order.  A chain's first delta file also records the
chain it ended (``chain_record``), so a live shard can be brought forward across a compaction.

Invariant: ``apply_change(t, since, [], change_of(layers))`` gives the tables the shard had
when the last layer was written, for ``t`` the tables right below handle ``since``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.arrays import isin
from ..engine.frames import empty, rows_where, stack
from ..engine.pending import OPS_ARROW, WATCH_ARROW, Pending
from ..engine.tables import OPS, RESOLVED, WATCH, ShardTables
from .codec import Encoded, frame_from, handles_from, table_from

#: the big tables whose rows carry a handle
TAILS = ("ops", "watch")
#: the first delta file of a chain: the metadata naming the chain it ended, its change since (parts);
#: or the metadata naming that chain and the change segment holding that change (``chain_record``)
_CHAIN_BEFORE, _BEFORE, _BEFORE_IN = "chain_before", "before_", "chain_before_in"


def pending_tables(parts: dict, prefix: str, meta: dict[str, str]) -> tuple[pa.Table, pa.Table]:
    """The ``ops`` and ``watch`` parts (``prefix``: "" or "tail_") of a value or segment as
    ``OPS_ARROW`` and ``WATCH_ARROW`` tables (formats 2 and 3 converted)."""
    ops, watch = parts[f"{prefix}ops"], parts[f"{prefix}watch"]
    if meta.get("format") in ("2", "3") or "format" not in meta:
        return Pending(frame_from(ops, OPS), frame_from(watch, WATCH)).arrow()
    return table_from(ops, OPS_ARROW), table_from(watch, WATCH_ARROW)


def layer_of(parts: dict, meta: dict[str, str], prefix: str = "tail_") -> dict:
    """One layer's change: the rows it added (``ops``, ``watch``), the handles it resolved
    (``dead``) and the dedup rows it added (``resolved``), from its ``prefix`` parts."""
    ops, watch = pending_tables(parts, prefix, meta)
    return {
        "ops": ops,
        "watch": watch,
        "dead": handles_from(parts[f"{prefix}dead"]),
        "resolved": frame_from(parts[f"{prefix}resolved"], RESOLVED),
    }


def change_of(layers: list[tuple[dict, dict[str, str]]]) -> dict:
    """Consecutive layers (parts and metadata, oldest first) as one change (``combined``)."""
    return combined([layer_of(parts, meta) for parts, meta in layers])


def combined(changes: list[dict]) -> dict:
    """Consecutive changes (oldest first) as one: their new rows, less the handles any of
    them resolved, and all those handles."""
    dead = np.concatenate([np.empty(0, np.int64), *(c["dead"] for c in changes)])
    change: dict = {"dead": dead}
    for name in TAILS:
        table = pa.concat_tables([c[name] for c in changes])
        if len(dead):
            table = table.filter(pa.array(~isin(table.column("handle").to_numpy(), dead)))
        change[name] = table
    resolved = empty(RESOLVED)
    for c in changes:
        resolved = stack(resolved, c["resolved"])
    change["resolved"] = resolved
    return change


def rows_of(frames: dict) -> int:
    """The rows of named tables: a change's (``layer_of``'s), a segment's."""
    return sum(len(f) for f in frames.values())


# -- the first delta file of a chain, and the change it records since the chain before ---------------


def chain_record(
    chain: list[tuple[str, int]], tail: dict[str, Encoded], segment: str | None = None
) -> tuple[dict, dict[str, str]]:
    """What the first delta file of a chain records beside its own parts: the chain it
    ended (``chain``, names and rows) and ``tail``, the change since its last file (encoded
    tables).  Parts and metadata to add to the file (``chain_before``, ``change_before`` read
    them back).  ``segment``: a change segment holding exactly that change, named instead of
    the change being written a second time."""
    if segment is not None:
        return {}, {_BEFORE_IN: json.dumps({"chain": chain, "segment": segment})}
    parts = {f"{_BEFORE}{name}": data for name, data in tail.items()}
    return parts, {_CHAIN_BEFORE: json.dumps(chain)}


def chain_before(meta: dict[str, str]) -> list[tuple[str, int]] | None:
    """The chain the first delta file of a chain ended (``chain_record``); None: none."""
    if _CHAIN_BEFORE in meta:
        chain = json.loads(meta[_CHAIN_BEFORE])
    elif _BEFORE_IN in meta:
        chain = json.loads(meta[_BEFORE_IN])["chain"]
    else:
        return None
    return [(name, int(rows)) for name, rows in chain]


def change_before(parts: dict, meta: dict[str, str], read: Callable[[str], tuple[dict, dict]]) -> dict:
    """The change the first delta file of a chain records (``chain_record``): its
    ``before_*`` parts, or the change segment it names (``read``: a file by name)."""
    if _BEFORE_IN in meta:
        return layer_of(*read(json.loads(meta[_BEFORE_IN])["segment"]))
    return layer_of(parts, meta, _BEFORE)


def apply_change(t: ShardTables, since: int, replaced: list[pd.DataFrame], change: dict) -> None:
    """Replace the big tables' rows from handle ``since`` on, and the dedup rows ``replaced``."""
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
