"""The per-shard purgatory: Kafka's DelayedOperationPurgatory for event time, on columns.

``Purgatory`` is a shard's engine as its host sees it: one call per micro-batch
(``process``), the sizes a host reports, and what a state layer reads and gives back.
Kafka's operations themselves, batched (``try_complete_else_watch``, ``check_and_complete``,
``advance``, ``force_complete`` / ``on_complete``, ``purge``), are ``delayed``'s.

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
the wheel's tombstones are sorted runs too.

**No pandas inside a call.**  A call works on ``rows.Rows`` (named numpy columns): the rows
it touches, its matches and outcomes, and the small tables (``matches``, buffered ``events``
with their keys' hashes, ``relayed``).  pandas stays at the edges: ``batch.admit`` takes the
host's frames, ``batch.result`` builds the returned ones, ``tables()`` / ``load_tables``
convert for the state layer (``snapshot``).  Read accessors: ``pending_operations()``, ``tables()``.

**One set of tables.**  A shard holds one ``snapshot.LiveTables``, handed to Kafka's
operations (``delayed.DelayedOperations``) and to the two hand-off protocols as functions of
it (``relay_tables``, ``registry.settle``): no mixin, no copy.

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
                ``expire_to_ms`` expire.  The cross-shard group takes it one call later:
                the relays of this batch's events come in its next call, and must be
                applied before the expiries they could prevent.  A home with operations
                parked for their verdicts expires its registered operations at once but
                reports its events unmatched only up to ``watermark_ms``: a parked
                operation registered in the next call may still count them; such a home
                whose stubs hold one of those events moves one call later, as the cross-shard
                group does (the stub's pairing must outlive the event's wait).

        The result's ``verdicts`` answer ``claims``.  Its ``relay`` holds what this shard's
        stubs relay (``relay.outgoing``) and
        the notices of the events they matched that became final (``relay.notices``).
        """
        # a container per reported row (its keys' list): the collector would walk them all,
        # alive, every 700 (``collector``); the Spark host pauses it around the whole shard call
        with collector_paused():
            delayed = self._delayed
            delayed.batch_id = int(batch_id)
            wm = max(int(watermark_ms), self._t.watermark)
            delayed.outcomes = []
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
            early = delayed.watch_operations(released)
            noticed = relay_tables.receive(
                self._t, None if relayed is None else Rows.of(relayed), delayed.batch_id, delayed.try_complete
            )
            # the batch's events are buffered and matched before its operations are registered, and
            # every operation touched is decided once, against all of them: an operation is decided
            # against every event of its micro-batch and of the buffer, in event time
            touched = delayed.watch_events(evs)
            early = early[self._t.pending.contains(early)]  # the relay may have completed some
            # the cross-shard group holds what is due by ``wm`` on arrival (below), also where its
            # wheel is behind ``wm`` (its first call, or one after the watermark moved without it)
            arriving = delayed.watch_operations(ops, due_by=wm if relayed is not None else None)
            delayed.try_complete(np.concatenate([early, touched, arriving]))
            of_stubs = relay_tables.of_stubs(self._t)
            handed_on = relay_tables.outgoing(
                self._t, new_from, new_eseq_from, of_stubs, bool(ops["stub"].any())
            )
            # the cross-shard group: operations due on arrival wait one call for their stubs' relay
            held = self._t.due[self._t.due >= new_from] if relayed is not None else _NO_HANDLES
            if held.size:
                delayed.schedule()  # the others go on the wheel now: these stay off it
                self._t.due = self._t.due[self._t.due < new_from]
            paired = self._t.matches["eseq"][of_stubs & in_window(self._t)]
            until = wm if expire_to_ms is None else max(wm, int(expire_to_ms))
            later = until > wm and relayed is not None  # the cross-shard group (see expire_to_ms)
            waiting = until > wm and self.parked > 0  # events wait for the parked (see expire_to_ms)
            # a stub due by ``until`` whose matched event waits would take its pairing with it (the
            # notice owed to the cross-shard group when the event is final): go on one call later
            later = later or (waiting and _strands_pairs(self._t, of_stubs, wm, until))
            self.advance(wm if later else until)
            if held.size:
                self._t.due = np.concatenate([self._t.due, held])
            reach = wm if later or waiting else until
            unmatched, notes = finalise_events(self._t, reach, paired, delayed.batch_id)
            self._t.retire(reach)
            if later:  # the next call admits at ``until`` and expires there, after its hand-off
                self._t.watermark = until
            outcomes = delayed.take_outcomes()
            self._t.pending.forget_recent()
            if memory.due(sum(0 if f is None else len(f) for f in (operations, events, relayed))):
                memory.release()  # bulk work: its temporaries back to the system
            return result(
                outcomes,
                noticed.stack(unmatched),
                rejected,
                handed_on.stack(notes),
                delayed.batch_id,
                answers,
            )

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

    # -- Kafka's operations, batched (``delayed``) ---------------------------------------------

    def try_complete_else_watch(self, ops: Rows) -> None:
        """Register admitted operations (``batch.admit``); complete at once those already
        satisfied by the buffered events or their keys' progress."""
        self._delayed.try_complete_else_watch(ops)

    def check_and_complete(self, events: Rows) -> None:
        """Buffer a batch of admitted events and complete the operations they satisfy."""
        self._delayed.check_and_complete(events)

    def advance(self, watermark_ms: int) -> None:
        """Move the wheel to the watermark; expire the operations whose deadline it reached."""
        self._delayed.advance(watermark_ms)

    def cancel_for_key(self, keys: list[str]) -> list[str]:
        """Kafka's ``cancelForKey``: drop the pending operations watching any of ``keys``.

        No outcome is emitted for them (the caller decided their fate, e.g. a deleted
        partition); their op_ids still count as resolved for duplicate detection.  Returns
        the cancelled op_ids.
        """
        return self._delayed.cancel_for_key(keys)


def _strands_pairs(t: LiveTables, of_stubs: np.ndarray, wm: int, until: int) -> bool:
    """Would moving to ``until`` expire a stub whose matched event stays in the buffer (at or
    after ``wm``, where a home waiting for its parked operations stops reporting)?"""
    if not of_stubs.any():
        return False
    waits = of_stubs & (t.matches["ts"] >= wm)
    if not waits.any():
        return False
    return bool((t.pending.column("deadline", t.matches["handle"][waits]) <= until).any())
