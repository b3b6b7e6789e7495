"""Columnar tables with spare capacity and tombstones, and a hash index of sorted runs.

These two structures make a shard's call cost what the batch touches, not what is pending:

* ``Columns``: numpy columns with spare capacity, rows appended in increasing ``handle``
  order, so ``searchsorted`` finds a handle's rows.  A full table grows by half (``GROWTH``);
  a removal clears the row's ``alive`` flag, and when dead rows pass half of the occupied
  ones the live rows move down in order (O(1) amortised per row either way).
* ``HashIndex``: 64-bit hash -> row, as runs sorted by hash merged geometrically (like an LSM
  tree): an inserted batch is a new run, and while the newest run is at least half the size
  of the one before, the two merge: O(log n) runs, each with a Bloom filter (``_Filter``).

Worked example: appending batches of 8, 8, 16 rows gives runs [8] -> [8, 8] -> merged [16]
-> [16, 16] -> merged [32]; a 33rd row makes [32, 1].

A hash only finds candidates: the caller confirms them on the strings.

Invariants: the occupied ``handle`` column is non-decreasing; ``len(table)`` counts the live
rows; when an index is read, every live row is in it exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

from . import memory
from .arrays import equal_ranges, expand_ranges, hash_strings, search
from .rows import Rows
from .tables import I64_MIN
from .text import TextColumn

_MIN_CAPACITY = 64
_MIN_DEAD = 1024  # below this many dead rows a table never compacts
_NONE = np.empty(0, np.int64)
_SORT_PROBES = 256  # more probes than this are sorted before a lookup
_KEEP_MAX = 1 << 17  # answers for more handles than this are not kept (``Columns._keep``)
TEXT = "text"  #: the dtype of a ``TextColumn``
SPARSE = "sparse"  #: the dtype of a float64 column that stores only its non-NaN rows (``_Sparse``)
GROWTH = 1.5  #: a full table's capacity is multiplied by this (numeric and text columns alike)


class _Filter:
    """A run's Bloom filter: each hash sets the slots of its low bits and of its top bits (set
    in order, as a run's hashes are sorted)."""

    SLOTS_PER_HASH = 8
    __slots__ = ("_bits", "_mask", "_top")

    def __init__(self, hashes: np.ndarray) -> None:
        slots = 1 << max(6, int(self.SLOTS_PER_HASH * hashes.size - 1).bit_length())
        self._mask = slots - 1
        self._top = 64 - (slots.bit_length() - 1)  # a hash shifted by this: its top bits
        hashes = _signed(hashes)
        marked = memory.empty(slots, bool)
        marked.fill(False)
        marked[hashes & self._mask] = True
        marked[(hashes >> self._top) & self._mask] = True  # masked: int64's shift keeps the sign
        self._bits = np.packbits(marked, bitorder="little")

    @property
    def nbytes(self) -> int:
        return self._bits.nbytes

    def passing(self, probes: np.ndarray) -> np.ndarray:
        """The indexes of the probes whose two slots are set (the others are not in the run)."""
        probes = _signed(probes)
        first = np.flatnonzero(self._set(probes & self._mask))
        return first[self._set((probes[first] >> self._top) & self._mask)]

    def _set(self, slots: np.ndarray) -> np.ndarray:
        return (self._bits[slots >> 3] & _BIT[slots & 7]).astype(bool)


_BIT = np.array([1 << i for i in range(8)], np.uint8)  # a slot's bit in its byte (little order)


def _signed(hashes: np.ndarray) -> np.ndarray:
    """64-bit hashes as int64, the same bits (numpy indexes with int64 as it is)."""
    return hashes.view(np.int64) if hashes.dtype.itemsize == 8 else hashes.astype(np.int64)


class HashIndex:
    """64-bit hashes -> row positions, as geometrically merged sorted runs (see module)."""

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray, _Filter]] = []

    def __len__(self) -> int:
        return sum(h.size for h, _, _ in self._runs)

    @property
    def nbytes(self) -> int:
        """Bytes of the runs and their filters."""
        return sum(h.nbytes + r.nbytes + f.nbytes for h, r, f in self._runs)

    @property
    def runs(self) -> int:
        return len(self._runs)

    def add(self, hashes: np.ndarray, rows: np.ndarray) -> None:
        """Index ``rows`` under ``hashes`` (one run, then merges while the sizes call for it)."""
        if hashes.size == 0:
            return
        order = np.argsort(hashes)
        hashes, rows = _taken(hashes, order), _taken(_narrow(rows), order)
        # every run the new one merges with, merged at once by one stable sort
        first, size = len(self._runs), hashes.size
        while first > 0 and 2 * size >= self._runs[first - 1][0].size:
            first -= 1
            size += self._runs[first][0].size
        if first < len(self._runs):
            hashes = np.concatenate([*(h for h, _, _ in self._runs[first:]), hashes])
            rows = np.concatenate([*(r for _, r, _ in self._runs[first:]), rows])
            order = np.argsort(hashes, kind="stable")
            hashes, rows = _taken(hashes, order), _taken(rows, order)
        self._runs[first:] = [(hashes, rows, _Filter(hashes))]

    def lookup(self, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (index into ``probes``, row) with an equal hash, dead rows included, in no
        particular order; per run, only the probes its filter passes are searched."""
        found_probe, found_row = [], []
        for hashes, rows, bloom in self._runs:
            candidates = bloom.passing(probes)
            if candidates.size == 0:
                continue
            if candidates.size > _SORT_PROBES:
                candidates = candidates[np.argsort(probes[candidates])]
            some = probes[candidates]
            lo = np.searchsorted(hashes, some)
            hit = np.flatnonzero(hashes[np.minimum(lo, hashes.size - 1)] == some)
            if hit.size == 0:
                continue
            lo, some, hit = lo[hit], some[hit], candidates[hit]
            counts = np.searchsorted(hashes, some, side="right") - lo
            if (counts == 1).all():
                found_probe.append(hit)
                found_row.append(rows[lo])
                continue
            probe, at = expand_ranges(lo, counts)
            found_probe.append(hit[probe])
            found_row.append(rows[at])
        if not found_probe:
            return _NONE, _NONE
        if len(found_probe) == 1:
            return found_probe[0], found_row[0]
        return np.concatenate(found_probe), np.concatenate(found_row)

    def remap(self, moved: np.ndarray) -> None:
        """Rows moved: ``moved[old]`` is the new position, -1 for a dropped row."""
        runs = []
        for hashes, rows, bloom in self._runs:
            new = moved[rows]
            keep = new >= 0
            if keep.any():  # the filter still passes every hash kept (and some dropped)
                runs.append((memory.copy_of(hashes[keep]), memory.copy_of(_narrow(new[keep])), bloom))
        self._runs = runs

    def hashes_at(self, positions: np.ndarray, occupied: int) -> np.ndarray:
        """The hash each of these rows (distinct, below ``occupied``) is indexed under."""
        if positions.size == 0:
            return np.empty(0, np.uint64)
        if 4 * positions.size >= occupied:  # most rows: invert every run
            inverse = np.zeros(occupied, np.uint64)
            for hashes, rows, _ in self._runs:
                inverse[rows] = hashes
            return inverse[positions]
        lo, hi = int(positions.min()), int(positions.max()) + 1
        inverse = np.zeros(hi - lo, np.uint64)
        for hashes, rows, _ in self._runs:
            at = np.flatnonzero((rows >= lo) & (rows < hi))
            inverse[rows[at] - lo] = hashes[at]
        return inverse[positions - lo]


def _taken(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    return np.take(values, order, out=memory.empty(order.size, values.dtype))


def _narrow(rows: np.ndarray) -> np.ndarray:
    """Row positions as int32 while they fit (4 bytes a row less in every index run)."""
    if rows.dtype == np.int32 or (rows.size and int(rows.max()) > np.iinfo(np.int32).max):
        return rows
    return rows.astype(np.int32)


class Columns:
    """A table of numpy columns with spare capacity and tombstones, rows in handle order.

    Args:
        dtypes: the columns and their numpy dtypes, ``"text"`` (a ``TextColumn``) or
            ``"sparse"`` (float64 mostly NaN, ``_Sparse``); one must be ``handle`` (int64).
        indexed: columns of uint64 hashes to keep a ``HashIndex`` on.
        hashed: indexed hash columns kept in their index only, each the ``hash_strings`` of a
            text column (``{"ohash": "op_id"}``).

    Appended rows enter the indexes when a read next needs them.  Positions are valid until
    the next ``compact``; handles always.  The last ``positions`` and ``ranges`` answers are
    kept, read-only, until the table next changes.
    """

    def __init__(
        self,
        dtypes: Mapping[str, str],
        indexed: tuple[str, ...] = (),
        hashed: Mapping[str, str] | None = None,
    ) -> None:
        self.dtypes = {name: t if t in (TEXT, SPARSE) else np.dtype(t) for name, t in dtypes.items()}
        kinds = (TEXT, SPARSE)
        self._cols = {name: np.empty(_MIN_CAPACITY, t) for name, t in self.dtypes.items() if t not in kinds}
        self._texts = {name: TextColumn() for name, t in self.dtypes.items() if t == TEXT}
        self._sparse = {name: _Sparse() for name, t in self.dtypes.items() if t == SPARSE}
        self._alive = np.zeros(_MIN_CAPACITY, bool)
        self._n = 0  # occupied rows, dead ones included
        self._live = 0
        self._hashed = dict(hashed or {})
        self._indexes = {name: HashIndex() for name in (*indexed, *self._hashed)}
        self._indexed_to = 0  # the rows from this position on are in no index yet
        self._unindexed: dict[str, list[np.ndarray]] = {name: [] for name in self._hashed}  # their hashes
        self._kept: dict[str, tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}  # the last answers

    # -- sizes and reads -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Live rows."""
        return self._live

    @property
    def occupied(self) -> int:
        """Rows in use, dead ones included (what a full scan visits)."""
        return self._n

    def column(self, name: str) -> np.ndarray:
        """The occupied rows of a numeric column, dead ones included (a view: do not modify)."""
        return self._cols[name][: self._n]

    def present(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A sparse column's live rows that have a value: their positions and values."""
        pos, values = self._sparse[name].stored()
        alive = self.alive[pos]
        return pos[alive], values[alive]

    def text(self, name: str, positions: np.ndarray) -> np.ndarray:
        return self._texts[name].objects(positions)

    def arrow(self, name: str, positions: np.ndarray) -> pa.Array:
        if name in self._texts:
            return self._texts[name].arrow(positions)
        return pa.array(self._get(name, positions))

    def hashes(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (distinct) of an indexed hash column, stored or not."""
        if name in self._cols:
            return self._cols[name][positions]
        if 16 * len(positions) < self._n:
            return hash_strings(self.arrow(self._hashed[name], positions))
        self._index_appended()
        return self._indexes[name].hashes_at(positions, self._n)

    @property
    def nbytes(self) -> int:
        """Bytes the occupied rows take, indexes included (no spare room)."""
        fixed = sum(col.itemsize for col in self._cols.values()) + 1
        runs = sum(index.nbytes for index in self._indexes.values())
        runs += sum(h.nbytes for waiting in self._unindexed.values() for h in waiting)
        sparse = sum(s.nbytes for s in self._sparse.values())
        return self._n * fixed + sum(t.nbytes_used for t in self._texts.values()) + runs + sparse

    @property
    def alive(self) -> np.ndarray:
        return self._alive[: self._n]

    def live_positions(self) -> np.ndarray:
        return np.flatnonzero(self.alive)

    def positions(self, handles: np.ndarray) -> np.ndarray:
        """The positions of these handles (each the handle of exactly one live row)."""
        kept = self._kept_answer("positions", handles)
        if kept is not None:
            return kept[0]
        return self._keep("positions", handles, search(self.column("handle"), handles))[0]

    def _kept_answer(self, kind: str, handles: np.ndarray) -> tuple[np.ndarray, ...] | None:
        kept = self._kept.get(kind)
        if kept is None or kept[0].shape != handles.shape or not np.array_equal(kept[0], handles):
            return None
        return kept[1]

    def _keep(self, kind: str, handles: np.ndarray, *answer: np.ndarray) -> tuple[np.ndarray, ...]:
        if handles.size > _KEEP_MAX:  # a read of a backlog: not held on to
            return answer
        for values in answer:
            values.flags.writeable = False
        self._kept[kind] = (handles.copy(), answer)
        return answer

    def contains(self, handles: np.ndarray) -> np.ndarray:
        if self._n == 0 or handles.size == 0:
            return np.zeros(handles.size, bool)
        pos = np.minimum(self.positions(handles), self._n - 1)
        return (self.column("handle")[pos] == handles) & self.alive[pos]

    def ranges(self, handles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (index into ``handles``, live position) with that handle (several rows each)."""
        kept = self._kept_answer("ranges", handles)
        if kept is not None:
            return kept[0], kept[1]
        probe, pos = equal_ranges(self.column("handle"), handles)
        live = self.alive[pos]
        probe, pos = self._keep("ranges", handles, probe[live], pos[live])
        return probe, pos

    def since(self, handle: int) -> np.ndarray:
        """The live positions of the rows with a handle >= ``handle`` (the newest rows)."""
        start = int(np.searchsorted(self.column("handle"), handle))
        return start + np.flatnonzero(self._alive[start : self._n])

    def lookup(self, index: str, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into ``probes``, live position) of every candidate row with a probe's hash."""
        if self._live == 0 or probes.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        self._index_appended()
        probe, pos = self._indexes[index].lookup(probes)
        live = self.alive[pos]
        return probe[live], pos[live]

    def frame(self, positions: np.ndarray | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        return self.rows(positions, columns).to_frame()

    def rows(self, positions: np.ndarray | None = None, columns: list[str] | None = None) -> Rows:
        """The rows at ``positions`` (default: every live row), copied out."""
        positions = self.live_positions() if positions is None else positions
        names = columns if columns is not None else self.dtypes
        cols = {c: self.text(c, positions) if c in self._texts else self._get(c, positions) for c in names}
        return Rows._made(cols, positions.size)

    def _get(self, name: str, positions: np.ndarray) -> np.ndarray:
        if name in self._sparse:
            return self._sparse[name].take(positions)
        if name in self._hashed:
            return self.hashes(name, positions)
        return self._cols[name][positions]

    # -- changes -------------------------------------------------------------------------------

    def append(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """Append rows (every column, handles not below the last one); returns their positions."""
        m = len(columns["handle"])
        if m == 0:
            return np.empty(0, np.int64)
        self._kept.clear()
        self._reserve(self._n + m)
        start, end = self._n, self._n + m
        for name, col in self._cols.items():
            col[start:end] = columns[name]
        for name, text in self._texts.items():
            text.append(columns[name])
        for name, sparse in self._sparse.items():
            sparse.append(start, np.asarray(columns[name], np.float64))
        self._alive[start:end] = True
        self._n, self._live = end, self._live + m
        for name, waiting in self._unindexed.items():
            waiting.append(np.asarray(columns[name], np.uint64))
        return np.arange(start, end, dtype=np.int64)

    def _index_appended(self) -> None:
        """Index the rows appended since the indexes were last read, those alive now."""
        start, end = self._indexed_to, self._n
        if start == end:
            return
        live = np.flatnonzero(self._alive[start:end])
        if live.size >= memory.RELEASE_ROWS:
            memory.bulk(live.size)
        for name, index in self._indexes.items():
            waiting = self._unindexed.get(name)
            if waiting is None:
                hashes = self._cols[name][start + live]
            else:
                hashes = (waiting[0] if len(waiting) == 1 else np.concatenate(waiting))[live]
                waiting.clear()
            index.add(hashes, start + live)
        self._indexed_to = end

    def kill(self, positions: np.ndarray) -> None:
        """Tombstone the live rows at ``positions`` (distinct); compacts when due."""
        if positions.size == 0:
            return
        self._kept.clear()
        self._alive[positions] = False
        self._live -= positions.size
        dead = self._n - self._live
        if dead >= _MIN_DEAD and 2 * dead > self._n:
            self.compact()

    def compact(self) -> None:
        """Move the live rows down, in order, dropping the tombstones; indexes follow."""
        self._kept.clear()
        self._index_appended()
        keep = self.live_positions()
        moved = np.full(self._n, -1, np.int64)
        moved[keep] = np.arange(keep.size, dtype=np.int64)
        k = keep.size
        for col in self._cols.values():
            col[:k] = col[keep]
            if col.dtype == object:
                col[k : self._n] = None  # release the strings of dead rows
        for text in self._texts.values():
            text.compact(keep)
        for sparse in self._sparse.values():
            sparse.compact(moved)
        self._alive[:k] = True
        self._alive[k : self._n] = False
        self._indexed_to = k
        self._n = k
        for index in self._indexes.values():
            index.remap(moved)
        if self._alive.size > 4 * max(k, _MIN_CAPACITY):  # give memory back after a big drain
            self._resize(max(2 * k, _MIN_CAPACITY))

    def _reserve(self, rows: int) -> None:
        if rows > self._alive.size:
            self._resize(max(rows, int(GROWTH * self._alive.size)))

    def _resize(self, capacity: int) -> None:
        for name, col in self._cols.items():
            new = memory.empty(capacity, col.dtype)
            new[: self._n] = col[: self._n]
            self._cols[name] = new
        alive = memory.empty(capacity, bool)
        alive[: self._n] = self._alive[: self._n]
        self._alive = alive


class _Sparse:
    """A float64 column that is mostly NaN: only the other rows, as (position, value) pairs."""

    __slots__ = ("_pos", "_val", "_n")

    def __init__(self) -> None:
        self._pos = np.empty(_MIN_CAPACITY, np.int64)
        self._val = np.empty(_MIN_CAPACITY, np.float64)
        self._n = 0

    @property
    def nbytes(self) -> int:
        return self._n * 16

    def append(self, start: int, values: np.ndarray) -> None:
        """Rows ``start, start + 1, ...`` (above every stored position) get ``values``."""
        present = np.flatnonzero(~np.isnan(values))
        if present.size == 0:
            return
        n, m = self._n, present.size
        if n + m > self._pos.size:
            capacity = max(n + m, int(GROWTH * self._pos.size))
            self._pos, self._val = (_grown(a, n, capacity) for a in (self._pos, self._val))
        self._pos[n : n + m] = start + present
        self._val[n : n + m] = values[present]
        self._n = n + m

    def stored(self) -> tuple[np.ndarray, np.ndarray]:
        return self._pos[: self._n], self._val[: self._n]

    def take(self, positions: np.ndarray) -> np.ndarray:
        out = np.full(len(positions), np.nan)
        if self._n:
            pos = self._pos[: self._n]
            at = np.minimum(np.searchsorted(pos, positions), self._n - 1)
            hit = pos[at] == positions
            out[hit] = self._val[at[hit]]
        return out

    def compact(self, moved: np.ndarray) -> None:
        new = moved[self._pos[: self._n]]
        keep = np.flatnonzero(new >= 0)
        self._val[: keep.size] = self._val[keep]
        self._pos[: keep.size] = new[keep]
        self._n = keep.size


class Retiring:
    """A ``Columns`` table whose rows a retirement watermark forgets: logically at once (each
    subclass's ``_remembered``), physically in bulk once the watermark reaches the ``_due``
    time of an eighth of the rows left (or, with ``regrow``, once they doubled).  With
    ``epochs``, a row added or touched since the last retirement is remembered."""

    def __init__(
        self, dtypes: Mapping[str, str], indexed: tuple[str, ...], *, epochs: bool, regrow: bool
    ) -> None:
        self._epochs, self._regrow = epochs, regrow
        self._rows = Columns({**dtypes, "handle": "int64", **({"epoch": "int64"} if epochs else {})}, indexed)
        self._next = 0  # the next row's handle
        self._epoch = 0  # retirements so far
        self._retired_wm = I64_MIN
        self._next_sweep = I64_MIN
        self._swept = 0  # rows left by the last sweep

    def __len__(self) -> int:
        return int(self._remembered(self._rows.live_positions()).sum()) if len(self._rows) else 0

    def _append(self, columns: Mapping[str, np.ndarray]) -> None:
        n = len(next(iter(columns.values())))
        extra = {"epoch": np.full(n, self._epoch, np.int64)} if self._epochs else {}
        self._rows.append(
            {**columns, "handle": np.arange(self._next, self._next + n, dtype=np.int64), **extra}
        )
        self._next += n

    def retire(self, watermark: int) -> None:
        """Forget the rows ``watermark`` makes useless (logically now, the rows in bulk)."""
        self._retired_wm = max(self._retired_wm, int(watermark))
        self._epoch += 1
        grown = self._regrow and len(self._rows) >= 2 * max(self._swept, 1024)
        if len(self._rows) == 0 or (self._retired_wm < self._next_sweep and not grown):
            return
        pos = self._rows.live_positions()
        forgotten = ~self._remembered(pos)
        due = self._due(pos[~forgotten])  # before the kill, which may move rows
        self._rows.kill(pos[forgotten])
        self._swept = due.size
        self._next_sweep = int(np.partition(due, due.size // 8)[due.size // 8]) if due.size else I64_MIN

    def _remembered(self, pos: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _due(self, pos: np.ndarray) -> np.ndarray:
        """The last watermark at which each row is still remembered."""
        raise NotImplementedError


def _grown(values: np.ndarray, n: int, capacity: int) -> np.ndarray:
    new = memory.empty(capacity, values.dtype)
    new[:n] = values[:n]
    return new
