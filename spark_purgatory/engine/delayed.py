"""Kafka's delayed-operation purgatory operations, batched, over one shard's live tables.

``DelayedOperations`` keeps Kafka's vocabulary (``tryCompleteElseWatch``,
``checkAndComplete``, ``forceComplete``, ``onComplete`` exactly once, ``purge``), each step
taking a whole micro-batch, and splits the first two in halves so a call decides each
operation once: ``watch_operations`` and ``watch_events`` match, then ``try_complete``
completes the operations touched whose condition holds, or withdraws those a cancel reached
first (``cancels``: Kafka's ``cancelForKey``, on event time).

A *warning* (``warn_at``: ``deadline - warn_ms``) is due for an operation that has not
resolved before ``warn_at`` in event time, as an expiry is for one that has not before its
deadline: ``advance`` warns the pending operations whose ``warn_at`` the watermark reached,
and ``_force_complete`` those resolving at or after it before it did.  Warned ones are not
marked: an operation was warned iff its ``warn_at`` is at or before the wheel's time and it
was registered before the last ``advance`` (``_warned``), both of which the state keeps.

Invariants: a resolved operation is reported once (``_on_complete``, stubs never) and leaves
nothing behind in the watchers, the wheel or the match table (``_purge``); its op_id is
remembered for duplicate detection; every removal is in the change log.
"""

from __future__ import annotations

import numpy as np

from ..config import PurgatoryConfig
from ..contract import CANCELLED, COMPLETED, EXPIRED
from . import dedup, watchers
from .answered import Answered, who_answered
from .arrays import among, distinct, distinct_at, hash_strings, isin, present
from .cancels import Decision, decide
from .conditions import CONDITION_NAMES, OFFSET, may_hold_unmatched
from .rows import Rows
from .snapshot import LiveTables
from .tables import EVENTS, ChangeLog, ops_rows

_EVENTS_HELD = {**EVENTS, "khash": "uint64"}
_NO_HANDLES = np.empty(0, dtype=np.int64)


class DelayedOperations:
    """Kafka's operations over one shard's live tables (``t``), batched."""

    def __init__(self, t: LiveTables, config: PurgatoryConfig, changes: ChangeLog) -> None:
        self.config = config
        self.changes = changes
        self.outcomes: list[Rows] = []
        self.warnings: list[Rows] = []
        self.batch_id = 0
        self.load(t)

    def load(self, t: LiveTables) -> None:
        self.t = t
        self._unscheduled_from: int | None = None  # handles from here on wait for the wheel
        self._warn_from = t.next_handle  # handles from here on came after the last ``advance``

    def take_outcomes(self) -> tuple[list[Rows], list[Rows]]:
        """The outcomes and the warnings reported since the last call."""
        outcomes, warnings, self.outcomes, self.warnings = self.outcomes, self.warnings, [], []
        return outcomes, warnings

    # -- Kafka's operations, batched -----------------------------------------------------------

    def watch_operations(self, ops: Rows, due_by: int | None = None) -> np.ndarray:
        """Register admitted operations, matched against every buffered event; return the
        handles of those that may hold now.  ``due_by``: operations due by it wait in ``due``
        although the wheel is behind it."""
        if len(ops) == 0:
            return _NO_HANDLES
        new_ops = ops_rows(ops, self.t.next_handle)
        self.t.next_handle += len(new_ops)
        handles = new_ops["handle"]
        watch = watchers.watch_rows(new_ops, self.t.keys)
        self.t.pending.add(new_ops, watch, recent=True)

        # the wheel takes them when time next moves: those resolved before never enter it
        now = self.t.wheel.current_time_ms if due_by is None else max(self.t.wheel.current_time_ms, due_by)
        already = new_ops["deadline"] <= now
        if already.any():
            self.t.due = np.concatenate([self.t.due, handles[already]])
        if self._unscheduled_from is None:
            self._unscheduled_from = int(handles[0])

        touched = _NO_HANDLES
        if len(self.t.events):
            pairs = watchers.buffered_pairs(new_ops, new_ops["ohash"], watch, self.t.events)
            if len(pairs):
                touched = self._add_matches(pairs, new_ops)[0]
        ready = may_hold_unmatched(new_ops["cond"], new_ops["target"]) | among(handles, touched)
        return handles[ready & ~new_ops["stub"]]  # stubs never complete

    def watch_events(self, events: Rows) -> np.ndarray:
        """Buffer admitted events and match them to the watchers; return the handles they touched."""
        n = len(events)
        if n == 0:
            return _NO_HANDLES
        eseq = np.arange(self.t.next_eseq, self.t.next_eseq + n, dtype=np.int64)
        self.t.next_eseq += n
        keys = events["key"].astype(object, copy=False)
        khash = hash_strings(keys)
        fields = {c: events[c] for c in ("ts", "op_id", "source", "value", "replica", "cancel")}
        evs = Rows({"eseq": eseq, "key": keys, **fields, "used": False, "khash": khash}, n)
        # buffered: never the caller's arrays
        evs = evs.cast(_EVENTS_HELD, copy=len(self.t.events) == 0)
        self.t.events = self.t.events.stack(evs)
        if self.t.pending.watched == 0:
            return _NO_HANDLES
        op_ids = evs["op_id"]
        targeted = present(op_ids)
        # untargeted events: every watcher of the key (Kafka's checkAndComplete(key))
        untargeted = np.flatnonzero(~targeted)
        ev_idx, handles = self.t.pending.watchers_of(keys[untargeted], khash[untargeted])
        idx = untargeted[ev_idx]
        if targeted.any():
            # targeted events: straight to their operation, if it is pending and watches the key
            targeted = np.flatnonzero(targeted)
            probe, t_handles = self.t.pending.by_op_id(op_ids[targeted])
            t_idx = targeted[probe]
            hit = watchers.watching(self.t.pending.rows(t_handles, keys=True), t_handles, keys[t_idx])
            idx, handles = np.concatenate([idx, t_idx[hit]]), np.concatenate([handles, t_handles[hit]])
        if idx.size == 0:
            return _NO_HANDLES
        pairs = {c: evs[c][idx] for c in watchers.PAIR[1:]}
        return self._add_matches(Rows({"handle": handles, **pairs}, idx.size))[0]

    def advance(self, watermark_ms: int) -> None:
        self.schedule()
        self.t.watermark = max(int(watermark_ms), self.t.watermark)
        handles, warn_at = self.t.pending.warn_times()
        due = (warn_at <= self.t.watermark) & ~self._warned(handles, warn_at)
        self._warn_from = self.t.next_handle
        if due.any():
            self._warn(self.t.pending.rows(handles[due]))
        expired = self.t.wheel.advance(self.t.watermark)
        if self.t.due.size:
            expired = np.concatenate([self.t.due, expired])
            self.t.due = _NO_HANDLES
        if expired.size == 0:
            return
        expired = distinct(expired)
        expired = expired[self.t.pending.contains(expired)]
        if expired.size:
            self._on_expiration(expired)

    def schedule(self) -> None:
        """Put the operations registered since the wheel last moved, pending and not due, on it."""
        if self._unscheduled_from is None:
            return
        handles, deadlines = self.t.pending.deadlines(since=self._unscheduled_from)
        self._unscheduled_from = None
        timed = deadlines > self.t.wheel.current_time_ms
        if self.t.due.size:
            timed &= ~isin(handles, self.t.due)
        self.t.wheel.add(handles[timed], deadlines[timed])

    def try_complete(self, handles: np.ndarray, ops: Rows | None = None) -> None:
        """Kafka's ``tryComplete``: force-complete those whose condition holds, as ``completed``,
        or that a cancel reached first, as ``cancelled`` at its time (``cancels``).  ``ops``:
        their rows, if the caller has them (then ``handles`` are sorted, distinct, no stubs)."""
        if handles.size == 0:
            return
        if ops is None:
            handles = distinct(handles)
            handles = handles[~self.t.pending.stub(handles)]  # stubs never complete
            if handles.size == 0:
                return
            ops = self.t.pending.rows(handles)
        decision = self._evaluate(handles, ops)
        result, withdrawn = decision.result, decision.cancelled
        ok = result.satisfied | withdrawn
        if not ok.any():
            return
        done = handles[ok]
        counted = result.eseq[result.used & among(result.handle, done)]
        self.t.mark_used(np.concatenate([counted, decision.cancels]))
        rows = ops.where(ok)
        if "ohash" not in rows:
            rows = rows.assign(ohash=self.t.pending.ohash(done))
        self._cancel(done, rows)
        at = np.where(withdrawn, decision.cancelled_at, result.resolved_at)[ok]
        status = (
            np.where(withdrawn[ok], CANCELLED, COMPLETED).astype(object) if withdrawn.any() else COMPLETED
        )
        answered = who_answered(ops, result, ok, self.config.input_max_members)
        self._force_complete(done, rows, status, at, result.matched[ok], result.progress[ok], answered)

    def _on_expiration(self, expired: np.ndarray) -> None:
        """The timer fired for these operations (sorted, distinct): expired at their deadline."""
        rows = self.t.pending.rows(expired)
        if "ohash" not in rows:
            rows = rows.assign(ohash=self.t.pending.ohash(expired))
        result = self._evaluate(expired, rows).result
        # a stub counts nothing: the cross-shard group says whether its events are used
        stub = rows["stub"]
        counted = result.used if not stub.any() else result.used & ~among(result.handle, expired[stub])
        counted = result.eseq[counted]
        self.t.mark_used(counted)
        answered = who_answered(rows, result, ~stub, self.config.input_max_members)
        self._force_complete(
            expired, rows, EXPIRED, rows["deadline"], result.matched, result.progress, answered
        )

    def _force_complete(
        self,
        handles: np.ndarray,
        rows: Rows,
        status: str | np.ndarray,
        resolved_at: np.ndarray,
        matched: np.ndarray,
        reached: np.ndarray,
        answered: Answered,
    ) -> None:
        """Kafka's ``forceComplete``: report the operations (stubs not: ``answered`` is who
        answered the others), then ``purge`` them."""
        real = ~rows["stub"]
        warn_at = rows["warn_at"]
        late = real & (warn_at <= resolved_at) & ~self._warned(handles, warn_at)
        if late.any():  # pending at its warning's time, resolved before the watermark got there
            self._warn(rows.where(late))
        if real.any():
            resolved = rows.assign(resolved_at=resolved_at, matched=matched, reached=reached)
            self._on_complete(
                resolved.where(real), status if isinstance(status, str) else status[real], answered
            )
        self._purge(handles, rows)

    def _on_complete(self, rows: Rows, status: str | np.ndarray, answered: Answered) -> None:
        rows = self.t.pending.with_keys(rows)  # still pending: ``purge`` follows
        op_ts, resolved_at = rows["ts"], rows["resolved_at"].astype(np.int64, copy=False)
        columns = {
            "op_id": rows["op_id"],
            "keys": rows["keys"],
            "status": status,
            "op_ts": op_ts,
            "deadline": rows["deadline"],
            "resolved_at": resolved_at,
            "latency_ms": resolved_at - op_ts,
            "matched_events": rows["matched"].astype(np.int64, copy=False),
            "progress": rows["reached"].astype(float, copy=False),
            "condition": CONDITION_NAMES[rows["cond"]],
            "target": rows["target"],
            "payload": rows["payload"],
            "reported": answered.reported,
            "missing": answered.missing,
            "batch_id": np.int64(self.batch_id),
        }
        self.outcomes.append(Rows(columns, len(rows)))

    def _warned(self, handles: np.ndarray, warn_at: np.ndarray) -> np.ndarray:
        """Per operation: was its warning written (the module docstring)?"""
        return (handles < self._warn_from) & (warn_at <= self.t.wheel.current_time_ms)

    def _warn(self, rows: Rows) -> None:
        """Warn these operations (sorted by handle, stubs dropped): their progress and who
        answered over the events before ``warn_at``, as if the watermark stood there."""
        rows = self.t.pending.with_keys(rows.where(~rows["stub"]))
        warn_at = rows["warn_at"].astype(np.int64)
        result = self._evaluate(rows["handle"], rows, before=warn_at).result
        answered = who_answered(rows, result, None, self.config.input_max_members)
        columns = {
            "op_id": rows["op_id"],
            "keys": rows["keys"],
            "deadline": rows["deadline"],
            "warned_at": warn_at,
            "progress": result.progress.astype(float, copy=False),
            "reported": answered.reported,
            "missing": answered.missing,
            "payload": rows["payload"],
            "batch_id": np.int64(self.batch_id),
        }
        self.warnings.append(Rows(columns, len(rows)))

    def _cancel(self, handles: np.ndarray, rows: Rows) -> None:
        """Operations resolved before their deadline leave the timer; their windows are kept."""
        timed = handles  # those on the wheel
        if self._unscheduled_from is not None:
            timed = timed[timed < self._unscheduled_from]
        if self.t.due.size:
            timed = timed[~isin(timed, self.t.due)]
            self.t.due = self.t.due[~among(self.t.due, handles)]
        self.t.wheel.cancel(timed)
        watch = self.t.pending.watch_rows(handles, ["hash", "handle"])
        at = np.searchsorted(rows["handle"], watch["handle"])
        real = ~rows["stub"][at]
        if real.any():
            ohash = rows["ohash"]
            at = at[real]
            self.t.windows.add(watch["hash"][real], ohash[at], rows["ts"][at], rows["deadline"][at])

    def _purge(self, handles: np.ndarray, rows: Rows) -> None:
        """Kafka's ``purge``: resolved operations leave every table; their op_ids are remembered."""
        self.changes.removed(handles)
        self.t.pending.remove(handles)
        if len(self.t.matches):
            self.t.matches = self.t.matches.where(~among(self.t.matches["handle"], handles))
        # a stub's op_id belongs to its original, which remembers it
        real = rows.where(~rows["stub"])
        if len(real):
            resolved = dedup.resolved_rows(
                real["op_id"],
                real["deadline"],
                self.t.watermark,
                self.config.dedup_retention_ms,
                real["ohash"] if "ohash" in real else None,
            )
            self.changes.resolved(resolved)
            self.t.resolved.add(resolved)

    # -- internals -----------------------------------------------------------------------------

    def _add_matches(self, pairs: Rows, ops: Rows | None = None) -> tuple[np.ndarray, Rows]:
        """Keep the pairs inside their operation's window as matches; return the touched
        handles and the pairs' operations' rows (``ops``, if the caller has them)."""
        at = None
        if ops is None:  # numbers only unless the check reads the op_ids (targeted) or members
            handles, at = distinct_at(pairs["handle"])
            ops = self.t.pending.rows(handles, text=False)
            if "op_id" not in ops and (present(pairs["op_id"]).any() or watchers.needs_members(ops)):
                ops = self.t.pending.rows(handles)
        new = watchers.matches_in_window(ops, pairs, at)
        if len(new) == 0:
            return _NO_HANDLES, ops
        self.t.matches = self.t.matches.stack(new)
        return distinct(new["handle"]), ops

    def _evaluate(self, handles: np.ndarray, ops: Rows, before: np.ndarray | None = None) -> Decision:
        """``cancels.decide`` over the operations' matches (``before``: per operation, those
        with an earlier event time only)."""
        matches = self.t.matches
        if len(matches):
            matches = matches.where(among(matches["handle"], handles))
        if before is not None and len(matches):
            matches = matches.where(matches["ts"] < before[np.searchsorted(handles, matches["handle"])])
        watch = None
        if (ops["cond"] == OFFSET).any():
            watch = self.t.pending.watch_rows(handles, ["handle", "hash", "progress_at_watch"])
        return decide(ops, matches, watch)
