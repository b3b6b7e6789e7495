"""A shard's state loaded: ``load_state``, the inverse of ``shard_state.save_state``.

Three ways to a live ``Purgatory`` (``shard_state`` explains the files and the worker cache):
the same worker's parked object (``exact``), a parked ancestor brought forward by the files
written since (``caught-up``), or the segments and the chain read afresh (``rebuilt``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..engine.frames import empty, rows_where
from ..engine.pending import OPS_ARROW, WATCH_ARROW
from ..engine.purgatory import Purgatory
from ..engine.tables import RESOLVED, SMALL_TABLES, ShardTables
from ..engine.wheel import TimingWheel
from .cache import WORKER_CACHE, WorkerCache
from .codec import frame_from, handles_from, unpack_parts
from .increments import (
    DeltaName,
    is_pointer,
    pointed,
)
from .layers import (
    apply_change,
    chain_before,
    change_before,
    change_of,
    combined,
    layer_of,
    pending_tables,
    rows_of,
)
from .segments import SegmentStore
from .shard_state import READABLE_VERSIONS, Lineage, Segment
from .small_tables import small_chain, small_mark, small_tables


def load_state(
    data: bytes,
    config: PurgatoryConfig | None = None,
    store: SegmentStore | None = None,
    *,
    cache: WorkerCache | None = None,
) -> Purgatory:
    """Inverse of ``save_state``; ``config`` may differ only in retention and limits.

    A format outside ``READABLE_VERSIONS`` raises ``ValueError`` naming it and what to do;
    ``loaded_by(p)`` tells which way it was loaded.
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
    if parked is not None and _catch_up(parked, (parts, meta), read, store):
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


def _catch_up(p: Purgatory, loaded: tuple[dict, dict], read: Callable, store: SegmentStore) -> bool:
    """Bring the parked ``p`` forward to the version of the delta file ``loaded`` when it is
    an ancestor: by the changes since its version (``_changes_since``), or else back to its
    last segment and forward; False: it is not one, or could not be (``p`` is then unusable)."""
    lineage = p.lineage
    parts, meta = loaded
    last = lineage.chain[-1][0] if lineage.chain else None
    found = None if last is None else _changes_since(last, lineage.segments, meta, read)
    if found is not None:
        return _forward(p, *found, loaded, read, last)
    if not _can_catch_up(lineage, meta, store):
        return False
    replaced, lineage.dead, lineage.resolved = lineage.resolved, [], []
    segments = [store.read(s.name) for s in _segments_of(meta)[len(lineage.segments) :]]
    deltas = [read(name) for name, _rows in json.loads(meta["chain"])[:-1]] + [loaded]
    since = lineage.segments[-1].next_handle
    _bring_forward(p, p.tables(arrow=True), since, replaced, [*segments, *deltas], deltas, read)
    lineage.loaded_by = "caught-up"
    return True


def _changes_since(
    last: str, segments: list[Segment], meta: dict[str, str], read: Callable[[str], tuple[dict, dict]]
) -> tuple[list[dict], int | None] | None:
    """The changes (``layers.layer_of``'s, oldest first) from the delta file ``last``, the
    version a parked shard on ``segments`` holds, to the version of the delta file ``meta``:
    the files after ``last`` on its chain, or, across compactions, those after it on an
    earlier chain, then for each later chain the change its first file records
    (``layers.chain_record``) and its other files.  With them, None when they are all on
    ``meta``'s chain, else the index of the first that is (the change since the last segment
    starts afresh there).  None when ``last`` is on none of those chains, a file is swept,
    or the changes hold more rows than a rebuild reads."""
    chain = json.loads(meta["chain"])
    budget = sum(s.rows for s in _segments_in(meta)) + sum(int(rows) for _name, rows in chain)
    newer: list[list[dict]] = []  # the changes of each later chain, newest first
    spent = 0
    try:
        while True:
            names = [name for name, _rows in chain]
            if last in names:
                later = chain[names.index(last) + 1 :]
                spent += sum(int(rows) for _name, rows in later)
                if spent > budget or (not newer and segments != _segments_in(meta)):
                    return None
                changes = [layer_of(*read(name)) for name, _rows in later]
                own = None if not newer else len(changes) + sum(map(len, newer[1:])) + 1
                return [c for cs in (changes, *reversed(newer)) for c in cs], own
            head = read(names[0])
            before = chain_before(head[1])
            if before is None:
                return None
            change = change_before(*head, read)
            # of a chain's first file only the change it records is decoded
            spent += rows_of(change) + sum(int(rows) for _name, rows in chain[1:])
            if spent > budget:
                return None
            newer.append([change, *(layer_of(*read(name)) for name, _rows in chain[1:])])
            chain = before
    except OSError:  # a file of an earlier chain swept: the version is rebuilt instead
        return None


def _forward(
    p: Purgatory, changes: list[dict], own: int | None, loaded: tuple[dict, dict], read: Callable, since: str
) -> bool:
    """Bring the live ``p``, at the version of the delta file ``since``, forward by
    ``changes`` to the version of ``loaded`` (``own``: ``_changes_since``'s); False: it could
    not (``p`` is then unusable)."""
    parts, meta = loaded
    change = combined(changes)
    to = ShardTables.empty()
    _set_small(p, to, parts, meta)
    to.events, windows, live = small_tables(parts, meta, read, live_events=p.buffered, since=since)
    if not live:
        to.windows = windows
    to.wheel_now = int(meta["wheel_now"])
    kept = {"windows_added": windows} if live else {}  # the live windows, and those added
    if not p.forward(to, (change["ops"], change["watch"]), change["dead"], change["resolved"], **kept):
        return False
    p.lineage.segments = _segments_in(meta)
    _lineage_at(p.lineage, changes if own is None else changes[own:], meta, afresh=own is not None)
    p.lineage.small = small_mark(p, to.events, to.next_eseq)
    p.lineage.loaded_by = "caught-up"
    p.take_changes()  # the state layer has it all: log from here on
    return True


def _lineage_at(lineage: Lineage, changes: list[dict], meta: dict[str, str], *, afresh: bool = False) -> None:
    """The lineage at the delta file ``meta``, having applied ``changes``."""
    if afresh:
        lineage.dead, lineage.resolved = [], []
    if lineage.segments:
        lineage.dead += [change["dead"] for change in changes]
        lineage.resolved += [change["resolved"] for change in changes]
    else:
        lineage.dead, lineage.resolved = [], []
    lineage.chain = [(name, int(rows)) for name, rows in json.loads(meta["chain"])]
    lineage.version, lineage.written = int(meta["version"]), int(meta["written"])
    lineage.small_chain = small_chain(meta)
    lineage.tails = None  # the chain's files were written elsewhere: a compaction reads the shard


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
    version of the last of ``deltas``: apply ``layers`` (change segments and delta files,
    oldest first), having dropped the dedup rows ``replaced`` (they come again); ``deltas``:
    the layers the lineage records as its change since its last segment."""
    lineage = p.lineage
    parts, meta = deltas[-1]
    changes = [layer_of(*layer) for layer in layers]
    apply_change(t, since, replaced, combined(changes))
    lineage.segments = _segments_in(meta)
    _set_small(p, t, parts, meta)
    t.events, t.windows, _ = small_tables(parts, meta, read)
    t.resolved = rows_where(t.resolved, t.resolved["expire_at"].to_numpy(np.int64) > t.retired_wm)
    _lineage_at(lineage, changes[len(changes) - len(deltas) :], meta)
    t.wheel, t.wheel_now = None, int(meta["wheel_now"])  # rebuilt from the pending deadlines
    p.load_tables(t)
    lineage.small = small_mark(p, t.events, t.next_eseq)
    p.take_changes()  # the state layer has it all: log from here on


def _segments_in(meta: dict[str, str]) -> list[Segment]:
    return _segments_of(meta) if "segments" in meta else []


def _rebuild(
    parts: dict, meta: dict[str, str], config: PurgatoryConfig | None, store: SegmentStore | None
) -> Purgatory:
    """A whole value: the state itself, or (older versions) the change since its segments."""
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
        lineage.base_dead = int(meta["base_dead"]) if "base_dead" in meta else None  # absent before


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
