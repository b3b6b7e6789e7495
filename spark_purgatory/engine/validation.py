"""Validation of operation and event frames in pandas: valid rows, or a reason.

The engine validates what it is handed unless the host already did (``validated=True``);
the Spark host validates in Spark SQL (``spark.sources``).  Both read a record the same way
and check the same things in the same order, the order of ``contract.OPERATION_REASONS`` /
``contract.EVENT_REASONS`` (the first failing check gives the reason), so a row gets the
same reason on either path:

* a text field (``op_id``, ``key``, ``source``, ``payload``, a key or member in a list) holds
  a string; a number or ``true``/``false`` stands for its text, as Spark's JSON reader reads
  it; an array or object in ``op_id``, ``source`` or ``payload`` is ``bad_<field>``;
* ``keys`` and ``members`` are lists of text (a single string is a one-element list), blank
  items dropped, deduplicated and sorted; ``key`` stands for ``keys`` when ``keys`` is absent;
* ``ts`` is an ISO-8601 timestamp (UTC unless it says otherwise) or whole epoch ms, from
  1970 up to ``contract.MAX_TS_MS``;
* ``timeout_ms`` is a whole number, ``target`` and ``value`` finite numbers (or their text).

Typed frames are read by the same rules, with one allowance: a whole float is a whole
number (pandas turns an int column with gaps into floats), where the JSON text ``5.0`` is not.

Invariant: every row comes out either valid or rejected with exactly one reason.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import numpy as np
import pandas as pd

from ..contract import (
    EVENT_COLUMNS,
    EVENT_REASONS,
    MAX_TS_MS,
    OPERATION_COLUMNS,
    OPERATION_INPUT,
    OPERATION_REASONS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
)
from .conditions import ALL, ANY, CONDITION_NAMES, CONDITIONS, NEEDS_TARGET

__all__ = ["epoch_ms", "raw_json", "readable", "first_keys", "validate_operations", "validate_events"]

_I64 = (-(2**63), 2**63 - 1)
_WHOLE = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_EPOCH_MS = re.compile(r"^\s*-?[0-9]+\s*$")
_STRUCTURED = (list, tuple, dict, np.ndarray)
_ANY = str(CONDITION_NAMES[ANY])


def raw_json(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The record as a person would read it, when the source did not keep its raw text.

    Valid JSON (a missing number is ``null``, never ``NaN``), with only the fields present.
    """
    if "raw" in frame.columns:
        return frame["raw"]
    present = [c for c in columns if c in frame.columns]
    records = frame[present].to_dict(orient="records") if present else [{}] * len(frame)
    return pd.Series(
        [json.dumps({k: _plain(v) for k, v in r.items()}, sort_keys=True, allow_nan=False) for r in records],
        index=frame.index,
        dtype=object,
    )


def _plain(value: object) -> object:
    """A field value as JSON can hold it (numpy scalars and arrays, NaN as null)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool, dict)):
        return value
    return None if pd.isna(value) else str(value)


# -- reading one field, the way Spark's JSON reader and casts read it --------------------------------


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """The column as an object array (all None when the frame lacks it)."""
    if name not in frame.columns:
        return np.full(len(frame), None, dtype=object)
    return frame[name].to_numpy(dtype=object)


def _is_missing(v: object) -> bool:
    return v is None or (not isinstance(v, (str, *_STRUCTURED)) and bool(pd.isna(v)))


def _text(v: object) -> str | None:
    """A field's text: a string as it is, a number or boolean as JSON writes it, an array or
    object as compact JSON (what Spark hands a string field); None when missing."""
    if isinstance(v, str):
        return v
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return None if np.isnan(v) else json.dumps(float(v))
    if _is_missing(v):
        return None
    return json.dumps(_plain(v), separators=(",", ":"))


def _blank(text: str | None) -> bool:
    return text is None or text.strip(" ") == ""


def _texts(values: np.ndarray) -> list[str | None]:
    return [_text(v) for v in values]


def _structured(values: np.ndarray) -> np.ndarray:
    return np.fromiter((isinstance(v, _STRUCTURED) for v in values), bool, len(values))


def _string_list(v: object) -> list[str] | None:
    """Spark's reading of a list field: an array's items as text, a single value as a
    one-element list; an object, or a string that is not a JSON array but looks like one, is
    no list at all (None)."""
    if _is_missing(v) or isinstance(v, dict):
        return None
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_text(item) for item in v]
    text = _text(v)
    stripped = text.strip(" ")
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return None
        return [_text(item) for item in items] if isinstance(items, list) else None
    if stripped.startswith("{") or stripped == "":
        return None
    return [text]


def _keys_of(keys: object, key: object) -> list[str | None] | None:
    """``keys``, or when it is no list, the single ``key`` (the SPEC's shorthand)."""
    listed = _string_list(keys)
    if listed is None and not _blank(_text(key)):
        return [_text(key)]
    return listed


def _clean(items: list[str | None] | None) -> list[str]:
    """Blank items dropped, deduplicated, sorted."""
    return sorted({i for i in items if not _blank(i)}) if items else []


def _whole(v: object) -> int | None:
    """A whole number within int64 (try_cast AS BIGINT), else None."""
    if _is_missing(v) or isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, str):
        n = int(v) if _WHOLE.match(v) else None
    elif isinstance(v, (int, np.integer)):
        n = int(v)
    elif isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
        n = int(v)
    else:
        return None
    return n if n is not None and _I64[0] <= n <= _I64[1] else None


def _number(v: object) -> float | None:
    """A number (try_cast AS DOUBLE: also its text, NaN and Infinity), else None."""
    if _is_missing(v) or isinstance(v, (bool, np.bool_, *_STRUCTURED)):
        return None
    if isinstance(v, str):
        text = v.strip()
        if "_" in text:  # Python reads 1_000, Spark does not
            return None
        try:
            return float(text)
        except ValueError:
            return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def epoch_ms(column: pd.Series) -> np.ndarray:
    """Event times as epoch ms (float, NaN when unreadable or out of range).

    Epoch ms as numbers or digit strings, ISO-8601 strings and datetimes are read, as the Spark
    parser reads them; the range is [1970, 2200).

    >>> epoch_ms(pd.Series([15, "2026-01-01T00:00:15Z", "yesterday"])).tolist()
    [15.0, 1767225615000.0, nan]
    """
    if pd.api.types.is_datetime64_any_dtype(column):
        ms = np.where(column.isna(), np.nan, column.to_numpy("datetime64[ms]").astype(np.int64))
    elif pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        ms = column.to_numpy(float)
        ms[ms != np.floor(ms)] = np.nan
    else:
        ms = _epoch_ms_of_objects(column.to_numpy(dtype=object))
    ms = ms.astype(float)
    ms[(ms < 0) | (ms >= MAX_TS_MS)] = np.nan
    return ms


def _epoch_ms_of_objects(values: np.ndarray) -> np.ndarray:
    ms = np.full(len(values), np.nan)
    iso: list[int] = []
    for i, v in enumerate(values):
        if isinstance(v, str) and not _EPOCH_MS.match(v):
            iso.append(i)
        elif isinstance(v, (dt.datetime, np.datetime64)):
            ms[i] = np.nan if pd.isna(v) else pd.Timestamp(v).value // 1_000_000
        else:
            n = _whole(v)
            ms[i] = np.nan if n is None else n
    if iso:
        parsed = pd.to_datetime(
            pd.Series([values[i].strip() for i in iso], dtype=object),
            utc=True,
            format="ISO8601",
            errors="coerce",
        )
        ns = parsed.dt.tz_localize(None).to_numpy("datetime64[ns]").astype(np.int64)
        ms[iso] = np.where(parsed.isna().to_numpy(), np.nan, ns // 1_000_000)
    return ms


# -- the checks, applied in the contract's order ---------------------------------------------------


def _first_reasons(checks: dict[str, np.ndarray], order: tuple[str, ...], n: int) -> np.ndarray:
    """Per row, the first reason in ``order`` whose check failed ("" when none did)."""
    unknown = set(checks) - set(order)
    if unknown:
        raise ValueError(f"checks for reasons outside the contract's order: {sorted(unknown)}")
    reasons = np.full(n, "", dtype=object)
    for reason in reversed(order):
        if reason in checks:
            reasons[np.asarray(checks[reason], dtype=bool)] = reason
    return reasons


def _rejections(
    frame: pd.DataFrame,
    reasons: np.ndarray,
    source: str,
    columns: list[str],
    op_id: np.ndarray,
    key: np.ndarray,
) -> pd.DataFrame:
    """The rejected rows (``contract.REJECTED``): the record, its reason, and its ``op_id`` and
    ``key`` where they are readable text (``readable``)."""
    bad = reasons != ""
    return pd.DataFrame(
        {
            "source": source,
            "raw": raw_json(frame.loc[bad], columns).to_numpy(dtype=object),
            "reason": reasons[bad],
            "op_id": op_id[bad],
            "key": key[bad],
        }
    )


def readable(texts: np.ndarray, structured: np.ndarray | None = None) -> np.ndarray:
    """Text values as ``rejected`` shows them: None where blank (or an array or object)."""
    out = np.array([None if _blank(t) else t for t in texts], dtype=object)
    if structured is not None:
        out[structured] = None
    return out


def first_keys(keys: np.ndarray) -> np.ndarray:
    """An operation's key for ``rejected``: the first of its (sorted) keys, None if none."""
    return np.array([k[0] if len(k) else None for k in keys], dtype=object)


def _time_checks(ts: np.ndarray, ms: np.ndarray, now_ms: int | None, max_future_ms: int | None) -> dict:
    """Missing, unreadable or out-of-range event time, or one too far in the future (off
    unless ``max_future_ms`` is given; ``now_ms`` defaults to the clock)."""
    missing = np.fromiter((_blank(_text(v)) for v in ts), bool, len(ts))
    checks = {"missing_ts": missing, "bad_ts": np.isnan(ms)}
    if max_future_ms is not None:
        now = time.time() * 1000 if now_ms is None else now_ms
        checks["ts_in_future"] = ms > now + max_future_ms
    return checks


def _blanks(texts) -> np.ndarray:
    return np.fromiter((_blank(t) for t in texts), bool, len(texts))


def _empty(lists: np.ndarray) -> np.ndarray:
    return np.fromiter((len(x) == 0 for x in lists), bool, len(lists))


def _numbers(values: np.ndarray) -> np.ndarray:
    """``_number`` of each value, NaN for none."""
    return np.array([np.nan if (x := _number(v)) is None else x for v in values], dtype=float)


def validate_operations(
    ops: pd.DataFrame, *, max_timeout_ms: int, now_ms: int | None = None, max_future_ms: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split operations into (valid, rejected rows with a reason).

    Expects the SPEC's operation fields (``keys`` a list, or ``key``; missing optional
    columns are allowed) and an optional ``raw`` column; ``ts`` may be epoch ms, a timestamp
    or ISO-8601 text.  Valid rows come back with ``keys`` deduplicated and sorted, ``ts`` in
    epoch ms, condition code ``cond`` and ``deadline = ts + timeout_ms``.  ``max_future_ms``
    turns on ``ts_in_future`` (relative to ``now_ms``, default the clock).
    """
    ops = ops.reset_index(drop=True)
    f = _read_operations(ops)
    n = len(ops)
    has_timeout = f["has_timeout"]
    needs_target = f["cond"].isin(NEEDS_TARGET).to_numpy()
    checks = {
        "missing_op_id": _blanks(f["op_id"]),
        "bad_op_id": _structured(_column(ops, "op_id")),
        "missing_key": _empty(f["keys"]),
        **_time_checks(_column(ops, "ts"), f["ts"], now_ms, max_future_ms),
        "missing_timeout_ms": _blanks(_texts(_column(ops, "timeout_ms"))),
        "bad_timeout_ms": ~has_timeout,
        "negative_timeout": has_timeout & (f["timeout_ms"] < 0),
        "timeout_above_max": has_timeout & (f["timeout_ms"] > max_timeout_ms),
        "unknown_condition": f["cond"].isna().to_numpy(),
        "missing_target": needs_target & _blanks(_texts(_column(ops, "target"))),
        "bad_target": needs_target & ~np.isfinite(f["target"]),
        "missing_members": (f["cond"] == ALL).to_numpy() & _empty(f["members"]),
        "bad_payload": _structured(_column(ops, "payload")),
    }
    reasons = _first_reasons(checks, OPERATION_REASONS, n)
    columns = [c for c in OPERATION_INPUT.names if c in OPERATION_COLUMNS or c in ops.columns]
    op_id = readable(f["op_id"], checks["bad_op_id"])
    rejected = _rejections(ops, reasons, SOURCE_OPERATIONS, columns, op_id, first_keys(f["keys"]))
    ok = reasons == ""
    ts = f["ts"][ok].astype(np.int64)
    valid = pd.DataFrame(
        {
            "op_id": f["op_id"][ok],
            "keys": f["keys"][ok],
            "ts": ts,
            "deadline": ts + f["timeout_ms"][ok],
            "cond": f["cond"].to_numpy()[ok].astype(np.int8),
            "target": f["target"][ok],
            "members": f["members"][ok],
            "payload": f["payload"][ok],
        }
    )
    if "raw" in ops.columns:
        valid["raw"] = ops["raw"].to_numpy(dtype=object)[ok]
    return valid, rejected


def _read_operations(ops: pd.DataFrame) -> dict:
    """Each field as the validator reads it (see the module docstring)."""
    n = len(ops)
    pairs = zip(_column(ops, "keys"), _column(ops, "key"), strict=True)
    condition = [_ANY if t is None else t.strip(" ").lower() for t in _texts(_column(ops, "condition"))]
    timeout = [_whole(v) for v in _column(ops, "timeout_ms")]
    return {
        "op_id": np.array(_texts(_column(ops, "op_id")), dtype=object),
        "keys": _objects([_clean(_keys_of(many, one)) for many, one in pairs]),
        "ts": epoch_ms(ops["ts"] if "ts" in ops.columns else pd.Series([None] * n, dtype=object)),
        "timeout_ms": np.array([0 if t is None else t for t in timeout], dtype=np.int64),
        "has_timeout": np.array([t is not None for t in timeout], dtype=bool),
        "cond": pd.Series(condition, dtype=object).map(CONDITIONS),
        "target": _numbers(_column(ops, "target")),
        "members": _objects([_clean(_string_list(v)) for v in _column(ops, "members")]),
        "payload": np.array(_texts(_column(ops, "payload")), dtype=object),
    }


def _objects(items: list) -> np.ndarray:
    """A list of lists as a 1-d object array (numpy would make a 2-d array of equal lists)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def validate_events(
    events: pd.DataFrame, *, now_ms: int | None = None, max_future_ms: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split completion events into (valid, rejected rows with a reason).

    Expects the SPEC's event fields and an optional ``raw`` column; ``ts`` as for
    ``validate_operations``, and so is ``max_future_ms``.
    """
    events = events.reset_index(drop=True)
    n = len(events)
    key = np.array(_texts(_column(events, "key")), dtype=object)
    ms = epoch_ms(events["ts"] if "ts" in events.columns else pd.Series([None] * n, dtype=object))
    value_given = ~np.fromiter((_is_missing(v) for v in _column(events, "value")), bool, n)
    value = _numbers(_column(events, "value"))
    op_id, source = _column(events, "op_id"), _column(events, "source")
    checks = {
        "missing_key": _blanks(key),
        **_time_checks(_column(events, "ts"), ms, now_ms, max_future_ms),
        "bad_value": value_given & ~np.isfinite(value),
        "bad_op_id": _structured(op_id),
        "bad_source": _structured(source),
    }
    reasons = _first_reasons(checks, EVENT_REASONS, n)
    op_ids = readable(np.array(_texts(op_id), dtype=object), checks["bad_op_id"])
    rejected = _rejections(events, reasons, SOURCE_EVENTS, EVENT_COLUMNS, op_ids, readable(key))
    ok = reasons == ""

    def text(values: np.ndarray) -> np.ndarray:
        return np.array([None if _blank(t) else t for t in _texts(values)], dtype=object)[ok]

    valid = pd.DataFrame(
        {
            "key": key[ok],
            "ts": ms[ok].astype(np.int64),
            "op_id": text(op_id),
            "source": text(source),
            "value": value[ok],
        }
    )
    if "raw" in events.columns:
        valid["raw"] = events["raw"].to_numpy(dtype=object)[ok]
    return valid, rejected
