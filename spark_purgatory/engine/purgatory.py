"""The per-shard purgatory: Kafka's DelayedOperationPurgatory for event time, on columns.

``Purgatory`` is a shard's engine as its host sees it: one call per micro-batch
(``process``), the sizes a host reports, and what a state layer reads and gives back.
Kafka's operations themselves, batched (watch and ``try_complete``, ``advance``,
``force_complete`` / ``on_complete``, ``purge``), are ``delayed``'s; ``process`` calls them
in named phases, each operation touched decided once against every event of the call and
the buffer (so its outcome does not depend on whether its events came before it or with it).

**Cost follows the batch, not the backlog.**  The tables that grow with the backlog are
updated in place, never rebuilt (``pending.Pending``, ``progress.KeyTable``,
``dedup.ResolvedTable``: columns with spare capacity, tombstones and hash indexes).  A call
works on ``rows.Rows`` (named numpy columns); pandas stays at the edges (``batch.admit``,
``batch.result``, ``tables()`` / ``load_tables`` for the state layer, ``snapshot``).  A shard
holds one ``snapshot.LiveTables``, handed to Kafka's operations and to the two hand-off
protocols (``relay_tables``, ``registry.settle``) as functions of it: no mixin, no copy.

Invariants: every valid operation gets exactly one outcome, ``completed`` in the batch that
makes its condition true or ``expired`` once the watermark reaches its deadline (never
earlier); a resolved operation leaves nothing behind in the watchers, the wheel or the
match table; every valid event is eventually either counted by an operation or reported in
``unmatched_events`` (an event a stub matched by the cross-shard group, on its notice:
``relay``).  The engine persists nothing: ``tables()`` and ``take_changes()`` let
a state layer (``spark_purgatory.state``) store it.  All times are epoch milliseconds (int64).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..contract import OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from . import memory, registry, relay_tables
from .batch import BatchResult, admit, result
from .collector import collector_paused
from .delayed import DelayedOperations
from .finalise import finalise_events, in_window
from .frames import concat
from .rows import Rows
from .snapshot import LiveTables, forward, live_from, plain
from .tables import EVENTS, I64_MIN, ChangeLog, Changes, ShardTables
from .wheel import TimingWheel

__all__ = ["BatchResult", "Purgatory"]

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
        self._delayed = DelayedOperations(
            live_from(tables, self.config, self._changes), self.config, self._changes
        )

    @property
    def _t(self) -> LiveTables:
        """The shard's live tables (``snapshot.LiveTables``), which Kafka's operations work on."""
        return self._delayed.t

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
        if hasattr(self, "_delayed"):
            self._delayed.config = config
            self._t.keys.retention_ms = config.progress_retention_ms

    @property
    def parked(self) -> int:
        """Operations parked here until their registry's verdict (``registry``)."""
        return len(self._t.parked)

    @property
    def held(self) -> int:
        """Operations due on arrival that the cross-shard group holds for one call, until
        the stubs' relay of their micro-batch is in (``process``): that call must come even
        when no shard relays and the watermark stalls (``handoff.wake``)."""
        return len(self._t.due)

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

    def tables(self, *, arrow: bool = False, since: int | None = None, small: bool = True) -> ShardTables:
        """The whole state as plain tables (``snapshot.plain``: frames, or Arrow tables with
        ``arrow``; ``since``: only what was registered from that handle on; ``small`` False:
        the big tables only)."""
        return plain(self._t, arrow=arrow, since=since, small=small)

    def load_tables(self, tables: ShardTables) -> None:
        """Replace the whole state by ``tables`` (``snapshot.live_from``); the change log
        restarts: every row counts as added."""
        self._delayed.load(live_from(tables, self.config, self._changes))

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
                count there but never report (their original does), and the
                ``batch.KEY_HINTS`` (``one_key``, ``n_members``) that spare a pass over lists.
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
                ``expire_to_ms`` expire, but where a hand-off still owes something (``_clock``).

        The result's ``verdicts`` answer ``claims``.  Its ``relay`` holds what this shard's
        stubs relay (``relay.outgoing``) and
        the notices of the events they matched that became final (``relay.notices``).
        """
        # a container per reported row (its keys' list): the collector would walk them all,
        # alive, every 700 (``collector``); the Spark host pauses it around the whole shard call
        with collector_paused():
            cross = relayed is not None  # the cross-shard group: it takes relays
            wm, added_from = self._begin(watermark_ms, batch_id)
            ops, evs, rejected = self._admit(operations, events, wm, validated)
            ops, released, refused, answers = registry.settle(
                self._t, self.shard, self.config, ops, claims, verdicts, wm
            )
            noticed = self._try_complete_else_watch(released, relayed, evs, ops, wm if cross else None)
            of_stubs = relay_tables.of_stubs(self._t)
            handed_on = relay_tables.outgoing(self._t, *added_from, of_stubs, bool(ops["stub"].any()))
            held = self._hold(added_from[0]) if cross else _NO_HANDLES
            paired = self._t.matches["eseq"][of_stubs & in_window(self._t)]
            clock = _clock(self._t, wm, expire_to_ms, of_stubs, cross=cross, parked=self.parked > 0)
            self._advance_clock(clock.expire, held)
            unmatched, notes = self._finalise(clock, paired)
            self._release_memory(operations, events, relayed)
            outcomes = self._delayed.take_outcomes()
            unmatched, relay = noticed.stack(unmatched), handed_on.stack(notes)
            return result(outcomes, unmatched, rejected + refused, relay, self._delayed.batch_id, answers)

    # -- the call's phases -----------------------------------------------------------------------

    def _begin(self, watermark_ms: int, batch_id: int) -> tuple[int, tuple[int, int]]:
        """The call's watermark (the engine's never moves back) and where what it adds begins
        (the next handle and event number)."""
        self._delayed.batch_id = int(batch_id)
        self._delayed.outcomes = []
        return max(int(watermark_ms), self._t.watermark), (self._t.next_handle, self._t.next_eseq)

    def _admit(
        self, operations: pd.DataFrame | None, events: pd.DataFrame | None, wm: int, validated: bool
    ) -> tuple[Rows, Rows, list[pd.DataFrame]]:
        """The call's rows as the engine takes them (``batch.admit``): late, duplicate and
        invalid rows rejected, against the op_ids remembered until ``wm``."""
        t, config = self._t, self.config
        t.forget_resolved(wm)
        limits, max_timeout_ms = config.input_limits, config.max_timeout_ms
        return admit(operations, events, wm, validated, max_timeout_ms, t.resolved, t.pending, limits)

    def _try_complete_else_watch(
        self, released: Rows, relayed: pd.DataFrame | None, evs: Rows, ops: Rows, due_by: int | None
    ) -> Rows:
        """Kafka's tryCompleteElseWatch for the call's operations and checkAndComplete for its
        events, decided once: everything is watched first (the operations the registry
        released, which arrived earlier; the relays, which may complete some of them; the
        events, matched to every watcher of their key; the new operations, matched to every
        buffered event), then each operation touched is tried once, against all of them.  So
        an operation's outcome does not depend on whether its events came before it or with
        it.  ``due_by``: the cross-shard group's watermark, by which an arriving operation is
        due on arrival (``_hold``).  Returns the relays' notices (``relay_tables.receive``)."""
        delayed = self._delayed
        early = delayed.watch_operations(released)
        relays = None if relayed is None else Rows.of(relayed)
        noticed = relay_tables.receive(self._t, relays, delayed.batch_id, delayed.try_complete)
        touched = delayed.watch_events(evs)
        early = early[self._t.pending.contains(early)]  # the relay may have completed some
        arriving = delayed.watch_operations(ops, due_by=due_by)
        delayed.try_complete(np.concatenate([early, touched, arriving]))
        return noticed

    def _hold(self, added_from: int) -> np.ndarray:
        """The cross-shard group holds the operations due on arrival for one call, until the
        stubs' relay of their micro-batch is in; the others go on the wheel now."""
        held = self._t.due[self._t.due >= added_from]
        if held.size:
            self._delayed.schedule()
            self._t.due = self._t.due[self._t.due < added_from]
        return held

    def _advance_clock(self, to: int, held: np.ndarray) -> None:
        """Kafka's advanceClock: the wheel moves to ``to`` and what it reached expires
        (onExpiration, forceComplete -> onComplete, purge: ``delayed``); ``held`` stay due."""
        self.advance(to)
        if held.size:
            self._t.due = np.concatenate([self._t.due, held])

    def _finalise(self, clock: _Clock, paired: np.ndarray) -> tuple[Rows, Rows]:
        """The events final by ``clock.final`` leave the buffer (``finalise``: unmatched ones
        reported, the stubs' pairs noticed); the shard ends the call at ``clock.until``."""
        unmatched, notes = finalise_events(self._t, clock.final, paired, self._delayed.batch_id)
        self._t.retire(clock.final)
        self._t.watermark = max(self._t.watermark, clock.until)  # the next call admits there
        self._t.pending.forget_recent()
        return unmatched, notes

    @staticmethod
    def _release_memory(*frames: pd.DataFrame | None) -> None:
        """After bulk work, its temporaries back to the system (``memory``)."""
        if memory.due(sum(0 if f is None else len(f) for f in frames)):
            memory.release()

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

    # -- Kafka's operations outside a call (``delayed``) ---------------------------------------

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark; expire the operations whose deadline it reached."""
        self._delayed.advance(watermark_ms)

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``, no outcome emitted (``DelayedOperations.cancel_for_key``)."""
        return self._delayed.cancel_for_key(keys)


class _Clock(NamedTuple):
    """Where a call's watermark takes the shard (``process``'s ``expire_to_ms``): operations
    due by ``expire`` expire, events final by ``final`` are finalised, and the next call
    starts at ``until``."""

    expire: int
    final: int
    until: int


def _clock(
    t: LiveTables, wm: int, expire_to_ms: int | None, of_stubs: np.ndarray, *, cross: bool, parked: bool
) -> _Clock:
    """The call's watermark policy: ``wm`` for the rows, then ``expire_to_ms`` (the operator's
    clock or the rows' own watermark) for what is due, except where a hand-off still owes
    something that could change an outcome.  The cross-shard group moves one call later (the
    relays of this call's events come in its next call and must be applied before the expiries
    they could prevent); a home with operations parked for their verdicts expires at once but
    finalises events only up to ``wm`` (a parked operation may still count them), and moves
    one call later too where a stub due by then would take its pairing with it."""
    until = wm if expire_to_ms is None else max(wm, int(expire_to_ms))
    waiting = until > wm and parked
    later = until > wm and cross or (waiting and _strands_pairs(t, of_stubs, wm, until))
    return _Clock(wm if later else until, wm if later or waiting else until, until)


def _strands_pairs(t: LiveTables, of_stubs: np.ndarray, wm: int, until: int) -> bool:
    """Would moving to ``until`` expire a stub whose matched event stays in the buffer (at or
    after ``wm``, where a home waiting for its parked operations stops reporting)?"""
    if not of_stubs.any():
        return False
    waits = of_stubs & (t.matches["ts"] >= wm)
    if not waits.any():
        return False
    return bool((t.pending.column("deadline", t.matches["handle"][waits]) <= until).any())
