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
import pandas as pd

from . import progress, relay
from .frames import distinct, stack

if TYPE_CHECKING:
    from .pending import Pending

__all__ = ["CrossShardHandOff"]


class CrossShardHandOff:
    """The relay's reads and writes of a ``Purgatory``'s tables (mixed into it)."""

    _pending: Pending
    _matches: pd.DataFrame
    _events: pd.DataFrame
    _relayed: pd.DataFrame
    _next_eseq: int
    _batch_id: int

    def _try_complete(self, handles: np.ndarray) -> None:  # Purgatory's own
        raise NotImplementedError

    def _of_stubs(self) -> np.ndarray:
        """Which ``matches`` belong to stubs (every match's operation is pending)."""
        held = self._matches["handle"].to_numpy(np.int64)
        if held.size == 0:
            return np.zeros(0, dtype=bool)
        return self._pending.stub(held)

    def _outgoing(self, new_from: int, new_eseq_from: int) -> pd.DataFrame:
        """``relay.outgoing`` on the rows it reads: the operations of matches and the
        operations (and their watchers) registered from ``new_from`` on."""
        held = self._matches["handle"].to_numpy(np.int64)
        ops, watch = self._pending.since(new_from)
        if held.size:
            ops = self._pending.rows(np.concatenate([held, ops["handle"].to_numpy(np.int64)]))
        return relay.outgoing(
            ops, watch, self._matches, self._events, new_from=new_from, new_eseq_from=new_eseq_from
        )

    def _receive(self, relayed: pd.DataFrame | None) -> pd.DataFrame:
        """Relayed pairs and floors as matches, step by step (``relay.steps``), each step
        evaluated as it was where the pairs were made; returns the ``unmatched_events`` rows
        of the noticed events nothing counted (``relay.decide``)."""
        lost = progress.empty_unmatched()
        for rows in relay.steps(relayed):
            if rows["stage"].iat[0] == relay.FINAL:
                pending = self._matches["eseq"].to_numpy(np.int64)
                noticed, self._relayed = relay.decide(rows, self._relayed, pending)
                lost = stack(lost, progress.after_resolution_rows(noticed, self._batch_id))
                continue
            ops, seen = self._pending.named_by(rows["for_op"].to_numpy(dtype=object))
            new, record = relay.matches_of(ops, seen, rows, self._next_eseq)
            self._next_eseq += len(rows)
            self._relayed = stack(self._relayed, record)
            if len(new):
                self._matches = stack(self._matches, new)
                self._try_complete(distinct(new["handle"].to_numpy(np.int64)))
        return lost
