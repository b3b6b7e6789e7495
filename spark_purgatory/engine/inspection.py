"""Inspection: a shard's pending operations, with the progress each has made, as one frame.

Invariants: a stub is never a row (the cross-shard group reports its operation); the frame
is a pure function of the state.

>>> import pandas as pd
>>> from spark_purgatory import Purgatory
>>> p = Purgatory()
>>> ops = pd.DataFrame({"op_id": ["join-1"], "keys": [["group-7"]], "ts": [0], "timeout_ms": [5_000],
...                     "condition": ["all"], "members": [["a", "b", "c"]]})
>>> _ = p.process(ops, pd.DataFrame({"key": ["group-7"], "ts": [10], "source": ["b"]}), watermark_ms=0)
>>> pending = pending_frame(p, watermark_ms=1_000)
>>> pending[["op_id", "progress", "goal", "time_left_ms"]].values.tolist()
[['join-1', 1.0, 3.0, 4000]]
>>> list(pending["members_missing"].iat[0])
['a', 'c']
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..contract import PENDING_COLUMNS
from .answered import who_answered
from .arrays import hash_strings
from .conditions import ALL, ANY, CONDITION_NAMES, FLOOR_ESEQ, OFFSET, evaluate
from .frames import rows_where
from .purgatory import Purgatory
from .tables import I64_MIN


def pending_count(p: Purgatory) -> int:
    """Pending operations this shard reports (stubs excluded)."""
    return int((~p.tables().ops["stub"].to_numpy(bool)).sum())


def pending_frame(p: Purgatory, *, watermark_ms: int | None = None, batch_id: int = -1) -> pd.DataFrame:
    """The pending operations of ``p`` (``contract.PENDING`` columns), each with the progress it
    would report if it expired now.

    Args:
        p: a shard's purgatory, e.g. from ``load_state``.
        watermark_ms: what ``time_left_ms`` counts from; the shard's own watermark when None.
        batch_id: the micro-batch whose state ``p`` is, written to every row.

    Returns:
        One row per pending operation (stubs excluded), in arrival order; times as epoch ms.
    """
    t = p.tables()
    ops = rows_where(t.ops, ~t.ops["stub"].to_numpy(bool)).reset_index(drop=True)
    handles = ops["handle"].to_numpy(np.int64)
    mine = np.isin(t.matches["handle"].to_numpy(np.int64), handles)
    matches = t.matches.loc[mine] if not mine.all() else t.matches
    cond = ops["cond"].to_numpy(np.int8)
    offset = cond == OFFSET
    watch = None
    if offset.any():
        watch = t.watch.loc[
            t.watch["handle"].isin(handles[offset]), ["handle", "hash", "key", "progress_at_watch"]
        ]
    result = evaluate(ops, matches, watch)

    pos = np.searchsorted(handles, matches["handle"].to_numpy(np.int64))
    event = matches["eseq"].to_numpy(np.int64) != FLOOR_ESEQ
    values = np.nan_to_num(matches["value"].to_numpy(float), nan=0.0)
    value_sum = np.bincount(pos[event], weights=values[event], minlength=len(ops))
    wm = t.watermark if watermark_ms is None else int(watermark_ms)
    wm = max(wm, 0) if wm == I64_MIN else wm
    deadline = ops["deadline"].to_numpy(np.int64)
    target = ops["target"].to_numpy(float)
    goal = np.where(cond == ALL, ops["n_members"].to_numpy(float), np.where(cond == ANY, 1.0, target))
    n = len(ops)
    frame = pd.DataFrame(
        {
            "op_id": ops["op_id"].to_numpy(dtype=object),
            "keys": ops["keys"].to_numpy(dtype=object),
            "shard": np.full(n, -1 if p.shard is None else p.shard, dtype=np.int32),
            "ts": ops["ts"].to_numpy(np.int64),
            "deadline": deadline,
            "condition": CONDITION_NAMES[cond.astype(np.int64)],
            "target": target,
            # no members: None, however the input said it (the Spark host stores None, pandas [])
            "members": np.where(
                ops["n_members"].to_numpy(np.int64) > 0, ops["members"].to_numpy(dtype=object), None
            ),
            "payload": ops["payload"].to_numpy(dtype=object),
            "matched_events": result.matched.astype(np.int64),
            "distinct_sources": _distinct_sources(
                n, pos[event], matches["source"].to_numpy(dtype=object)[event]
            ),
            "value_sum": value_sum,
            "progress": result.progress.astype(float),
            "goal": goal,
            "offsets": _offsets(ops, offset, matches, watch),
            # None for every operation when none is an ``all`` or ``quorum``
            "members_missing": who_answered(ops, result, None, p.config.input_max_members).missing,
            "time_left_ms": deadline - wm,
            "watermark": np.full(n, wm, dtype=np.int64),
            "batch_id": np.full(n, int(batch_id), dtype=np.int64),
        },
        copy=False,
    )
    return frame[PENDING_COLUMNS]


def with_progress_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (``contract.PENDING`` columns) with how far each operation is from its
    condition: ``still_needed`` (the goal less the progress, never below 0) and
    ``progress_text``, in words.

    >>> frame = pd.DataFrame({"condition": ["all", "count", "quorum"], "progress": [1.0, 2.0, 1.0],
    ...     "goal": [3.0, 3.0, 2.0], "matched_events": [1, 2, 2], "distinct_sources": [1, 2, 2],
    ...     "members_missing": [["a", "c"], None, ["a", "c"]], "offsets": [None, None, None]})
    >>> for row in with_progress_text(frame)[["still_needed", "progress_text"]].values.tolist():
    ...     print(row)
    [2.0, '1 of 3 members, missing a, c']
    [1.0, '2 of 3 sources']
    [1.0, '1 of 2 members, yet to report a, c']
    """
    cond = frame["condition"].to_numpy(dtype=object)
    progress = frame["progress"].to_numpy(float)
    goal = frame["goal"].to_numpy(float)
    done = np.nan_to_num(progress, nan=0.0)
    of = _number(done) + " of " + _number(goal)
    missing = np.array(
        [", ".join(m) if m is not None else "" for m in frame["members_missing"]], dtype=object
    )
    lowest = np.array([_lowest(m) for m in frame["offsets"]], dtype=object)
    sources = frame["distinct_sources"].to_numpy(np.int64) > 0
    text = np.select(
        [cond == "any", cond == "count", cond == "sum", cond == "all", cond == "offset", cond == "quorum"],
        [
            np.where(frame["matched_events"].to_numpy(np.int64) > 0, "matched", "no event yet"),
            of + np.where(sources, " sources", " events"),
            "sum " + of,
            of + " members, missing " + missing,
            "lowest key at " + lowest + " of " + _number(goal),
            of + " members, yet to report " + missing,
        ],
        default="",
    )
    still = np.where(np.isnan(progress), goal, np.maximum(goal - done, 0.0))
    return frame.assign(still_needed=still, progress_text=text.astype(object))


def _number(values: np.ndarray) -> np.ndarray:
    """2 rather than 2.0, 12.5 as it is."""
    return np.array([f"{v:.6f}".rstrip("0").rstrip(".") for v in values], dtype=object)


def _lowest(offsets: object) -> str:
    if offsets is None:
        return "none"
    pairs = offsets.items() if isinstance(offsets, dict) else offsets  # Spark: a dict; Arrow: pairs
    values = [v for _, v in pairs if v is not None]  # type: ignore[union-attr]
    return _number(np.array([min(values)]))[0] if values else "none"


def _distinct_sources(n_ops: int, pos: np.ndarray, source: np.ndarray) -> np.ndarray:
    present = pd.notna(source)
    if not present.any():
        return np.zeros(n_ops, dtype=np.int64)
    pairs = pd.DataFrame({"op": pos[present], "source": hash_strings(source[present])}).drop_duplicates()
    return np.bincount(pairs["op"].to_numpy(np.int64), minlength=n_ops).astype(np.int64)


def _offsets(
    ops: pd.DataFrame, offset: np.ndarray, matches: pd.DataFrame, watch: pd.DataFrame | None
) -> np.ndarray:
    """Per ``offset`` operation, each watched key's highest offset so far; None for others."""
    out = np.full(len(ops), None, dtype=object)
    if watch is None or len(watch) == 0:
        return out
    handles = ops["handle"].to_numpy(np.int64)
    best = (
        matches.loc[matches["handle"].isin(handles[offset]), ["handle", "khash", "value"]]
        .groupby(["handle", "khash"], sort=False)["value"]
        .max()
        .rename("reached")
    )
    w = watch.join(best, on=["handle", "hash"])
    w = w.assign(best=np.fmax(w["progress_at_watch"].to_numpy(float), w["reached"].to_numpy(float)))
    w = w.sort_values(["handle", "key"], kind="stable")
    per_op = np.searchsorted(handles, w["handle"].to_numpy(np.int64))
    lengths = np.bincount(per_op, minlength=len(ops))[offset]
    maps = pa.MapArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(lengths)]), pa.int32()),
        pa.array(w["key"].to_numpy(dtype=object), pa.string()),
        pa.array(w["best"].to_numpy(float), pa.float64(), from_pandas=True),
    )
    out[offset] = maps.to_pandas()
    return out
