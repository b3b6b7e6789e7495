"""Validation of canonical operation and event frames in pandas: valid rows, or a reason.

The engine validates what it is handed unless the host already did (``validated=True``);
the Spark host validates in Spark SQL (``spark.sources``).  Both speak the vocabulary of
``contract.REASONS``.

Invariant: every row comes out either valid or rejected with exactly one reason.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..contract import EVENT_COLUMNS, OPERATION_COLUMNS
from .conditions import ALL, CONDITIONS, NEEDS_TARGET

__all__ = ["raw_json", "validate_operations", "validate_events"]


def raw_json(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
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
            "raw": raw_json(frame.loc[bad], columns).to_numpy(dtype=object),
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
    needs_target = code.isin(NEEDS_TARGET).to_numpy()
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
        }
    )
    if "raw" in ops.columns:
        valid["raw"] = ops["raw"].to_numpy(dtype=object)[ok]
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
        return (
            events[column].map(lambda v: v if isinstance(v, str) and v else None).to_numpy(dtype=object)[ok]
        )

    valid = pd.DataFrame(
        {
            "key": events["key"].to_numpy(dtype=object)[ok],
            "ts": ts.to_numpy()[ok].astype(np.int64),
            "op_id": text("op_id"),
            "source": text("source"),
            "value": value.to_numpy(dtype=float)[ok],
        }
    )
    if "raw" in events.columns:
        valid["raw"] = events["raw"].to_numpy(dtype=object)[ok]
    return valid, rejected
