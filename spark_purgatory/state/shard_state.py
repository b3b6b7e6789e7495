"""A shard's state saved: ``save_state`` (its inverse, ``load_state``, is ``shard_load``'s).

Stored whole in the group state, a shard's state would move through the state store every
micro-batch.  With a ``SegmentStore`` (``purgatory.state.path``, which ``start`` always sets)
the group state holds a small *pointer*, and the state lives in files the executor writes:

* one small **delta file** per save (``increments``): what changed since the last save
  (operations added, handles resolved, dedup rows added), the small tables and scalars, the
  segment files and the *chain* of delta files since the last segment;
* immutable **segments**, LSM-style: one *base* and *change* segments.  When a chain reaches
  ``MAX_DELTAS`` files or ``purgatory.state.segment.rows`` rows, its change is written as a
  change segment and the chain starts afresh; when resolved operations outnumber pending
  ones, or after ``MAX_CHANGE_SEGMENTS`` change segments, one new base replaces them all.  A
  shard below ``segment.rows`` rows has no segment: its chain starts with one *full* delta.

A save costs what the batch changed (``Purgatory.take_changes``); only a compaction reads
more.  The timing wheel is rebuilt from the pending deadlines on load.

**The worker cache** (``cache``).  Each saved version carries a random token and the tokens
of its ancestors, under the shard's lineage id.  A load that claims a parked object of the
same lineage takes it back when the token is the same (``exact``), applies only the delta
files written since when it finds an ancestor (``caught-up``), and otherwise rebuilds from
the segments and the chain (``rebuilt``).

Invariant: ``load_state(save_state(p))`` behaves exactly as ``p`` would, whichever of the
three ways it was loaded.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from ..engine.arrays import distinct
from ..engine.frames import empty, stack
from ..engine.purgatory import Purgatory
from ..engine.tables import BIG_TABLES, RESOLVED, SMALL_TABLES, ShardTables
from .cache import WORKER_CACHE, WorkerCache
from .codec import Encoded, frame_bytes, handles_bytes, pack_parts, spliced
from .increments import (
    MAX_DELTAS,
    SWEEP_EVERY,
    delta_name,
    directory_of,
    expired,
    pointer,
)
from .layers import TAILS, chain_record, rows_of
from .segments import SegmentStore
from .small_tables import SMALL_CHAIN, SmallMark, small_parts

#: the format of a state value and of segment files: 3 has no ``seen`` table; 4 holds the
#: pending operations and watchers as Arrow tables (no keys in ``ops``), compressed parts, no
#: timing wheel.  Formats 2 and 3 still load, converted as they are read.
STATE_VERSION = 4
#: the formats ``load_state`` reads
READABLE_VERSIONS = ("2", "3", "4")
#: how far back a version lists its ancestors
_ANCESTRY = 64
#: the most change segments after a base (``_rebase_due``): what a rebuild reads, in files
MAX_CHANGE_SEGMENTS = 16


class Segment(NamedTuple):
    """A segment file a state version extends: its name, the shard's next handle when it was
    written (rows from that handle on are newer), and the rows it holds."""

    name: str
    next_handle: int
    rows: int


@dataclass
class Lineage:
    """What the state layer keeps with a live shard between saves (``Purgatory.lineage``)."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    token: str | None = None  # the version last saved or loaded
    ancestry: list[str] = field(default_factory=list)
    loaded_by: str = "new"  # exact | caught-up | rebuilt | new
    saves: int = 0  # saves with segments, the clock of the graveyard
    segments: list[Segment] = field(default_factory=list)  # [base, change, ...]
    graveyard: list[tuple[str, int]] = field(default_factory=list)  # replaced files, the save that did it
    dead: list[np.ndarray] = field(default_factory=list)  # handles resolved since the last segment
    resolved: list[pd.DataFrame] = field(default_factory=list)  # dedup rows added since then
    chain: list[tuple[str, int]] = field(default_factory=list)  # delta files since then, their rows
    version: int = 0  # the last delta file's version
    written: int = 0  # delta files written, the clock of the sweep
    saved_bytes: int = 0  # the size of what the last save wrote (the delta file, or the value)
    small: SmallMark | None = None  # the events and windows the last delta file left (``small_tables``)
    small_chain: list[str] = field(default_factory=list)  # its small chain
    # the encoded ``tail_*`` parts of each file of the chain, when this object wrote them all
    tails: list[dict[str, Encoded]] | None = None
    # handles resolved since the base was written; None: not known (an older version)
    base_dead: int | None = None


def loaded_by(p: Purgatory) -> str:
    """How ``load_state`` got ``p``: ``exact`` (the worker cache), ``caught-up``, ``rebuilt``;
    ``new`` for a purgatory no load made."""
    return p.lineage.loaded_by if isinstance(p.lineage, Lineage) else "new"


def saved_bytes(p: Purgatory) -> int:
    """The size of what ``p``'s last ``save_state`` wrote: its delta file, or its whole value."""
    return p.lineage.saved_bytes if isinstance(p.lineage, Lineage) else 0


# -- save -------------------------------------------------------------------------------------------


def save_state(
    p: Purgatory,
    store: SegmentStore | None = None,
    *,
    park: bool = False,
    cache: WorkerCache | None = None,
    version: int | None = None,
) -> bytes:
    """The shard state for a Spark group state: the whole state (without ``store``), or a
    pointer to its files.

    ``version`` (the micro-batch's timestamp, raised past the last) names the delta file.
    ``park`` leaves ``p`` in the worker cache; the caller must not change ``p`` afterwards.
    """
    if not isinstance(p.lineage, Lineage):
        p.lineage = Lineage()
    lineage = p.lineage
    if store is None:
        p.take_changes()
        t = p.tables(arrow=True)
        meta = _scalars(p, t, lineage)
        meta["wheel_now"] = str(t.wheel_now)  # the wheel is rebuilt from the deadlines on load
        parts = _small_parts(t)
        parts.update({name: frame_bytes(getattr(t, name)) for name in BIG_TABLES})
        data = pack_parts(parts, meta)
        lineage.saved_bytes = len(data)
    else:
        data = _save_version(p, lineage, store, version)
    if park:
        (cache or WORKER_CACHE).park(lineage.id, lineage.token, p)
    return data


def _small_parts(t: ShardTables) -> dict[str, Encoded]:
    parts = {name: frame_bytes(getattr(t, name)) for name in SMALL_TABLES}
    parts["due"] = handles_bytes(t.due)
    return parts


def _save_version(p: Purgatory, lineage: Lineage, store: SegmentStore, version: int | None) -> bytes:
    """Write this save's delta file (compacting the chain first when it is due); its pointer."""
    changes = p.take_changes()
    if lineage.segments:  # the change since the last segment grows
        lineage.dead.append(changes.removed)
        lineage.resolved.append(changes.resolved)
        lineage.saves += 1
        if lineage.base_dead is not None:
            lineage.base_dead += len(changes.removed)
    since = changes.added_from  # the last save's next handle: rows from there on are new
    t = p.tables(arrow=True, since=since)
    layer = {"ops": t.ops, "watch": t.watch, "dead": _handles(changes.removed), "resolved": changes.resolved}
    # the chain's change: its first file's rows are a small shard's every row (its "base")
    chain_rows = sum(rows for _name, rows in lineage.chain[1:]) + rows_of(layer)
    record: tuple[dict, dict[str, str]] = ({}, {})
    if not lineage.chain or len(lineage.chain) >= MAX_DELTAS or chain_rows > store.segment_rows:
        ended = lineage.chain
        # the batch's change encoded only when a part is made of it: the ended chain's
        # record, a splice; a lineage's first save writes its every row, no change
        tail = _encoded(layer) if ended or lineage.segments else {}
        t, layer, since, spliced_as = _compact(p, lineage, store, t, tail, rows_of(layer))
        if ended:  # the new chain's first file records how it follows the last one
            alone = spliced_as if all(rows == 0 for _name, rows in ended) else None
            record = chain_record(ended, tail, alone)  # alone: the change segment is this change
        lineage.chain = []
    tail = _encoded(layer)
    if lineage.segments:
        _collect(lineage, store)
    meta = _scalars(p, t, lineage)
    lineage.version = max(int(version or 0), lineage.version + 1)
    name = delta_name(p.shard, lineage.version, lineage.id, lineage.token)
    lineage.chain.append((name, rows_of(layer)))
    lineage.tails = None if lineage.tails is None else [*lineage.tails, tail]
    lineage.written += 1
    meta.update(
        wheel_now=str(t.wheel_now),
        since=str(since),
        chain=json.dumps(lineage.chain),
        version=str(lineage.version),
        written=str(lineage.written),
    )
    if lineage.segments:
        meta.update(
            segments=json.dumps(lineage.segments),
            saves=str(lineage.saves),
            graveyard=json.dumps(lineage.graveyard),
        )
        if lineage.base_dead is not None:
            meta["base_dead"] = str(lineage.base_dead)
    # the events and windows whole once every MAX_DELTAS files, their change in between
    mark = lineage.small if 0 < len(lineage.small_chain) < MAX_DELTAS else None
    parts, whole, lineage.small = small_parts(p, t, mark)
    lineage.small_chain = [name] if whole else [*lineage.small_chain, name]
    meta[SMALL_CHAIN] = json.dumps(lineage.small_chain)
    parts.update({f"tail_{k}": v for k, v in tail.items()})
    parts.update(record[0])
    meta.update(record[1])
    lineage.saved_bytes = store.write_named(name, parts, meta)
    if lineage.written % SWEEP_EVERY == 0:
        directory = directory_of(p.shard)
        store.delete(expired(store.names_under(directory), store.retain_versions + MAX_DELTAS))
    return pointer(name)


def _encoded(layer: dict) -> dict[str, Encoded]:
    """A layer's tables (and its ``dead`` handles) encoded, by name."""
    return {
        name: handles_bytes(table) if isinstance(table, np.ndarray) else frame_bytes(table)
        for name, table in layer.items()
    }


def _compact(
    p: Purgatory, lineage: Lineage, store: SegmentStore, t: ShardTables, tail: dict[str, Encoded], rows: int
) -> tuple[ShardTables, dict, int, str | None]:
    """Start the delta chain afresh: the change since the last segment written as a change
    segment (or a new base, when one is due), or, for a shard with no segment and fewer than
    ``segment_rows`` rows, every row in one full delta.  ``t``, ``tail`` and ``rows``: this
    save's tables, its change encoded and that change's rows.  Returns the shard's tables, the
    new chain's first layer, the handle it starts from, and the name of the change segment
    when it was spliced (else None).

    When this object wrote every file of the chain (``Lineage.tails``), the change segment is
    their ``tail_*`` parts and this save's spliced (``codec.spliced``), resolved rows among
    them (every load drops them); otherwise the rows alive now are read from the shard."""
    spliced_as = None
    if lineage.segments:
        tails = _tails_of(lineage)
        rows += sum(r for _name, r in lineage.chain)
        rebase = _rebase_due(p, lineage, rows)
        change = None if rebase or tails is None else _spliced([*tails, tail])
        if change is not None:
            _write_parts(lineage, store, change, t.next_handle, rows)
            spliced_as = lineage.segments[-1].name
        else:
            since = None if rebase else lineage.segments[-1].next_handle
            whole = p.tables(arrow=True, since=since, small=False)
            _write_segment(whole, lineage, store, None if rebase else _change(whole, lineage))
    else:
        whole = p.tables(arrow=True, small=False)
        if sum(len(getattr(whole, name)) for name in BIG_TABLES) < store.segment_rows:
            lineage.tails = None
            full = {"ops": whole.ops, "watch": whole.watch, "dead": _handles(), "resolved": whole.resolved}
            # ``t``'s small tables (the same moment's), ``whole``'s big ones
            return replace(t, ops=whole.ops, watch=whole.watch, resolved=whole.resolved), full, 0, None
        _write_segment(whole, lineage, store, None)
    nothing = {
        "ops": t.ops.slice(0, 0),
        "watch": t.watch.slice(0, 0),
        "dead": _handles(),
        "resolved": empty(RESOLVED),
    }
    return t, nothing, lineage.segments[-1].next_handle, spliced_as


def _rebase_due(p: Purgatory, lineage: Lineage, rows: int) -> bool:
    """Is a new base due, rather than one more change segment of ``rows`` rows?

    Yes when the operations resolved since the last base outnumber the pending ones (a rebuild
    then reads at most about twice the rows it keeps), or after ``MAX_CHANGE_SEGMENTS`` change
    segments; never for growth alone.  Without that count (an older version): at half the
    base's rows."""
    if len(lineage.segments) > MAX_CHANGE_SEGMENTS:
        return True
    if lineage.base_dead is None:
        return sum(s.rows for s in lineage.segments[1:]) + rows > lineage.segments[0].rows // 2
    return lineage.base_dead > p.pending


def _tails_of(lineage: Lineage) -> list[dict[str, Encoded]] | None:
    """The encoded parts of every file of the chain, when this object wrote them all."""
    tails = lineage.tails
    return tails if tails is not None and len(tails) == len(lineage.chain) else None


def _spliced(tails: list[dict[str, Encoded]]) -> dict[str, Encoded] | None:
    """Consecutive layers' encoded parts as one layer's; None when a part's schemas differ."""
    change = {}
    for name in tails[-1]:
        data = spliced([tail[name] for tail in tails])
        if data is None:
            return None
        change[f"tail_{name}"] = data
    return change


def _handles(handles: np.ndarray | None = None) -> np.ndarray:
    return np.empty(0, np.int64) if handles is None else handles


def _scalars(p: Purgatory, t: ShardTables, lineage: Lineage) -> dict[str, str]:
    """The value's metadata; gives this version a new token, descending from the last one."""
    ancestry = (lineage.ancestry + [lineage.token] if lineage.token else lineage.ancestry)[-_ANCESTRY:]
    lineage.token, lineage.ancestry = uuid.uuid4().hex, ancestry
    return {
        "format": str(STATE_VERSION),
        "watermark": str(t.watermark),
        "next_handle": str(t.next_handle),
        "next_eseq": str(t.next_eseq),
        "retired_wm": str(t.retired_wm),
        "lineage": lineage.id,
        "shard": "" if p.shard is None else str(p.shard),
        "relays_through": str(p.relays_through),
        "parked_in": str(p.parked_in),
        "token": lineage.token,
        "ancestry": json.dumps(ancestry),
    }


def _collect(lineage: Lineage, store: SegmentStore) -> None:
    """Delete the files replaced long enough ago that no retained version still names them."""
    old = [name for name, at in lineage.graveyard if lineage.saves - at >= store.retain_versions]
    if old:
        store.delete(old)
        lineage.graveyard = [(name, at) for name, at in lineage.graveyard if name not in old]


def _change(t: ShardTables, lineage: Lineage) -> dict:
    """What changed since the last segment: new rows of the big tables, resolved handles."""
    since = lineage.segments[-1].next_handle
    change: dict = {name: _from_handle(getattr(t, name), since) for name in TAILS}
    dead = distinct(np.concatenate([np.empty(0, np.int64), *lineage.dead]))
    change["dead"] = dead[dead < since]
    new = empty(RESOLVED)
    for rows in lineage.resolved:
        new = stack(new, rows)
    change["resolved"] = new.loc[new["expire_at"].to_numpy(np.int64) > t.retired_wm]
    return change


def _from_handle(table: pa.Table, since: int) -> pa.Table:
    """The rows of a table in handle order from handle ``since`` on."""
    return table.slice(int(np.searchsorted(table.column("handle").to_numpy(), since)))


def _write_segment(t: ShardTables, lineage: Lineage, store: SegmentStore, change: dict | None) -> None:
    """Write ``change`` as a change segment, or (None) every big table as a new base."""
    if change is None:
        frames = {name: getattr(t, name) for name in BIG_TABLES}
        lineage.graveyard += [(s.name, lineage.saves) for s in lineage.segments]
        lineage.segments = []
    else:
        frames = {f"tail_{k}": v for k, v in change.items()}
    parts = _encoded(frames)
    _write_parts(lineage, store, parts, t.next_handle, rows_of(frames), base=change is None)


def _write_parts(
    lineage: Lineage,
    store: SegmentStore,
    parts: dict[str, Encoded],
    next_handle: int,
    rows: int,
    *,
    base: bool = False,
) -> None:
    """Write a segment of encoded ``parts``; the change since the last segment starts afresh."""
    meta = {"lineage": lineage.id, "format": str(STATE_VERSION)}
    name = store.write("base" if base else "change", parts, meta)
    if base:
        lineage.base_dead = 0
    lineage.segments.append(Segment(name, next_handle, rows))
    lineage.dead, lineage.resolved, lineage.tails = [], [], []
