"""Kafka's delayed-operation purgatory operations, batched, over one shard's live tables.

Kafka parks a ``DelayedOperation`` that cannot complete yet in a purgatory: it is watched under
its keys (``Watchers``) and scheduled on a timing wheel.  ``tryCompleteElseWatch`` completes an
operation at once if it can; ``checkAndComplete(key)`` re-tries the operations watching a key
when something happens to it; the timer's expiry calls ``forceComplete`` and then
``onExpiration``; ``forceComplete`` calls ``onComplete`` exactly once; ``purge`` drops
completed operations from the watcher lists.  ``DelayedOperations`` keeps that vocabulary, but
every step takes a whole micro-batch of operations or events at once:

* tryCompleteElseWatch and checkAndComplete, split in their two halves so a call decides
  each operation once: ``watch_operations(ops)`` registers operations, each matched against
  the events still buffered (events may arrive before their operation) and the key's
  ``offset`` progress; ``watch_events(events)`` buffers events and matches them to the
  watchers (``watchers``); ``try_complete(handles)`` then completes the operations touched
  whose condition holds (``conditions.evaluate``).
* ``advance(watermark)`` moves the timing wheel to the watermark; operations whose deadline
  it reached expire (``_on_expiration``).
* ``_force_complete`` resolves operations: ``_on_complete`` reports each one, ``_purge``
  then removes it from every table, so nothing can report it twice.

The order a micro-batch runs them in is the call's (``purgatory.Purgatory.process``).  A key
or op_id is looked up by its 64-bit hash, computed once per batch, and every candidate is
confirmed on the strings.  What a step reads of the big tables is the rows its batch touches
(``Pending.rows``), as ``rows.Rows``: no pandas here.

Invariants: a resolved operation is reported once (``_on_complete``, stubs never) and leaves
nothing behind in the watchers, the wheel or the match table (``_purge``); its op_id is
remembered for duplicate detection (``dedup``); every removal is in the change log.
"""

from __future__ import annotations

import numpy as np

from ..config import PurgatoryConfig
from ..contract import COMPLETED, EXPIRED
from . import dedup, watchers
from .arrays import among, distinct, distinct_at, hash_strings, isin, present
from .conditions import CONDITION_NAMES, OFFSET, Evaluation, evaluate, may_hold_unmatched
from .rows import Rows
from .snapshot import LiveTables
from .tables import EVENTS, ChangeLog, ops_rows

__all__ = ["DelayedOperations"]

#: the buffered events as held: ``EVENTS`` and each key's 64-bit hash
_EVENTS_HELD = {**EVENTS, "khash": "uint64"}
_NO_HANDLES = np.empty(0, dtype=np.int64)


class DelayedOperations:
    """Kafka's operations over one shard's live tables (``t``), batched.

    ``outcomes`` collects the outcome rows (``_on_complete``) until the call takes them;
    ``batch_id`` is written to each.  ``changes`` outlives every load of the tables: the state
    layer takes from it (``Purgatory.take_changes``).
    """

    def __init__(self, t: LiveTables, config: PurgatoryConfig, changes: ChangeLog) -> None:
        self.config = config
        self.changes = changes
        self.outcomes: list[Rows] = []
        self.batch_id = 0
        self.load(t)

    def load(self, t: LiveTables) -> None:
        """Work on ``t`` from now on (a state loaded whole)."""
        self.t = t
        self._unscheduled_from: int | None = None  # handles from here on wait for the wheel

    def take_outcomes(self) -> list[Rows]:
        """The outcome rows reported since the last take."""
        outcomes, self.outcomes = self.outcomes, []
        return outcomes

    # -- Kafka's operations, batched -----------------------------------------------------------

    def watch_operations(self, ops: Rows, due_by: int | None = None) -> np.ndarray:
        """Register admitted operations, matched against every buffered event (untargeted ones
        by key, targeted by op_id); return the handles of those that may hold now.
        ``due_by``: the call's watermark, when operations due by it must wait in ``due`` (the
        cross-shard group holds them, ``Purgatory.process``) although the wheel is behind it."""
        if len(ops) == 0:
            return _NO_HANDLES
        new_ops = ops_rows(ops, self.t.next_handle)
        self.t.next_handle += len(new_ops)
        handles = new_ops["handle"]
        watch = watchers.watch_rows(new_ops, self.t.keys)
        self.t.pending.add(new_ops, watch, recent=True)

        # the wheel takes them when time next moves (``schedule``): those resolved before
        # never enter it, nor leave it by a tombstone
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
        """Buffer a batch of admitted events and match them to the pending operations' watchers;
        return the handles of the operations they touched."""
        n = len(events)
        if n == 0:
            return _NO_HANDLES
        eseq = np.arange(self.t.next_eseq, self.t.next_eseq + n, dtype=np.int64)
        self.t.next_eseq += n
        keys = events["key"].astype(object, copy=False)
        khash = hash_strings(keys)  # once: the watchers' lookup, the matches and finalising need it
        fields = {c: events[c] for c in ("ts", "op_id", "source", "value", "replica")}
        evs = Rows({"eseq": eseq, "key": keys, **fields, "used": False, "khash": khash}, n)
        # buffered: never the caller's arrays (``stack`` onto buffered events copies them anyway)
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
        """Move the wheel to the watermark; expire the operations whose deadline it reached
        (the timer's expiry: ``_on_expiration``, which force-completes them)."""
        self.schedule()
        self.t.watermark = max(int(watermark_ms), self.t.watermark)
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
        """Put the operations registered since the wheel last moved and still pending on the
        wheel (those already due at registration wait in ``due``)."""
        if self._unscheduled_from is None:
            return
        handles, deadlines = self.t.pending.deadlines(since=self._unscheduled_from)
        self._unscheduled_from = None
        timed = deadlines > self.t.wheel.current_time_ms
        if self.t.due.size:  # due at registration, ahead of the wheel (``due_by``): never on it
            timed &= ~isin(handles, self.t.due)
        self.t.wheel.add(handles[timed], deadlines[timed])

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``: drop the pending operations watching any of ``keys``.

        No outcome is emitted for them (the caller decided their fate, e.g. a deleted
        partition); their op_ids still count as resolved for duplicate detection.  Returns
        the cancelled op_ids.
        """
        keys_array = np.asarray(keys, dtype=object)
        handles = distinct(self.t.pending.watchers_of(keys_array, hash_strings(keys_array))[1])
        if handles.size == 0:
            return []
        rows = self.t.pending.rows(handles)
        if "ohash" not in rows:
            rows = rows.assign(ohash=hash_strings(rows["op_id"].astype(object, copy=False)))
        self._cancel(handles, rows)
        self._purge(handles, rows)
        return rows["op_id"].tolist()

    def try_complete(self, handles: np.ndarray, ops: Rows | None = None) -> None:
        """Kafka's ``tryComplete`` for these operations: force-complete those whose condition
        holds, at the event time it became true.  ``ops``: their rows, if the caller has them
        (then ``handles`` are theirs: sorted, distinct, no stubs)."""
        if handles.size == 0:
            return
        if ops is None:
            handles = distinct(handles)
            handles = handles[~self.t.pending.stub(handles)]  # stubs never complete
            if handles.size == 0:
                return
            ops = self.t.pending.rows(handles)
        result = self._evaluate(handles, ops)
        ok = result.satisfied
        if not ok.any():
            return
        done = handles[ok]
        self.t.mark_used(result.eseq[result.used & among(result.handle, done)])
        rows = ops.where(ok)
        if "ohash" not in rows:  # once, for the windows (``_cancel``) and the dedup (``_purge``)
            rows = rows.assign(ohash=self.t.pending.ohash(done))
        self._cancel(done, rows)
        at, matched, reached = result.resolved_at[ok], result.matched[ok], result.progress[ok]
        self._force_complete(done, rows, COMPLETED, at, matched, reached)

    def _on_expiration(self, expired: np.ndarray) -> None:
        """The timer fired for these operations (sorted, distinct): report them expired at
        their deadline, with the progress they made."""
        rows = self.t.pending.rows(expired)
        if "ohash" not in rows:  # for the dedup (``_purge``): no op_id hashed again
            rows = rows.assign(ohash=self.t.pending.ohash(expired))
        result = self._evaluate(expired, rows)
        # a stub counts nothing: whether its events are used is the cross-shard group's to say
        stub = rows["stub"]
        counted = result.used if not stub.any() else result.used & ~among(result.handle, expired[stub])
        counted = result.eseq[counted]
        self.t.mark_used(counted)
        self._force_complete(expired, rows, EXPIRED, rows["deadline"], result.matched, result.progress)

    def _force_complete(
        self,
        handles: np.ndarray,
        rows: Rows,
        status: str,
        resolved_at: np.ndarray,
        matched: np.ndarray,
        reached: np.ndarray,
    ) -> None:
        """Kafka's ``forceComplete``: ``on_complete`` reports the operations (``rows``, in
        handle order; stubs report nothing), then ``purge`` removes them from every table, so
        each is reported exactly once."""
        real = ~rows["stub"]
        if real.any():
            resolved = rows.assign(resolved_at=resolved_at, matched=matched, reached=reached)
            self._on_complete(resolved.where(real), status)
        self._purge(handles, rows)

    def _on_complete(self, rows: Rows, status: str) -> None:
        """Kafka's ``onComplete``: the outcome rows of resolved operations (``OUTCOME_COLUMNS``);
        ``rows`` carry each one's ``resolved_at``, ``matched`` events and ``reached`` progress."""
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
            "batch_id": np.int64(self.batch_id),
        }
        self.outcomes.append(Rows(columns, len(rows)))

    def _cancel(self, handles: np.ndarray, rows: Rows) -> None:
        """Operations resolved before their deadline leave the timer; the events of their
        windows that nothing counts are ``after_resolution`` from now on (``windows``)."""
        timed = handles  # on the wheel: neither due at registration nor waiting (``schedule``)
        if self._unscheduled_from is not None:
            timed = timed[timed < self._unscheduled_from]
        if self.t.due.size:  # added already past their deadline: never on the wheel
            timed = timed[~isin(timed, self.t.due)]
            self.t.due = self.t.due[~among(self.t.due, handles)]
        self.t.wheel.cancel(timed)
        watch = self.t.pending.watch_rows(handles, ["hash", "handle"])  # in handle order, as rows
        at = np.searchsorted(rows["handle"], watch["handle"])
        real = ~rows["stub"][at]  # a stub's events are its operation's to report (``relay``)
        if real.any():
            ohash = rows["ohash"]  # ``_try_complete`` and ``cancel_for_key`` give it
            at = at[real]
            self.t.windows.add(watch["hash"][real], ohash[at], rows["ts"][at], rows["deadline"][at])

    def _purge(self, handles: np.ndarray, rows: Rows) -> None:
        """Kafka's ``purge``: resolved operations (``handles``, sorted; ``rows``, theirs) leave
        the watchers, the match table and the pending op_ids at once; their op_ids are
        remembered for duplicate detection."""
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
                real["ohash"] if "ohash" in real else None,  # new operations carry theirs
            )
            self.changes.resolved(resolved)
            self.t.resolved.add(resolved)

    # -- internals -----------------------------------------------------------------------------

    def _add_matches(self, pairs: Rows, ops: Rows | None = None) -> tuple[np.ndarray, Rows]:
        """Keep the (event, operation) pairs (``watchers.PAIR``) inside the operation's window;
        return the touched handles (sorted) and the rows of the pairs' operations (``ops``, if
        the caller has them: rows of at least those operations, sorted by handle; read here,
        their numbers at least, ``Pending.rows(..., text=False)``)."""
        at = None
        if ops is None:  # numbers only unless the check reads the op_ids (targeted) or members
            handles, at = distinct_at(pairs["handle"])  # one sort: the rows and each pair's row
            ops = self.t.pending.rows(handles, text=False)
            if "op_id" not in ops and (present(pairs["op_id"]).any() or watchers.needs_members(ops)):
                ops = self.t.pending.rows(handles)
        new = watchers.matches_in_window(ops, pairs, at)
        if len(new) == 0:
            return _NO_HANDLES, ops
        self.t.matches = self.t.matches.stack(new)
        return distinct(new["handle"]), ops

    def _evaluate(self, handles: np.ndarray, ops: Rows) -> Evaluation:
        """``conditions.evaluate`` for these (sorted) handles, whose rows are ``ops``."""
        matches = self.t.matches
        if len(matches):
            matches = matches.where(among(matches["handle"], handles))
        watch = None
        if (ops["cond"] == OFFSET).any():
            watch = self.t.pending.watch_rows(handles, ["handle", "hash", "progress_at_watch"])
        return evaluate(ops, matches, watch)
