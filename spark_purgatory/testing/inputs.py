"""The tester's input and times: rows as records or JSON lines, event times in any accepted
form in, UTC Timestamps out (as the Delta tables hold them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from ..config import InputLimits
from ..contract import MAX_TS_MS
from ..engine.lines import json_lines
from ..engine.validation import epoch_ms, record_json

Rows: TypeAlias = "pd.DataFrame | Sequence[Mapping[str, Any]] | Sequence[str | bytes] | str | bytes"
#: an event time: epoch ms, an ISO-8601 string (``"2026-01-01T00:00:15Z"``) or a datetime
Time: TypeAlias = "int | str | datetime"


def _utc(ms: Any) -> pd.DatetimeIndex:
    """Epoch ms (float64, NaN for none) as UTC Timestamps, NaT for NaN, through int64.

    Not ``pd.to_datetime(floats, unit="ms")``: with a NaN among the floats, pandas now and then
    raises ``FloatingPointError`` ("overflow encountered in multiply").

    >>> list(_utc([1767225615000.0, float("nan"), 0.5]).astype(str))
    ['2026-01-01 00:00:15+00:00', 'NaT', '1970-01-01 00:00:00.000500+00:00']
    """
    ms = np.asarray(ms, dtype="float64")
    missing = np.isnan(ms)
    known = np.where(missing, 0.0, ms)
    whole = np.floor(known).astype(np.int64)
    ns = whole.astype("datetime64[ms]").astype("datetime64[ns]")
    ns = ns + np.round((known - whole) * 1e6).astype("timedelta64[ns]")  # a fraction of a ms
    ns[missing] = np.datetime64("NaT")
    return pd.DatetimeIndex(ns).tz_localize("UTC")


def _timestamps(values: pd.Series) -> pd.DatetimeIndex:
    """Any accepted time form (ms, ISO string, datetime) as UTC Timestamps; NaT if missing."""
    return _utc(epoch_ms(pd.Series(values, dtype=object)))


def _with_timestamps(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    present = [c for c in columns if c in frame.columns]
    return frame.assign(**{c: pd.Series(_utc(frame[c]), index=frame.index) for c in present})


def _input_frame(rows: Rows, limits: InputLimits) -> pd.DataFrame:
    """The rows as a frame: records as they are, JSON lines read as the job reads them."""
    if isinstance(rows, pd.DataFrame):
        return rows.copy()
    if isinstance(rows, (str, bytes)):
        return json_lines(rows.splitlines(), limits=limits)
    rows = list(rows)
    lines = [isinstance(r, (str, bytes, bytearray)) for r in rows]
    if rows and all(lines):
        return json_lines(rows, limits=limits)
    if any(lines):
        raise TypeError("give records (dicts) or JSON lines (str, bytes), not both in one call")
    return pd.DataFrame(rows)


def _with_raw(frames: list[pd.DataFrame]) -> list[pd.DataFrame]:
    """When lines and records are queued for one micro-batch, the records get the ``raw``
    a rejected record shows (its fields as JSON), since the lines bring theirs."""
    if not any("raw" in f.columns for f in frames):
        return frames
    return [f if "raw" in f.columns else f.assign(raw=record_json(f, list(f.columns))) for f in frames]


def _check_readable(to: Time) -> None:
    """Raise the ``ValueError`` for a time that is well formed but outside the contract's
    range (1970 up to ``contract.MAX_TS_MS``); return for one that is not a time at all."""
    ms: float | None = None
    if isinstance(to, (int, np.integer)) and not isinstance(to, bool):
        ms = float(to)
    elif isinstance(to, (str, datetime)):
        try:
            when = datetime.fromisoformat(to) if isinstance(to, str) else to
        except ValueError:
            return
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        ms = (when - datetime(1970, 1, 1, tzinfo=timezone.utc)) / timedelta(milliseconds=1)
    if ms is not None and not 0 <= ms < MAX_TS_MS:
        raise ValueError(
            f"event time out of range: {to!r} (the contract's event times lie from 1970-01-01 "
            f"up to {_utc([MAX_TS_MS])[0].isoformat()}, excluded)"
        )


def _collect(frames: list[pd.DataFrame], columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of ``frames`` in order (only ``columns``, if given); empty frames add nothing."""
    filled = [f for f in frames if len(f)]
    if not filled:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns or []})
    rows = pd.concat(filled, ignore_index=True)
    return rows if columns is None else rows[columns]
