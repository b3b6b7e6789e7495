"""The per-shard purgatory: Kafka's DelayedOperationPurgatory for event time, on columns.

Kafka parks a ``DelayedOperation`` that cannot complete yet in a purgatory: it is watched under
its keys (``Watchers``) and scheduled on a timing wheel.  ``tryCompleteElseWatch`` completes an
operation at once if it can; ``checkAndComplete(key)`` re-tries the operations watching a key
when something happens to it; the timer's expiry calls ``forceComplete`` and then
``onExpiration``; ``forceComplete`` calls ``onComplete`` exactly once; ``purge`` drops
completed operations from the watcher lists.  This module keeps that vocabulary, but every
step takes a whole micro-batch of operations or events at once:

* ``try_complete_else_watch(ops)`` registers operations; each is matched against the events
  still buffered (events may arrive before their operation) and against the key's ``offset``
  progress, and completes at once if its condition already holds.
* ``check_and_complete(events)`` matches a batch of events against the watchers
  (``watchers``) and completes whatever became true (``conditions.evaluate``).
* ``advance(watermark)`` moves the timing wheel to the watermark; operations whose deadline
  it reached expire (``_on_expiration``).
* ``_force_complete`` resolves operations: ``_on_complete`` reports each one, ``_purge``
  then removes it from every table, so nothing can report it twice.
* ``process(ops, events, watermark_ms=...)`` does all of it in the right order, finalises the
  events the watermark passed (``progress``), and returns the rows for the ``outcomes``,
  ``unmatched_events`` and ``rejected`` tables, and what its stubs relay to the cross-shard
  group (``relay``), which takes it as ``process(..., relayed=...)``.

**Cost follows the batch, not the backlog.**  The tables that grow with the backlog are
updated in place, never rebuilt: the pending operations and their watchers are a
``pending.Pending`` (``columns.Columns``: numpy columns with spare capacity and tombstones,
rows in handle order, with hash indexes by op_id and by key, ``columns.HashIndex``: sorted
runs merged geometrically); retained key progress is a ``progress.KeyTable`` and remembered resolved
op_ids a ``dedup.ResolvedTable`` (the same structure, forgetting deferred to bulk sweeps);
the wheel's tombstones are sorted runs too.  A key or op_id is looked up by its 64-bit hash,
computed once per batch, and every candidate is confirmed on the strings.  What a call reads
of them is the rows its batch touches, as small frames (``Pending.rows``), which the matching
and condition code (``watchers``, ``conditions``, ``relay``) takes as before.  Read
accessors: ``pending_operations()``, ``tables()`` (everything as plain frames).

Invariants: every valid operation gets exactly one outcome, ``completed`` in the batch that
makes its condition true or ``expired`` once the watermark reaches its deadline (never
earlier); a resolved operation leaves nothing behind in the watchers, the wheel or the
match table; every valid event is eventually either counted by an operation or reported in
``unmatched_events`` (an event a stub matched by the cross-shard group, on its notice:
``relay``).  The engine persists nothing: ``tables()`` and ``take_changes()`` let
a state layer (``spark_purgatory.state``) store it.  All times are epoch milliseconds (int64).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..contract import (
    COMPLETED,
    EXPIRED,
    OUTCOME_COLUMNS,
    REJECTED_COLUMNS,
    UNMATCHED_COLUMNS,
)
from . import dedup, progress, relay, watchers
from .batch import BatchResult, admit
from .conditions import CONDITION_NAMES, OFFSET, Evaluation, evaluate
from .frames import concat, distinct, hash_strings, rows_where, stack
from .handoff import CrossShardHandOff
from .pending import Pending
from .tables import EVENTS, I64_MIN, OPS, WATCH, ChangeLog, Changes, ShardTables, ops_rows
from .wheel import TimingWheel

__all__ = ["BatchResult", "Purgatory"]


class Purgatory(CrossShardHandOff):
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

    def __init__(self, config: PurgatoryConfig | None = None, *, start_ms: int = I64_MIN) -> None:
        self.config = config or PurgatoryConfig()
        #: the host's shard number, kept with the state (the Spark host checks it on load)
        self.shard: int | None = None
        #: what the state layer keeps with this shard between saves; the engine never reads it
        self.lineage: Any = None
        #: the host's, kept with the state: the last micro-batch whose relays this shard has
        #: received (the cross-shard group's; ``relay``)
        self.relays_through: int = -1
        self._changes = ChangeLog()
        tables = ShardTables.empty()
        tables.watermark = int(start_ms)
        tables.wheel = TimingWheel(self.config.tick_ms, self.config.wheel_size, max(start_ms, 0))
        self.load_tables(tables)
        self._outcomes: list[pd.DataFrame] = []
        self._batch_id = 0

    # -- sizes (for metrics and tests) ---------------------------------------------------------

    @property
    def watermark(self) -> int:
        return self._watermark

    @property
    def pending(self) -> int:
        """Operations waiting (Kafka's ``delayed``)."""
        return len(self._pending)

    @property
    def watched(self) -> int:
        """Watcher entries, one per (operation, key) (Kafka's ``watched``)."""
        return self._pending.watched

    @property
    def buffered_events(self) -> int:
        return len(self._events)

    @property
    def retained_keys(self) -> int:
        return len(self._keys)

    @property
    def config(self) -> PurgatoryConfig:
        return self._config

    @config.setter
    def config(self, config: PurgatoryConfig) -> None:
        """A loaded state may get another config (``load_state``): the key table follows."""
        self._config = config
        if hasattr(self, "_keys"):
            self._keys.retention_ms = config.progress_retention_ms

    @property
    def awaited_notices(self) -> int:
        """Relayed pairs whose event's notice the cross-shard group still waits for (``relay``)."""
        return len(self._relayed)

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
        keys_wakeup = self._keys.wakeup()
        if keys_wakeup is not None:
            times.append(keys_wakeup)
        resolved_wakeup = self._resolved.wakeup()
        if resolved_wakeup is not None:
            times.append(resolved_wakeup)
        return min(times)

    def is_empty(self) -> bool:
        """Nothing pending, buffered or retained: the state can be dropped."""
        return not (
            len(self._pending)
            or len(self._events)
            or len(self._due)
            or len(self._relayed)
            or len(self._resolved)  # last: these two count
            or len(self._keys)
        )

    # -- what a state layer reads (the engine persists nothing itself) -------------------------

    def tables(self) -> ShardTables:
        """The whole state as plain tables: the pending operations and their watchers copied
        out of the engine's columns (in handle order), the small tables as they are (read
        them, never modify them)."""
        ops, watch = self._pending.frames()
        return ShardTables(
            ops=ops,
            watch=watch,
            resolved=self._resolved.frame(),
            matches=self._matches,
            events=self._events,
            keys=self._keys.frame(),
            relayed=self._relayed,
            due=self._due,
            watermark=self._watermark,
            next_handle=self._next_handle,
            next_eseq=self._next_eseq,
            retired_wm=self._retired_wm,
            wheel=self._wheel,
            wheel_now=self._wheel.current_time_ms,
        )

    def pending_operations(self) -> pd.DataFrame:
        """The pending operations (``tables.OPS`` columns), one row each, in handle order."""
        return self._pending.frames()[0]

    def load_tables(self, tables: ShardTables) -> None:
        """Replace the whole state by ``tables`` (``ops`` and ``watch`` in any order); a
        ``wheel`` of None is rebuilt from the pending deadlines.  The change log restarts:
        every row counts as added."""
        t = tables
        self._pending = Pending(t.ops, t.watch)
        self._resolved = dedup.ResolvedTable(t.resolved)
        self._matches, self._events, self._due = t.matches, t.events, t.due
        self._keys = progress.KeyTable(self.config.progress_retention_ms, t.keys)
        self._watermark, self._retired_wm, self._relayed = t.watermark, t.retired_wm, t.relayed
        self._next_handle, self._next_eseq = t.next_handle, t.next_eseq
        if t.wheel is not None:
            self._wheel = t.wheel
        else:  # the wheel holds every pending operation not already due
            self._wheel = TimingWheel(self.config.tick_ms, self.config.wheel_size, t.wheel_now)
            handles = t.ops["handle"].to_numpy(np.int64)
            timed = ~np.isin(handles, self._due)
            already = self._wheel.add(handles[timed], t.ops["deadline"].to_numpy(np.int64)[timed])
            self._due = np.concatenate([self._due, handles[timed][already]])
        self._changes.restart()

    def take_changes(self) -> Changes:
        """What the big tables gained and lost since the last call (see ``tables.Changes``)."""
        return self._changes.take(self._next_handle, self._resolved.frame)

    # -- the batch entry point -----------------------------------------------------------------

    def process(
        self,
        operations: pd.DataFrame | None,
        events: pd.DataFrame | None,
        *,
        watermark_ms: int,
        batch_id: int = 0,
        validated: bool = False,
        relayed: pd.DataFrame | None = None,
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
                They may also carry ``stub`` (operations) and ``replica`` (events) flags:
                copies of an operation or event that the host sends to a second shard, which
                count there but never report (their original does).
            relayed: what primary shards relayed to this shard, the cross-shard group
                (``tables.RELAY`` rows with the ``batch`` and ``sender`` that made them;
                ``relay``).  They become matches of the operations they name, batch by
                batch, before this batch's operations, events and expiries; a notice of
                an event nothing counted makes it an ``unmatched_events`` row.

        The result's ``relay`` holds what this shard's stubs relay (``relay.outgoing``) and
        the notices of the events they matched that became final (``relay.notices``).
        """
        self._batch_id = int(batch_id)
        wm = max(int(watermark_ms), self._watermark)
        self._outcomes = []
        new_from, new_eseq_from = self._next_handle, self._next_eseq
        ops, evs, rejected = admit(
            operations, events, wm, validated, self.config.max_timeout_ms, self._resolved, self._pending
        )

        noticed = self._receive(relayed)
        self.try_complete_else_watch(ops)
        self.check_and_complete(evs)
        handed_on = self._outgoing(new_from, new_eseq_from)
        # the cross-shard group: operations due on arrival wait one call for their stubs' relay
        held = self._due[self._due >= new_from] if relayed is not None else self._due[:0]
        self._due = self._due[~np.isin(self._due, held)]
        paired = self._matches["eseq"].to_numpy(np.int64)[self._of_stubs()]
        self.advance(wm)
        self._due = np.concatenate([self._due, held])
        unmatched, notes = self._finalise_events(wm, paired)
        self._retire(wm)
        unmatched, handed_on = stack(noticed, unmatched), stack(handed_on, notes)

        outcomes = concat(self._outcomes, OUTCOME_COLUMNS)
        self._outcomes = []
        rej = concat([r for r in rejected if len(r)], REJECTED_COLUMNS[:-1])  # batch_id added next
        rej["batch_id"] = self._batch_id
        return BatchResult(outcomes.reset_index(drop=True), unmatched, rej[REJECTED_COLUMNS], handed_on)

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
            concat([first.outcomes, last.outcomes], OUTCOME_COLUMNS),
            concat([first.unmatched, last.unmatched], UNMATCHED_COLUMNS),
            concat([first.rejected, last.rejected], REJECTED_COLUMNS),
        )

    # -- Kafka's operations, batched -----------------------------------------------------------

    def try_complete_else_watch(self, ops: pd.DataFrame) -> None:
        """Register validated operations; complete at once those already satisfied."""
        if len(ops) == 0:
            return
        new_ops = ops_rows(ops, self._next_handle)
        self._next_handle += len(new_ops)
        handles = new_ops["handle"].to_numpy(np.int64)
        watch = watchers.watch_rows(new_ops, self._keys)
        columns = {c: new_ops[c].to_numpy() for c in OPS}
        if "ohash" in ops.columns:  # ``batch.admit`` hashed them already
            ohash = ops["ohash"].to_numpy(np.uint64)
        else:
            ohash = hash_strings(columns["op_id"])
        self._pending.add(columns, ohash, {c: watch[c].to_numpy() for c in WATCH})

        already = self._wheel.add(handles, new_ops["deadline"].to_numpy())
        self._due = np.concatenate([self._due, handles[already]])

        # events that arrived before their operation: untargeted ones by key, targeted by op_id
        if len(self._events):
            self._add_matches(watchers.buffered_pairs(new_ops, new_ops, watch, self._events))
        self._try_complete(handles)

    def check_and_complete(self, events: pd.DataFrame) -> None:
        """Buffer a batch of validated events and complete the operations they satisfy."""
        if len(events) == 0:
            return
        n = len(events)
        eseq = np.arange(self._next_eseq, self._next_eseq + n, dtype=np.int64)
        self._next_eseq += n
        evs = events.assign(eseq=eseq, used=False)[list(EVENTS)].astype(EVENTS)
        self._events = stack(self._events, evs)
        if self._pending.watched == 0:
            return
        keys, op_ids = evs["key"].to_numpy(dtype=object), evs["op_id"].to_numpy(dtype=object)
        khash = hash_strings(keys)  # once: the watchers' lookup and the matches both need it
        # untargeted events: every watcher of the key (Kafka's checkAndComplete(key))
        untargeted = np.flatnonzero(pd.isna(op_ids))
        ev_idx, handles = self._pending.watchers_of(keys[untargeted], khash[untargeted])
        ev_idx = untargeted[ev_idx]
        # targeted events: straight to their operation, if it is pending and watches the key
        targeted = np.flatnonzero(pd.notna(op_ids))
        probe, t_handles = self._pending.by_op_id(op_ids[targeted])
        t_idx = targeted[probe]
        hit = watchers.watching(self._pending.rows(t_handles), t_handles, keys[t_idx])
        idx = np.concatenate([ev_idx, t_idx[hit]])
        pairs = {c: evs[c].to_numpy()[idx] for c in ("key", "ts", "eseq", "op_id", "source", "value")}
        pairs.update(handle=np.concatenate([handles, t_handles[hit]]), khash=khash[idx])
        self._try_complete(self._add_matches(pd.DataFrame(pairs, copy=False)))

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark; expire the operations whose deadline it reached
        (the timer's expiry: ``_on_expiration``, which force-completes them)."""
        self._watermark = max(int(watermark_ms), self._watermark)
        expired = np.concatenate([self._due, self._wheel.advance(self._watermark)])
        self._due = np.empty(0, dtype=np.int64)
        expired = distinct(expired)
        expired = expired[self._pending.contains(expired)]
        if expired.size:
            self._on_expiration(expired)

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``: drop the pending operations watching any of ``keys``.

        No outcome is emitted for them (the caller decided their fate, e.g. a deleted
        partition); their op_ids still count as resolved for duplicate detection.  Returns
        the cancelled op_ids.
        """
        keys_array = np.asarray(keys, dtype=object)
        handles = distinct(self._pending.watchers_of(keys_array, hash_strings(keys_array))[1])
        if handles.size == 0:
            return []
        rows = self._pending.rows(handles)
        self._cancel(handles, rows)
        self._purge(handles, rows)
        return rows["op_id"].tolist()

    def _try_complete(self, handles: np.ndarray) -> None:
        """Kafka's ``tryComplete`` for these operations: force-complete those whose condition
        holds, at the event time it became true."""
        if handles.size == 0:
            return
        handles = distinct(handles)
        handles = handles[~self._pending.stub(handles)]  # stubs never complete
        if handles.size == 0:
            return
        ops = self._pending.rows(handles)
        result = self._evaluate(handles, ops)
        done = handles[result.satisfied]
        if done.size == 0:
            return
        self._mark_used(result.eseq[result.used & np.isin(result.handle, done)])
        rows = rows_where(ops, result.satisfied)
        self._cancel(done, rows)
        ok = result.satisfied
        self._force_complete(
            done, rows, COMPLETED, result.resolved_at[ok], result.matched[ok], result.progress[ok]
        )

    def _on_expiration(self, expired: np.ndarray) -> None:
        """The timer fired for these operations: report them expired at their deadline, with
        the progress they made."""
        rows = self._pending.rows(expired)
        result = self._evaluate(expired, rows)
        # a stub counts nothing: whether its events are used is the cross-shard group's to say
        stubs = rows["handle"].to_numpy(np.int64)[rows["stub"].to_numpy(bool)]
        self._mark_used(result.eseq[~np.isin(result.handle, stubs)])
        self._force_complete(
            expired, rows, EXPIRED, rows["deadline"].to_numpy(np.int64), result.matched, result.progress
        )

    def _force_complete(
        self,
        handles: np.ndarray,
        rows: pd.DataFrame,
        status: str,
        resolved_at: np.ndarray,
        matched: np.ndarray,
        reached: np.ndarray,
    ) -> None:
        """Kafka's ``forceComplete``: ``on_complete`` reports the operations (``rows``, in
        handle order; stubs report nothing), then ``purge`` removes them from every table, so
        each is reported exactly once."""
        real = ~rows["stub"].to_numpy(bool)
        if real.all():
            self._on_complete(rows, status, resolved_at, matched, reached)
        else:
            reported = rows.loc[real].reset_index(drop=True)
            self._on_complete(reported, status, resolved_at[real], matched[real], reached[real])
        self._purge(handles, rows)

    def _on_complete(
        self,
        rows: pd.DataFrame,
        status: str,
        resolved_at: np.ndarray,
        matched: np.ndarray,
        reached: np.ndarray,
    ) -> None:
        """Kafka's ``onComplete``: the outcome rows of resolved operations."""
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
                    "progress": reached.astype(float),
                    "condition": CONDITION_NAMES[rows["cond"].to_numpy(np.int64)],
                    "target": rows["target"].to_numpy(float),
                    "payload": rows["payload"].to_numpy(dtype=object),
                    "batch_id": self._batch_id,
                }
            )[OUTCOME_COLUMNS]  # the contract's order, and a loud error if it and this drift apart
        )

    def _cancel(self, handles: np.ndarray, rows: pd.DataFrame) -> None:
        """Operations resolved before their deadline leave the timer; events on their keys
        before that deadline count as ``after_resolution`` from now on."""
        due = np.isin(handles, self._due)  # added already past their deadline: never on the wheel
        self._due = self._due[~np.isin(self._due, handles)]
        self._wheel.cancel(handles[~due])
        watch = self._pending.watch_rows(handles, ["hash", "handle"])
        khash = watch["hash"].to_numpy(np.uint64)
        order = np.argsort(khash, kind="stable")  # keys new to ``keys`` join in hash order
        at = np.searchsorted(rows["handle"].to_numpy(np.int64), watch["handle"].to_numpy(np.int64)[order])
        self._keys.touch(khash[order], resolved_until=rows["deadline"].to_numpy(np.int64)[at])

    def _purge(self, handles: np.ndarray, rows: pd.DataFrame) -> None:
        """Kafka's ``purge``: resolved operations leave the watchers, the match table and the
        pending op_ids at once; their op_ids are remembered for duplicate detection."""
        self._changes.removed(handles)
        self._pending.remove(handles)
        if len(self._matches):
            held = self._matches["handle"].to_numpy(np.int64)
            self._matches = rows_where(self._matches, ~np.isin(held, handles))
        # a stub's op_id belongs to its original, which remembers it
        real = rows_where(rows, ~rows["stub"].to_numpy(bool))
        if len(real):
            resolved = dedup.resolved_rows(
                real["op_id"].to_numpy(dtype=object),
                real["deadline"].to_numpy(np.int64),
                self._watermark,
                self.config.dedup_retention_ms,
            )
            self._changes.resolved(resolved)
            self._resolved.add(resolved)

    # -- internals -----------------------------------------------------------------------------

    def _add_matches(self, pairs: pd.DataFrame) -> np.ndarray:
        """Keep the (event, operation) pairs inside the operation's window; return touched handles."""
        if len(pairs) == 0:
            return np.empty(0, dtype=np.int64)
        new = watchers.matches_in_window(self._pending.rows(pairs["handle"].to_numpy(np.int64)), pairs)
        if len(new) == 0:
            return np.empty(0, dtype=np.int64)
        self._matches = stack(self._matches, new)
        return distinct(new["handle"].to_numpy(np.int64))

    def _evaluate(self, handles: np.ndarray, ops: pd.DataFrame) -> Evaluation:
        """``conditions.evaluate`` for these (sorted) handles, whose rows of ``ops`` are ``ops``."""
        matches = self._matches.loc[self._matches["handle"].isin(handles)]
        watch = None
        if (ops["cond"].to_numpy() == OFFSET).any():
            watch = self._pending.watch_rows(handles, ["handle", "hash", "progress_at_watch"])
        return evaluate(ops, matches, watch)

    def _mark_used(self, eseqs: np.ndarray) -> None:
        """Operations of this shard counted these events (here, or relayed: ``relay.absorb``)."""
        if eseqs.size and len(self._events):
            hit = np.isin(self._events["eseq"].to_numpy(np.int64), eseqs)
            self._events.loc[hit, "used"] = True
        self._relayed = relay.absorb(self._relayed, eseqs)

    def _finalise_events(self, wm: int, paired: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Events the watermark passed can match no future operation: fold them into key
        progress and report the ones nothing counted.  An event a stub matched (``paired``)
        is the cross-shard group's to report: its notice goes there (``relay``)."""
        evs = self._events
        done = evs["ts"].to_numpy(np.int64) < wm
        if not done.any():
            return progress.empty_unmatched(), relay.notices(evs.iloc[:0], done[:0])
        final = evs.loc[done]
        self._events = evs.loc[~done].reset_index(drop=True)
        eseq = final["eseq"].to_numpy(np.int64)
        # a pending operation of this shard holds it: it counts (it is before any later crossing)
        held = self._matches["eseq"].to_numpy(np.int64)[~self._of_stubs()]
        used = final["used"].to_numpy(bool) | np.isin(eseq, held)
        progress.final_progress(self._keys, final)
        mine = ~final["replica"].to_numpy(bool)
        relayed = np.isin(eseq, paired) & mine
        notes = relay.notices(final.loc[relayed], used[relayed])
        lost = final.loc[~used & ~relayed & mine]
        if len(lost) == 0:
            return progress.empty_unmatched(), notes
        targets = lost["op_id"].to_numpy(dtype=object)
        resolved = self._resolved.contains(hash_strings(targets[pd.notna(targets)]))
        keys = self._keys.frame(hash_strings(lost["key"].to_numpy(dtype=object)))
        return progress.unmatched_rows(lost, keys, resolved, self._batch_id), notes

    def _retire(self, wm: int) -> None:
        """Drop what the watermark made useless: old key progress, old dedup entries."""
        self._retired_wm = max(self._retired_wm, int(wm))
        self._keys.retire(wm)
        self._resolved.retire(wm)
