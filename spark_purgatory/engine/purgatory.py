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
* ``process(ops, events, watermark_ms=...)`` does all of it in the right order: the batch's
  events are buffered and matched first, its operations registered against every buffered
  event, and each operation touched decided once, against all of them (so an operation's
  outcome does not depend on whether its events came before it or with it); then it expires
  what the watermark reached, finalises the events the watermark passed (``progress``; an
  unmatched one's reason from the completed operations' windows, ``windows``), and returns
  the rows for the ``outcomes``,
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
of them is the rows its batch touches (``Pending.rows``).

**No pandas inside a call.**  A call works on ``rows.Rows`` (named numpy columns): the rows
it touches, its matches and outcomes, and the small tables (``matches``, buffered ``events``
with their keys' hashes, ``relayed``).  pandas stays at the edges: ``batch.admit`` takes the
host's frames, ``batch.result`` builds the returned ones, ``tables()`` / ``load_tables``
convert for the state layer (``snapshot``).  Read accessors: ``pending_operations()``, ``tables()``.

**One set of tables.**  A shard holds one ``snapshot.LiveTables``, handed to the two hand-off
protocols as functions of it (``relay_tables``, ``registry.settle``): no mixin, no copy.

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
from ..contract import COMPLETED, EXPIRED, OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from . import dedup, memory, registry, relay_tables, watchers
from .arrays import among, distinct, hash_strings, isin
from .batch import BatchResult, admit, result
from .collector import collector_paused
from .conditions import CONDITION_NAMES, OFFSET, Evaluation, evaluate, may_hold_unmatched
from .finalise import finalise_events, in_window
from .frames import concat
from .rows import Rows
from .snapshot import LiveTables, forward, live_from, plain
from .tables import EVENTS, I64_MIN, VERDICTS, ChangeLog, Changes, ShardTables, ops_rows
from .wheel import TimingWheel

__all__ = ["BatchResult", "Purgatory"]

#: the buffered events as held: ``EVENTS`` and each key's 64-bit hash
_EVENTS_HELD = {**EVENTS, "khash": "uint64"}
_NO_HANDLES = np.empty(0, dtype=np.int64)


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

    def __init__(self, config: PurgatoryConfig | None = None, *, start_ms: int = I64_MIN) -> None:
        self.config = config or PurgatoryConfig()
        #: the host's shard number, kept with the state (the Spark host checks it on load)
        self.shard: int | None = None
        #: what the state layer keeps with this shard between saves; the engine never reads it
        self.lineage: Any = None
        #: the host's, kept with the state: the last micro-batch whose relays this shard has
        #: received (the cross-shard group's; ``relay``)
        self.relays_through: int = -1
        #: the host's, kept with the state: the micro-batch whose call parked the operations
        #: parked now, whose verdicts the next call receives (``registry``)
        self.parked_in: int = -1
        self._changes = ChangeLog()  # outlives every load: the state layer takes from it
        tables = ShardTables.empty()
        tables.watermark = int(start_ms)
        tick, size = self.config.tick_ms, self.config.wheel_size
        tables.wheel = TimingWheel(tick, size, max(start_ms, 0), fresh_ids=True)
        self.load_tables(tables)
        self._outcomes: list[Rows] = []
        self._batch_id = 0

    # -- sizes (for metrics and tests) ---------------------------------------------------------

    @property
    def watermark(self) -> int:
        return self._t.watermark

    @property
    def pending(self) -> int:
        """Operations waiting for their condition or their deadline, each counted once (Kafka's
        ``delayed``): a cross-shard operation counts in the cross-shard group, never in the
        shards where its stubs watch its keys (``stubs``)."""
        return len(self._t.pending) - self._t.pending.stubs

    @property
    def stubs(self) -> int:
        """Stubs held here: watchers of cross-shard operations, which live until their
        operation's deadline, also after it completed (``relay``); not ``pending``."""
        return self._t.pending.stubs

    @property
    def watched(self) -> int:
        """Watcher entries, one per (operation, key) (Kafka's ``watched``)."""
        return self._t.pending.watched

    @property
    def buffered_events(self) -> int:
        return len(self._t.events)

    @property
    def retained_keys(self) -> int:
        return len(self._t.keys)

    @property
    def config(self) -> PurgatoryConfig:
        return self._config

    @config.setter
    def config(self, config: PurgatoryConfig) -> None:
        """A loaded state may get another config (``load_state``): the key table follows."""
        self._config = config
        if hasattr(self, "_t"):
            self._t.keys.retention_ms = config.progress_retention_ms

    @property
    def parked(self) -> int:
        """Operations parked here until their registry's verdict (``registry``)."""
        return len(self._t.parked)

    @property
    def awaited_notices(self) -> int:
        """Relayed pairs whose event's notice the cross-shard group still waits for (``relay``)."""
        return len(self._t.relayed)

    def next_expiration(self) -> int:
        """Earliest pending deadline or buffered event's time past which the watermark must
        move (for the GroupState timeout), ``NO_EXPIRATION`` if none."""
        return self._t.next_expiration()

    def next_wakeup(self) -> int:
        """When this shard next has work even without input (``NO_EXPIRATION`` if never)."""
        return self._t.next_wakeup()

    def latest_deadline(self) -> int | None:
        """The latest deadline of a pending operation (None if none): one pass over the
        deadline column, no row copied out (the end of input waits for it)."""
        return self._t.pending.latest_deadline()

    def is_empty(self) -> bool:
        """Nothing pending, buffered or retained: the state can be dropped."""
        return self._t.is_empty()

    # -- what a state layer reads and gives back (``snapshot``) --------------------------------

    def tables(self, *, arrow: bool = False, since: int | None = None) -> ShardTables:
        """The whole state as plain tables (``snapshot.plain``: frames, or Arrow tables with
        ``arrow``; ``since``: only what was registered from that handle on)."""
        return plain(self._t, arrow=arrow, since=since)

    def load_tables(self, tables: ShardTables) -> None:
        """Replace the whole state by ``tables`` (``snapshot.live_from``); the change log
        restarts: every row counts as added."""
        self._t: LiveTables = live_from(tables, self.config, self._changes)
        self._unscheduled_from: int | None = None  # handles from here on wait for the wheel

    def forward(
        self, to: ShardTables, added: tuple, removed: np.ndarray, resolved: pd.DataFrame, **windows: Any
    ) -> bool:
        """Bring the state forward to ``to`` by what changed since (``snapshot.forward``; its
        ``windows_added``); False: it could not, and the state must be loaded whole."""
        return forward(self._t, to, added, removed, resolved, self.config, **windows)

    def windows_added(self, mark: int | None = None) -> tuple[pd.DataFrame | None, int]:
        """The completed operations' windows remembered since ``mark`` (a mark this returned
        before; None: none asked), in the order they came, and the mark now."""
        windows = self._t.windows
        return (None if mark is None else windows.added(mark)), windows.mark

    def buffered(self) -> pd.DataFrame:
        """The buffered events (``tables.EVENTS``), in arrival order."""
        return self._t.events.to_frame(EVENTS)

    def take_changes(self) -> Changes:
        """What the big tables gained and lost since the last call (see ``tables.Changes``)."""
        return self._changes.take(self._t.next_handle, self._t.resolved.frame)

    def pending_operations(self) -> pd.DataFrame:
        """The pending operations (``tables.OPS`` columns), one row each, in handle order."""
        return self._t.pending.frames()[0]

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
        claims: pd.DataFrame | None = None,
        verdicts: pd.DataFrame | None = None,
        expire_to_ms: int | None = None,
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
            claims: other shards' claims of op_ids this shard is the registry of
                (``tables.CLAIMS``; ``registry``); validated operations may carry
                ``registry``, their op_id's registry shard: one other than ``shard`` parks
                the operation until its verdict.
            verdicts: the registries' verdicts on the operations parked here
                (``tables.VERDICTS``), received in the call after the one that parked them.
            expire_to_ms: where the watermark goes *after* this batch's rows are admitted
                (the operator's clock on a quiet stream, ``handoff.reaper``): the rows are
                judged ``late`` against ``watermark_ms``, then the operations due by
                ``expire_to_ms`` expire.  The cross-shard group takes it one call later:
                the relays of this batch's events come in its next call, and must be
                applied before the expiries they could prevent.  A home with operations
                parked for their verdicts expires its registered operations at once but
                reports its events unmatched only up to ``watermark_ms``: a parked
                operation registered in the next call may still count them.

        The result's ``verdicts`` answer ``claims``.  Its ``relay`` holds what this shard's
        stubs relay (``relay.outgoing``) and
        the notices of the events they matched that became final (``relay.notices``).
        """
        # a container per reported row (its keys' list): the collector would walk them all,
        # alive, every 700 (``collector``); the Spark host pauses it around the whole shard call
        with collector_paused():
            self._batch_id = int(batch_id)
            wm = max(int(watermark_ms), self._t.watermark)
            self._outcomes = []
            new_from, new_eseq_from = self._t.next_handle, self._t.next_eseq
            self._t.forget_resolved(wm)
            ops, evs, rejected = admit(
                operations,
                events,
                wm,
                validated,
                self.config.max_timeout_ms,
                self._t.resolved,
                self._t.pending,
                self.config.input_limits,
            )

            ops, released, refused, answers = registry.settle(
                self._t, self.shard, self.config, ops, claims, verdicts, wm
            )
            rejected += refused
            # parked operations the registry released arrived earlier: registered before this call's
            # events and relays, decided with this call's operations (``registry``)
            early = self._watch_operations(released)
            noticed = relay_tables.receive(
                self._t, None if relayed is None else Rows.of(relayed), self._batch_id, self._try_complete
            )
            # the batch's events are buffered and matched before its operations are registered, and
            # every operation touched is decided once, against all of them: an operation is decided
            # against every event of its micro-batch and of the buffer, in event time
            touched = self._watch_events(evs)
            early = early[self._t.pending.contains(early)]  # the relay may have completed some
            self._try_complete(np.concatenate([early, touched, self._watch_operations(ops)]))
            of_stubs = relay_tables.of_stubs(self._t)
            handed_on = relay_tables.outgoing(
                self._t, new_from, new_eseq_from, of_stubs, bool(ops["stub"].any())
            )
            # the cross-shard group: operations due on arrival wait one call for their stubs' relay
            held = self._t.due[self._t.due >= new_from] if relayed is not None else _NO_HANDLES
            if held.size:
                self._t.due = self._t.due[self._t.due < new_from]
            paired = self._t.matches["eseq"][of_stubs & in_window(self._t)]
            until = wm if expire_to_ms is None else max(wm, int(expire_to_ms))
            later = until > wm and relayed is not None  # the cross-shard group (see expire_to_ms)
            waiting = until > wm and self.parked > 0  # events wait for the parked (see expire_to_ms)
            self.advance(wm if later else until)
            if held.size:
                self._t.due = np.concatenate([self._t.due, held])
            reach = wm if later or waiting else until
            unmatched, notes = finalise_events(self._t, reach, paired, self._batch_id)
            self._t.retire(reach)
            if later:  # the next call admits at ``until`` and expires there, after its hand-off
                self._t.watermark = until
            outcomes, self._outcomes = self._outcomes, []
            self._t.pending.forget_recent()
            if memory.due(sum(0 if f is None else len(f) for f in (operations, events, relayed))):
                memory.release()  # bulk work: its temporaries back to the system
            out = result(outcomes, noticed.stack(unmatched), rejected, handed_on.stack(notes), self._batch_id)
            out.verdicts = answers.to_frame(VERDICTS)
            return out

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

    def try_complete_else_watch(self, ops: Rows) -> None:
        """Register admitted operations (``batch.admit``); complete at once those already
        satisfied by the buffered events or their keys' progress."""
        self._try_complete(self._watch_operations(ops))
        self._t.pending.forget_recent()
        self._schedule()

    def check_and_complete(self, events: Rows) -> None:
        """Buffer a batch of admitted events and complete the operations they satisfy."""
        self._try_complete(self._watch_events(events))

    def _watch_operations(self, ops: Rows) -> np.ndarray:
        """Register admitted operations, matched against every buffered event (untargeted ones
        by key, targeted by op_id); return the handles of those that may hold now."""
        if len(ops) == 0:
            return _NO_HANDLES
        new_ops = ops_rows(ops, self._t.next_handle)
        self._t.next_handle += len(new_ops)
        handles = new_ops["handle"]
        watch = watchers.watch_rows(new_ops, self._t.keys)
        self._t.pending.add(new_ops, watch, recent=True)

        # the wheel takes them when time next moves (``_schedule``): those resolved before
        # never enter it, nor leave it by a tombstone
        already = new_ops["deadline"] <= self._t.wheel.current_time_ms
        if already.any():
            self._t.due = np.concatenate([self._t.due, handles[already]])
        if self._unscheduled_from is None:
            self._unscheduled_from = int(handles[0])

        touched = _NO_HANDLES
        if len(self._t.events):
            pairs = watchers.buffered_pairs(new_ops, new_ops["ohash"], watch, self._t.events)
            if len(pairs):
                touched = self._add_matches(pairs, new_ops)[0]
        ready = may_hold_unmatched(new_ops["cond"], new_ops["target"]) | among(handles, touched)
        return handles[ready & ~new_ops["stub"]]  # stubs never complete

    def _watch_events(self, events: Rows) -> np.ndarray:
        """Buffer a batch of admitted events and match them to the pending operations' watchers;
        return the handles of the operations they touched."""
        n = len(events)
        if n == 0:
            return _NO_HANDLES
        eseq = np.arange(self._t.next_eseq, self._t.next_eseq + n, dtype=np.int64)
        self._t.next_eseq += n
        keys = events["key"].astype(object, copy=False)
        khash = hash_strings(keys)  # once: the watchers' lookup, the matches and finalising need it
        fields = {c: events[c] for c in ("ts", "op_id", "source", "value", "replica")}
        evs = Rows({"eseq": eseq, "key": keys, **fields, "used": False, "khash": khash}, n)
        evs = evs.cast(_EVENTS_HELD, copy=True)  # buffered: never the caller's arrays
        self._t.events = self._t.events.stack(evs)
        if self._t.pending.watched == 0:
            return _NO_HANDLES
        op_ids = evs["op_id"]
        targeted = pd.notna(op_ids)
        # untargeted events: every watcher of the key (Kafka's checkAndComplete(key))
        untargeted = np.flatnonzero(~targeted)
        ev_idx, handles = self._t.pending.watchers_of(keys[untargeted], khash[untargeted])
        idx = untargeted[ev_idx]
        if targeted.any():
            # targeted events: straight to their operation, if it is pending and watches the key
            targeted = np.flatnonzero(targeted)
            probe, t_handles = self._t.pending.by_op_id(op_ids[targeted])
            t_idx = targeted[probe]
            hit = watchers.watching(self._t.pending.rows(t_handles, keys=True), t_handles, keys[t_idx])
            idx, handles = np.concatenate([idx, t_idx[hit]]), np.concatenate([handles, t_handles[hit]])
        if idx.size == 0:
            return _NO_HANDLES
        pairs = {c: evs[c][idx] for c in watchers.PAIR[1:]}
        return self._add_matches(Rows({"handle": handles, **pairs}, idx.size))[0]

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark; expire the operations whose deadline it reached
        (the timer's expiry: ``_on_expiration``, which force-completes them)."""
        self._schedule()
        self._t.watermark = max(int(watermark_ms), self._t.watermark)
        expired = self._t.wheel.advance(self._t.watermark)
        if self._t.due.size:
            expired = np.concatenate([self._t.due, expired])
            self._t.due = _NO_HANDLES
        if expired.size == 0:
            return
        expired = distinct(expired)
        expired = expired[self._t.pending.contains(expired)]
        if expired.size:
            self._on_expiration(expired)

    def _schedule(self) -> None:
        """Put the operations registered since the wheel last moved and still pending on the
        wheel (those already due at registration wait in ``due``)."""
        if self._unscheduled_from is None:
            return
        handles, deadlines = self._t.pending.deadlines(since=self._unscheduled_from)
        self._unscheduled_from = None
        timed = deadlines > self._t.wheel.current_time_ms
        self._t.wheel.add(handles[timed], deadlines[timed])

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``: drop the pending operations watching any of ``keys``.

        No outcome is emitted for them (the caller decided their fate, e.g. a deleted
        partition); their op_ids still count as resolved for duplicate detection.  Returns
        the cancelled op_ids.
        """
        keys_array = np.asarray(keys, dtype=object)
        handles = distinct(self._t.pending.watchers_of(keys_array, hash_strings(keys_array))[1])
        if handles.size == 0:
            return []
        rows = self._t.pending.rows(handles)
        if "ohash" not in rows:
            rows = rows.assign(ohash=hash_strings(rows["op_id"].astype(object, copy=False)))
        self._cancel(handles, rows)
        self._purge(handles, rows)
        return rows["op_id"].tolist()

    def _try_complete(self, handles: np.ndarray, ops: Rows | None = None) -> None:
        """Kafka's ``tryComplete`` for these operations: force-complete those whose condition
        holds, at the event time it became true.  ``ops``: their rows, if the caller has them
        (then ``handles`` are theirs: sorted, distinct, no stubs)."""
        if handles.size == 0:
            return
        if ops is None:
            handles = distinct(handles)
            handles = handles[~self._t.pending.stub(handles)]  # stubs never complete
            if handles.size == 0:
                return
            ops = self._t.pending.rows(handles)
        result = self._evaluate(handles, ops)
        ok = result.satisfied
        if not ok.any():
            return
        done = handles[ok]
        self._t.mark_used(result.eseq[result.used & among(result.handle, done)])
        rows = ops.where(ok)
        if "ohash" not in rows:  # once, for the windows (``_cancel``) and the dedup (``_purge``)
            rows = rows.assign(ohash=hash_strings(rows["op_id"].astype(object, copy=False)))
        self._cancel(done, rows)
        at, matched, reached = result.resolved_at[ok], result.matched[ok], result.progress[ok]
        self._force_complete(done, rows, COMPLETED, at, matched, reached)

    def _on_expiration(self, expired: np.ndarray) -> None:
        """The timer fired for these operations (sorted, distinct): report them expired at
        their deadline, with the progress they made."""
        rows = self._t.pending.rows(expired)
        result = self._evaluate(expired, rows)
        # a stub counts nothing: whether its events are used is the cross-shard group's to say
        stub = rows["stub"]
        counted = result.used if not stub.any() else result.used & ~among(result.handle, expired[stub])
        counted = result.eseq[counted]
        self._t.mark_used(counted)
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
        rows = self._t.pending.with_keys(rows)  # still pending: ``purge`` follows
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
            "batch_id": np.int64(self._batch_id),
        }
        self._outcomes.append(Rows(columns, len(rows)))

    def _cancel(self, handles: np.ndarray, rows: Rows) -> None:
        """Operations resolved before their deadline leave the timer; the events of their
        windows that nothing counts are ``after_resolution`` from now on (``windows``)."""
        timed = handles  # on the wheel: neither due at registration nor waiting (``_schedule``)
        if self._unscheduled_from is not None:
            timed = timed[timed < self._unscheduled_from]
        if self._t.due.size:  # added already past their deadline: never on the wheel
            timed = timed[~isin(timed, self._t.due)]
            self._t.due = self._t.due[~among(self._t.due, handles)]
        self._t.wheel.cancel(timed)
        watch = self._t.pending.watch_rows(handles, ["hash", "handle"])  # in handle order, as rows
        at = np.searchsorted(rows["handle"], watch["handle"])
        real = ~rows["stub"][at]  # a stub's events are its operation's to report (``relay``)
        if real.any():
            ohash = rows["ohash"]  # ``_try_complete`` and ``cancel_for_key`` give it
            at = at[real]
            self._t.windows.add(watch["hash"][real], ohash[at], rows["ts"][at], rows["deadline"][at])

    def _purge(self, handles: np.ndarray, rows: Rows) -> None:
        """Kafka's ``purge``: resolved operations (``handles``, sorted; ``rows``, theirs) leave
        the watchers, the match table and the pending op_ids at once; their op_ids are
        remembered for duplicate detection."""
        self._changes.removed(handles)
        self._t.pending.remove(handles)
        if len(self._t.matches):
            self._t.matches = self._t.matches.where(~among(self._t.matches["handle"], handles))
        # a stub's op_id belongs to its original, which remembers it
        real = rows.where(~rows["stub"])
        if len(real):
            resolved = dedup.resolved_rows(
                real["op_id"],
                real["deadline"],
                self._t.watermark,
                self.config.dedup_retention_ms,
                real["ohash"] if "ohash" in real else None,  # new operations carry theirs
            )
            self._changes.resolved(resolved)
            self._t.resolved.add(resolved)

    # -- internals -----------------------------------------------------------------------------

    def _add_matches(self, pairs: Rows, ops: Rows | None = None) -> tuple[np.ndarray, Rows]:
        """Keep the (event, operation) pairs (``watchers.PAIR``) inside the operation's window;
        return the touched handles (sorted) and the rows of the pairs' operations (``ops``, if
        the caller has them: rows of at least those operations, sorted by handle)."""
        if ops is None:
            ops = self._t.pending.rows(pairs["handle"])
        new = watchers.matches_in_window(ops, pairs)
        if len(new) == 0:
            return _NO_HANDLES, ops
        self._t.matches = self._t.matches.stack(new)
        return distinct(new["handle"]), ops

    def _evaluate(self, handles: np.ndarray, ops: Rows) -> Evaluation:
        """``conditions.evaluate`` for these (sorted) handles, whose rows are ``ops``."""
        matches = self._t.matches
        if len(matches):
            matches = matches.where(among(matches["handle"], handles))
        watch = None
        if (ops["cond"] == OFFSET).any():
            watch = self._t.pending.watch_rows(handles, ["handle", "hash", "progress_at_watch"])
        return evaluate(ops, matches, watch)
