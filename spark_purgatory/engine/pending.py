"""The pending operations and their watchers, indexed by handle, op_id and key.

Kafka keeps its operations in ``Watchers`` lists, one per key.  Here one ``Pending`` holds
every pending operation and every (operation, key) watcher of a shard in ``columns.Columns``,
indexed by the op_id hash and the key hash.  Every read takes a batch of handles, op_ids or
keys, costs what it touches, and gives ``rows.Rows`` in handle order.

Compact: what most operations lack takes no room (docs/engine-internals.md, "The worker's
memory"); ``rows`` puts the ``OPS`` columns back together for the rows asked for.

Invariants: an operation's rows (its own, its watchers', its members' and its payload's)
are all live or all gone; an op_id or key found by hash is confirmed on the string before it
is returned.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import distinct, flatten, hash_strings, isin, present
from .columns import SPARSE, TEXT, Columns
from .rows import Rows
from .tables import OPS, WATCH
from .text import lists_of

#: the pending operations as read (``rows``): ``OPS`` and each op_id's 64-bit hash
HELD = {**OPS, "ohash": "uint64"}
#: what ``rows(..., text=False)`` reads of the stored operations: no text
NUMBERS = ["handle", "ts", "deadline", "cond", "target", "stub", "warn_at"]
#: the pending operations as stored (keys in the watchers, members and payloads aside; the
#: op_id's hash in its index only; a target only where there is one)
_STORED = {
    "handle": "int64",
    "op_id": TEXT,
    "ts": "int64",
    "deadline": "int64",
    "cond": "int8",
    "target": SPARSE,
    "stub": "bool",
    "warn_at": SPARSE,
}
#: the watchers as stored: the key's hash in its index only, the progress at watch only for
#: ``offset`` operations
_WATCH_STORED = {"key": TEXT, "handle": "int64", "progress_at_watch": SPARSE}
_MEMBERS = {"handle": "int64", "member": TEXT}
_PAYLOADS = {"handle": "int64", "payload": TEXT}


def _arrow(dtypes: dict[str, str]) -> pa.Schema:
    """The Arrow schema of these engine columns: text as strings, ``members`` a list of them."""

    def of(name: str, dtype: str) -> pa.DataType:
        if dtype != "object":
            return pa.from_numpy_dtype(np.dtype(dtype))
        return pa.list_(pa.string()) if name == "members" else pa.string()

    return pa.schema([(name, of(name, dtype)) for name, dtype in dtypes.items()])


#: the Arrow form of the pending operations (``arrow`` / ``Pending(...)``): ``_STORED`` with
#: their members and payload (null for none); the keys are the watchers'
OPS_ARROW = _arrow({name: HELD[name] for name in (*_STORED, "ohash", "members", "payload")})
WATCH_ARROW = _arrow(WATCH)
_EMPTY = np.empty(0, np.int64)


class Pending:
    """A shard's pending operations and watchers (see the module docstring).

    Args:
        ops: ``OPS`` rows (a frame) or ``OPS_ARROW`` rows (an Arrow table), in any order.
        watch: ``WATCH`` rows of those operations (a frame, or a ``WATCH_ARROW`` table), in
            any order; an operation's watchers in the order of its keys.
    """

    def __init__(self, ops: pd.DataFrame | pa.Table, watch: pd.DataFrame | pa.Table) -> None:
        self._ops = Columns(_STORED, hashed={"ohash": "op_id"})
        self._watch = Columns(_WATCH_STORED, hashed={"hash": "key"})
        self._members = Columns(_MEMBERS)
        self._payloads = Columns(_PAYLOADS)
        self._recent: Rows | None = None  # the rows ``add`` was given this call (``recent``)
        self._recent_watch: Rows | None = None  # ... and their watchers
        # those of them from this handle on are in no column yet (``_register``); per recent
        # row, is it still pending (``remove`` before registration)
        self._unregistered_from: int | None = None
        self._recent_alive = np.empty(0, bool)
        if isinstance(ops, pa.Table):
            self.append_arrow(ops, watch)
            return
        ops = Rows.of(ops, OPS).take(np.argsort(ops["handle"].to_numpy(np.int64), kind="stable"))
        # an operation's watchers in the order of its keys (a frame of format 2 or 3 kept them
        # by hash; its keys were sorted then)
        watch = Rows.of(_in_key_order(ops, watch), WATCH)
        n_members = np.fromiter(map(_size, ops["members"]), np.int64, count=len(ops))
        self.add(ops.assign(ohash=hash_strings(ops["op_id"]), n_members=n_members), watch)

    def append_arrow(self, ops: pa.Table, watch: pa.Table) -> None:
        """Register ``OPS_ARROW`` operations (handles above every pending one) and their
        ``WATCH_ARROW`` watchers, no Python object per row (what ``add`` kept forgotten first)."""
        self.forget_recent()
        ops, watch = _by_handle(ops), _by_handle(watch)
        self._ops.append({c: _column(ops, c) for c in (*_STORED, "ohash")})
        self._watch.append({c: _column(watch, c) for c in WATCH})
        members = ops.column("members").combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(members), 0).to_numpy()
        if lengths.any():
            handles = np.repeat(ops.column("handle").to_numpy(), lengths)
            self._members.append({"handle": handles, "member": pc.list_flatten(members)})
        payload = ops.column("payload").combine_chunks()
        if payload.null_count < len(payload):
            present = pc.is_valid(payload)
            handles = ops.column("handle").to_numpy()[present.to_numpy(zero_copy_only=False)]
            self._payloads.append({"handle": handles, "payload": payload.filter(present)})

    def __len__(self) -> int:
        """Pending operations."""
        self._register()
        return len(self._ops)

    @property
    def stubs(self) -> int:
        """Pending stubs: copies a cross-shard operation leaves in the shards of its keys
        (``relay``), which count nothing and report nothing."""
        self._register()
        if len(self._ops) == 0:
            return 0
        return int(self._ops.column("stub")[self._ops.alive].sum())

    @property
    def watched(self) -> int:
        """Watcher rows, one per (operation, key)."""
        self._register()
        return len(self._watch)

    @property
    def nbytes(self) -> int:
        """Bytes the pending operations and watchers take (their rows and indexes)."""
        self._register()
        return sum(t.nbytes for t in (self._ops, self._watch, self._members, self._payloads))

    # -- changes -------------------------------------------------------------------------------

    def add(self, ops: Rows, watch: Rows, *, recent: bool = False) -> None:
        """Register operations (``HELD`` columns; handles above every pending one) and their
        watchers (``WATCH`` columns, in handle order).

        ``recent``: keep ``ops`` and ``watch`` as given to answer reads of them until
        ``forget_recent``, instead of reading them back from the columns: a call's operations
        are most of what it reads.  They enter the columns only when a read needs them there
        (``_register``), those still pending then, so an operation that completes in the call
        that registers it is never appended and tombstoned.  Without ``recent``, what was
        kept is registered and forgotten first."""
        if "warn_at" not in ops:  # rows made before warnings (``OPS``): none asked
            ops = ops.assign(warn_at=np.full(len(ops), np.nan))
        if recent:
            self._remember(ops, watch)
            return
        self.forget_recent()
        self._append(ops, watch)

    def _append(self, ops: Rows, watch: Rows) -> None:
        """Append operations (``HELD``, handles above every row of the columns) and their
        watchers to the columns."""
        self._ops.append(ops)
        self._watch.append(watch)
        with_members = np.flatnonzero(ops["n_members"] > 0)
        if with_members.size:
            lengths, members = flatten(ops["members"][with_members])
            handles = np.repeat(ops["handle"][with_members], lengths)
            self._members.append({"handle": handles, "member": members})
        payload = ops["payload"]
        has_payload = present(payload)
        if has_payload.any():
            at = np.flatnonzero(has_payload)
            self._payloads.append({"handle": ops["handle"][at], "payload": payload[at]})

    def _remember(self, ops: Rows, watch: Rows) -> None:
        """Keep ``ops`` as ``rows`` gives them, not in the columns yet; a batch that does not
        follow the kept one replaces it (the kept one registered first)."""
        some, has_payload = ops["n_members"] > 0, present(ops["payload"])
        if not some.any():  # no members: none made from the lists
            ops = ops.assign(members=np.full(len(ops), None, dtype=object))
        elif not some.all():
            ops = ops.assign(members=np.where(some, ops["members"], None))
        if not has_payload.all():
            ops = ops.assign(payload=np.where(has_payload, ops["payload"], None))
        ops = ops.select(HELD)
        watch = watch.select(WATCH)
        first = int(ops["handle"][0])
        alive = np.ones(len(ops), bool)
        recent = self._recent
        if recent is not None and len(recent) and int(recent["handle"][-1]) + 1 == first:
            ops, watch = recent.stack(ops), self._recent_watch.stack(watch)
            alive = np.concatenate([self._recent_alive, alive])
        else:
            self._register()
        if self._unregistered_from is None:
            self._unregistered_from = first
        self._recent, self._recent_watch, self._recent_alive = ops, watch, alive

    def forget_recent(self) -> None:
        """Drop what ``add(..., recent=True)`` kept (at the end of a call), those still pending
        registered first."""
        self._register()
        self._recent = self._recent_watch = None
        self._recent_alive = np.empty(0, bool)

    def _register(self) -> None:
        """Append the kept operations not in the columns yet and still pending, and their
        watchers, to the columns (before a read of the columns, or a batch not kept)."""
        start = self._unregistered_from
        if start is None:
            return
        self._unregistered_from = None
        recent, watch = self._recent, self._recent_watch
        cut = start - int(recent["handle"][0])
        alive = self._recent_alive[cut:]
        if not alive.any():
            return
        at = int(np.searchsorted(watch["handle"], start))
        if cut or not alive.all():  # not every kept row: copies of those still pending
            w_alive = alive[watch["handle"][at:] - start]
            recent = recent.take(np.arange(cut, len(recent))[alive])
            watch = watch.take(np.arange(at, len(watch))[w_alive])
        self._append(recent, watch)

    def _recent_cut(self, handles: np.ndarray) -> int:
        """How many of these handles (sorted) come before the kept operations: those are read
        from the columns, the others from what ``add`` kept."""
        recent = self._recent
        if recent is None or not len(recent) or not handles.size:
            return handles.size
        return int(np.searchsorted(handles, int(recent["handle"][0])))

    def remove(self, handles: np.ndarray) -> None:
        """Drop these pending operations (distinct handles) and their watchers; those kept but
        not in the columns yet only leave what ``add`` kept (``_register`` skips them)."""
        start = self._unregistered_from
        if start is not None:
            kept = handles >= start
            if kept.any():
                self._recent_alive[handles[kept] - int(self._recent["handle"][0])] = False
                handles = handles[~kept]
        self._ops.kill(self._ops.positions(handles))
        self._watch.kill(self._watch.ranges(handles)[1])
        for side in (self._members, self._payloads):
            if len(side):
                side.kill(side.ranges(handles)[1])

    # -- reads ---------------------------------------------------------------------------------

    def rows(self, handles: np.ndarray, *, keys: bool = False, text: bool = True) -> Rows:
        """The ``HELD`` rows of these pending operations, in handle order, once each; without
        ``keys`` unless asked.  Those ``add`` kept come as they were given.  Without ``text``,
        the rows read from the columns have their ``NUMBERS`` only."""
        handles = distinct(handles)
        cut = self._recent_cut(handles)
        if cut == handles.size:
            if not text:
                return self._ops.rows(self._ops.positions(handles), NUMBERS)
            return self._held(self._ops.positions(handles), keys)
        recent = self._recent
        if handles.size - cut == len(recent):  # every kept row (distinct, sorted): no copy
            new = recent
        else:
            new = recent.take(handles[cut:] - int(recent["handle"][0]))
        if cut == 0:
            return new
        positions = self._ops.positions(handles[:cut])
        old = self._held(positions, keys) if text else self._ops.rows(positions, NUMBERS)
        return Rows.concat([old, new], dict.fromkeys(old.columns))

    def with_keys(self, rows: Rows) -> Rows:
        """``rows`` of pending operations (sorted by handle) with their ``keys``, if missing."""
        if "keys" in rows:
            return rows
        handles = rows["handle"]
        cut = self._recent_cut(handles)
        probe, at = self._watch.ranges(handles[:cut])
        keys = lists_of(np.bincount(probe, minlength=cut), self._watch.text("key", at))
        if cut < handles.size:  # the kept operations' own lists
            first = int(self._recent["handle"][0])
            keys = np.concatenate([keys, self._recent["keys"][handles[cut:] - first]])
        return rows.assign(keys=keys)

    def _held(self, positions: np.ndarray, keys: bool) -> Rows:
        """The ``HELD`` rows at these positions of the operations (in handle order)."""
        rows = self._ops.rows(positions)
        handles = rows["handle"]
        n = handles.size
        n_members = np.zeros(n, np.int64)
        members = np.full(n, None, dtype=object)  # an operation without members: None
        if len(self._members):
            probe, at = self._members.ranges(handles)
            n_members = np.bincount(probe, minlength=n)
            some = n_members > 0
            members[some] = lists_of(n_members[some], self._members.text("member", at))
        payload = np.full(n, None, dtype=object)
        if len(self._payloads):
            probe, at = self._payloads.ranges(handles)
            payload[probe] = self._payloads.text("payload", at)
        rows = rows.assign(members=members, payload=payload, n_members=n_members)
        return self.with_keys(rows) if keys else rows

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every pending operation and watcher, as ``OPS`` and ``WATCH`` frames in handle order."""
        self._register()
        ops = self._held(self._ops.live_positions(), keys=True)
        return ops.to_frame(list(OPS)), self._watch.frame(columns=list(WATCH))

    def arrow(self, since: int | None = None) -> tuple[pa.Table, pa.Table]:
        """The pending operations and watchers (those registered from handle ``since`` on, or
        all) as ``OPS_ARROW`` and ``WATCH_ARROW`` tables in handle order: the state layer's
        form, no Python object per row."""
        self._register()
        ops_pos = self._ops.live_positions() if since is None else self._ops.since(since)
        watch_pos = self._watch.live_positions() if since is None else self._watch.since(since)
        handles = self._ops.column("handle")[ops_pos]
        columns = {c: self._ops.arrow(c, ops_pos) for c in _STORED}
        columns["ohash"] = pa.array(self._ops.hashes("ohash", ops_pos))
        columns["members"] = self._members_arrow(handles)
        columns["payload"] = self._payload_arrow(handles)
        ops = pa.Table.from_pydict(columns, schema=OPS_ARROW)
        watch = {c: self._watch.arrow(c, watch_pos) for c in _WATCH_STORED}
        watch["hash"] = pa.array(self._watch.hashes("hash", watch_pos))
        watch = pa.Table.from_pydict(watch, schema=WATCH_ARROW)
        return ops, watch

    def _members_arrow(self, handles: np.ndarray) -> pa.Array:
        probe, at = self._members.ranges(handles) if len(self._members) else (_EMPTY, _EMPTY)
        offsets = np.zeros(handles.size + 1, np.int32)
        np.cumsum(np.bincount(probe, minlength=handles.size), out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), self._members.arrow("member", at))

    def _payload_arrow(self, handles: np.ndarray) -> pa.Array:
        if not len(self._payloads):
            return pa.nulls(handles.size, pa.string())
        probe, at = self._payloads.ranges(handles)
        index = np.zeros(handles.size, np.int64)
        index[probe] = np.arange(probe.size)
        mask = np.ones(handles.size, bool)
        mask[probe] = False
        return self._payloads.arrow("payload", at).take(pa.array(index, mask=mask))

    def since(self, handle: int) -> tuple[Rows, Rows]:
        """The operations (``HELD``) and watchers registered from ``handle`` on (still pending)."""
        self._register()
        return self._held(self._ops.since(handle), False), self._watch.rows(self._watch.since(handle))

    def contains(self, handles: np.ndarray) -> np.ndarray:
        """Per handle: is that operation pending?"""
        start = self._unregistered_from
        if start is None:
            return self._ops.contains(handles)
        first = int(self._recent["handle"][0])
        kept = (handles >= start) & (handles < first + len(self._recent))
        pending = np.zeros(handles.size, bool)
        pending[~kept] = self._ops.contains(handles[~kept])
        pending[kept] = self._recent_alive[handles[kept] - first]
        return pending

    def stub(self, handles: np.ndarray) -> np.ndarray:
        """Per (pending) handle: is the operation a stub?"""
        return self.column("stub", handles)

    def column(self, name: str, handles: np.ndarray) -> np.ndarray:
        """Per (pending) handle: its operation's ``name`` (an ``OPS`` column)."""
        start = self._unregistered_from
        if start is None:
            return self._ops.column(name)[self._ops.positions(handles)]
        kept = handles >= start
        recent = self._recent[name]
        values = np.empty(handles.size, recent.dtype)
        values[~kept] = self._ops.column(name)[self._ops.positions(handles[~kept])]
        values[kept] = recent[handles[kept] - int(self._recent["handle"][0])]
        return values

    def ohash(self, handles: np.ndarray) -> np.ndarray:
        """Per (pending) handle: its op_id's hash, from what ``add`` kept or from the op_id
        index; no Python string is made."""
        start = self._unregistered_from
        if start is None:
            return self._ops.hashes("ohash", self._ops.positions(handles))
        kept = handles >= start
        values = np.empty(handles.size, np.uint64)
        values[~kept] = self._ops.hashes("ohash", self._ops.positions(handles[~kept]))
        values[kept] = self._recent["ohash"][handles[kept] - int(self._recent["handle"][0])]
        return values

    def deadlines(self, since: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every pending operation's handle and deadline (``since``: from that handle on), in
        handle order."""
        self._register()
        pos = self._ops.live_positions() if since is None else self._ops.since(since)
        return self._ops.column("handle")[pos], self._ops.column("deadline")[pos]

    def warn_times(self) -> tuple[np.ndarray, np.ndarray]:
        """The pending operations that asked for a warning: their handles and ``warn_at``."""
        self._register()
        pos, warn_at = self._ops.present("warn_at")
        return self._ops.column("handle")[pos], warn_at

    def latest_deadline(self) -> int | None:
        """The latest deadline of a pending operation (None if none)."""
        self._register()
        if len(self._ops) == 0:
            return None
        return int(self._ops.column("deadline")[self._ops.alive].max())

    def watch_rows(self, handles: np.ndarray, columns: list[str]) -> Rows:
        """The watcher rows of these pending operations (sorted, distinct handles), in handle
        order."""
        cut = self._recent_cut(handles)
        if cut == handles.size:
            return self._watch.rows(self._watch.ranges(handles)[1], columns)
        watch = self._recent_watch.select(columns)
        new = watch.take(isin(watch["handle"], handles[cut:]))  # a mask: the kept rows are in order
        if cut == 0:
            return new
        old = self._watch.rows(self._watch.ranges(handles[:cut])[1], columns)
        return Rows.concat([old, new], dict.fromkeys(columns))

    def by_op_id(self, op_ids: np.ndarray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``op_ids``, handle) of the pending operations with these op_ids, in
        ``op_ids`` order (``hashes``: the op_ids' ``hash_strings``, if the caller has them)."""
        self._register()
        if len(self._ops) == 0 or len(op_ids) == 0:
            return _EMPTY, _EMPTY
        hashes = hash_strings(op_ids) if hashes is None else hashes
        probe, pos = self._ops.lookup("ohash", hashes)
        if probe.size == 0:
            return _EMPTY, _EMPTY
        same = self._ops.text("op_id", pos) == op_ids[probe]  # the candidates' strings only
        probe, pos = probe[same], pos[same]
        if probe.size > 1:  # by op_id (each names one operation at most)
            order = np.argsort(probe)
            probe, pos = probe[order], pos[order]
        return probe, self._ops.column("handle")[pos]

    def watchers_of(self, keys: np.ndarray, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``keys``, handle) for every pending operation watching each key (Kafka's
        ``Watchers`` of the key), by key then handle (``hashes``: the keys' hashes)."""
        self._register()
        if len(self._watch) == 0 or len(keys) == 0:
            return _EMPTY, _EMPTY
        probe, pos = self._watch.lookup("hash", hashes)
        if probe.size == 0:
            return _EMPTY, _EMPTY
        same = self._watch.text("key", pos) == keys[probe]  # the candidates' strings only
        probe, pos = probe[same], pos[same]
        if probe.size > 1:  # by key, then handle (positions follow handles): one int64 sort
            order = np.argsort(probe * np.int64(self._watch.occupied) + pos)
            probe, pos = probe[order], pos[order]
        return probe, self._watch.column("handle")[pos]


def _in_key_order(ops: Rows, watch: pd.DataFrame) -> pd.DataFrame:
    """The watchers by handle, each operation's in the order of its ``keys``."""
    lengths = np.fromiter(map(_size, ops["keys"]), np.int64, count=len(ops))
    listed = pd.DataFrame(
        {
            "handle": np.repeat(ops["handle"], lengths),
            "key": np.fromiter(
                (k for keys in ops["keys"] if _size(keys) for k in keys), object, int(lengths.sum())
            ),
            "_at": np.arange(int(lengths.sum())),  # the operations are in handle order
        }
    )
    ranked = watch.merge(listed, on=["handle", "key"], how="left", sort=False)
    return ranked.sort_values(["handle", "_at", "key"], kind="stable").drop(columns="_at")


def _size(values: object) -> int:
    """A list's length, 0 for a missing one (None or NaN)."""
    return len(values) if isinstance(values, (list, tuple, np.ndarray)) else 0


def _by_handle(table: pa.Table) -> pa.Table:
    handles = table.column("handle").to_numpy()
    if handles.size > 1 and not (handles[1:] >= handles[:-1]).all():
        table = table.take(pa.array(np.argsort(handles, kind="stable")))
    return table


def _column(table: pa.Table, name: str) -> np.ndarray | pa.Array:
    """A column of an Arrow table as the ``Columns`` take it (numbers as numpy, text as Arrow)."""
    column = table.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.combine_chunks()
    return column.to_numpy()
