"""Validation of operation and event frames in pandas: valid rows, or a reason.

The engine validates what it is handed unless the host already did (``validated=True``).
A field is read as ``contract.inputs`` says and checked by ``contract.rules`` in its order,
so a row gets the same reason as on the Spark path.  The keys keep their order (a repeated
key at its first place), the members are sorted; ``key`` stands for ``keys`` when ``keys`` is
absent.  Typed frames get one allowance: a whole float is a whole number (pandas turns an
int column with gaps into floats), where the JSON text ``5.0`` is not.

Invariant: every row comes out either valid or rejected with exactly one reason.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from decimal import Decimal

import numpy as np
import pandas as pd

from .. import contract as c
from ..config import InputLimits
from ..contract import (
    EVENT_CHECKS,
    EVENT_COLUMNS,
    OPERATION_CHECKS,
    OPERATION_COLUMNS,
    OPERATION_INPUT,
    READINGS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    TIME,
    WHOLE,
    first_reason,
    read_as,
    resembles,
    truncated,
)
from .conditions import ANY, CONDITIONS
from .fields import (
    blanks,
    epoch_ms,
    flags,
    given,
    missing,
    non_texts,
    numbers,
    plain,
    texts,
    values_of,
    wholes,
)
from .lines import malformed, poisoned
from .list_fields import clean_lists, one_item_lists

_NAMES = pd.Index(list(CONDITIONS))
_CODES = np.array(list(CONDITIONS.values()), dtype=np.int8)
_UNKNOWN = -1


def raw_json(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The ``raw`` of a row rejected after it was read (``late``, ``duplicate_op_id``) when
    the source kept no raw text: a JSON object of the fields that have a value, in
    ``columns``' order.
    """
    if "raw" in frame.columns:
        return frame["raw"]
    present = [c for c in columns if c in frame.columns]
    records = frame[present].to_dict(orient="records") if present else [{}] * len(frame)
    fields = ({k: plain(v) for k, v in r.items()} for r in records)
    return pd.Series(
        [json.dumps({k: v for k, v in f.items() if v is not None}, allow_nan=False) for f in fields],
        index=frame.index,
        dtype=object,
    )


def record_json(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """A record rejected as it is read, as Spark's ``to_json`` writes a typed row's ``raw``,
    when the source kept no raw text: the fields that have a value, in ``columns``' order, a
    time in UTC milliseconds, a number as Java writes a double, a whole ``timeout_ms`` or
    ``ts`` as a whole number; a NaN is a missing value.

    >>> record_json(pd.DataFrame([{"op_id": "é", "ts": pd.Timestamp(0, tz="UTC"), "target": 1e7}]),
    ...             ["op_id", "ts", "target"]).tolist()
    ['{"op_id":"é","ts":"1970-01-01T00:00:00.000Z","target":1.0E7}']
    """
    if "raw" in frame.columns:
        return frame["raw"]
    present = [name for name in columns if name in frame.columns]
    records = frame[present].to_dict(orient="records") if present else [{}] * len(frame)
    texts = []
    for record in records:
        fields = ((name, _json_text(value, name in _WHOLE_FIELDS)) for name, value in record.items())
        texts.append("{" + ",".join(f"{json.dumps(n)}:{v}" for n, v in fields if v is not None) + "}")
    return pd.Series(texts, index=frame.index, dtype=object)


#: the fields whose contract type is a whole number (or epoch ms)
_WHOLE_FIELDS = read_as(WHOLE, TIME)


def _json_text(value: object, whole: bool = False) -> str | None:
    """One value as Spark's ``to_json`` writes it (``record_json``); None when it has none."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ",".join(_json_text(item) or "null" for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{json.dumps(str(k))}:{_json_text(v) or 'null'}" for k, v in value.items()) + "}"
        )
    if value is None or (not isinstance(value, str) and bool(pd.isna(value))):
        return None
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if whole and float(value).is_integer() else _java_double(float(value))
    if isinstance(value, (dt.datetime, np.datetime64)):
        return json.dumps(_spark_time(pd.Timestamp(value)))
    return json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)


def _java_double(x: float) -> str:
    """A number (not NaN: a missing value) as Java's ``Double.toString`` writes it, an
    infinity quoted, as Jackson writes it."""
    if np.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0.0" if np.copysign(1.0, x) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    figures = "".join(map(str, digits))
    e = len(figures) + int(exponent) - 1  # the exponent of the first figure
    head = "-" if sign else ""
    if -3 <= e < 7:  # plain notation, at least one figure after the point
        if e >= 0:
            return f"{head}{figures[: e + 1].ljust(e + 1, '0')}.{figures[e + 1 :] or '0'}"
        return f"{head}0.{'0' * (-e - 1)}{figures}"
    return f"{head}{figures[0]}.{figures[1:] or '0'}E{e}"


def _spark_time(t: pd.Timestamp) -> str:
    """A time as Spark's ``to_json`` writes it: UTC, milliseconds, ``Z`` (none without a zone)."""
    zone = t.tzinfo is not None
    t = t.tz_convert("UTC") if zone else t
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    return f"{text}.{t.microsecond // 1000:03d}" + ("Z" if zone else "")


# -- the checks, applied in the contract's order ---------------------------------------------------


class _Checks:
    """The pandas reader of the contract's checks: each test a boolean array over the rows,
    from the fields as read: ``no`` (absent), ``wrong`` (a JSON type the field cannot have),
    ``value``, ``null`` (no value of its type) and ``count`` (a list field's items)."""

    def __init__(self, frame: pd.DataFrame, source: str, now_ms: int | None, cond: np.ndarray | None = None):
        self.frame, self.n, self.now_ms, self.cond = frame, len(frame), now_ms, cond
        self.known = tuple(READINGS[source])
        self.no: dict[str, np.ndarray] = {}
        self.wrong: dict[str, np.ndarray] = {}
        self.value: dict[str, np.ndarray] = {}
        self.null: dict[str, np.ndarray] = {}
        self.count: dict[str, np.ndarray] = {}

    def poison(self, field: str, reason: str) -> np.ndarray:
        return poisoned(self.frame, reason)

    def malformed(self, field: str, bound: None) -> np.ndarray:
        return malformed(self.frame)

    def misspelled(self, field: str, bound: None) -> np.ndarray:
        out = np.zeros(self.n, dtype=bool)
        for name in self.frame.columns:
            if isinstance(name, str) and resembles(name, self.known):
                out |= given(self.frame[name], self.n)
        return out

    def absent(self, field: str, bound: None) -> np.ndarray:
        return self.no[field]

    def wrong_type(self, field: str, bound: None) -> np.ndarray:
        return self.wrong[field]

    def unreadable(self, field: str, bound: None) -> np.ndarray:
        return ~self.no[field] & self.null[field]

    def not_finite(self, field: str, bound: None) -> np.ndarray:
        return ~self.no[field] & ~np.isfinite(self.value[field])

    def below(self, field: str, bound: int) -> np.ndarray:
        return ~self.null[field] & (self.value[field] < bound)

    def above(self, field: str, bound: int | str) -> np.ndarray:
        # another field as bound: a list's length, a number's value
        limit = self.count.get(bound, self.value.get(bound)) if isinstance(bound, str) else bound
        return ~self.null[field] & (self.value[field] > limit)

    def more(self, field: str, bound: int) -> np.ndarray:
        return self.count[field] > bound

    def future(self, field: str, bound: int) -> np.ndarray:
        now = time.time() * 1000 if self.now_ms is None else self.now_ms
        return self.value[field] > now + bound

    def unknown(self, field: str, names: tuple[str, ...]) -> np.ndarray:
        return self.cond == _UNKNOWN

    def given(self, field: str, bound: None) -> np.ndarray:
        return ~self.no[field]

    def among(self, names: tuple[str, ...]) -> np.ndarray:
        return np.isin(self.cond, [CONDITIONS[name] for name in names])

    def both(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a & b

    def first(self, pairs: list[tuple[str, np.ndarray]]) -> np.ndarray:
        reasons = np.full(self.n, "", dtype=object)
        for reason, failed in reversed(pairs):
            reasons[np.asarray(failed, dtype=bool)] = reason
        return reasons


def _rejections(
    frame: pd.DataFrame,
    reasons: np.ndarray,
    source: str,
    columns: list[str],
    op_id: np.ndarray,
    key: np.ndarray,
) -> pd.DataFrame:
    """The rejected rows (``contract.REJECTED``): the record, its reason, its ``op_id`` and
    ``key``."""
    bad = reasons != ""
    rows = frame.loc[bad] if bad.any() else frame.iloc[:0]
    raw = record_json(rows, columns).to_numpy(dtype=object) if len(rows) else np.empty(0, dtype=object)
    for at in np.flatnonzero(reasons[bad] == c.RECORD_TOO_LARGE):
        raw[at] = truncated(raw[at])
    return pd.DataFrame(
        {
            "source": np.full(len(rows), source, dtype=object),
            "raw": raw,
            "reason": reasons[bad],
            "op_id": op_id,
            "key": key,
        },
        copy=False,
    )


def readable(texts: np.ndarray, structured: np.ndarray | None = None) -> np.ndarray:
    """Text values as ``rejected`` shows them: None where blank (or an array or object)."""
    out = np.array(texts, dtype=object)  # a copy
    out[blanks(out)] = None
    if structured is not None:
        out[structured] = None
    return out


def first_keys(keys: np.ndarray) -> np.ndarray:
    """An operation's key for ``rejected``: the first of its keys, None if none."""
    return np.array([k[0] if len(k) else None for k in keys], dtype=object)


def _event_times(frame: pd.DataFrame) -> np.ndarray:
    ts = values_of(frame, "ts")
    return epoch_ms(ts if ts is not None else pd.Series([None] * len(frame), dtype=object))


def _conditions(column: pd.Series | None, n: int) -> np.ndarray:
    """Each condition's code (``conditions.CONDITIONS``; missing is ``any``), -1 if unknown:
    the name's text with spaces stripped, in lower case."""
    text, _ = texts(column, n)
    at = _NAMES.get_indexer(text)
    codes = np.where(at >= 0, _CODES[at], _UNKNOWN).astype(np.int8)
    absent = text == None  # noqa: E711 (elementwise)
    codes[absent] = ANY
    other = np.flatnonzero((at < 0) & ~absent)  # not a name as it stands: "COUNT ", "", 5
    if len(other):
        codes[other] = [CONDITIONS.get(t.strip(" ").lower(), _UNKNOWN) for t in text[other]]
    return codes


def validate_operations(
    ops: pd.DataFrame,
    *,
    max_timeout_ms: int,
    now_ms: int | None = None,
    max_future_ms: int | None = None,
    limits: InputLimits | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split operations (the contract's fields, optional ones may be missing, and an optional
    ``raw``) into (valid, rejected rows with a reason).  Valid rows have ``ts`` in epoch ms,
    condition code ``cond`` and ``deadline``.  ``max_future_ms`` turns on ``ts_in_future``
    (relative to ``now_ms``, default the clock); ``limits``: the defaults when None.
    """
    limits = limits or InputLimits()
    f = _read_operations(ops)
    n = len(ops)
    cond = f["cond"]
    checks = _Checks(ops, SOURCE_OPERATIONS, now_ms, cond)
    checks.no = {
        "op_id": blanks(f["op_id"]),
        "keys": f["n_keys"] == 0,
        "ts": missing(values_of(ops, "ts"), n),
        "timeout_ms": missing(values_of(ops, "timeout_ms"), n),
        "target": missing(values_of(ops, "target"), n),
        "members": f["n_members"] == 0,
        "warn_ms": missing(values_of(ops, "warn_ms"), n),
    }
    checks.wrong = {"op_id": f["bad_op_id"], "payload": f["bad_payload"]}
    checks.value = {name: f[name] for name in ("ts", "timeout_ms", "target", "warn_ms")}
    checks.null = {
        "ts": np.isnan(f["ts"]),
        "timeout_ms": ~f["has_timeout"],
        "target": np.isnan(f["target"]),
        "warn_ms": ~f["has_warn"],
    }
    checks.count = {"keys": f["n_keys"], "members": f["n_members"]}
    reasons = first_reason(OPERATION_CHECKS, checks, limits.bounds(max_timeout_ms, max_future_ms))
    ok = reasons == ""
    bad = ~ok
    columns = [c for c in OPERATION_INPUT.names if c in OPERATION_COLUMNS or c in ops.columns]
    op_id = readable(f["op_id"][bad], f["bad_op_id"][bad])
    rejected = _rejections(ops, reasons, SOURCE_OPERATIONS, columns, op_id, first_keys(f["keys"][bad]))
    ts = f["ts"][ok].astype(np.int64)
    valid = pd.DataFrame(
        {
            "op_id": f["op_id"][ok],
            "keys": f["keys"][ok],
            "ts": ts,
            "deadline": ts + f["timeout_ms"][ok],
            "cond": cond[ok],
            "target": f["target"][ok],
            "members": f["members"][ok],
            "payload": f["payload"][ok],
            # when its warning is due (NaN: none asked): ``deadline - warn_ms``
            "warn_at": np.where(f["has_warn"][ok], ts + f["timeout_ms"][ok] - f["warn_ms"][ok], np.nan),
        },
        copy=False,  # fresh arrays: no block to consolidate them into
    )
    if "raw" in ops.columns:
        valid["raw"] = ops["raw"].to_numpy(dtype=object)[ok]
    return valid, rejected


def _read_operations(ops: pd.DataFrame) -> dict:
    """Each field as the validator reads it (see the module docstring)."""
    n = len(ops)
    op_id, bad_op_id = texts(values_of(ops, "op_id"), n)
    keys, listed, n_keys = clean_lists(values_of(ops, "keys"), n, keep_order=True)
    if "key" in ops.columns and not listed.all():  # ``key`` stands for ``keys`` (read only there)
        rows = np.flatnonzero(~listed)
        key, _ = texts(ops["key"] if len(rows) == n else ops["key"].iloc[rows], len(rows))
        text = ~blanks(key)
        keys[rows[text]] = one_item_lists(key[text])
        n_keys[rows[text]] = 1
    members, _, n_members = clean_lists(values_of(ops, "members"), n)
    timeout_ms, has_timeout = wholes(values_of(ops, "timeout_ms"), n)
    warn_ms, has_warn = wholes(values_of(ops, "warn_ms"), n)
    payload, _ = texts(values_of(ops, "payload"), n)
    bad_payload = non_texts(values_of(ops, "payload"), n)  # carried unchanged: a string or nothing
    return {
        "op_id": op_id,
        "bad_op_id": bad_op_id,
        "keys": keys,
        "n_keys": n_keys,
        "ts": _event_times(ops),
        "timeout_ms": timeout_ms,
        "has_timeout": has_timeout,
        "warn_ms": warn_ms,
        "has_warn": has_warn,
        "cond": _conditions(values_of(ops, "condition"), n),
        "target": numbers(values_of(ops, "target"), n),
        "members": members,
        "n_members": n_members,
        "payload": payload,
        "bad_payload": bad_payload,
    }


def validate_events(
    events: pd.DataFrame, *, now_ms: int | None = None, max_future_ms: int | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split completion events into (valid, rejected rows with a reason), as
    ``validate_operations``."""
    n = len(events)
    key, _ = texts(values_of(events, "key"), n)
    ms = _event_times(events)
    value = numbers(values_of(events, "value"), n)
    op_id, bad_op_id = texts(values_of(events, "op_id"), n)
    source, _ = texts(values_of(events, "source"), n)
    bad_source = non_texts(values_of(events, "source"), n)  # a name: a string or nothing
    cancel, bad_cancel = flags(values_of(events, "cancel"), n)
    checks = _Checks(events, SOURCE_EVENTS, now_ms)
    checks.no = {
        "key": blanks(key),
        "ts": missing(values_of(events, "ts"), n),
        "value": ~given(values_of(events, "value"), n),
    }
    checks.wrong = {"op_id": bad_op_id, "source": bad_source, "cancel": bad_cancel}
    checks.value, checks.null = {"ts": ms, "value": value}, {"ts": np.isnan(ms)}
    reasons = first_reason(EVENT_CHECKS, checks, InputLimits().bounds(None, max_future_ms))
    ok = reasons == ""
    bad = ~ok
    rejected = _rejections(
        events,
        reasons,
        SOURCE_EVENTS,
        EVENT_COLUMNS,
        readable(op_id[bad], bad_op_id[bad]),
        readable(key[bad]),
    )
    valid = pd.DataFrame(
        {
            "key": key[ok],
            "ts": ms[ok].astype(np.int64),
            "op_id": readable(op_id[ok]),
            "source": readable(source[ok]),
            "value": value[ok],
            "cancel": cancel[ok],
        },
        copy=False,
    )
    if "raw" in events.columns:
        valid["raw"] = events["raw"].to_numpy(dtype=object)[ok]
    return valid, rejected
