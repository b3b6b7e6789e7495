"""Withdrawn operations: a cancel event ends the operations it matches, as ``cancelled``.

A cancel event (``cancel: true``) matches as any event does: with an ``op_id``, that
operation; without, every operation watching its key (Kafka's ``cancelForKey``); inside the
window ``o.ts <= e.ts < o.deadline`` only.  It never counts towards a condition.  ``decide``
evaluates the condition over the events before an operation's first cancel: if it holds
the operation completes, else the cancel withdraws it at the cancel's time.

Invariant: like ``conditions.evaluate``, a pure function of the matches it is given, so a
cancel splits into micro-batches like any other event.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .arrays import run_starts
from .conditions import Evaluation, evaluate
from .rows import Rows

_NEVER = np.iinfo(np.int64).max


class Decision(NamedTuple):
    """``decide``'s answer, per operation (aligned with its ``ops``) unless said otherwise."""

    result: Evaluation  # the condition over each operation's matches before its first cancel
    cancelled: np.ndarray  # bool: withdrawn (a cancel came first)
    cancelled_at: np.ndarray  # int64: the first cancel's time (where cancelled)
    cancels: np.ndarray  # int64 ``eseq`` of each cancel that withdrew an operation


def decide(ops: Rows, matches: Rows, watch: Rows | None = None) -> Decision:
    """``conditions.evaluate`` with cancels: each operation (``ops`` sorted by unique handle)
    is evaluated over its matches before its first cancel in its window, and withdrawn
    there unless its condition held first."""
    n = len(ops)
    flag = matches.get("cancel")
    if flag is None or not flag.any():
        return Decision(evaluate(ops, matches, watch), np.zeros(n, bool), np.zeros(n, np.int64), _NONE)
    handle, ts, eseq = matches["handle"], matches["ts"], matches["eseq"]
    pos = np.searchsorted(ops["handle"], handle)
    # a cancel before the operation (an ``offset``'s earlier rows on its key) withdraws nothing
    rows = np.flatnonzero(flag & (ts >= ops["ts"][pos]))
    at, at_eseq = np.full(n, _NEVER, np.int64), np.full(n, _NEVER, np.int64)
    if rows.size:
        rows = rows[np.lexsort((eseq[rows], ts[rows], handle[rows]))]
        first = rows[run_starts(handle[rows])]
        at[pos[first]], at_eseq[pos[first]] = ts[first], eseq[first]
    row_at, row_eseq = at[pos], at_eseq[pos]
    before = ~flag & ((ts < row_at) | ((ts == row_at) & (eseq < row_eseq)))
    result = evaluate(ops, matches.where(before), watch)
    cancelled = (at < _NEVER) & ~result.satisfied
    return Decision(result, cancelled, np.where(cancelled, at, 0), at_eseq[cancelled])


_NONE = np.empty(0, np.int64)
