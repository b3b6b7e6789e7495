"""Completion conditions: validating operations and deciding, vectorised, when they hold.

An operation completes at the earliest *event time* at which its condition holds over the
events that match it: ``o.ts <= e.ts < o.deadline``, except that ``offset`` also counts the
key's untargeted events before ``o.ts`` (a high watermark already reached).  Events can arrive in any order, so ``evaluate`` sorts each operation's
matches by event time and finds the first prefix that satisfies the condition; the event
time of the last event in that prefix is ``resolved_at``.  Conditions:

==========  ===========================================================================
``any``     one matching event
``count``   at least ``target`` events; events with a ``source`` count once per source
``sum``     sum of ``value`` >= ``target`` (a missing value counts as 0)
``all``     every name in ``members`` reported (as ``source``)
``offset``  on every watched key, the running max of ``value`` >= ``target``
==========  ===========================================================================

Invariant: ``evaluate`` is a pure function of the matches it is given; the purgatory hands
it every match of the operations it evaluates, old and new, so the answer does not depend
on how events were split into micro-batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "ANY",
    "COUNT",
    "SUM",
    "ALL",
    "OFFSET",
    "CONDITIONS",
    "Evaluation",
    "evaluate",
    "validate_operations",
    "validate_events",
]

ANY, COUNT, SUM, ALL, OFFSET = 0, 1, 2, 3, 4
#: condition name -> code used in state
CONDITIONS = {"any": ANY, "count": COUNT, "sum": SUM, "all": ALL, "offset": OFFSET}
CONDITION_NAMES = np.array(list(CONDITIONS), dtype=object)
_NEEDS_TARGET = (COUNT, SUM, OFFSET)

#: canonical columns of an operations frame (ts in epoch ms)
OPERATION_COLUMNS = ["op_id", "keys", "ts", "timeout_ms", "condition", "target", "members", "payload"]
#: canonical columns of an events frame (ts in epoch ms)
EVENT_COLUMNS = ["key", "ts", "op_id", "source", "value"]


def _raw_json(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The record as a person would read it, when the source did not keep its raw text."""
    if "raw" in frame.columns:
        return frame["raw"]
    records = frame.reindex(columns=columns).to_dict(orient="records")
    return pd.Series(
        [json.dumps(r, default=_json_default, sort_keys=True) for r in records],
        index=frame.index,
        dtype=object,
    )


def _json_default(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and np.isnan(value):
        return None
    return str(value)


def _is_missing_text(values: pd.Series) -> np.ndarray:
    return np.asarray(values.map(lambda v: not isinstance(v, str) or v == ""), dtype=bool)


def _rejections(frame: pd.DataFrame, reasons: np.ndarray, source: str, columns: list[str]) -> pd.DataFrame:
    bad = reasons != ""
    return pd.DataFrame(
        {
            "source": source,
            "raw": _raw_json(frame.loc[bad], columns).to_numpy(dtype=object),
            "reason": reasons[bad],
        }
    )


def _first_reason(reasons: np.ndarray, mask: np.ndarray, reason: str) -> None:
    reasons[(reasons == "") & mask] = reason


def validate_operations(ops: pd.DataFrame, *, max_timeout_ms: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split canonical operations into (valid, rejected rows with a reason).

    Expects ``OPERATION_COLUMNS`` (``keys`` a list of strings; missing optional columns are
    allowed) and an optional ``raw`` column.  Valid rows come back with ``keys`` deduplicated
    and sorted, ``condition`` lower-cased, and ``deadline = ts + timeout_ms``.
    """
    ops = ops.reindex(columns=[*OPERATION_COLUMNS, *(["raw"] if "raw" in ops.columns else [])])
    ops = ops.reset_index(drop=True)
    n = len(ops)
    reasons = np.full(n, "", dtype=object)
    _first_reason(reasons, _is_missing_text(ops["op_id"]), "missing_op_id")
    keys = ops["keys"].map(_clean_keys)
    _first_reason(reasons, np.asarray(keys.map(len) == 0, dtype=bool), "missing_key")
    ts = pd.to_numeric(ops["ts"], errors="coerce")
    _first_reason(reasons, ts.isna().to_numpy(), "missing_ts")
    timeout = pd.to_numeric(ops["timeout_ms"], errors="coerce")
    _first_reason(reasons, timeout.isna().to_numpy(), "missing_timeout_ms")
    _first_reason(reasons, (timeout < 0).fillna(False).to_numpy(), "negative_timeout")
    _first_reason(reasons, (timeout > max_timeout_ms).fillna(False).to_numpy(), "timeout_above_max")
    condition = ops["condition"].map(lambda c: "any" if c is None or c != c else str(c).strip().lower())
    code = condition.map(CONDITIONS)
    _first_reason(reasons, code.isna().to_numpy(), "unknown_condition")
    target = pd.to_numeric(ops["target"], errors="coerce")
    needs_target = code.isin(_NEEDS_TARGET).to_numpy()
    _first_reason(reasons, needs_target & ~np.isfinite(target.to_numpy(dtype=float)), "missing_target")
    members = ops["members"].map(_clean_keys)
    _first_reason(reasons, (code == ALL).to_numpy() & (members.map(len) == 0).to_numpy(), "missing_members")
    payload = ops["payload"]
    _first_reason(
        reasons,
        np.asarray(payload.map(lambda p: p is not None and p == p and not isinstance(p, str)), dtype=bool),
        "bad_payload",
    )

    rejected = _rejections(ops, reasons, "operations", OPERATION_COLUMNS)
    ok = reasons == ""
    valid = pd.DataFrame(
        {
            "op_id": ops["op_id"].to_numpy(dtype=object)[ok],
            "keys": keys.to_numpy(dtype=object)[ok],
            "ts": ts.to_numpy()[ok].astype(np.int64),
            "deadline": (ts + timeout).to_numpy()[ok].astype(np.int64),
            "cond": code.to_numpy()[ok].astype(np.int8),
            "target": target.to_numpy(dtype=float)[ok],
            "members": members.to_numpy(dtype=object)[ok],
            "payload": payload.map(lambda p: p if isinstance(p, str) else None).to_numpy(dtype=object)[ok],
            "raw": _raw_json(ops, OPERATION_COLUMNS).to_numpy(dtype=object)[ok],
        }
    )
    return valid, rejected


def _clean_keys(value: object) -> list[str]:
    """A key list as sorted unique non-empty strings; anything malformed gives []."""
    if isinstance(value, str):
        return [value] if value else []
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    try:
        items = list(value)  # list, tuple, numpy array
    except TypeError:
        return []
    if not items or not all(isinstance(k, str) and k for k in items):
        return []
    return sorted(set(items))


def validate_events(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split canonical completion events into (valid, rejected rows with a reason)."""
    events = events.reindex(columns=[*EVENT_COLUMNS, *(["raw"] if "raw" in events.columns else [])])
    events = events.reset_index(drop=True)
    reasons = np.full(len(events), "", dtype=object)
    _first_reason(reasons, _is_missing_text(events["key"]), "missing_key")
    ts = pd.to_numeric(events["ts"], errors="coerce")
    _first_reason(reasons, ts.isna().to_numpy(), "missing_ts")
    value = pd.to_numeric(events["value"], errors="coerce")
    bad_value = events["value"].notna().to_numpy() & ~np.isfinite(value.to_numpy(dtype=float))
    _first_reason(reasons, bad_value, "bad_value")
    for column in ("op_id", "source"):
        col = events[column]
        bad = np.asarray(col.map(lambda v: v is not None and v == v and not isinstance(v, str)), dtype=bool)
        _first_reason(reasons, bad, f"bad_{column}")
    rejected = _rejections(events, reasons, "events", EVENT_COLUMNS)
    ok = reasons == ""

    def text(column: str) -> np.ndarray:
        return events[column].map(lambda v: v if isinstance(v, str) and v else None).to_numpy(dtype=object)[ok]

    valid = pd.DataFrame(
        {
            "key": events["key"].to_numpy(dtype=object)[ok],
            "ts": ts.to_numpy()[ok].astype(np.int64),
            "op_id": text("op_id"),
            "source": text("source"),
            "value": value.to_numpy(dtype=float)[ok],
        }
    )
    return valid, rejected


@dataclass(frozen=True)
class Evaluation:
    """Result of ``evaluate`` for the operations it was given (aligned with ``ops``).

    ``used`` is aligned with the *sorted* matches (``matches`` attribute): True for the events
    that made a satisfied operation true (the prefix up to its crossing event), and for every
    match of an unsatisfied one.
    """

    satisfied: np.ndarray  # bool per op
    resolved_at: np.ndarray  # int64 per op (event time the condition became true; undefined if not)
    progress: np.ndarray  # float per op: count / sum / members reported / min offset over keys
    matched: np.ndarray  # int64 per op: events counted (up to the crossing when satisfied)
    matches: pd.DataFrame  # the matches, sorted by (handle, ts, eseq)
    used: np.ndarray  # bool per sorted match


def _group_starts(group: np.ndarray) -> np.ndarray:
    """Index of the first row of each run of equal values in a sorted array, per row."""
    n = group.size
    if n == 0:
        return np.empty(0, dtype=np.int64)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = group[1:] != group[:-1]
    return np.maximum.accumulate(np.where(new, np.arange(n), 0))


def _grouped_cumsum(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    return total - total[starts] + values[starts]


def _first_per_group(group: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group values, row index) of the first hit row of each group, in sorted order."""
    rows = np.flatnonzero(hit)
    values, first = np.unique(group[rows], return_index=True)
    return values, rows[first]


def evaluate(ops: pd.DataFrame, matches: pd.DataFrame, watch: pd.DataFrame | None = None) -> Evaluation:
    """Decide, for each operation, whether and when its condition holds.

    Args:
        ops: one row per operation: ``handle`` (unique int64), ``cond``, ``target``, ``ts``,
            ``n_members``.
        matches: every event matching those operations: ``handle``, ``key``, ``ts``, ``eseq``
            (arrival order, the tie-breaker), ``value``, ``source``, and ``is_member`` (bool,
            for ``all``).
        watch: for ``offset`` operations, one row per (``handle``, ``key``) with ``base``, the
            key's progress from events finalised before the operation arrived (NaN if none).
    """
    handles = ops["handle"].to_numpy(np.int64)
    n_ops = handles.size
    order = np.lexsort((matches["eseq"].to_numpy(), matches["ts"].to_numpy(), matches["handle"].to_numpy()))
    m = matches.iloc[order].reset_index(drop=True)
    m_handle = m["handle"].to_numpy(np.int64)
    m_ts = m["ts"].to_numpy(np.int64)
    if not _is_sorted(handles):
        raise ValueError("evaluate() needs ops sorted by unique handle")
    op_pos = np.searchsorted(handles, m_handle)
    cond = ops["cond"].to_numpy(np.int8)
    target = ops["target"].to_numpy(float)
    op_ts = ops["ts"].to_numpy(np.int64)
    row_cond = cond[op_pos]

    satisfied = np.zeros(n_ops, dtype=bool)
    resolved_at = op_ts.copy()
    progress = np.zeros(n_ops, dtype=float)
    matched = np.zeros(n_ops, dtype=np.int64)
    used = np.ones(len(m), dtype=bool)

    # --- any / count / sum / all: one cumulative measure per operation ------------------
    counted = row_cond != OFFSET
    starts = _group_starts(m_handle)
    source = m["source"].to_numpy(dtype=object)
    has_source = pd.notna(m["source"]).to_numpy()
    first_of_source = ~pd.DataFrame({"h": m_handle, "s": source}).duplicated().to_numpy() | ~has_source
    step = np.ones(len(m), dtype=float)
    step = np.where(row_cond == COUNT, first_of_source.astype(float), step)
    step = np.where(row_cond == SUM, np.nan_to_num(m["value"].to_numpy(float), nan=0.0), step)
    if "is_member" in m.columns:
        is_member = m["is_member"].to_numpy(bool)
    else:
        is_member = np.zeros(len(m), dtype=bool)
    step = np.where(row_cond == ALL, (first_of_source & has_source & is_member).astype(float), step)
    step = np.where(counted, step, 0.0)
    cum = _grouped_cumsum(step, starts) if len(m) else step
    goal = np.where(cond == ALL, ops["n_members"].to_numpy(float), np.where(cond == ANY, 1.0, target))
    row_goal = goal[op_pos]
    hit = counted & (cum >= row_goal - _epsilon(row_goal))

    # operations satisfied with no events at all (count/sum with target <= 0)
    trivially = np.isin(cond, (COUNT, SUM)) & (target <= 0)
    satisfied |= trivially

    hit_handles, hit_rows = _first_per_group(m_handle, hit)
    hit_ops = np.searchsorted(handles, hit_handles)
    fresh = ~satisfied[hit_ops]
    satisfied[hit_ops[fresh]] = True
    resolved_at[hit_ops[fresh]] = m_ts[hit_rows[fresh]]

    # per-row: is this row after its operation's crossing row? (for satisfied operations)
    crossing_row = np.full(n_ops, np.iinfo(np.int64).max, dtype=np.int64)
    crossing_row[hit_ops[fresh]] = hit_rows[fresh]
    crossing_row[trivially] = -1
    row_index = np.arange(len(m))
    counted_used = row_index <= crossing_row[op_pos]
    used = np.where(counted, counted_used, used)

    # progress and matched counts for non-offset ops: the value at the crossing or at the end
    if len(m):
        last_row = np.full(n_ops, -1, dtype=np.int64)
        np.maximum.at(last_row, op_pos[counted & counted_used], row_index[counted & counted_used])
        has_rows = last_row >= 0
        progress[has_rows] = cum[last_row[has_rows]]
        np.add.at(matched, op_pos[counted & counted_used], 1)
    progress = np.where(cond == ANY, matched.astype(float), progress)

    # --- offset: per (operation, key) running max, all keys must reach target -------------
    out = Evaluation(satisfied, resolved_at, progress, matched, m, used)
    is_offset = cond == OFFSET
    if is_offset.any():
        _evaluate_offset(handles, is_offset, target, op_ts, m, row_cond, watch, out)
    return out


def _evaluate_offset(
    handles: np.ndarray,
    is_offset: np.ndarray,
    target: np.ndarray,
    op_ts: np.ndarray,
    m: pd.DataFrame,
    row_cond: np.ndarray,
    watch: pd.DataFrame | None,
    out: Evaluation,
) -> None:
    """Offset: per (operation, key) running max from the key's base; every key must reach it."""
    if watch is None:
        raise ValueError("offset operations need the watch table (per-key base progress)")
    w = watch.loc[watch["handle"].isin(handles[is_offset]), ["handle", "key", "base"]]
    off_rows = np.flatnonzero(row_cond == OFFSET)
    events = m.iloc[off_rows][["handle", "key", "ts", "eseq", "value"]]
    # the base is a pseudo-event before all time; progress already there counts from o.ts
    seeds = w.assign(ts=np.iinfo(np.int64).min, eseq=-1, value=w["base"]).drop(columns="base")
    rows = pd.concat([seeds, events], ignore_index=True)
    rows = rows.sort_values(["handle", "key", "ts", "eseq"], kind="stable", ignore_index=True)
    running = rows.groupby(["handle", "key"], sort=False)["value"].cummax().to_numpy(float)
    pos = np.searchsorted(handles, rows["handle"].to_numpy(np.int64))
    reached = running >= target[pos] - _epsilon(target[pos])
    at = np.maximum(rows["ts"].to_numpy(np.int64), op_ts[pos])
    per_key = pd.DataFrame(
        {"handle": rows["handle"], "key": rows["key"], "running": running, "at": np.where(reached, at, -1)}
    )
    first_hit = per_key[reached].groupby(["handle", "key"], sort=False)["at"].first()
    final = per_key.groupby(["handle", "key"], sort=False)["running"].last()
    per_op = pd.DataFrame(
        {
            "keys": final.groupby(level=0).size(),
            "progress": final.fillna(-np.inf).groupby(level=0).min().replace(-np.inf, np.nan),
            "hit_keys": first_hit.groupby(level=0).size(),
            "at": first_hit.groupby(level=0).max(),
        }
    )
    idx = np.searchsorted(handles, per_op.index.to_numpy(np.int64))
    out.progress[idx] = per_op["progress"].to_numpy(float)
    done = (per_op["hit_keys"].fillna(0) >= per_op["keys"]).to_numpy()
    newly = done & ~out.satisfied[idx]
    out.satisfied[idx[newly]] = True
    out.resolved_at[idx[newly]] = per_op["at"].to_numpy()[newly].astype(np.int64)
    # events that count: for a satisfied op those up to resolved_at, else all of them
    row_pos = np.searchsorted(handles, m["handle"].to_numpy(np.int64)[off_rows])
    m_ts = m["ts"].to_numpy(np.int64)[off_rows]
    use = ~out.satisfied[row_pos] | (m_ts <= out.resolved_at[row_pos])
    out.used[off_rows] = use
    np.add.at(out.matched, row_pos[use], 1)


def _epsilon(goal: np.ndarray) -> np.ndarray:
    """Tolerance for float sums (0.1 + 0.2 >= 0.3 should hold)."""
    return np.abs(np.nan_to_num(goal, nan=0.0)) * 1e-12


def _is_sorted(values: np.ndarray) -> bool:
    return values.size < 2 or bool((values[1:] > values[:-1]).all())
