"""A shard's side of the cross-shard hand-off (``relay``), as part of ``Purgatory``.

A primary shard's stubs watch a cross-shard operation's keys and report nothing; what they
match goes out as the relay (``_outgoing``).  The cross-shard group takes the relayed pairs
and floors in (``_receive``) as matches of its own, step by step, each evaluated as it was
where it was made.  ``relay`` holds the algorithm; this mixin only reads and writes the
shard's tables for it, so ``purgatory`` keeps Kafka's operations and this one concept lives
here.

Invariant: the mixin holds nothing of its own; every table it reads or writes is the shard's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import progress, relay, watchers
from .frames import distinct, hash_strings
from .rows import Rows

if TYPE_CHECKING:
    from .pending import Pending
    from .windows import ResolvedWindows

__all__ = ["CrossShardHandOff"]


class CrossShardHandOff:
    """The relay's reads and writes of a ``Purgatory``'s tables (mixed into it)."""

    _pending: Pending
    _matches: Rows
    _events: Rows
    _relayed: Rows
    _windows: ResolvedWindows
    _next_eseq: int
    _batch_id: int

    def _try_complete(self, handles: np.ndarray, ops: Rows | None = None) -> None:  # Purgatory's own
        raise NotImplementedError

    def _of_stubs(self) -> np.ndarray:
        """Which ``matches`` belong to stubs (every match's operation is pending)."""
        held = self._matches["handle"]
        if held.size == 0:
            return np.zeros(0, dtype=bool)
        return self._pending.stub(held)

    def _outgoing(self, new_from: int, new_eseq_from: int, of_stubs: np.ndarray, new_stubs: bool) -> Rows:
        """``relay.outgoing`` on the rows it reads: the operations of matches and the
        operations (and their watchers) registered from ``new_from`` on.  ``of_stubs``:
        ``_of_stubs()``; ``new_stubs``: whether this batch registered a stub (without either
        there is nothing to relay, and nothing is read)."""
        if not new_stubs and not of_stubs.any():
            return relay.NOTHING
        held = self._matches["handle"]
        ops, watch = self._pending.since(new_from)
        if held.size:
            ops = self._pending.rows(np.concatenate([held, ops["handle"]]))
        return relay.outgoing(
            ops, watch, self._matches, self._events, new_from=new_from, new_eseq_from=new_eseq_from
        )

    def _receive(self, relayed: Rows | None) -> Rows:
        """Relayed pairs and floors as matches, step by step (``relay.steps``), each step
        evaluated as it was where the pairs were made; returns the ``unmatched_events`` rows
        of the noticed events nothing counted (``relay.decide``)."""
        lost = progress.empty_unmatched()
        for rows in relay.steps(relayed):
            if rows["stage"][0] == relay.FINAL:
                pending = self._matches["eseq"]
                noticed, after, self._relayed = relay.decide(rows, self._relayed, pending)
                lost = lost.stack(progress.unmatched_rows(noticed, after, self._batch_id))
                continue
            for_op = rows["for_op"].astype(object, copy=False)
            named = self._pending.by_op_id(for_op)
            # only the stubs of the operation held here: a repeated op_id's copy, refused here
            # as a duplicate, may have left stubs on keys the operation does not watch
            held = self._pending.rows(named[1], keys=True)
            watched = watchers.watching(held, named[1], rows["key"][named[0]])
            named = (named[0][watched], named[1][watched])
            # a pair of no pending operation: its stub outlived an operation completed here
            # (a window of it holds the pair), or it is a refused copy's
            ours = np.zeros(len(rows), dtype=bool)
            ours[named[0]] = True
            mine = Rows({"khash": hash_strings(rows["key"]), "ts": rows["ts"], "op_id": for_op}, len(rows))
            spurious = ~ours & ~self._windows.covers(mine)
            ops = self._pending.rows(named[1])
            new, record = relay.matches_of(ops, named, rows, self._next_eseq, spurious)
            self._next_eseq += len(rows)
            self._relayed = self._relayed.stack(record)
            if len(new):
                self._matches = self._matches.stack(new)
                self._try_complete(distinct(new["handle"]))
        return lost
