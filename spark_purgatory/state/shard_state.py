"""A shard's state saved and loaded: ``save_state`` and ``load_state``.

A shard's ``Purgatory`` grows with its pending operations.  Stored whole in the group state,
every micro-batch moves all of it through the state store, the JVM and Arrow, both ways
(docs/performance-history.md, "A shard's whole state in the group state").  With a
``SegmentStore`` (``purgatory.state.path``, which ``start`` always sets) the group state
holds a *pointer* of a hundred bytes, and the state lives in files the executor writes:

* one small **delta file** per save (``deltas``): the operations added since the last save,
  the handles resolved since (the dead), the dedup rows added since, the small tables
  (matches, key progress, ...) and scalars whole, the buffered events and completed
  operations' windows whole once every ``MAX_DELTAS`` files and as changes between
  (``small_tables``), the list of segment files and the *chain* of delta files since the
  last segment;
* immutable **segments**, LSM-style: one *base* (every big table) and *change* segments.
  When a chain reaches ``deltas.MAX_DELTAS`` files or holds more than
  ``purgatory.state.segment.rows`` rows, the change since the last segment is written as a
  change segment and the chain starts afresh; when the change segments together hold half
  as many rows as the base, one new base replaces them all (amortised over many
  micro-batches).  A shard below ``segment.rows`` rows has no segment: its chain starts with
  one *full* delta file holding every row, rewritten when the chain is compacted.

What changed is read from the engine's change log (``Purgatory.take_changes``), taken at
every save; the engine itself writes nothing.  A save reads only the rows registered since
the last save (``Purgatory.tables(arrow=True, since=...)``), so it costs what the batch
changed, however many operations are pending; only a compaction reads more.  Without a
store (or in a checkpoint written before the pointers) the value holds the state itself,
or the change since the segments it names; such a value loads as it always did, and its
next save writes files.

**Compact.**  The pending operations and their watchers are stored as the engine holds them,
Arrow tables of UTF-8 strings and numbers (``pending.OPS_ARROW``, ``WATCH_ARROW``; an
operation's keys are its watchers'), every part zstd-compressed (``codec``); the timing wheel
is not stored (it is rebuilt from the pending deadlines on load).

**Immutable files, versioned pointers.**  A version names the files it extends, so a
restart from any retained checkpoint version finds them; a replay after a crash loads the
version Spark committed and never a file of the crashed attempt (``deltas``).  A replaced
segment is deleted ``purgatory.state.retain.versions`` saves of its shard later, old delta
files by the sweep (``deltas``); keep the setting at or above
``spark.sql.streaming.minBatchesToRetain``, Spark's default 100.

**The worker cache** (``cache``).  Each saved version carries a random token and the tokens
of the versions it descends from (its ancestry), under the shard's lineage id.  A load that
claims a parked object of the same lineage:

* finds the same token: takes the object back, no file read (``exact``);
* finds an ancestor (another worker ran the shard since): applies only what changed since,
  the delta files after it on the same chain, or, across a compaction, the change segments
  written in between and the chain (``caught-up``);
* otherwise (a sibling from a failed attempt, another shard, nothing parked): rebuilds from
  the segments and the chain (``rebuilt``).

Invariant: ``load_state(save_state(p))`` behaves exactly as ``p`` would, whichever of the
three ways it was loaded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import PurgatoryConfig
from ..engine.frames import distinct, empty, rows_where, stack
from ..engine.pending import OPS_ARROW, WATCH_ARROW
from ..engine.purgatory import Purgatory
from ..engine.tables import BIG_TABLES, RESOLVED, SMALL_TABLES, Changes, ShardTables
from ..engine.wheel import TimingWheel
from .cache import WORKER_CACHE, WorkerCache
from .codec import frame_bytes, frame_from, handles_bytes, handles_from, pack_parts, unpack_parts
from .deltas import (
    MAX_DELTAS,
    SWEEP_EVERY,
    DeltaName,
    delta_name,
    directory_of,
    expired,
    is_pointer,
    pointed,
    pointer,
)
from .layers import TAILS, apply_change, change_of, pending_tables
from .segments import SegmentStore
from .small_tables import SMALL_CHAIN, SmallMark, small_chain, small_mark, small_parts, small_tables

__all__ = ["Lineage", "Segment", "save_state", "load_state", "loaded_by", "saved_bytes", "STATE_VERSION"]

#: the format of a state value and of segment files.  3: the pending op_ids are no longer a
#: table of their own (``seen``: the engine indexes ``ops`` by op_id hash instead).  4: the
#: pending operations and watchers as Arrow tables (no keys in ``ops``: the watchers have
#: them; the op_ids' hashes kept), zstd-compressed parts, no timing wheel.  Values and
#: segments of formats 2 and 3 still load (converted as they are read; format 2's ``seen``
#: parts are ignored); any other format is refused with an error naming it.
STATE_VERSION = 4
#: the formats ``load_state`` reads
READABLE_VERSIONS = ("2", "3", "4")
#: how far back a version lists its ancestors
_ANCESTRY = 64


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

    def record(self, changes: Changes) -> None:
        """Add the engine's changes since the last save to the change since the last segment."""
        self.dead.append(changes.removed)
        self.resolved.append(changes.resolved)


def loaded_by(p: Purgatory) -> str:
    """How ``load_state`` got ``p``: ``exact`` (the worker cache), ``caught-up``, ``rebuilt``;
    ``new`` for a purgatory no load made."""
    return p.lineage.loaded_by if isinstance(p.lineage, Lineage) else "new"


def saved_bytes(p: Purgatory) -> int:
    """The size of what ``p``'s last ``save_state`` wrote: its delta file, or its whole value."""
    return p.lineage.saved_bytes if isinstance(p.lineage, Lineage) else 0


def _lineage_of(p: Purgatory) -> Lineage:
    if not isinstance(p.lineage, Lineage):
        p.lineage = Lineage()
    return p.lineage


# -- save -------------------------------------------------------------------------------------------


def save_state(
    p: Purgatory,
    store: SegmentStore | None = None,
    *,
    park: bool = False,
    cache: WorkerCache | None = None,
    version: int | None = None,
) -> bytes:
    """The shard state for a Spark group state: the whole state, or a pointer to its files.

    Without ``store`` the value holds everything (Arrow IPC).  With a ``SegmentStore`` the
    state goes to files, a delta file of what changed since the last save and segments
    for the bulk (``deltas``), and the value is a pointer naming the delta file: its size
    does not depend on the shard's.  ``version`` (the micro-batch's timestamp) names the
    delta file; it is raised to one more than the last when it is not larger.  ``park``
    leaves ``p`` in the worker cache (``cache``, default this process's) for the next
    ``load_state`` of this version; the caller must not change ``p`` afterwards.
    """
    lineage = _lineage_of(p)
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


def _small_parts(t: ShardTables) -> dict[str, bytes]:
    parts = {name: frame_bytes(getattr(t, name)) for name in SMALL_TABLES}
    parts["due"] = handles_bytes(t.due)
    return parts


def _save_version(p: Purgatory, lineage: Lineage, store: SegmentStore, version: int | None) -> bytes:
    """Write this save's delta file (compacting the chain first when it is due); its pointer."""
    changes = p.take_changes()
    if lineage.segments:
        lineage.record(changes)
        lineage.saves += 1
    since = changes.added_from  # the last save's next handle: rows from there on are new
    t = p.tables(arrow=True, since=since)
    layer = {"ops": t.ops, "watch": t.watch, "dead": _handles(changes.removed), "resolved": changes.resolved}
    chain_rows = sum(rows for _name, rows in lineage.chain) + _rows_in(layer)
    if not lineage.chain or len(lineage.chain) >= MAX_DELTAS or chain_rows > store.segment_rows:
        t, layer, since = _compact(p, lineage, store)
        lineage.chain = []
    if lineage.segments:
        _collect(lineage, store)
    meta = _scalars(p, t, lineage)
    lineage.version = max(int(version or 0), lineage.version + 1)
    name = delta_name(p.shard, lineage.version, lineage.id, lineage.token)
    lineage.chain.append((name, _rows_in(layer)))
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
    # the events and windows whole once every MAX_DELTAS files, their change in between
    mark = lineage.small if 0 < len(lineage.small_chain) < MAX_DELTAS else None
    parts, whole, lineage.small = small_parts(p, t, mark)
    lineage.small_chain = [name] if whole else [*lineage.small_chain, name]
    meta[SMALL_CHAIN] = json.dumps(lineage.small_chain)
    parts.update({f"tail_{k}": frame_bytes(v) for k, v in layer.items()})
    data = pack_parts(parts, meta)
    store.write_named(name, data)
    lineage.saved_bytes = len(data)
    if lineage.written % SWEEP_EVERY == 0:
        directory = directory_of(p.shard)
        store.delete(expired(store.names_under(directory), store.retain_versions + MAX_DELTAS))
    return pointer(name)


def _compact(p: Purgatory, lineage: Lineage, store: SegmentStore) -> tuple[ShardTables, dict, int]:
    """Start the delta chain afresh: the change since the last segment written as a change
    segment (or a new base, when the changes hold half the base's rows), or, for a shard
    with no segment and fewer than ``segment_rows`` rows, every row in one full delta.
    Returns the shard's tables, the new chain's first layer and the handle it starts from."""
    if lineage.segments:
        t = p.tables(arrow=True, since=lineage.segments[-1].next_handle)
        change = _change(t, lineage)
        # changes pile up until they hold half the base's rows; then one new base replaces them
        rebase = sum(s.rows for s in lineage.segments[1:]) + _rows_in(change) > lineage.segments[0].rows // 2
        if rebase:
            t = p.tables(arrow=True)  # a new base: every pending row
        _write_segment(t, lineage, store, None if rebase else change)
    else:
        t = p.tables(arrow=True)
        if sum(len(getattr(t, name)) for name in BIG_TABLES) < store.segment_rows:
            return t, {"ops": t.ops, "watch": t.watch, "dead": _handles(), "resolved": t.resolved}, 0
        _write_segment(t, lineage, store, None)
    nothing = {
        "ops": t.ops.slice(0, 0),
        "watch": t.watch.slice(0, 0),
        "dead": _handles(),
        "resolved": empty(RESOLVED),
    }
    return t, nothing, lineage.segments[-1].next_handle


def _handles(handles: np.ndarray | None = None) -> pd.DataFrame:
    return pd.DataFrame({"handle": np.empty(0, np.int64) if handles is None else handles})


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
    change["dead"] = pd.DataFrame({"handle": dead[dead < since]})
    new = empty(RESOLVED)
    for rows in lineage.resolved:
        new = stack(new, rows)
    change["resolved"] = new.loc[new["expire_at"].to_numpy(np.int64) > t.retired_wm]
    return change


def _from_handle(table: pa.Table, since: int) -> pa.Table:
    """The rows of a table in handle order from handle ``since`` on."""
    return table.slice(int(np.searchsorted(table.column("handle").to_numpy(), since)))


def _write_segment(t: ShardTables, lineage: Lineage, store: SegmentStore, change: dict | None) -> None:
    """Write ``change`` as a change segment, or (None) every big table as a new base segment,
    which replaces all earlier segments."""
    if change is None:
        frames = {name: getattr(t, name) for name in BIG_TABLES}
        lineage.graveyard += [(s.name, lineage.saves) for s in lineage.segments]
        lineage.segments = []
    else:
        frames = {f"tail_{k}": v for k, v in change.items()}
    parts = {k: frame_bytes(v) for k, v in frames.items()}
    meta = {"lineage": lineage.id, "format": str(STATE_VERSION)}
    name = store.write("change" if change is not None else "base", parts, meta)
    lineage.segments.append(Segment(name, t.next_handle, _rows_in(frames)))
    lineage.dead, lineage.resolved = [], []


def _rows_in(frames: dict) -> int:
    return sum(len(f) for f in frames.values())


# -- load -------------------------------------------------------------------------------------------


def load_state(
    data: bytes,
    config: PurgatoryConfig | None = None,
    store: SegmentStore | None = None,
    *,
    cache: WorkerCache | None = None,
) -> Purgatory:
    """Inverse of ``save_state``; ``config`` may differ only in retention and limits.

    A pointer (``deltas``) loads from the ``store``'s files; a whole value (saved without a
    store, or by a spark-purgatory before the pointers: its next save writes files) from
    itself and the segments it names.  Reads the formats in ``READABLE_VERSIONS``: a value
    saved before the columnar engine (format 2) loads as it is; any other format raises
    ``ValueError`` naming its format and what to do.

    A shard parked in the worker cache is taken back when it is this exact version (no file
    read), or brought forward when it is an ancestor of this version (only the files
    written since are read); anything else is rebuilt from the files.  ``loaded_by(p)``
    tells which.
    """
    cache = cache or WORKER_CACHE
    if is_pointer(data):
        return _load_version(pointed(data), config, store, cache)
    parts, meta = unpack_parts(data)
    _check_format(meta)
    parked = _parked(cache, meta["lineage"], config)
    if parked is not None and parked.lineage.token == meta["token"]:
        parked.lineage.loaded_by = "exact"
        return parked
    return _rebuild(parts, meta, config, store)


def _check_format(meta: dict[str, str]) -> None:
    if meta.get("format") not in READABLE_VERSIONS:
        raise ValueError(
            f"unsupported purgatory state format {meta.get('format')!r} (this version of "
            f"spark-purgatory reads formats {', '.join(READABLE_VERSIONS)}): run the version "
            "that wrote it, or start a new checkpoint"
        )


def _parked(cache: WorkerCache, lineage: str, config: PurgatoryConfig | None) -> Purgatory | None:
    """The shard parked for ``lineage`` in this worker, taken out of the cache, if any."""
    parked = cache.claim(lineage)
    if parked is None or not isinstance(parked.lineage, Lineage):
        return None
    parked.config = config or parked.config
    return parked


def _load_version(
    at: DeltaName, config: PurgatoryConfig | None, store: SegmentStore | None, cache: WorkerCache
) -> Purgatory:
    """The version a pointer names: parked, brought forward from a parked ancestor, or rebuilt."""
    if store is None:
        raise ValueError(
            f"this shard's state is kept in files ({at.name}): pass the SegmentStore it was saved with"
        )
    parked = _parked(cache, at.lineage, config)
    if parked is not None and parked.lineage.token == at.token:
        parked.lineage.loaded_by = "exact"
        return parked
    parts, meta = store.read(at.name)
    _check_format(meta)
    chain = [name for name, _rows in json.loads(meta["chain"])]
    read = _reader(store, at.name, (parts, meta))
    if parked is not None:
        lineage = parked.lineage
        last = lineage.chain[-1][0] if lineage.chain else None
        if last in chain[:-1] and lineage.segments == _segments_in(meta):
            # the ancestor is on this chain: only the delta files after it, applied to it live
            later = [read(name) for name in chain[chain.index(last) + 1 : -1]]
            if _forward(parked, [*later, (parts, meta)], read, last):
                return parked
        if _can_catch_up(lineage, meta, store):
            # an ancestor on earlier segments: back to its last segment, then forward
            replaced, lineage.dead, lineage.resolved = lineage.resolved, [], []
            segments = [store.read(s.name) for s in _segments_of(meta)[len(lineage.segments) :]]
            deltas = [read(name) for name in chain[:-1]] + [(parts, meta)]
            since = lineage.segments[-1].next_handle
            _bring_forward(
                parked, parked.tables(arrow=True), since, replaced, [*segments, *deltas], deltas, read
            )
            lineage.loaded_by = "caught-up"
            return parked
    p = Purgatory(config)
    p.lineage = Lineage(loaded_by="rebuilt")
    t = ShardTables.empty()
    t.ops, t.watch = OPS_ARROW.empty_table(), WATCH_ARROW.empty_table()
    since, segments = 0, []
    if "segments" in meta:
        base, *changes = _segments_of(meta)
        base_parts, base_meta = store.read(base.name)
        t.ops, t.watch = pending_tables(base_parts, "", base_meta)
        t.resolved = frame_from(base_parts["resolved"], RESOLVED)
        since, segments = base.next_handle, [store.read(s.name) for s in changes]
    deltas = [read(name) for name in chain[:-1]] + [(parts, meta)]
    _bring_forward(p, t, since, [], [*segments, *deltas], deltas, read)
    return p


def _reader(store: SegmentStore, name: str, file: tuple[dict, dict]) -> Callable[[str], tuple[dict, dict]]:
    """``store.read`` of delta files, each read once per load (``file``: ``name``'s, read)."""
    files = {name: file}

    def read(name: str) -> tuple[dict, dict]:
        if name not in files:
            files[name] = store.read(name)
        return files[name]

    return read


def _forward(p: Purgatory, deltas: list[tuple[dict, dict]], read: Callable, since: str) -> bool:
    """Bring the live ``p``, at the version of the delta file ``since``, forward by the delta
    files after it (the last is the loaded version's), at the cost of what they changed
    (``Purgatory.forward``); False: it could not (``p`` is then unusable)."""
    parts, meta = deltas[-1]
    change = change_of(deltas)
    to = ShardTables.empty()
    _set_small(p, to, parts, meta)
    to.events, windows, live = small_tables(parts, meta, read, live_events=p.buffered, since=since)
    if not live:
        to.windows = windows
    to.wheel_now = int(meta["wheel_now"])
    kept = {"windows_added": windows} if live else {}  # the live windows, and those added
    if not p.forward(to, (change["ops"], change["watch"]), change["dead"], change["resolved"], **kept):
        return False
    _lineage_at(p.lineage, deltas, meta)
    p.lineage.small = small_mark(p, to.events, to.next_eseq)
    p.lineage.loaded_by = "caught-up"
    p.take_changes()  # the state layer has it all: log from here on
    return True


def _lineage_at(lineage: Lineage, deltas: list[tuple[dict, dict]], meta: dict[str, str]) -> None:
    """The lineage at the delta file ``meta``, having read ``deltas`` (its chain's files
    since the lineage's version): its change since the last segment, its chain, its clocks."""
    if lineage.segments:
        lineage.dead += [handles_from(d["tail_dead"]) for d, _ in deltas]
        lineage.resolved += [frame_from(d["tail_resolved"], RESOLVED) for d, _ in deltas]
    else:
        lineage.dead, lineage.resolved = [], []
    lineage.chain = [(name, int(rows)) for name, rows in json.loads(meta["chain"])]
    lineage.version, lineage.written = int(meta["version"]), int(meta["written"])
    lineage.small_chain = small_chain(meta)


def _bring_forward(
    p: Purgatory,
    t: ShardTables,
    since: int,
    replaced: list[pd.DataFrame],
    layers: list[tuple[dict, dict[str, str]]],
    deltas: list[tuple[dict, dict[str, str]]],
    read: Callable[[str], tuple[dict, dict]],
) -> None:
    """Bring ``p``, whose big tables ``t`` are right below handle ``since``, forward to the
    version of the last delta file of ``deltas``: apply ``layers`` (change segments, delta
    files, oldest first, that file last), having dropped the dedup rows ``replaced`` (they
    come again); ``deltas``: those of the layers that the lineage records as its change
    since its last segment; ``read``: delta files by name (the small chain's)."""
    lineage = p.lineage
    parts, meta = deltas[-1]
    apply_change(t, since, replaced, change_of(layers))
    lineage.segments = _segments_in(meta)
    _set_small(p, t, parts, meta)
    t.events, t.windows, _ = small_tables(parts, meta, read)
    t.resolved = rows_where(t.resolved, t.resolved["expire_at"].to_numpy(np.int64) > t.retired_wm)
    _lineage_at(lineage, deltas, meta)
    t.wheel, t.wheel_now = None, int(meta["wheel_now"])  # rebuilt from the pending deadlines
    p.load_tables(t)
    lineage.small = small_mark(p, t.events, t.next_eseq)
    p.take_changes()  # the state layer has it all: log from here on


def _segments_in(meta: dict[str, str]) -> list[Segment]:
    return _segments_of(meta) if "segments" in meta else []


def _rebuild(
    parts: dict, meta: dict[str, str], config: PurgatoryConfig | None, store: SegmentStore | None
) -> Purgatory:
    """A whole value (no pointer): the state itself, or (before the pointers) the change
    since the segments it names."""
    p = Purgatory(config)
    p.lineage = Lineage(loaded_by="rebuilt")
    t = ShardTables.empty()
    if "segments" not in meta:
        t.ops, t.watch = pending_tables(parts, "", meta)
        t.resolved = frame_from(parts["resolved"], RESOLVED)
        _set_small(p, t, parts, meta)
        if "wheel" in parts:  # formats 2 and 3 kept the wheel
            t.wheel = TimingWheel.from_bytes(parts["wheel"])
        else:
            t.wheel, t.wheel_now = None, int(meta["wheel_now"])  # rebuilt from the pending deadlines
        p.load_tables(t)
        p.take_changes()  # the state layer has it all: log from here on
        return p
    if store is None:
        raise ValueError("this state extends segment files: pass the SegmentStore it was saved with")
    # the base's tables, then what every later segment and this value changed
    base, *changes = _segments_of(meta)
    base_parts, base_meta = store.read(base.name)  # format 2 also kept ``seen``: not read
    t.ops, t.watch = pending_tables(base_parts, "", base_meta)
    t.resolved = frame_from(base_parts["resolved"], RESOLVED)
    layers = [*(store.read(s.name) for s in changes), (parts, meta)]
    apply_change(t, base.next_handle, [], change_of(layers))
    p.lineage.segments = _segments_of(meta)
    _set_small(p, t, parts, meta)
    t.resolved = rows_where(t.resolved, t.resolved["expire_at"].to_numpy(np.int64) > t.retired_wm)
    p.lineage.dead = [handles_from(parts["tail_dead"])]
    p.lineage.resolved = [frame_from(parts["tail_resolved"], RESOLVED)]
    t.wheel, t.wheel_now = None, int(meta["wheel_now"])
    p.load_tables(t)
    p.take_changes()
    return p


def _set_small(p: Purgatory, t: ShardTables, parts: dict, meta: dict[str, str]) -> None:
    """Scalars, the small tables and the lineage, which every value carries whole."""
    t.watermark = int(meta["watermark"])
    t.next_handle = int(meta["next_handle"])
    t.next_eseq = int(meta["next_eseq"])
    t.retired_wm = int(meta["retired_wm"])
    for name, dtypes in SMALL_TABLES.items():  # ``relayed`` is absent before relay notices
        setattr(t, name, frame_from(parts[name], dtypes) if name in parts else empty(dtypes))
    t.due = handles_from(parts["due"])
    p.shard = int(meta["shard"]) if meta["shard"] else None
    p.relays_through = int(meta.get("relays_through", -1))  # absent before the mailbox
    p.parked_in = int(meta.get("parked_in", -1))  # absent before the registry
    lineage = p.lineage
    lineage.id, lineage.token = meta["lineage"], meta["token"]
    lineage.ancestry = json.loads(meta["ancestry"])
    if "segments" in meta:
        lineage.saves = int(meta["saves"])
        lineage.graveyard = [(name, int(at)) for name, at in json.loads(meta["graveyard"])]


def _segments_of(meta: dict[str, str]) -> list[Segment]:
    return [Segment(name, int(nxt), int(rows)) for name, nxt, rows in json.loads(meta["segments"])]


def _can_catch_up(lineage: Lineage, meta: dict[str, str], store: SegmentStore | None) -> bool:
    """Is this (parked) lineage an ancestor of ``meta``'s version on the same segments?"""
    if store is None or "segments" not in meta or not lineage.segments or lineage.token is None:
        return False
    segments = _segments_of(meta)
    return (
        lineage.token in json.loads(meta["ancestry"])
        and segments[: len(lineage.segments)] == lineage.segments
    )
