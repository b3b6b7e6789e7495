"""Who answered: the members an outcome heard from and those it did not, or the sources it counted.

==========  ===========================================================================
``all``,    ``reported``: the members with a counted event (as its ``source``), in the
``quorum``  order of the operation's ``members``; ``missing``: the other members
``count``   ``reported``: the distinct sources of its counted events, in the order of
            each one's first (event time, then arrival), at most ``limit`` of them
            (``input.max.members``); ``missing``: None
others      both None
==========  ===========================================================================

A desk acting on an expired quorum needs the names, not the count: who to chase.

Invariant: "counted" is the evaluation's ``used``, so the lists are a pure function of the
evaluation; a member who reported after the crossing is ``missing``, and a source that is not
a member is never named for ``all`` or ``quorum``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from .arrays import flatten, group_starts, pairs_in
from .conditions import ALL, COUNT, QUORUM, Evaluation, Table
from .text import lists_of


class Answered(NamedTuple):
    """Per operation asked about: a list of names, or None where the condition names nobody
    (every row None, or both None when none does)."""

    reported: np.ndarray | None
    missing: np.ndarray | None


def names_anyone(cond: np.ndarray) -> np.ndarray:
    """Per operation: does its condition name who answered (``count``, ``all``, ``quorum``)?"""
    return (cond == COUNT) | (cond == ALL) | (cond == QUORUM)


def who_answered(ops: Table, result: Evaluation, which: np.ndarray | None, limit: int) -> Answered:
    """Who answered each operation of ``ops[which]`` (all when None), from ``evaluate``'s
    ``result`` over ``ops`` (sorted by handle); ``limit``: the most sources a ``count`` names."""
    cond = np.asarray(ops["cond"], dtype=np.int8)
    picked = np.ones(cond.size, dtype=bool) if which is None else np.asarray(which, dtype=bool)
    asks = picked & names_anyone(cond)
    if not asks.any():  # the usual batch (``any``): nothing to name, nothing computed
        return Answered(None, None)
    reported = np.full(cond.size, None, dtype=object)
    missing = np.full(cond.size, None, dtype=object)
    handles = np.asarray(ops["handle"], dtype=np.int64)
    op_pos = np.searchsorted(handles, result.handle)
    counted = result.used & asks[op_pos] & pd.notna(result.source)
    of_members = asks & (cond != COUNT)
    if of_members.any():
        rows = np.flatnonzero(counted & result.is_member)
        reported[of_members], missing[of_members] = _members(
            np.asarray(ops["members"], dtype=object)[of_members],
            np.flatnonzero(of_members),
            op_pos[rows],
            result.source[rows],
        )
    counts = asks & (cond == COUNT)
    if counts.any():
        rows = np.flatnonzero(counted & (cond[op_pos] == COUNT))
        reported[counts] = _sources(np.flatnonzero(counts), op_pos[rows], result.source[rows], limit)
    return Answered(reported[picked], missing[picked])


def _members(
    members: np.ndarray, ops: np.ndarray, heard_op: np.ndarray, heard: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per operation (positions ``ops``, their ``members`` lists): the members among the
    sources it heard (``heard`` of ``heard_op``), and the others, each in members order."""
    lengths, items = flatten(members)
    owner = np.repeat(ops, lengths)
    codes = pd.factorize(np.concatenate([items, heard]))[0]  # exact: equal codes, equal names
    said = pairs_in(owner, codes[: items.size], heard_op, codes[items.size :])
    which = np.repeat(np.arange(ops.size), lengths)
    n_said = np.bincount(which[said], minlength=ops.size)
    return lists_of(n_said, items[said]), lists_of(lengths - n_said, items[~said])


def _sources(ops: np.ndarray, of_op: np.ndarray, source: np.ndarray, limit: int) -> np.ndarray:
    """Per operation (positions ``ops``): the distinct ``source`` of its rows (``of_op``, by
    operation, each in event order), first seen first, at most ``limit``."""
    first = ~pd.DataFrame({"op": of_op, "source": pd.factorize(source)[0]}).duplicated().to_numpy()
    of_op, source = of_op[first], source[first]
    keep = np.arange(of_op.size) - group_starts(of_op) < limit
    n = np.bincount(np.searchsorted(ops, of_op[keep]), minlength=ops.size)
    return lists_of(n, source[keep])
