"""The per-shard purgatory: Kafka's DelayedOperationPurgatory for event time, on columns.

Kafka parks a ``DelayedOperation`` that cannot complete yet in a purgatory: it is watched under
its keys (``Watchers``) and scheduled on a timing wheel.  ``tryCompleteElseWatch`` completes an
operation at once if it can; ``checkAndComplete(key)`` re-tries the operations watching a key
when something happens to it; the timer's ``onExpiration`` fires the ones that time out;
``purge`` drops completed operations from the watcher lists.  This module keeps that
vocabulary, but every step takes a whole micro-batch of operations or events at once:

* ``try_complete_else_watch(ops)`` registers operations; each is matched against the events
  still buffered (events may arrive before their operation) and against the key's ``offset``
  progress, and completes at once if its condition already holds.
* ``check_and_complete(events)`` matches a batch of events against the watchers (a sorted
  key-hash index, joined with ``searchsorted``) and completes whatever became true.
* ``advance(watermark)`` moves the timing wheel to the watermark; operations whose deadline
  it reached expire (``on_expiration``).
* ``process(ops, events, watermark_ms=...)`` does all three in the right order, finalises the
  events the watermark passed (reporting those that matched nothing), and returns the rows
  for the ``outcomes``, ``unmatched_events`` and ``rejected`` tables.

Invariants: every valid operation gets exactly one outcome, ``completed`` in the batch that
makes its condition true or ``expired`` once the watermark reaches its deadline (never
earlier); a resolved operation leaves nothing behind in the watchers, the wheel or the
match table; every valid event is eventually either counted by an operation or reported in
``unmatched_events``.  The whole shard state serialises to one binary value (``to_bytes``).
All times are epoch milliseconds (int64).
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from ..config import PurgatoryConfig
from ..contract import EVENT_COLUMNS, OPERATION_COLUMNS, OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from ..state.segments import SegmentStore, pack_parts, unpack_parts
from .conditions import (
    ALL,
    CONDITION_NAMES,
    OFFSET,
    evaluate,
    hash_strings,
)
from .validation import raw_json, validate_events, validate_operations
from .wheel import TimingWheel

__all__ = ["BatchResult", "Purgatory", "OUTCOME_COLUMNS", "UNMATCHED_COLUMNS", "REJECTED_COLUMNS"]


_I64_MIN = np.iinfo(np.int64).min
_STATE_VERSION = 1


_hash = hash_strings


def _equal_ranges(sorted_hashes: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (probe index, sorted index) pairs with equal hash, vectorised."""
    lo = np.searchsorted(sorted_hashes, probes, side="left")
    hi = np.searchsorted(sorted_hashes, probes, side="right")
    counts = hi - lo
    total = int(counts.sum())
    probe_idx = np.repeat(np.arange(probes.size), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return probe_idx, np.repeat(lo, counts) + offsets


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


_OPS = {
    "handle": "int64",
    "op_id": "object",
    "keys": "object",
    "ts": "int64",
    "deadline": "int64",
    "cond": "int8",
    "target": "float64",
    "members": "object",
    "payload": "object",
    "n_members": "int64",
    "stub": "bool",
}
_WATCH = {"hash": "uint64", "key": "object", "handle": "int64", "base": "float64"}
_MATCHES = {
    "handle": "int64",
    "khash": "uint64",
    "ts": "int64",
    "eseq": "int64",
    "value": "float64",
    "source": "object",
    "is_member": "bool",
}
_EVENTS = {
    "eseq": "int64",
    "key": "object",
    "ts": "int64",
    "op_id": "object",
    "source": "object",
    "value": "float64",
    "used": "bool",
    "replica": "bool",
}
# per key (by 64-bit hash): offset progress, and until when events count as after_resolution
_KEYS = {"khash": "uint64", "base": "float64", "last_event_ts": "int64", "resolved_until": "int64"}
# every op_id pending (handle >= 0, expire_at = max) or resolved within dedup retention
_SEEN = {"hash": "uint64", "op_id": "object", "handle": "int64"}
# op_ids resolved within purgatory.dedup.retention.ms, as 64-bit hashes (compact: no strings)
_RESOLVED = {"hash": "uint64", "expire_at": "int64"}
# the tables that grow with pending operations (kept in base segments with a SegmentStore)
_BIG = {"ops": _OPS, "watch": _WATCH, "seen": _SEEN, "resolved": _RESOLVED}


@dataclass
class BatchResult:
    """Rows produced by one ``Purgatory.process`` call, with the SPEC's columns (times in ms)."""

    outcomes: pd.DataFrame
    unmatched: pd.DataFrame
    rejected: pd.DataFrame

    @property
    def completed(self) -> int:
        return int((self.outcomes["status"] == "completed").sum())

    @property
    def expired(self) -> int:
        return int((self.outcomes["status"] == "expired").sum())


class Purgatory:
    """One shard's purgatory: watchers, timing wheel, key progress and buffered events.

    Example:

    >>> import pandas as pd
    >>> p = Purgatory(PurgatoryConfig(tick_ms=10))
    >>> ops = pd.DataFrame({"op_id": ["a", "b"], "keys": [["k"], ["k"]], "ts": [0, 0],
    ...                     "timeout_ms": [100, 100], "condition": ["any", "count"],
    ...                     "target": [None, 2.0]})
    >>> events = pd.DataFrame({"key": ["k"], "ts": [40]})
    >>> out = p.process(ops, events, watermark_ms=0)
    >>> out.outcomes[["op_id", "status", "resolved_at"]].values.tolist()
    [['a', 'completed', 40]]
    >>> p.process(ops.iloc[:0], events.iloc[:0], watermark_ms=100).outcomes[
    ...     ["op_id", "status", "resolved_at"]].values.tolist()
    [['b', 'expired', 100]]
    """

    def __init__(self, config: PurgatoryConfig | None = None, *, start_ms: int = _I64_MIN) -> None:
        self.config = config or PurgatoryConfig()
        self._watermark = int(start_ms)
        self._wheel = TimingWheel(self.config.tick_ms, self.config.wheel_size, max(start_ms, 0))
        self._ops = _empty(_OPS)
        self._watch = _empty(_WATCH)
        self._matches = _empty(_MATCHES)
        self._events = _empty(_EVENTS)
        self._keys = _empty(_KEYS)
        self._seen = _empty(_SEEN)
        self._resolved = _empty(_RESOLVED)
        self._next_handle = 0
        self._next_eseq = 0
        self._due = np.empty(0, dtype=np.int64)  # added with a deadline already passed
        self._outcomes: list[pd.DataFrame] = []
        self._batch_id = 0
        self._retired_wm = _I64_MIN  # the watermark of the last _retire
        # with a SegmentStore (segments.py): the base this state extends, and what changed since
        self._lineage = uuid.uuid4().hex
        self._token: str | None = None  # the version last saved or loaded
        self.loaded_by = "new"  # how from_bytes got it: exact | caught-up | rebuilt | new
        self.shard: int | None = None  # the host's shard number, kept with the state
        self._ancestry: list[str] = []
        self._saves = 0
        # segment files [base, delta, ...] as (name, next handle when written, rows)
        self._segments: list[tuple[str, int, int]] = []
        self._removed: list[np.ndarray] = []  # handles resolved since the last segment
        self._resolved_new: list[pd.DataFrame] = []  # dedup rows added since the last segment
        self._graveyard: list[tuple[str, int]] = []  # superseded bases, and the save that did it

    # -- sizes (for metrics and tests) ---------------------------------------------------------

    @property
    def watermark(self) -> int:
        return self._watermark

    @property
    def pending(self) -> int:
        """Operations waiting (Kafka's ``delayed``)."""
        return len(self._ops)

    @property
    def watched(self) -> int:
        """Watcher entries, one per (operation, key) (Kafka's ``watched``)."""
        return len(self._watch)

    @property
    def buffered_events(self) -> int:
        return len(self._events)

    @property
    def retained_keys(self) -> int:
        return len(self._keys)

    def next_expiration(self) -> int:
        """Earliest pending deadline (for the GroupState timeout), ``NO_EXPIRATION`` if none.

        Buffered events also need the watermark to pass them, so their earliest time counts.
        """
        times = [self._wheel.next_expiration()]
        if len(self._due):
            times.append(self._watermark)
        if len(self._events):
            times.append(int(self._events["ts"].min()) + 1)
        return min(times)

    def next_wakeup(self) -> int:
        """When this shard next has work even without input: an expiry, an event to finalise,
        or retained progress / dedup entries to forget (``NO_EXPIRATION`` if never)."""
        times = [self.next_expiration()]
        if len(self._keys):
            # a key is forgotten once both its progress retention and its resolution passed
            last = self._keys["last_event_ts"].to_numpy(np.int64)
            progress_until = np.where(last > _I64_MIN, last + self.config.progress_retention_ms, _I64_MIN)
            retire = np.maximum(progress_until, self._keys["resolved_until"].to_numpy(np.int64))
            times.append(int(retire.min()) + 1)
        if len(self._resolved):
            times.append(int(self._resolved["expire_at"].min()) + 1)
        return min(times)

    def is_empty(self) -> bool:
        """Nothing pending, buffered or retained: the state can be dropped."""
        return not (
            len(self._ops)
            or len(self._events)
            or len(self._keys)
            or len(self._seen)
            or len(self._resolved)
            or len(self._due)
        )

    def pending_op_ids(self) -> list[str]:
        return self._ops["op_id"].tolist()

    # -- the batch entry point -----------------------------------------------------------------

    def process(
        self,
        operations: pd.DataFrame | None,
        events: pd.DataFrame | None,
        *,
        watermark_ms: int,
        batch_id: int = 0,
        validated: bool = False,
    ) -> BatchResult:
        """Run one micro-batch: register operations, apply events, expire, report.

        Args:
            operations: canonical operations (``op_id``, ``keys`` or ``key``, ``ts`` and
                ``timeout_ms`` in ms, ``condition``, ``target``, ``members``, ``payload``,
                optional ``raw``).
            events: canonical completion events (``key``, ``ts`` in ms, ``op_id``,
                ``source``, ``value``, optional ``raw``).
            watermark_ms: the event-time watermark of this micro-batch.  Input older than
                it is rejected as ``late``; operations whose deadline it reached expire.
            batch_id: written to every output row.
            validated: the frames are already validated, in the form ``validate_operations``
                / ``validate_events`` return (``deadline`` and condition code ``cond``
                instead of ``timeout_ms`` and ``condition``), as the Spark host sends them.
                They may also carry ``stub`` (operations) and ``replica`` (events) flags;
                see ``streaming`` for what those are.
        """
        self._batch_id = int(batch_id)
        wm = max(int(watermark_ms), self._watermark)
        rejected: list[pd.DataFrame] = []
        self._outcomes = []

        if validated:
            ops = _frame_or_empty(operations, _VALID_OPS)
            evs = _frame_or_empty(events, _VALID_EVENTS)
        else:
            ops, bad = validate_operations(_with_keys(operations), max_timeout_ms=self.config.max_timeout_ms)
            rejected.append(bad)
            evs, bad = validate_events(events if events is not None else pd.DataFrame())
            rejected.append(bad)
        if "stub" not in ops.columns:
            ops["stub"] = False
        if "replica" not in evs.columns:
            evs["replica"] = False

        # stubs and replicas are copies: their original reports lateness and duplicates
        late = ops["ts"].to_numpy() < wm
        rejected.append(_rejected_rows("operations", ops.loc[late & ~ops["stub"].to_numpy(bool)], "late"))
        ops = ops.loc[~late]
        ops, dup = self._split_duplicates(ops)
        rejected.append(_rejected_rows("operations", dup.loc[~dup["stub"].to_numpy(bool)], "duplicate_op_id"))
        late = evs["ts"].to_numpy() < wm
        rejected.append(_rejected_rows("events", evs.loc[late & ~evs["replica"].to_numpy(bool)], "late"))
        evs = evs.loc[~late].reset_index(drop=True)

        self.try_complete_else_watch(ops)
        self.check_and_complete(evs)
        self.advance(wm)
        unmatched = self._finalise_events(wm)
        self._retire(wm)

        outcomes = _concat(self._outcomes, OUTCOME_COLUMNS)
        self._outcomes = []
        rej = _concat([r for r in rejected if len(r)], ["source", "raw", "reason"])
        rej["batch_id"] = self._batch_id
        return BatchResult(outcomes.reset_index(drop=True), unmatched, rej[REJECTED_COLUMNS])

    def replay(
        self,
        operations: pd.DataFrame | None,
        events: pd.DataFrame | None,
        *,
        final_watermark_ms: int,
        validated: bool = False,
    ) -> BatchResult:
        """Everything at once, then the watermark moved to ``final_watermark_ms`` (backfills).

        For input without late rows this is what a stream ends with at that watermark.
        """
        first = self.process(operations, events, watermark_ms=0, validated=validated)
        last = self.process(None, None, watermark_ms=final_watermark_ms, validated=validated)
        return BatchResult(
            _concat([first.outcomes, last.outcomes], OUTCOME_COLUMNS),
            _concat([first.unmatched, last.unmatched], UNMATCHED_COLUMNS),
            _concat([first.rejected, last.rejected], REJECTED_COLUMNS),
        )

    # -- Kafka's operations, batched -----------------------------------------------------------

    def try_complete_else_watch(self, ops: pd.DataFrame) -> None:
        """Register validated operations; complete at once those already satisfied."""
        if len(ops) == 0:
            return
        n = len(ops)
        handles = np.arange(self._next_handle, self._next_handle + n, dtype=np.int64)
        self._next_handle += n
        new_ops = pd.DataFrame(
            {
                "handle": handles,
                "op_id": ops["op_id"].to_numpy(dtype=object),
                "keys": ops["keys"].to_numpy(dtype=object),
                "ts": ops["ts"].to_numpy(np.int64),
                "deadline": ops["deadline"].to_numpy(np.int64),
                "cond": ops["cond"].to_numpy(np.int8),
                "target": ops["target"].to_numpy(float),
                "members": ops["members"].to_numpy(dtype=object),
                "payload": ops["payload"].to_numpy(dtype=object),
                "n_members": ops["members"].map(_length).to_numpy(np.int64),
                "stub": ops["stub"].to_numpy(bool),
            }
        )
        watch = new_ops[["handle", "keys", "cond"]].explode("keys").rename(columns={"keys": "key"})
        watch = watch.assign(hash=_hash(watch["key"].to_numpy(dtype=object)))
        watch = watch.merge(self._keys[["khash", "base"]], left_on="hash", right_on="khash", how="left")
        watch.loc[watch["cond"].to_numpy() != OFFSET, "base"] = np.nan
        watch = watch[list(_WATCH)]
        watch = watch.astype(_WATCH)
        self._ops = _stack(self._ops, new_ops)
        self._watch = _merge_by_hash(self._watch, watch)
        ids = _hash(new_ops["op_id"].to_numpy())
        seen = pd.DataFrame({"hash": ids, "op_id": new_ops["op_id"], "handle": handles})
        self._seen = _merge_by_hash(self._seen, seen)

        already = self._wheel.add(handles, new_ops["deadline"].to_numpy())
        self._due = np.concatenate([self._due, handles[already]])

        # events that arrived before their operation: untargeted ones by key, targeted by op_id
        if len(self._events):
            buffered = self._events
            targeted = buffered["op_id"].notna().to_numpy()
            by_key = watch[["key", "handle"]].merge(buffered.loc[~targeted], on="key")
            by_id = new_ops[["op_id", "handle"]].merge(buffered.loc[targeted], on="op_id")
            by_id = by_id.loc[
                self._watches(by_id["handle"].to_numpy(np.int64), by_id["key"].to_numpy(dtype=object))
            ]
            self._add_matches(_stack(by_key, by_id[list(by_key.columns)]))
        self._check(handles)

    def check_and_complete(self, events: pd.DataFrame) -> None:
        """Buffer a batch of validated events and complete the operations they satisfy."""
        if len(events) == 0:
            return
        n = len(events)
        eseq = np.arange(self._next_eseq, self._next_eseq + n, dtype=np.int64)
        self._next_eseq += n
        evs = events.assign(eseq=eseq, used=False)[list(_EVENTS)].astype(_EVENTS)
        self._events = _stack(self._events, evs)
        if len(self._watch) == 0:
            return
        # untargeted events: every watcher of the key (Kafka's checkAndComplete(key))
        untargeted = np.flatnonzero(evs["op_id"].isna().to_numpy())
        ev_idx, w_idx = _equal_ranges(
            self._watch["hash"].to_numpy(np.uint64), _hash(evs["key"].to_numpy(dtype=object)[untargeted])
        )
        ev_idx = untargeted[ev_idx]
        same_key = (
            evs["key"].to_numpy(dtype=object)[ev_idx] == self._watch["key"].to_numpy(dtype=object)[w_idx]
        )
        ev_idx, handles = ev_idx[same_key], self._watch["handle"].to_numpy(np.int64)[w_idx[same_key]]
        # targeted events: straight to their operation, if it is pending and watches the key
        targeted = np.flatnonzero(evs["op_id"].notna().to_numpy())
        probe, row = self._lookup_seen(evs["op_id"].to_numpy(dtype=object)[targeted])
        t_handles = self._seen["handle"].to_numpy(np.int64)[row]
        t_idx = targeted[probe]
        live = t_handles >= 0
        t_idx, t_handles = t_idx[live], t_handles[live]
        watches = self._watches(t_handles, evs["key"].to_numpy(dtype=object)[t_idx])
        ev_idx = np.concatenate([ev_idx, t_idx[watches]])
        handles = np.concatenate([handles, t_handles[watches]])
        pairs = evs.iloc[ev_idx].reset_index(drop=True)
        pairs["handle"] = handles
        touched = self._add_matches(pairs)
        self._check(touched)

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark and expire the operations whose deadline it reached."""
        self._watermark = max(int(watermark_ms), self._watermark)
        expired = np.concatenate([self._due, self._wheel.advance(self._watermark)])
        self._due = np.empty(0, dtype=np.int64)
        handles = self._ops["handle"].to_numpy(np.int64)
        expired = np.unique(expired)
        expired = expired[np.isin(expired, handles, assume_unique=True)]
        if expired.size == 0:
            return
        result = self._evaluate(expired)
        self._mark_used(result.eseq)
        rows = self._ops_rows(expired)
        real = ~rows["stub"].to_numpy(bool)
        self._emit(
            rows.loc[real].reset_index(drop=True),
            "expired",
            rows["deadline"].to_numpy(np.int64)[real],
            result.matched[real],
            result.progress[real],
        )
        self._purge(expired, completed=False)

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``: drop the pending operations watching any of ``keys``.

        No outcome is emitted for them (the caller decided their fate, e.g. a deleted
        partition); their op_ids still count as resolved for duplicate detection.  Returns
        the cancelled op_ids.
        """
        probes = _hash(np.asarray(keys, dtype=object))
        _, hit = _equal_ranges(self._watch["hash"].to_numpy(np.uint64), probes)
        hit = hit[np.isin(self._watch["key"].to_numpy(dtype=object)[hit], np.asarray(keys, dtype=object))]
        handles = np.unique(self._watch["handle"].to_numpy(np.int64)[hit])
        if handles.size == 0:
            return []
        op_ids = self._ops_rows(handles)["op_id"].tolist()
        self._purge(handles, completed=True)
        return op_ids

    # -- internals -----------------------------------------------------------------------------

    def _split_duplicates(self, ops: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Reject an op_id already pending, already resolved, or repeated within the batch."""
        dup = ops["op_id"].duplicated().to_numpy()
        ids = ops["op_id"].to_numpy(dtype=object)
        probe, _ = self._lookup_seen(ids)
        dup[probe] = True
        dup |= self._recently_resolved(ids)
        return ops.loc[~dup], ops.loc[dup]

    def _recently_resolved(self, op_ids: np.ndarray) -> np.ndarray:
        """Which op_ids were resolved within the dedup retention (by 64-bit hash)."""
        if len(self._resolved) == 0 or len(op_ids) == 0:
            return np.zeros(len(op_ids), dtype=bool)
        table = self._resolved["hash"].to_numpy(np.uint64)
        hashes = _hash(op_ids)
        pos = np.minimum(np.searchsorted(table, hashes), table.size - 1)
        return table[pos] == hashes

    def _lookup_seen(self, op_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(index into op_ids, row of the seen table) for the op_ids of pending operations."""
        if len(self._seen) == 0 or len(op_ids) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        probe, row = _equal_ranges(self._seen["hash"].to_numpy(np.uint64), _hash(op_ids))
        same = self._seen["op_id"].to_numpy(dtype=object)[row] == op_ids[probe]
        return probe[same], row[same]

    def _watches(self, handles: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """For each (handle, key) pair: does that pending operation watch that key?"""
        if handles.size == 0:
            return np.zeros(0, dtype=bool)
        pos = np.searchsorted(self._ops["handle"].to_numpy(np.int64), handles)
        op_keys = pd.Series(self._ops["keys"].to_numpy(dtype=object)[pos]).explode()
        pair = op_keys.index.to_numpy()
        hit = op_keys.to_numpy(dtype=object) == keys[pair]
        return np.bincount(pair[hit], minlength=handles.size) > 0

    def _add_matches(self, pairs: pd.DataFrame) -> np.ndarray:
        """Keep the (event, operation) pairs inside the operation's window; return touched handles."""
        if len(pairs) == 0:
            return np.empty(0, dtype=np.int64)
        pos = np.searchsorted(self._ops["handle"].to_numpy(np.int64), pairs["handle"].to_numpy(np.int64))
        op_ts = self._ops["ts"].to_numpy(np.int64)[pos]
        deadline = self._ops["deadline"].to_numpy(np.int64)[pos]
        cond = self._ops["cond"].to_numpy(np.int8)[pos]
        op_id = self._ops["op_id"].to_numpy(dtype=object)[pos]
        ts = pairs["ts"].to_numpy(np.int64)
        target_id = pairs["op_id"].to_numpy(dtype=object)
        untargeted = pd.isna(target_id)
        # offset counts a key's progress from before the operation; targeted events never do
        ok = (ts < deadline) & ((ts >= op_ts) | ((cond == OFFSET) & untargeted))
        ok &= untargeted | (target_id == op_id)
        pairs = pairs.loc[ok]
        if len(pairs) == 0:
            return np.empty(0, dtype=np.int64)
        involved = np.unique(pairs["handle"].to_numpy(np.int64)[cond[ok] == ALL])
        members = self._ops_rows(involved)[["handle", "members"]]
        members = members.explode("members").rename(columns={"members": "source"}).assign(is_member=True)
        pairs = pairs.drop(columns=[c for c in ("is_member",) if c in pairs.columns])
        pairs = pairs.merge(
            members.drop_duplicates(["handle", "source"]), on=["handle", "source"], how="left"
        )
        pairs["is_member"] = pairs["is_member"].notna().to_numpy()
        pairs["khash"] = _hash(pairs["key"].to_numpy(dtype=object))
        new = pairs[list(_MATCHES)].astype(_MATCHES)
        self._matches = _stack(self._matches, new)
        return np.unique(new["handle"].to_numpy(np.int64))

    def _evaluate(self, handles: np.ndarray):
        ops = self._ops_rows(handles)
        matches = self._matches.loc[self._matches["handle"].isin(handles)]
        watch = None
        if (ops["cond"].to_numpy() == OFFSET).any():
            watch = self._watch.loc[self._watch["handle"].isin(handles), ["handle", "hash", "base"]]
        return evaluate(ops, matches, watch)

    def _check(self, handles: np.ndarray) -> None:
        """checkAndComplete for the given operations: complete those whose condition holds."""
        if handles.size == 0:
            return
        handles = np.unique(handles)
        handles = handles[~self._ops_rows(handles)["stub"].to_numpy(bool)]  # stubs never complete
        if handles.size == 0:
            return
        result = self._evaluate(handles)
        done = handles[result.satisfied]
        if done.size == 0:
            return
        used_rows = result.used & np.isin(result.handle, done)
        self._mark_used(result.eseq[used_rows])
        rows = self._ops_rows(done)
        self._emit(
            rows,
            "completed",
            result.resolved_at[result.satisfied],
            result.matched[result.satisfied],
            result.progress[result.satisfied],
        )
        self._purge(done, completed=True)

    def _mark_used(self, eseqs: np.ndarray) -> None:
        if eseqs.size and len(self._events):
            hit = np.isin(self._events["eseq"].to_numpy(np.int64), eseqs)
            self._events.loc[hit, "used"] = True

    def _ops_rows(self, handles: np.ndarray) -> pd.DataFrame:
        pos = np.searchsorted(self._ops["handle"].to_numpy(np.int64), np.sort(handles))
        return self._ops.iloc[pos].reset_index(drop=True)

    def _emit(
        self,
        rows: pd.DataFrame,
        status: str,
        resolved_at: np.ndarray,
        matched: np.ndarray,
        progress: np.ndarray,
    ) -> None:
        op_ts = rows["ts"].to_numpy(np.int64)
        self._outcomes.append(
            pd.DataFrame(
                {
                    "op_id": rows["op_id"].to_numpy(dtype=object),
                    "keys": rows["keys"].to_numpy(dtype=object),
                    "status": status,
                    "op_ts": op_ts,
                    "deadline": rows["deadline"].to_numpy(np.int64),
                    "resolved_at": resolved_at.astype(np.int64),
                    "latency_ms": resolved_at.astype(np.int64) - op_ts,
                    "matched_events": matched.astype(np.int64),
                    "progress": progress.astype(float),
                    "condition": CONDITION_NAMES[rows["cond"].to_numpy(np.int64)],
                    "target": rows["target"].to_numpy(float),
                    "payload": rows["payload"].to_numpy(dtype=object),
                    "batch_id": self._batch_id,
                }
            )
        )

    def _purge(self, handles: np.ndarray, *, completed: bool) -> None:
        """Kafka's purge: resolved operations leave the watchers, the wheel and the match table."""
        rows = self._ops_rows(handles)
        if completed:
            # still on the timer: cancel (those added already past their deadline never were)
            due = np.isin(handles, self._due)
            self._due = self._due[~np.isin(self._due, handles)]
            self._wheel.cancel(handles[~due])
            # events on these keys before the deadline arrive "after resolution" from now on
            watched = self._watch.loc[self._watch["handle"].isin(handles), ["hash", "handle"]]
            at = np.searchsorted(rows["handle"].to_numpy(np.int64), watched["handle"].to_numpy(np.int64))
            deadline = rows["deadline"].to_numpy(np.int64)[at]
            self._touch_keys(watched["hash"].to_numpy(np.uint64), resolved_until=deadline)
        if self._segments:
            self._removed.append(np.asarray(handles, np.int64))
        for name in ("_ops", "_watch", "_matches", "_seen"):
            frame = getattr(self, name)
            setattr(self, name, _rows_where(frame, ~np.isin(frame["handle"].to_numpy(np.int64), handles)))
        # remembered for dedup_retention_ms of event time after the later of deadline and now;
        # a stub's op_id belongs to its original, which remembers it
        real = rows.loc[~rows["stub"].to_numpy(bool)]
        if len(real):
            until = (
                np.maximum(self._watermark, real["deadline"].to_numpy(np.int64))
                + self.config.dedup_retention_ms
            )
            resolved = pd.DataFrame({"hash": _hash(real["op_id"].to_numpy(dtype=object)), "expire_at": until})
            if self._segments:
                self._resolved_new.append(resolved)
            self._resolved = _merge_by_hash(self._resolved, resolved)

    def _touch_keys(
        self,
        khash: np.ndarray,
        *,
        base: np.ndarray | None = None,
        last_event_ts: np.ndarray | None = None,
        resolved_until: np.ndarray | None = None,
    ) -> None:
        n = len(khash)
        update = pd.DataFrame(
            {
                "khash": khash.astype(np.uint64),
                "base": base if base is not None else np.full(n, np.nan),
                "last_event_ts": last_event_ts if last_event_ts is not None else np.full(n, _I64_MIN),
                "resolved_until": resolved_until if resolved_until is not None else np.full(n, _I64_MIN),
            }
        )
        merged = _stack(self._keys, update)
        self._keys = (
            merged.groupby("khash", sort=False)
            .agg(
                base=("base", "max"),
                last_event_ts=("last_event_ts", "max"),
                resolved_until=("resolved_until", "max"),
            )
            .reset_index()
            .astype(_KEYS)
        )

    def _finalise_events(self, wm: int) -> pd.DataFrame:
        """Events the watermark passed can match no future operation: report the unused ones."""
        evs = self._events
        done = evs["ts"].to_numpy(np.int64) < wm
        if not done.any():
            return _empty_unmatched(self._batch_id)
        final = evs.loc[done]
        self._events = evs.loc[~done].reset_index(drop=True)
        used = final["used"].to_numpy(bool) | np.isin(
            final["eseq"].to_numpy(np.int64), self._matches["eseq"].to_numpy(np.int64)
        )
        # offset progress: untargeted events with a value feed the key's running max for later ops
        untargeted = final.loc[final["op_id"].isna() & final["value"].notna()]
        if len(untargeted):
            untargeted = untargeted.assign(khash=_hash(untargeted["key"].to_numpy(dtype=object)))
            per_key = untargeted.groupby("khash").agg(base=("value", "max"), last=("ts", "max"))
            self._touch_keys(
                per_key.index.to_numpy(np.uint64),
                base=per_key["base"].to_numpy(float),
                last_event_ts=per_key["last"].to_numpy(np.int64),
            )
        lost = final.loc[~used & ~final["replica"].to_numpy(bool)]
        if len(lost) == 0:
            return _empty_unmatched(self._batch_id)
        lost_hash = pd.DataFrame({"khash": _hash(lost["key"].to_numpy(dtype=object))})
        resolved_until = lost_hash.merge(self._keys[["khash", "resolved_until"]], on="khash", how="left")
        after = lost["ts"].to_numpy(np.int64) < resolved_until["resolved_until"].fillna(_I64_MIN).to_numpy()
        # a targeted event is late for its own operation only, whatever happened on its key
        targeted = lost["op_id"].to_numpy(dtype=object)
        has_target = pd.notna(targeted)
        after[has_target] = self._recently_resolved(targeted[has_target])
        reason = np.where(after, "after_resolution", "no_operation")
        out = lost[["key", "ts", "op_id", "source", "value"]].reset_index(drop=True)
        out["reason"] = reason
        out["batch_id"] = self._batch_id
        return out

    def _retire(self, wm: int) -> None:
        """Drop what the watermark made useless: old key progress, old dedup entries."""
        self._retired_wm = max(self._retired_wm, int(wm))
        keys = self._keys
        if len(keys):
            keep = (keys["last_event_ts"].to_numpy(np.int64) > wm - self.config.progress_retention_ms) | (
                keys["resolved_until"].to_numpy(np.int64) > wm
            )
            self._keys = keys.loc[keep].reset_index(drop=True)
        if len(self._resolved):
            keep = self._resolved["expire_at"].to_numpy(np.int64) > wm
            self._resolved = _rows_where(self._resolved, keep)

    # -- serialisation -------------------------------------------------------------------------

    def to_bytes(self, store: SegmentStore | None = None, *, park: bool = False) -> bytes:
        """The shard state as one binary value (Arrow IPC), for a Spark group state.

        Without ``store`` the value holds everything.  With a ``SegmentStore`` (see
        ``segments.py``) a state of at least ``store.segment_rows`` rows keeps its bulk in
        immutable segment files (a base and delta segments) and the value holds the change
        since the last of them and their names.  ``park``
        leaves this object in the worker's cache for the next ``from_bytes`` of this state
        (the caller must not change it afterwards).
        """
        meta = {
            "format": str(_STATE_VERSION),
            "watermark": str(self._watermark),
            "next_handle": str(self._next_handle),
            "next_eseq": str(self._next_eseq),
            "retired_wm": str(self._retired_wm),
            "lineage": self._lineage,
            "shard": "" if self.shard is None else str(self.shard),
            "token": uuid.uuid4().hex,
            # the versions this one descends from (the worker cache may bring them forward)
            "ancestry": json.dumps((self._ancestry + [self._token] if self._token else self._ancestry)[-64:]),
        }
        self._token, self._ancestry = meta["token"], json.loads(meta["ancestry"])
        parts = {
            "matches": _frame_bytes(self._matches),
            "events": _frame_bytes(self._events),
            "keys": _frame_bytes(self._keys),
            "due": _frame_bytes(pd.DataFrame({"handle": self._due})),
        }
        rows = len(self._ops) + len(self._watch) + len(self._seen) + len(self._resolved)
        if store is None or (not self._segments and rows < store.segment_rows):
            parts.update({name: _frame_bytes(getattr(self, f"_{name}")) for name in _BIG})
            parts["wheel"] = self._wheel.to_bytes()
        else:
            self._saves += 1
            delta = self._delta() if self._segments else None
            if delta is None:
                self._write_segment(store, None)
                delta = self._delta()
            elif _rows_in(delta) > store.segment_rows:
                written = sum(n for _name, _next, n in self._segments[1:]) + _rows_in(delta)
                self._write_segment(store, delta if written <= self._segments[0][2] // 2 else None)
                delta = self._delta()  # empty: everything is in the segments now
            old = [n for n, at in self._graveyard if self._saves - at >= store.retain_versions]
            if old:  # superseded long enough ago that no retained version still names them
                store.delete(old)
                self._graveyard = [(n, at) for n, at in self._graveyard if n not in old]
            parts.update({f"tail_{k}": _frame_bytes(v) for k, v in delta.items()})
            meta.update(
                segments=json.dumps(self._segments),
                saves=str(self._saves),
                graveyard=json.dumps(self._graveyard),
                wheel_now=str(self._wheel.current_time_ms),
            )
        data = pack_parts(parts, meta)
        if park:
            SegmentStore.park(self._lineage, meta["token"], self)
        return data

    def _delta(self) -> dict[str, pd.DataFrame]:
        """What changed since the last segment: new rows of the big tables, resolved handles."""
        since = self._segments[-1][1]
        delta = {}
        for name in ("ops", "watch", "seen"):
            frame = getattr(self, f"_{name}")
            delta[name] = frame.loc[frame["handle"].to_numpy(np.int64) >= since]
        dead = np.unique(np.concatenate([np.empty(0, np.int64), *self._removed]))
        delta["dead"] = pd.DataFrame({"handle": dead[dead < since]})
        new = (
            _stack(_empty(_RESOLVED), pd.concat(self._resolved_new))
            if self._resolved_new
            else _empty(_RESOLVED)
        )
        delta["resolved"] = new.loc[new["expire_at"].to_numpy(np.int64) > self._retired_wm]
        return delta

    def _write_segment(self, store: SegmentStore, delta: dict[str, pd.DataFrame] | None) -> None:
        """Write ``delta`` as a delta segment, or (None) everything as a new base segment.

        LSM-style: deltas pile up until they hold half the base's rows, then one new base
        replaces them all; the replaced files are deleted ``retain_versions`` saves later.
        """
        if delta is None:
            frames = {n: getattr(self, f"_{n}") for n in _BIG}
            self._graveyard += [(name, self._saves) for name, _next, _n in self._segments]
            self._segments = []
        else:
            frames = {f"tail_{k}": v for k, v in delta.items()}
        name = store.write({k: _frame_bytes(v) for k, v in frames.items()}, {"lineage": self._lineage})
        self._segments.append((name, self._next_handle, _rows_in(frames)))
        self._removed, self._resolved_new = [], []

    @classmethod
    def from_bytes(
        cls, data: bytes, config: PurgatoryConfig | None = None, store: SegmentStore | None = None
    ) -> Purgatory:
        """Inverse of ``to_bytes``; ``config`` may differ only in retention and limits.

        A shard parked in this worker (``to_bytes(..., park=True)``) is taken back when it is
        this exact version, or brought forward when it is an ancestor of this version that
        shares its segment files (another worker ran the shard in between): only the delta
        since is applied.  Anything else rebuilds the shard from the value and its segments.
        """
        parts, meta = unpack_parts(data)
        if meta.get("format") != str(_STATE_VERSION):
            raise ValueError(f"unsupported purgatory state format {meta.get('format')!r}")
        parked = SegmentStore.claim(meta["lineage"]) if "lineage" in meta else None
        if parked is not None:
            parked.config = config or parked.config
            if parked._token == meta["token"]:
                parked.loaded_by = "exact"
                return parked
            if parked._can_catch_up(meta, store):
                parked._catch_up(parts, meta, store)  # type: ignore[arg-type]
                parked.loaded_by = "caught-up"
                return parked
        p = cls(config)
        p.loaded_by = "rebuilt"
        if "segments" not in meta:
            p._set_small(parts, meta)
            for name in _BIG:
                setattr(p, f"_{name}", _frame_from(parts[name], _BIG[name]))
            p._wheel = TimingWheel.from_bytes(parts["wheel"])
            return p
        if store is None:
            raise ValueError("this state extends segment files: pass the SegmentStore it was saved with")
        # the base's tables, then what every later segment and this value changed
        base = _segments_of(meta)[0]
        for name, part in store.read(base[0])[0].items():
            setattr(p, f"_{name}", _frame_from(part, _BIG[name]))
        p._segments = [base]
        p._catch_up(parts, meta, store)
        return p

    def _set_small(self, parts: dict, meta: dict[str, str]) -> None:
        """Scalars and the small tables, which every value carries whole."""
        self._watermark = int(meta["watermark"])
        self._next_handle = int(meta["next_handle"])
        self._next_eseq = int(meta["next_eseq"])
        self._retired_wm = int(meta.get("retired_wm", _I64_MIN))
        self._lineage = meta.get("lineage", self._lineage)
        self.shard = int(meta["shard"]) if meta.get("shard") else None
        self._token = meta.get("token")
        self._ancestry = json.loads(meta.get("ancestry", "[]"))
        self._matches = _frame_from(parts["matches"], _MATCHES)
        self._events = _frame_from(parts["events"], _EVENTS)
        self._keys = _frame_from(parts["keys"], _KEYS)
        self._due = _handles(parts["due"])
        if "segments" in meta:
            self._saves = int(meta["saves"])
            self._graveyard = [(n, int(at)) for n, at in json.loads(meta["graveyard"])]

    def _rebuild_wheel(self, now: int) -> None:
        """The wheel holds every pending operation not already due: rebuild it from them."""
        self._wheel = TimingWheel(self.config.tick_ms, self.config.wheel_size, now)
        handles = self._ops["handle"].to_numpy(np.int64)
        timed = ~np.isin(handles, self._due)
        already = self._wheel.add(handles[timed], self._ops["deadline"].to_numpy(np.int64)[timed])
        self._due = np.concatenate([self._due, handles[timed][already]])

    def _can_catch_up(self, meta: dict[str, str], store: SegmentStore | None) -> bool:
        """Is this (parked) object an ancestor of ``meta``'s version on the same segments?"""
        if store is None or "segments" not in meta or not self._segments or self._token is None:
            return False
        segments = _segments_of(meta)
        return (
            self._token in json.loads(meta["ancestry"]) and segments[: len(self._segments)] == self._segments
        )

    def _catch_up(self, parts: dict, meta: dict[str, str], store: SegmentStore) -> None:
        """Bring this state forward from its last segment to ``meta``'s version: apply the
        delta segments written since, then the value's delta, as one change."""
        segments = _segments_of(meta)
        later = [store.read(name)[0] for name, _next, _rows in segments[len(self._segments) :]]
        self._apply_delta(_delta_of([*later, parts]))
        self._segments = segments
        self._set_small(parts, meta)
        self._resolved = _rows_where(
            self._resolved, self._resolved["expire_at"].to_numpy(np.int64) > self._retired_wm
        )
        self._removed = [_handles(parts["tail_dead"])]
        self._resolved_new = [_frame_from(parts["tail_resolved"], _RESOLVED)]
        self._rebuild_wheel(int(meta["wheel_now"]))

    def _apply_delta(self, delta: dict) -> None:
        """Replace what changed since the last segment by ``delta`` (``_delta_of``)."""
        since = self._segments[-1][1]
        for name in ("ops", "watch", "seen"):
            frame = getattr(self, f"_{name}")
            h = frame["handle"].to_numpy(np.int64)
            kept = _rows_where(frame, (h < since) & ~np.isin(h, delta["dead"]))
            tail = delta[name]
            setattr(self, f"_{name}", _stack(kept, tail) if name == "ops" else _merge_by_hash(kept, tail))
        if self._resolved_new:  # rows added since the last segment: the delta has them (or fewer)
            old = pd.concat(self._resolved_new)
            self._resolved = _rows_where(self._resolved, ~np.isin(_row_key(self._resolved), _row_key(old)))
        self._resolved = _merge_by_hash(self._resolved, delta["resolved"])


# -- helpers ------------------------------------------------------------------------------------


# what ``process(..., validated=True)`` takes: the ops table without the engine's own columns
_VALID_OPS = {k: v for k, v in _OPS.items() if k not in ("handle", "n_members")}
_VALID_EVENTS = {
    "key": "object",
    "ts": "int64",
    "op_id": "object",
    "source": "object",
    "value": "float64",
    "replica": "bool",
}


def _frame_or_empty(frame: pd.DataFrame | None, dtypes: dict[str, str]) -> pd.DataFrame:
    if frame is None or len(frame) == 0:
        return _empty(dtypes)
    return frame.reset_index(drop=True)


def _length(value: object) -> int:
    return 0 if value is None or (isinstance(value, float) and value != value) else len(value)


def _with_keys(ops: pd.DataFrame | None) -> pd.DataFrame:
    """Accept a single ``key`` column as shorthand for ``keys``."""
    if ops is None:
        return pd.DataFrame()
    if "key" in ops.columns:
        single = ops["key"].map(lambda k: [k] if isinstance(k, str) else None)
        if "keys" in ops.columns:
            ops = ops.assign(keys=ops["keys"].where(ops["keys"].notna(), single))
        else:
            ops = ops.assign(keys=single)
        ops = ops.drop(columns="key")
    return ops


def _stack(top: pd.DataFrame, bottom: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``top`` then ``bottom`` (same columns), column by column.

    ``pd.concat`` inspects object columns value by value to decide on missing-value
    handling; state tables append every batch, so they stack numpy columns directly.
    """
    if len(bottom) == 0:
        return top
    if len(top) == 0:
        return bottom.reset_index(drop=True)
    return pd.DataFrame(
        {c: np.concatenate([top[c].to_numpy(), bottom[c].to_numpy()]) for c in top.columns}, copy=False
    )


def _segments_of(meta: dict[str, str]) -> list[tuple[str, int, int]]:
    return [(name, int(nxt), int(rows)) for name, nxt, rows in json.loads(meta["segments"])]


def _delta_of(layers: list[dict]) -> dict:
    """Consecutive deltas (``tail_*`` parts, oldest first) as one: their new rows, less the
    handles any of them resolved, and all those handles."""
    dead = np.concatenate([_handles(layer["tail_dead"]) for layer in layers])
    delta: dict = {"dead": dead}
    for name, dtypes in _BIG.items():
        frame = _empty(dtypes)
        for layer in layers:
            frame = _stack(frame, _frame_from(layer[f"tail_{name}"], dtypes))
        if name != "resolved" and len(dead):
            frame = _rows_where(frame, ~np.isin(frame["handle"].to_numpy(np.int64), dead))
        delta[name] = frame
    return delta


def _handles(data) -> np.ndarray:
    return _frame_from(data, {"handle": "int64"})["handle"].to_numpy(np.int64)


def _row_key(resolved: pd.DataFrame) -> np.ndarray:
    """One 64-bit key per dedup row (op_id hash mixed with its expiry)."""
    mix = resolved["expire_at"].to_numpy(np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return resolved["hash"].to_numpy(np.uint64) ^ mix


def _rows_in(frames: dict[str, pd.DataFrame]) -> int:
    return sum(len(f) for f in frames.values())


def _merge_by_hash(big: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``_sorted_by_hash(_stack(big, new))`` for ``big`` already sorted: insert, don't re-sort."""
    if len(new) == 0:
        return big
    if len(big) == 0:
        return _sorted_by_hash(new)
    new = _sorted_by_hash(new)
    at = np.searchsorted(big["hash"].to_numpy(np.uint64), new["hash"].to_numpy(np.uint64), side="right")
    # copy=False: fresh arrays already; pandas would otherwise copy them again into 2-D blocks
    return pd.DataFrame(
        {c: np.insert(big[c].to_numpy(), at, new[c].to_numpy()) for c in big.columns}, copy=False
    )


def _rows_where(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """``frame.loc[keep]`` with a fresh index, column by column (cheaper on big tables)."""
    if keep.all():
        return frame
    return pd.DataFrame({c: frame[c].to_numpy()[keep] for c in frame.columns}, copy=False)


def _sorted_by_hash(frame: pd.DataFrame) -> pd.DataFrame:
    order = np.argsort(frame["hash"].to_numpy(np.uint64), kind="stable")
    return frame.iloc[order].reset_index(drop=True)


def _rejected_rows(source: str, rows: pd.DataFrame, reason: str) -> pd.DataFrame:
    """Rejected rows keep the record: its raw text when the source kept it, else its fields."""
    columns = OPERATION_COLUMNS if source == "operations" else EVENT_COLUMNS
    if len(rows) and "raw" not in rows.columns and source == "operations":
        rows = rows.assign(timeout_ms=rows["deadline"] - rows["ts"], condition=CONDITION_NAMES[rows["cond"]])
    raw = raw_json(rows, columns) if len(rows) else pd.Series([], dtype=object)
    return pd.DataFrame({"source": source, "raw": raw.to_numpy(dtype=object), "reason": reason})


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return pd.concat(frames, ignore_index=True)


def _empty_unmatched(batch_id: int) -> pd.DataFrame:
    frame = _empty(
        {
            "key": "object",
            "ts": "int64",
            "op_id": "object",
            "source": "object",
            "value": "float64",
            "reason": "object",
        }
    )
    frame["batch_id"] = pd.Series(dtype="int64")
    return frame


def _frame_bytes(frame: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _frame_from(data: bytes, dtypes: dict[str, str]) -> pd.DataFrame:
    """Inverse of ``_frame_bytes``; list columns come back as numpy arrays (fine for the engine)."""
    table = pa.ipc.open_stream(data).read_all()
    if table.num_rows == 0:
        return _empty(dtypes)
    frame = table.to_pandas()
    return frame.astype({k: v for k, v in dtypes.items() if v != "object"}, copy=False)[list(dtypes)]
