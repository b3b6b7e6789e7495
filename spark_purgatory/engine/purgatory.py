"""The per-shard purgatory: Kafka's DelayedOperationPurgatory for event time, on columns.

``Purgatory`` is a shard's engine as its host sees it.  A call decides each operation it
touches once, against every event of the call and of the buffer, so an outcome does not
depend on whether its events came before the operation or with it.

Invariants: every valid operation gets exactly one outcome, ``completed`` in the batch that
makes its condition true or ``expired`` once the watermark reaches its deadline (never
earlier), and one with ``warn_ms`` at most one warning (``delayed``); every valid event is
eventually counted by an operation or reported in
``unmatched_events``.  The engine persists nothing.  All times are epoch milliseconds.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..config import PurgatoryConfig
from ..contract import OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS, WARNING_COLUMNS
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
        # the host's, kept with the state; the engine never reads them
        self.shard: int | None = None
        self.lineage: Any = None
        #: the last micro-batch whose relays this shard has received
        self.relays_through: int = -1
        #: the micro-batch whose call parked the operations parked now
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
        return self._delayed.t

    # -- sizes (for metrics and tests) ---------------------------------------------------------

    @property
    def watermark(self) -> int:
        return self._t.watermark

    @property
    def pending(self) -> int:
        """Operations waiting for their condition or deadline (Kafka's ``delayed``), not stubs."""
        return len(self._t.pending) - self._t.pending.stubs

    @property
    def stubs(self) -> int:
        """Stubs held here: watchers of cross-shard operations, kept until their deadline."""
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
        """A loaded state may get another config: the key table follows."""
        self._config = config
        if hasattr(self, "_delayed"):
            self._delayed.config = config
            self._t.keys.retention_ms = config.progress_retention_ms

    @property
    def parked(self) -> int:
        """Operations parked here until their registry's verdict."""
        return len(self._t.parked)

    @property
    def held(self) -> int:
        """Operations due on arrival the cross-shard group holds for one call (a call it needs)."""
        return len(self._t.due)

    @property
    def awaited_notices(self) -> int:
        """Relayed pairs whose event's notice the cross-shard group still waits for."""
        return len(self._t.relayed)

    def next_expiration(self) -> int:
        """When the watermark must next move for work to happen (``NO_EXPIRATION``: never)."""
        return self._t.next_expiration()

    def next_wakeup(self) -> int:
        """When this shard next has work even without input (``NO_EXPIRATION`` if never)."""
        return self._t.next_wakeup()

    def latest_deadline(self) -> int | None:
        """The latest deadline of a pending operation (None if none)."""
        return self._t.pending.latest_deadline()

    def is_empty(self) -> bool:
        """Nothing pending, buffered or retained: the state can be dropped."""
        return self._t.is_empty()

    # -- what a state layer reads and gives back ------------------------------------------------

    def tables(self, *, arrow: bool = False, since: int | None = None, small: bool = True) -> ShardTables:
        """The whole state as plain tables (``snapshot.plain``)."""
        return plain(self._t, arrow=arrow, since=since, small=small)

    def load_tables(self, tables: ShardTables) -> None:
        """Replace the whole state by ``tables``; every row counts as added in the change log."""
        self._delayed.load(live_from(tables, self.config, self._changes))

    def forward(
        self, to: ShardTables, added: tuple, removed: np.ndarray, resolved: pd.DataFrame, **windows: Any
    ) -> bool:
        """Bring the state forward to ``to`` (``snapshot.forward``); False: load it whole."""
        if not forward(self._t, to, added, removed, resolved, self.config, **windows):
            return False
        self._delayed.load(self._t)  # ``to``'s operations came before its last advance, as on a load
        return True

    def windows_added(self, mark: int | None = None) -> tuple[pd.DataFrame | None, int]:
        """The windows remembered since ``mark`` (None: none asked), and the mark now."""
        windows = self._t.windows
        return (None if mark is None else windows.added(mark)), windows.mark

    def buffered(self) -> pd.DataFrame:
        """The buffered events (``tables.EVENTS``), in arrival order."""
        return self._t.events.to_frame(EVENTS)

    def take_changes(self) -> Changes:
        """What the big tables gained and lost since the last call."""
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
            operations: canonical operations (``op_id``, ``keys`` or ``key``, ``ts``,
                ``timeout_ms``, ``condition``, ``target``, ``members``, ``payload``, ``raw``).
            events: canonical events (``key``, ``ts``, ``op_id``, ``source``, ``value``, ``cancel``, ``raw``).
            watermark_ms: this micro-batch's watermark: older input is ``late``, operations
                whose deadline it reached expire.
            batch_id: written to every output row.
            validated: the frames are already validated (``validate_operations`` /
                ``validate_events``' form), with optional ``stub`` / ``replica`` flags (copies
                that count here but never report) and ``batch.KEY_HINTS``.
            relayed: the pairs, floors and notices primary shards relayed to the cross-shard
                group (``tables.RELAY`` rows with ``batch`` and ``sender``; ``relay``).
            claims: other shards' claims of op_ids this shard is the registry of
                (``tables.CLAIMS``; ``registry``).
            verdicts: the registries' verdicts on the operations parked here
                (``tables.VERDICTS``).
            expire_to_ms: where the watermark goes after this batch's rows are admitted (the
                operator's clock on a quiet stream), except where a hand-off still owes
                something (``_clock``).
        """
        with collector_paused():  # a list per reported row: nothing for the collector to find
            cross = relayed is not None  # the cross-shard group: it takes relays
            wm, added_from = self._begin(watermark_ms, batch_id)
            ops, evs, rejected = admit(operations, events, wm, validated, self.config, self._t)
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
            if memory.due(sum(0 if f is None else len(f) for f in (operations, events, relayed))):
                memory.release()
            outcomes, warnings = self._delayed.take_outcomes()
            unmatched, relay = noticed.stack(unmatched), handed_on.stack(notes)
            out = result(outcomes, unmatched, rejected + refused, relay, self._delayed.batch_id, answers)
            return out.with_warnings(warnings)

    # -- the call's phases -----------------------------------------------------------------------

    def _begin(self, watermark_ms: int, batch_id: int) -> tuple[int, tuple[int, int]]:
        """The call's watermark (never moving back) and the first handle and event number it adds."""
        self._delayed.batch_id = int(batch_id)
        self._delayed.take_outcomes()
        return max(int(watermark_ms), self._t.watermark), (self._t.next_handle, self._t.next_eseq)

    def _try_complete_else_watch(
        self, released: Rows, relayed: pd.DataFrame | None, evs: Rows, ops: Rows, due_by: int | None
    ) -> Rows:
        """Kafka's tryCompleteElseWatch and checkAndComplete: everything is watched first, then
        each operation touched is tried once.  Returns the relays' unmatched rows."""
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
        """The operations due on arrival, held for one call (the others go on the wheel now)."""
        held = self._t.due[self._t.due >= added_from]
        if held.size:
            self._delayed.schedule()
            self._t.due = self._t.due[self._t.due < added_from]
        return held

    def _advance_clock(self, to: int, held: np.ndarray) -> None:
        """Kafka's advanceClock: what the wheel reaches by ``to`` expires; ``held`` stay due."""
        self.advance(to)
        if held.size:
            self._t.due = np.concatenate([self._t.due, held])

    def _finalise(self, clock: _Clock, paired: np.ndarray) -> tuple[Rows, Rows]:
        """The events final by ``clock.final`` leave the buffer; the call ends at ``clock.until``."""
        unmatched, notes = finalise_events(self._t, clock.final, paired, self._delayed.batch_id)
        self._t.retire(clock.final)
        self._t.watermark = max(self._t.watermark, clock.until)  # the next call admits there
        self._t.pending.forget_recent()
        return unmatched, notes

    def replay(
        self,
        operations: pd.DataFrame | None,
        events: pd.DataFrame | None,
        *,
        final_watermark_ms: int,
        validated: bool = False,
    ) -> BatchResult:
        """Everything at once, then the watermark moved to ``final_watermark_ms`` (backfills)."""
        first = self.process(operations, events, watermark_ms=0, validated=validated)
        last = self.process(None, None, watermark_ms=final_watermark_ms, validated=validated)
        return BatchResult(
            concat([first.outcomes, last.outcomes], OUTCOME_COLUMNS),
            concat([first.unmatched, last.unmatched], UNMATCHED_COLUMNS),
            concat([first.rejected, last.rejected], REJECTED_COLUMNS),
            warnings=concat([first.warnings, last.warnings], WARNING_COLUMNS),
        )

    # -- Kafka's operations outside a call (``delayed``) ---------------------------------------

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark; expire the operations whose deadline it reached."""
        self._delayed.advance(watermark_ms)


class _Clock(NamedTuple):
    """Where a call takes the shard: expiries by ``expire``, events final before ``final``, then ``until``."""

    expire: int
    final: int
    until: int


def _clock(
    t: LiveTables, wm: int, expire_to_ms: int | None, of_stubs: np.ndarray, *, cross: bool, parked: bool
) -> _Clock:
    """The call's watermark policy: ``wm`` for the rows, then ``expire_to_ms`` for what is due,
    except where a hand-off still owes something that could change an outcome.  The
    cross-shard group moves one call later (this call's relays come in its next call, before
    the expiries they could prevent); a home with parked operations finalises events only up to
    ``wm`` (a parked operation may still count them), and moves one call later where a stub
    due by then would take its pairing with it."""
    until = wm if expire_to_ms is None else max(wm, int(expire_to_ms))
    waiting = until > wm and parked
    later = until > wm and cross or (waiting and _strands_pairs(t, of_stubs, wm, until))
    return _Clock(wm if later else until, wm if later or waiting else until, until)


def _strands_pairs(t: LiveTables, of_stubs: np.ndarray, wm: int, until: int) -> bool:
    """Would moving to ``until`` expire a stub whose matched event stays buffered (at or after ``wm``)?"""
    if not of_stubs.any():
        return False
    waits = of_stubs & (t.matches["ts"] >= wm)
    if not waits.any():
        return False
    return bool((t.pending.column("deadline", t.matches["handle"][waits]) <= until).any())
