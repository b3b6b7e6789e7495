"""Key progress and event finalisation: what the watermark settles about keys and events.

Events are buffered until the watermark passes them, since an operation may still arrive
for them.  Once passed, an event is *final*:

* an untargeted event with a ``value`` feeds its key's offset progress (the running max of
  values, kept ``purgatory.progress.retention.ms`` after the key's last such event), which
  ``offset`` operations arriving later start from;
* an event no operation counted is reported in ``unmatched_events``: ``after_resolution``
  if an operation watching its key (or, for a targeted event, its own operation) resolved
  after it, else ``no_operation``.  An event a stub matched is the cross-shard group's to
  report, on its primary's notice (``relay``; ``after_resolution_rows``).

Invariants: every valid event is finalised exactly once; a key is retained while either its
progress or its resolution time can still matter, and forgotten after.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..contract import AFTER_RESOLUTION, NO_OPERATION, UNMATCHED_COLUMNS
from .frames import empty, hash_strings, run_starts
from .tables import EVENTS, I64_MIN, KEYS

__all__ = [
    "touch_keys",
    "final_progress",
    "unmatched_rows",
    "after_resolution_rows",
    "retire_keys",
    "keys_wakeup",
    "empty_unmatched",
]

#: an unmatched event's own fields (the columns before ``reason`` and ``batch_id``)
_EVENT_FIELDS = UNMATCHED_COLUMNS[: UNMATCHED_COLUMNS.index("reason")]


def touch_keys(
    keys: pd.DataFrame,
    khash: np.ndarray,
    *,
    progress: np.ndarray | None = None,
    last_event_ts: np.ndarray | None = None,
    resolved_until: np.ndarray | None = None,
) -> pd.DataFrame:
    """``keys`` with these keys' columns raised to the given values (each a running max).

    Keys keep their order, new ones follow in the order given (a ``groupby(sort=False)``),
    each column the max of its rows (``progress`` the max of its non-NaN values).
    """
    n = len(khash)
    update = {
        "khash": khash.astype(np.uint64),
        "progress": progress if progress is not None else np.full(n, np.nan),
        "last_event_ts": last_event_ts if last_event_ts is not None else np.full(n, I64_MIN),
        "resolved_until": resolved_until if resolved_until is not None else np.full(n, I64_MIN),
    }
    rows = {c: np.concatenate([keys[c].to_numpy(), update[c]]).astype(t) for c, t in KEYS.items()}
    order = np.argsort(rows["khash"], kind="stable")  # a key's rows together, in row order
    khash = rows["khash"][order]
    starts = np.flatnonzero(run_starts(khash))
    if starts.size == 0:
        return empty(KEYS)
    place = np.argsort(order[starts], kind="stable")  # keys in the order of their first row
    out = {"khash": khash[starts][place]}
    out["progress"] = np.fmax.reduceat(rows["progress"][order], starts)[place]
    for c in ("last_event_ts", "resolved_until"):
        out[c] = np.maximum.reduceat(rows[c][order], starts)[place]
    return pd.DataFrame(out, copy=False)


def final_progress(keys: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """``keys`` with the offset progress of the final events' untargeted values."""
    untargeted = final.loc[final["op_id"].isna() & final["value"].notna()]
    if len(untargeted) == 0:
        return keys
    untargeted = untargeted.assign(khash=hash_strings(untargeted["key"].to_numpy(dtype=object)))
    per_key = untargeted.groupby("khash").agg(progress=("value", "max"), last=("ts", "max"))
    return touch_keys(
        keys,
        per_key.index.to_numpy(np.uint64),
        progress=per_key["progress"].to_numpy(float),
        last_event_ts=per_key["last"].to_numpy(np.int64),
    )


def unmatched_rows(
    lost: pd.DataFrame, keys: pd.DataFrame, resolved_targets: np.ndarray, batch_id: int
) -> pd.DataFrame:
    """``unmatched_events`` rows for final events nothing counted, with their reason.

    ``resolved_targets``: per targeted event in ``lost`` (in order), whether its own
    operation was resolved recently.
    """
    lost_hash = pd.DataFrame({"khash": hash_strings(lost["key"].to_numpy(dtype=object))})
    resolved_until = lost_hash.merge(keys[["khash", "resolved_until"]], on="khash", how="left")
    after = lost["ts"].to_numpy(np.int64) < resolved_until["resolved_until"].fillna(I64_MIN).to_numpy()
    # a targeted event is late for its own operation only, whatever happened on its key
    after[pd.notna(lost["op_id"].to_numpy(dtype=object))] = resolved_targets
    return _reported(lost, np.where(after, AFTER_RESOLUTION, NO_OPERATION), batch_id)


def after_resolution_rows(lost: pd.DataFrame, batch_id: int) -> pd.DataFrame:
    """``unmatched_events`` rows for events an operation resolved before (the cross-shard
    group's answer to notices: ``relay.decide``)."""
    return _reported(lost, np.full(len(lost), AFTER_RESOLUTION, dtype=object), batch_id)


def _reported(lost: pd.DataFrame, reason: np.ndarray, batch_id: int) -> pd.DataFrame:
    out = lost[_EVENT_FIELDS].reset_index(drop=True).astype({n: EVENTS[n] for n in _EVENT_FIELDS})
    out["reason"] = reason
    out["batch_id"] = np.int64(batch_id)
    return out


def retire_keys(keys: pd.DataFrame, watermark: int, progress_retention_ms: int) -> pd.DataFrame:
    """Forget keys whose progress retention and resolution time the watermark both passed."""
    if len(keys) == 0:
        return keys
    keep = (keys["last_event_ts"].to_numpy(np.int64) > watermark - progress_retention_ms) | (
        keys["resolved_until"].to_numpy(np.int64) > watermark
    )
    return keys.loc[keep].reset_index(drop=True)


def keys_wakeup(keys: pd.DataFrame, progress_retention_ms: int) -> int:
    """The earliest watermark at which ``retire_keys`` forgets a key (``keys`` not empty)."""
    last = keys["last_event_ts"].to_numpy(np.int64)
    progress_until = np.where(last > I64_MIN, last + progress_retention_ms, I64_MIN)
    retire = np.maximum(progress_until, keys["resolved_until"].to_numpy(np.int64))
    return int(retire.min()) + 1


def empty_unmatched() -> pd.DataFrame:
    frame = empty({name: EVENTS[name] for name in _EVENT_FIELDS})
    frame["reason"] = pd.Series(dtype="object")
    frame["batch_id"] = pd.Series(dtype="int64")
    return frame
