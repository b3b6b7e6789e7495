"""Hierarchical timing wheel, columnar: Kafka's TimingWheel with numpy arrays instead of lists.

Kafka's ``TimingWheel`` keeps timer tasks in ``wheelSize`` buckets of ``tickMs`` each; a task
beyond the wheel's interval goes to an *overflow wheel* whose tick is the lower wheel's
interval, and so on upwards.  When time reaches a bucket's expiration, its entries are
re-added, which expires them or *cascades* them into a finer wheel.  Adding and expiring are
O(1) per task; the cost of time passing is per bucket, not per task.

Worked example (tick 1 ms, wheel size 20, now 0): level 0 covers [0, 20) with 1 ms buckets,
level 1 (tick 20) covers [0, 400), level 2 (tick 400) covers [0, 8000).  A deadline of 450
lands in level 2's bucket [400, 800).  When time reaches 400 that bucket is flushed and 450
moves to level 1's bucket [440, 460); at 440 it drops into level 0's bucket [450, 451); at
450 it expires.  Each entry is moved at most once per level.

What is different here: entries are columns (an ``int64`` id and deadline), each ``add``
storing its entries per level as one *run* sorted by bucket start, so a bucket is a slice of
each run; ``advance`` is driven by the watermark, not a thread.  ``cancel`` records a
tombstone, dropped when its bucket is flushed or when tombstones outnumber live entries.

Invariants: every live entry sits in exactly one bucket of one level; ``advance(t)`` returns
exactly the live entries with ``deadline <= t``, each once; an entry never expires before its
deadline, not even a tick early (an event that completes the operation could still arrive).

>>> import numpy as np
>>> w = TimingWheel(tick_ms=10, wheel_size=8, start_ms=0)
>>> w.add(np.array([1, 2, 3]), np.array([5, 95, 1000])).tolist()  # already expired?
[False, False, False]
>>> w.advance(100).tolist()
[1, 2]
>>> w.next_expiration()
1000
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .arrays import distinct, run_starts

#: ``next_expiration()`` when the wheel is empty.
NO_EXPIRATION = np.iinfo(np.int64).max
_I64_MAX = int(np.iinfo(np.int64).max)
_U32_MAX = int(np.iinfo(np.uint32).max)
_EMPTY = np.empty(0, dtype=np.int64)
_FORMAT_VERSION = 1


def _as_i64(values: object) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.int64).reshape(-1)


class _IdCounts:
    """A multiset of int64 ids, as sorted runs of (distinct id, count) merged geometrically;
    adding an id with -1 takes it out again.

    >>> s = _IdCounts(np.array([3, 1]))
    >>> s.add(np.array([3]), -1)
    >>> s.contains(np.array([1, 3, 7])).tolist()
    [True, False, False]
    """

    def __init__(self, ids: np.ndarray = _EMPTY) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray | None]] = []  # counts None: all 1
        self.add(ids)

    @property
    def size(self) -> int:
        return sum(run.size for run, _ in self._runs)

    def add(self, ids: np.ndarray, count: int = 1) -> None:
        """Add ``count`` to each of ``ids`` (an id given twice: twice)."""
        if ids.size == 0:
            return
        self._runs.append(_summed(ids, np.full(ids.size, count, np.int32)))
        while len(self._runs) > 1 and 2 * self._runs[-1][0].size >= self._runs[-2][0].size:
            (a, ca), (b, cb) = self._runs[-2:]
            counts = [np.ones(r.size, np.int32) if c is None else c for r, c in ((a, ca), (b, cb))]
            self._runs[-2:] = [_summed(np.concatenate([a, b]), np.concatenate(counts))]
            if self._runs[-1][0].size == 0:
                self._runs.pop()

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """Per id: is its count above 0?"""
        if all(counts is None for _, counts in self._runs):
            found = np.zeros(ids.size, dtype=bool)
            for run, _ in self._runs:
                at = np.minimum(np.searchsorted(run, ids), run.size - 1)
                found |= run[at] == ids
            return found
        total = np.zeros(ids.size, dtype=np.int64)
        for run, counts in self._runs:
            at = np.minimum(np.searchsorted(run, ids), run.size - 1)
            total += np.where(run[at] == ids, 1 if counts is None else counts[at], 0)
        return total > 0


def _summed(ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(distinct ids, sorted; the sum of their counts, None when each is 1), zero sums left out."""
    order = np.argsort(ids, kind="stable")
    ids, counts = ids[order], counts[order]
    starts = np.flatnonzero(run_starts(ids))
    ids, counts = ids[starts], np.add.reduceat(counts, starts) if starts.size else counts
    keep = counts != 0
    ids, counts = (ids, counts) if keep.all() else (ids[keep], counts[keep])
    return ids, None if (counts == 1).all() else counts  # None: every count 1


class _Run:
    """Entries of one level sorted by bucket start: a bucket is a contiguous slice of a run.

    Bucket starts are not kept: "deadline below a bucket boundary" holds for a prefix of the
    run, which a binary search on the deadlines finds (``_Level._cut``).  Ids are kept as
    uint32 offsets from the run's smallest while they span less than 2^32."""

    __slots__ = ("base", "offsets", "deadlines")

    def __init__(self, ids: np.ndarray, deadlines: np.ndarray, base: int | None = None) -> None:
        if base is None:  # ids as given: narrowed if they fit
            base = int(ids.min()) if ids.size else 0
            if ids.size and int(ids.max()) - base <= _U32_MAX:
                # modulo 2^32 in uint32 directly, no int64 temporary: exact, as the span fits
                ids = np.subtract(ids, base & _U32_MAX, dtype=np.uint32, casting="unsafe")
            else:
                base = 0
        self.base, self.offsets, self.deadlines = base, ids, deadlines

    @property
    def size(self) -> int:
        return self.offsets.size

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.deadlines.nbytes

    @property
    def ids(self) -> np.ndarray:
        return self.head(self.size)

    def head(self, cut: int) -> np.ndarray:
        return self.offsets[:cut].astype(np.int64) + self.base

    def tail(self, cut: int) -> _Run:
        """The entries from ``cut`` on (views, no copy)."""
        return _Run(self.offsets[cut:], self.deadlines[cut:], self.base)

    def where(self, keep: np.ndarray) -> _Run:
        return _Run(self.offsets[keep], self.deadlines[keep], self.base)


@dataclass
class _Level:
    """One wheel of the hierarchy: ``wheel_size`` buckets of ``tick`` ms each, as runs
    (flushing every due bucket is one ``searchsorted`` per run); runs are merged when there
    are more than ``MAX_RUNS``."""

    MAX_RUNS = 16

    tick: int
    wheel_size: int
    current: int
    runs: list[_Run] = field(default_factory=list)

    @property
    def interval(self) -> int:
        return self.tick * self.wheel_size

    def horizon(self) -> int:
        """First deadline that does not fit this level (saturating at int64 max)."""
        return min(self.current + self.interval, _I64_MAX)

    def advance_clock(self, time_ms: int) -> None:
        if time_ms >= self.current + self.tick:
            self.current = time_ms - time_ms % self.tick

    def place(self, ids: np.ndarray, deadlines: np.ndarray) -> None:
        starts = deadlines - deadlines % self.tick
        if starts.size > 1 and not (starts[1:] >= starts[:-1]).all():
            slots = (starts - self.current) // self.tick  # numpy sorts int16 by radix
            slots = slots.astype(np.int16) if self.wheel_size < 32_000 else slots
            order = np.argsort(slots, kind="stable")
            ids, deadlines = ids[order], deadlines[order]
        self.runs.append(_Run(ids, deadlines))
        if len(self.runs) > self.MAX_RUNS:
            self.merge_runs()

    def merge_runs(self) -> None:
        """Merge the smaller half of the runs (tiered: O(log n) merges per entry)."""
        self.runs.sort(key=lambda r: r.size, reverse=True)
        keep, merge = self.runs[: len(self.runs) // 2], self.runs[len(self.runs) // 2 :]
        deadlines = np.concatenate([r.deadlines for r in merge])
        order = np.argsort(self.starts(deadlines), kind="stable")
        ids = np.concatenate([r.ids for r in merge])[order]
        self.runs = [*keep, _Run(ids, deadlines[order])]

    def starts(self, deadlines: np.ndarray) -> np.ndarray:
        return deadlines - deadlines % self.tick

    def _cut(self, run: _Run, time_ms: int) -> int:
        """How many entries of ``run`` (a prefix) lie in buckets starting at or before ``time_ms``."""
        boundary = time_ms - time_ms % self.tick + self.tick
        if boundary > _I64_MAX:
            return run.size
        return int(np.searchsorted(run.deadlines, boundary, side="left"))

    def take_due(self, time_ms: int, out: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Remove every bucket whose expiration (start) is <= time_ms; append its entries."""
        kept = []
        for run in self.runs:
            cut = self._cut(run, time_ms)
            if cut:
                out.append((run.head(cut), run.deadlines[:cut]))
            if cut < run.size:
                kept.append(run.tail(cut) if cut else run)
        self.runs = kept

    def first_bucket_min_deadline(self) -> int | None:
        """Smallest deadline in this level's earliest bucket (the level's smallest deadline)."""
        if not self.runs:
            return None
        first = min(int(self.starts(run.deadlines[:1])[0]) for run in self.runs)
        best = None
        for run in self.runs:
            cut = self._cut(run, first)
            if cut:
                low = int(run.deadlines[:cut].min())
                best = low if best is None else min(best, low)
        return best

    def filter(self, keep_ids) -> None:
        kept = []
        for run in self.runs:
            live = keep_ids(run.ids)
            if live.all():
                kept.append(run)
            elif live.any():
                kept.append(run.where(live))
        self.runs = kept


class TimingWheel:
    """A hierarchical timing wheel over int64 ids and int64 deadlines (ms), vectorised.

    Args:
        tick_ms: width of a level-0 bucket in ms (Kafka's ``tickMs``).
        wheel_size: buckets per level (Kafka's ``wheelSize``).
        start_ms: initial time; deadlines at or before it count as already expired.
        fresh_ids: the caller promises that an id is never added twice and only pending ids
            are cancelled: the wheel keeps no record of its ids.  Without it, re-adding an id
            replaces its deadline (as Kafka's ``TimerTaskList.add`` moves an entry) and
            cancelling an id that is not pending does nothing.

    >>> w = TimingWheel(tick_ms=10, wheel_size=5, start_ms=0)
    >>> w.add([1], [100]).tolist(); w.cancel([1]); w.add([1], [50]).tolist()
    [False]
    [False]
    >>> w.advance(50).tolist(), w.advance(100).tolist(), w.size()
    ([1], [], 0)
    """

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int = 0, *, fresh_ids: bool = False) -> None:
        if tick_ms < 1:
            raise ValueError(f"purgatory.tick.ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"purgatory.wheel.size must be >= 2, got {wheel_size}")
        self.tick_ms = int(tick_ms)
        self.wheel_size = int(wheel_size)
        self._now = int(start_ms)
        self._levels: list[_Level] = [
            _Level(self.tick_ms, self.wheel_size, self._now - self._now % self.tick_ms)
        ]
        self._tombstones = _IdCounts()  # ids cancelled (some may have left their bucket since)
        self._dead = 0  # tombstoned entries still in a bucket
        self._entries = 0  # entries physically held, tombstoned ones included
        self.fresh_ids = bool(fresh_ids)
        self._held = _IdCounts()  # without fresh ids: the pending ids

    # -- Kafka's vocabulary ------------------------------------------------------------------

    @property
    def current_time_ms(self) -> int:
        """The time of the last ``advance`` (not truncated to the tick)."""
        return self._now

    @property
    def levels(self) -> int:
        return len(self._levels)

    def level_times(self) -> list[int]:
        """Each level's current time, truncated to its tick (Kafka's currentTimeMs)."""
        return [level.current for level in self._levels]

    def size(self) -> int:
        """Pending entries (added, not expired, not cancelled)."""
        return self._entries - self._dead

    def __len__(self) -> int:
        return self.size()

    def add(self, ids: object, deadlines: object) -> np.ndarray:
        """Schedule entries; return a mask of those already expired (``deadline <=
        current_time_ms``: not added, the caller expires them), as Kafka's ``add`` returns
        false.  Without ``fresh_ids``, an id given twice keeps its last deadline.
        """
        ids, deadlines = _as_i64(ids), _as_i64(deadlines)
        if ids.shape != deadlines.shape:
            raise ValueError(f"ids and deadlines differ in length: {ids.size} != {deadlines.size}")
        given = ids.size
        if not self.fresh_ids:
            last = self._replacing(ids)
            ids, deadlines = ids[last], deadlines[last]
        if not self.fresh_ids and self._tombstones.size and self._tombstones.contains(ids).any():
            self.purge()  # an id cancelled before, its entry gone: its tombstone must not hit this one
        expired = deadlines <= self._now
        if expired.any():
            keep = ~expired
            self._insert(ids[keep], deadlines[keep])
        else:
            self._insert(ids, deadlines)
        if self.fresh_ids:
            return expired
        self._held.add(ids[~expired])
        answer = np.zeros(given, dtype=bool)
        answer[last] = expired
        return answer

    def _replacing(self, ids: np.ndarray) -> np.ndarray:
        """Each id's last position in ``ids``; those ids' pending entries leave the wheel."""
        _, last_rev = np.unique(ids[::-1], return_index=True)
        last = np.sort(ids.size - 1 - last_rev)
        again = ids[last][self._held.contains(ids[last])]
        if again.size:
            self.cancel(again)
            self.purge()
        return last

    def cancel(self, ids: object) -> None:
        """Cancel pending entries: ``advance`` will never return them."""
        ids = _as_i64(ids)
        if not self.fresh_ids:
            ids = distinct(ids)
            ids = ids[self._held.contains(ids)]
            self._held.add(ids, -1)
        if ids.size == 0:
            return
        self._tombstones.add(ids)
        self._dead += ids.size  # the ids are pending (the caller's promise): each in one bucket
        if self._dead >= max(1024, self.size()):
            self.purge()

    def advance(self, to_ms: int) -> np.ndarray:
        """Move time to ``to_ms`` (never backwards) and return the ids whose deadline is
        <= to_ms, each once; the rest of each flushed bucket cascades into a finer level.
        """
        to_ms = int(to_ms)
        if to_ms < self._now:
            return _EMPTY
        self._now = to_ms
        chunks: list[tuple[np.ndarray, np.ndarray]] = []
        for level in self._levels:
            level.advance_clock(to_ms)
            level.take_due(to_ms, chunks)
        if not chunks:
            return _EMPTY
        if len(chunks) == 1:
            ids, deadlines = chunks[0]
        else:
            ids = np.concatenate([c[0] for c in chunks])
            deadlines = np.concatenate([c[1] for c in chunks])
        self._entries -= ids.size
        ids, deadlines = self._drop_cancelled(ids, deadlines)
        due = deadlines <= to_ms
        if not due.all():
            self._insert(ids[~due], deadlines[~due])
            ids = ids[due]
        if not self.fresh_ids and ids.size:
            self._held.add(ids, -1)  # each pending once: its entry left the wheel
        return ids

    def next_expiration(self) -> int:
        """Smallest pending deadline (``NO_EXPIRATION`` if none); early, never late, if some cancelled."""
        best = NO_EXPIRATION
        for level in self._levels:
            low = level.first_bucket_min_deadline()
            if low is not None:
                best = min(best, low)
        return best

    def pending(self) -> tuple[np.ndarray, np.ndarray]:
        ids, deadlines, _, _ = self._flatten()
        return self._drop_cancelled(ids, deadlines, consume=False)

    def purge(self) -> None:
        tombstones = self._tombstones
        for level in self._levels:
            level.filter(lambda ids: ~tombstones.contains(ids))
        self._tombstones, self._dead = _IdCounts(), 0
        self._entries = sum(run.size for level in self._levels for run in level.runs)

    # -- serialisation -----------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Serialise the whole wheel (placement included) as one Arrow IPC stream."""
        ids, deadlines, levels, starts = self._flatten()
        dead = self._tombstones.contains(ids)  # only tombstones of entries still held
        tombstones = ids[dead]
        table = pa.table(
            {
                "id": pa.array(np.concatenate([ids, tombstones])),
                "deadline": pa.array(np.concatenate([deadlines, np.zeros_like(tombstones)])),
                "level": pa.array(np.concatenate([levels, np.full(tombstones.size, -1, np.int8)])),
                "bucket": pa.array(np.concatenate([starts, np.zeros_like(tombstones)])),
            }
        )
        meta = {
            "format": str(_FORMAT_VERSION),
            "tick_ms": str(self.tick_ms),
            "wheel_size": str(self.wheel_size),
            "now": str(self._now),
            "fresh_ids": str(int(self.fresh_ids)),
            "level_times": ",".join(str(t) for t in self.level_times()),
        }
        table = table.replace_schema_metadata(meta)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TimingWheel:
        """Inverse of ``to_bytes``: the same entries in the same buckets, same clocks."""
        table = pa.ipc.open_stream(data).read_all()
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        if meta.get("format") != str(_FORMAT_VERSION):
            raise ValueError(f"unsupported timing wheel format {meta.get('format')!r}")
        fresh = meta.get("fresh_ids", "1") == "1"  # older states saved only fresh-id wheels
        wheel = cls(int(meta["tick_ms"]), int(meta["wheel_size"]), int(meta["now"]), fresh_ids=fresh)
        times = [int(t) for t in meta["level_times"].split(",")]
        wheel._levels = []
        tick = wheel.tick_ms
        for t in times:
            wheel._levels.append(_Level(tick, wheel.wheel_size, t))
            tick = min(tick * wheel.wheel_size, _I64_MAX)
        ids = table.column("id").to_numpy()
        deadlines = table.column("deadline").to_numpy()
        levels = table.column("level").to_numpy()
        wheel._tombstones = _IdCounts(ids[levels < 0])
        for index, level in enumerate(wheel._levels):
            at = levels == index
            if not at.any():
                continue
            order = np.argsort(level.starts(deadlines[at]), kind="stable")
            level.runs = [_Run(ids[at][order], deadlines[at][order])]
        wheel._entries = int((levels >= 0).sum())
        wheel._dead = int(wheel._tombstones.contains(ids[levels >= 0]).sum())
        if not fresh:
            wheel._held = _IdCounts(distinct(wheel.pending()[0]))
        return wheel

    # -- internals ---------------------------------------------------------------------------

    def _insert(self, ids: np.ndarray, deadlines: np.ndarray) -> None:
        """Place entries with deadline > now into the lowest level whose span holds them."""
        if ids.size == 0:
            return
        self._entries += ids.size
        index = 0
        while ids.size:
            if index == len(self._levels):  # the overflow wheel, at the lower one's time
                lower = self._levels[-1]
                tick = min(lower.interval, _I64_MAX)
                self._levels.append(_Level(tick, self.wheel_size, lower.current - lower.current % tick))
            level = self._levels[index]
            fits = deadlines < level.horizon()
            if fits.all():
                level.place(ids, deadlines)
                return
            if fits.any():
                level.place(ids[fits], deadlines[fits])
                ids, deadlines = ids[~fits], deadlines[~fits]
            index += 1

    def _drop_cancelled(
        self, ids: np.ndarray, deadlines: np.ndarray, *, consume: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._dead == 0 or ids.size == 0:
            return ids, deadlines
        dead = self._tombstones.contains(ids)
        if not dead.any():
            return ids, deadlines
        if consume:  # their ids stay in the set (stale) until the next purge
            self._dead -= int(dead.sum())
        return ids[~dead], deadlines[~dead]

    def _flatten(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every entry's (id, deadline, level, bucket start), tombstoned ones included."""
        parts = [(_EMPTY, _EMPTY, np.empty(0, np.int8), _EMPTY)]
        for index, level in enumerate(self._levels):
            for run in level.runs:
                levels = np.full(run.size, index, np.int8)
                parts.append((run.ids, run.deadlines, levels, level.starts(run.deadlines)))
        ids, deadlines, levels, starts = (np.concatenate(column) for column in zip(*parts, strict=True))
        return ids, deadlines, levels, starts
