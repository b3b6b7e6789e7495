"""Completion conditions: deciding, vectorised, when an operation's condition holds.

An operation completes at the earliest event time at which its condition holds over its
matches: ``evaluate`` finds the first prefix, by event time, that satisfies it; its last
event's time is ``resolved_at``.

==========  ===========================================================================
``any``     one matching event
``count``   at least ``target`` events; events with a ``source`` count once per source
``sum``     sum of ``value`` >= ``target`` (a missing value counts as 0)
``all``     every name in ``members`` reported (as ``source``)
``offset``  on every watched key, the running max of ``value`` >= ``target``
``quorum``  at least ``target`` of the names in ``members`` reported (as ``source``)
==========  ===========================================================================

Invariant: ``evaluate`` is a pure function of the matches it is given, so its answer does
not depend on how events were split into micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from .. import contract
from .arrays import group_starts, run_starts, search, tie_order
from .rows import Rows

#: what ``evaluate`` reads its columns from: the engine's ``Rows``, or frames (``inspection``)
Table = Rows | pd.DataFrame

ANY, COUNT, SUM, ALL, OFFSET, QUORUM = 0, 1, 2, 3, 4, 5
#: condition name -> code used in state (a code is never reused: a checkpoint keeps it)
CONDITIONS = dict(zip(contract.CONDITIONS, (ANY, COUNT, SUM, ALL, OFFSET, QUORUM), strict=True))
CONDITION_NAMES = np.array(list(CONDITIONS), object)
NEEDS_TARGET = tuple(CONDITIONS[name] for name in contract.TARGETED)
NEEDS_MEMBERS = tuple(CONDITIONS[name] for name in contract.WITH_MEMBERS)
#: the ``eseq`` of a match that is a key's *floor* (its progress before the operation, relayed
#: by a primary shard), not an event: it raises progress, it is not a matched event
FLOOR_ESEQ = -1


@dataclass(frozen=True)
class Evaluation:
    """Result of ``evaluate``: per operation (aligned with ``ops``) and per match, sorted by
    (handle, ts, eseq).  ``used``: the prefix up to a satisfied operation's crossing event,
    and every match of an unsatisfied one; ``source`` and ``is_member`` per sorted match, for
    who answered (``answered``).
    """

    satisfied: np.ndarray  # bool per op
    resolved_at: np.ndarray  # int64 per op: event time the condition became true
    progress: np.ndarray  # float per op: count / sum / members reported / min offset over keys
    matched: np.ndarray  # int64 per op: events counted (up to the crossing when satisfied)
    handle: np.ndarray  # int64 per sorted match
    eseq: np.ndarray  # int64 per sorted match
    used: np.ndarray  # bool per sorted match
    source: np.ndarray  # object per sorted match
    is_member: np.ndarray  # bool per sorted match


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    return total - total[starts] + values[starts]


def _first_per_group(group: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group values, row index) of the first hit row of each group, for ``group`` sorted."""
    rows = np.flatnonzero(hit)
    hit_group = group[rows]
    first = run_starts(hit_group)
    return hit_group[first], rows[first]


def _first_occurrence(handle: np.ndarray, labels: np.ndarray, present: np.ndarray) -> np.ndarray:
    """True on the first row (in row order) of each (handle, label) among rows where present."""
    first = np.zeros(handle.size, dtype=bool)
    rows = np.flatnonzero(present)
    if rows.size == 0:
        return first
    codes = pd.factorize(labels[rows])[0]  # exact: equal codes are equal labels
    order = np.lexsort((rows, codes, handle[rows]))
    h, c = handle[rows][order], codes[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (h[1:] != h[:-1]) | (c[1:] != c[:-1])
    first[rows[order[new]]] = True
    return first


def may_hold_unmatched(cond: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per operation: can its condition hold with no match yet (``offset``, or nothing to reach)?"""
    return (cond == OFFSET) | (_counts_up(cond) & (target <= 0))


def _counts_up(cond: np.ndarray) -> np.ndarray:
    return (cond == COUNT) | (cond == SUM) | (cond == QUORUM)


def evaluate(ops: Table, matches: Table, watch: Table | None = None) -> Evaluation:
    """Decide, for each operation (``ops``, sorted by unique ``handle``), whether and when its
    condition holds, from all its ``matches`` (``eseq``: arrival order, the tie-breaker) and,
    for ``offset`` operations, each watched key's ``progress_at_watch`` (``watch``)."""
    handles = _col(ops, "handle", np.int64)
    if not _is_sorted(handles):
        raise ValueError("evaluate() needs ops sorted by unique handle")
    order: np.ndarray | slice = slice(None)  # already in order: one match per operation at most
    if not _is_sorted(_col(matches, "handle", np.int64)):
        order = tie_order(_col(matches, "handle"), _col(matches, "ts"), _col(matches, "eseq"))
    m = _Sorted(
        _col(matches, "handle", np.int64)[order],
        _col(matches, "ts", np.int64)[order],
        _col(matches, "eseq", np.int64)[order],
        _col(matches, "value", float)[order],
        _col(matches, "source", object)[order],
        _col(matches, "is_member", bool)[order],
    )
    op_pos = np.searchsorted(handles, m.handle)
    cond = _col(ops, "cond", np.int8)

    if m.handle.size and bool((cond == ANY).all()):  # the usual batch: no measure to accumulate
        return _evaluate_any(_col(ops, "ts", np.int64), m, op_pos)
    out = _evaluate_cumulative(ops, m, op_pos)
    if (cond == OFFSET).any():
        if watch is None:
            raise ValueError("offset operations need the watch table (per-key progress_at_watch)")
        m_khash = _col(matches, "khash", np.uint64)[order]
        _evaluate_offset(ops, m, m_khash, op_pos, watch, out)
    return out


class _Sorted(NamedTuple):
    handle: np.ndarray
    ts: np.ndarray
    eseq: np.ndarray
    value: np.ndarray
    source: np.ndarray
    is_member: np.ndarray

    def evaluation(self, satisfied, resolved_at, progress, matched, used) -> Evaluation:
        """The ``Evaluation`` of these matches, given its per-operation arrays and ``used``."""
        return Evaluation(
            satisfied,
            resolved_at,
            progress,
            matched,
            self.handle,
            self.eseq,
            used,
            self.source,
            self.is_member,
        )


def _evaluate_cumulative(ops: Table, m: _Sorted, op_pos: np.ndarray) -> Evaluation:
    """Every condition but ``offset``: the first match where a cumulative measure reaches its goal."""
    n_ops, n_rows = len(ops), m.handle.size
    cond = _col(ops, "cond", np.int8)
    target = _col(ops, "target", float)
    trivially = _counts_up(cond) & (target <= 0)
    satisfied = trivially.copy()
    resolved_at = _col(ops, "ts", np.int64).copy()
    progress = np.zeros(n_ops, dtype=float)
    matched = np.zeros(n_ops, dtype=np.int64)
    if n_rows == 0:
        return m.evaluation(satisfied, resolved_at, progress, matched, np.ones(0, bool))

    # each match's step: any 1, count 1 per source (or sourceless event), sum its value,
    # all and quorum 1 per member reporting first; offset 0
    row_cond = cond[op_pos]
    counted = row_cond != OFFSET
    step = counted.astype(float)
    is_count, of_members = row_cond == COUNT, (row_cond == ALL) | (row_cond == QUORUM)
    if is_count.any() or of_members.any():
        has_source = pd.notna(m.source)
        first_of_source = _first_occurrence(m.handle, m.source, has_source & (is_count | of_members))
        step[is_count] = (first_of_source | ~has_source)[is_count]
        step[of_members] = (first_of_source & m.is_member)[of_members]
    is_sum = row_cond == SUM
    if is_sum.any():
        step[is_sum] = np.nan_to_num(m.value[is_sum], nan=0.0)
    cum = _grouped_cumsum(step, group_starts(m.handle))
    goal = np.where(cond == ALL, _col(ops, "n_members", float), np.where(cond == ANY, 1.0, target))
    row_goal = goal[op_pos]
    hit = counted & (cum >= row_goal - _epsilon(row_goal))

    hit_handles, hit_rows = _first_per_group(m.handle, hit)
    hit_ops = np.searchsorted(_col(ops, "handle", np.int64), hit_handles)
    fresh = ~satisfied[hit_ops]
    satisfied[hit_ops[fresh]] = True
    resolved_at[hit_ops[fresh]] = m.ts[hit_rows[fresh]]

    # rows up to and including the crossing row count; later ones arrived after resolution
    crossing_row = np.full(n_ops, np.iinfo(np.int64).max, dtype=np.int64)
    crossing_row[hit_ops[fresh]] = hit_rows[fresh]
    crossing_row[trivially] = -1
    row_index = np.arange(n_rows)
    used = np.where(counted, row_index <= crossing_row[op_pos], True)
    rows = np.flatnonzero(counted & used)
    if rows.size:
        # rows are by operation: the last counted row of each holds its measure
        of_op = op_pos[rows]
        last = np.ones(rows.size, dtype=bool)
        np.not_equal(of_op[1:], of_op[:-1], out=last[:-1])
        progress[of_op[last]] = cum[rows[last]]
        matched = np.bincount(of_op, minlength=n_ops).astype(np.int64)
    progress = np.where(cond == ANY, matched.astype(float), progress)
    return m.evaluation(satisfied, resolved_at, progress, matched, used)


def _evaluate_any(ts: np.ndarray, m: _Sorted, op_pos: np.ndarray) -> Evaluation:
    """Every operation ``any``: each with a match holds at its first one."""
    first = run_starts(m.handle)
    at = op_pos[first]
    satisfied = np.zeros(ts.size, dtype=bool)
    satisfied[at] = True
    resolved_at = ts.copy()
    resolved_at[at] = m.ts[first]
    matched = satisfied.astype(np.int64)
    return m.evaluation(satisfied, resolved_at, matched.astype(float), matched, first)


class _KeyGroups(NamedTuple):
    """One group per (offset operation, watched key), and each offset match's group."""

    op: np.ndarray  # position of the group's operation in ``handles``
    floor: np.ndarray  # the key's progress when the operation was watched (NaN: none)
    of_match: np.ndarray  # group of each offset match (matches in ``rows`` order)
    rows: np.ndarray  # positions of the offset matches among all sorted matches


def _evaluate_offset(
    ops: Table,
    m: _Sorted,
    m_khash: np.ndarray,
    op_pos: np.ndarray,
    watch: Table,
    out: Evaluation,
) -> None:
    """Offset: the operation holds once every key's running max reached the target."""
    handles, cond = _col(ops, "handle", np.int64), _col(ops, "cond", np.int8)
    target, op_ts = _col(ops, "target", float), _col(ops, "ts", np.int64)
    g = _offset_groups(handles, cond, op_pos, m_khash, watch)
    best, reach_at, crossing, reached = _per_key_progress(g, target, op_ts, m)
    _offset_outcomes(g, ops, cond, best, (reach_at, crossing, reached), m, op_pos, out)


def _offset_groups(
    handles: np.ndarray, cond: np.ndarray, op_pos: np.ndarray, m_khash: np.ndarray, watch: Table
) -> _KeyGroups:
    """Each (operation, key) as one run of its watch row, then its matches."""
    w_handle = _col(watch, "handle", np.int64)
    w_pos = search(handles, w_handle)
    at = np.minimum(w_pos, handles.size - 1)
    keep = (w_pos < handles.size) & (handles[at] == w_handle) & (cond[at] == OFFSET)
    w_handle, w_pos = w_handle[keep], w_pos[keep]
    w_khash = _col(watch, "hash", np.uint64)[keep]
    rows = np.flatnonzero(cond[op_pos] == OFFSET)
    n_w = w_handle.size
    all_h = np.concatenate([w_handle, handles[op_pos[rows]]])
    all_k = np.concatenate([w_khash, m_khash[rows]])
    is_match = np.concatenate([np.zeros(n_w, dtype=np.int8), np.ones(rows.size, dtype=np.int8)])
    order = np.lexsort((is_match, all_k, all_h))
    group_sorted = np.cumsum(is_match[order] == 0) - 1
    group = np.empty_like(group_sorted)
    group[order] = group_sorted
    g_op = np.empty(n_w, dtype=np.int64)
    g_op[group[:n_w]] = w_pos
    floor = np.full(n_w, np.nan)
    floor[group[:n_w]] = _col(watch, "progress_at_watch", float)[keep]
    return _KeyGroups(g_op, floor, group[n_w:], rows)


def _per_key_progress(
    g: _KeyGroups, target: np.ndarray, op_ts: np.ndarray, m: _Sorted
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group: the best progress seen, when (o.ts at the earliest) and by which ``eseq``
    (``FLOOR_ESEQ`` if before o.ts) the key reached the target, and whether it did."""
    value, ts = m.value[g.rows], m.ts[g.rows]
    g_target = target[g.op]
    best = g.floor.copy()
    np.fmax.at(best, g.of_match, value)
    hits = np.flatnonzero(value >= g_target[g.of_match] - _epsilon(g_target[g.of_match]))
    # the first hit of each group in (ts, eseq) order: ``g.rows`` are in that order per operation
    first = np.full(g.op.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, g.of_match[hits], hits)
    by_event = first < np.iinfo(np.int64).max
    by_floor = g.floor >= g_target - _epsilon(g_target)
    reached = by_event | by_floor
    at = np.full(g.op.size, np.iinfo(np.int64).min, dtype=np.int64)
    at[by_event] = ts[first[by_event]]
    at[by_floor] = np.iinfo(np.int64).min
    reach_at = np.maximum(at, op_ts[g.op])
    crossing = np.full(g.op.size, FLOOR_ESEQ, dtype=np.int64)
    late_hit = by_event & ~by_floor & (at >= op_ts[g.op])
    crossing[late_hit] = m.eseq[g.rows][first[late_hit]]
    return best, reach_at, crossing, reached


def _offset_outcomes(
    g: _KeyGroups,
    ops: Table,
    cond: np.ndarray,
    best: np.ndarray,
    reach: tuple[np.ndarray, np.ndarray, np.ndarray],
    m: _Sorted,
    op_pos: np.ndarray,
    out: Evaluation,
) -> None:
    """An operation holds at its latest key's time; its progress is the lowest key's, and the
    events that count are those of its window up to the crossing."""
    reach_at, crossing, reached = reach
    n_ops = len(ops)
    n_keys = np.bincount(g.op, minlength=n_ops)
    n_reached = np.bincount(g.op[reached], minlength=n_ops)
    # per operation, the latest reached key's (time, eseq)
    latest = np.full(n_ops, np.iinfo(np.int64).min, dtype=np.int64)
    latest_eseq = np.full(n_ops, FLOOR_ESEQ, dtype=np.int64)
    r = np.flatnonzero(reached)
    if r.size:
        order = r[np.lexsort((crossing[r], reach_at[r], g.op[r]))]
        last = np.r_[g.op[order][1:] != g.op[order][:-1], True]
        latest[g.op[order][last]] = reach_at[order][last]
        latest_eseq[g.op[order][last]] = crossing[order][last]
    low = np.full(n_ops, np.inf)
    with np.errstate(invalid="ignore"):
        np.minimum.at(low, g.op, best)  # NaN (a key without progress) propagates
    is_off = cond == OFFSET
    done = is_off & (n_keys > 0) & (n_reached == n_keys) & ~out.satisfied
    out.satisfied[done] = True
    out.resolved_at[done] = latest[done]
    row_op = op_pos[g.rows]
    ts, eseq = m.ts[g.rows], m.eseq[g.rows]
    at, at_eseq = out.resolved_at[row_op], latest_eseq[row_op]
    until = ~out.satisfied[row_op] | (ts < at) | ((ts == at) & (eseq <= at_eseq))
    if done.any():  # the progress reached when it held: the keys' maxima up to the crossing
        best = g.floor.copy()
        np.fmax.at(best, g.of_match[until], m.value[g.rows][until])
        low = np.full(n_ops, np.inf)
        with np.errstate(invalid="ignore"):
            np.minimum.at(low, g.op, best)
    out.progress[is_off] = low[is_off]
    # an event before the operation only raises its key's progress: it is not one of its
    # matched events (nor is a floor), so it stays to be reported as nothing counted it
    use = until & (ts >= _col(ops, "ts", np.int64)[row_op])
    out.used[g.rows] = use
    counts = use & (eseq != FLOOR_ESEQ)
    np.add.at(out.matched, row_op[counts], 1)


def _col(table, name: str, dtype=None) -> np.ndarray:
    return np.asarray(table[name], dtype=dtype)


def _epsilon(goal: np.ndarray) -> np.ndarray:
    """Tolerance for float sums (0.1 + 0.2 >= 0.3 should hold)."""
    return np.abs(goal) * 1e-12


def _is_sorted(values: np.ndarray) -> bool:
    return values.size < 2 or bool((values[1:] > values[:-1]).all())
