"""How the pandas validator reads a field, a whole column at a time.

A field is read as text, a list of text, a whole number, a number or an event time, by
Spark's JSON reader's and casts' rules, written once per value (``text``, ``string_list``,
``whole``, ``number``).  The column readers give the same answers, reading typed columns
with numpy and Arrow and handing only the odd values to the per-value reading.

Invariant: for every value, the column reader and the per-value reading agree.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import (
    EPOCH_MS_TEXT,
    MAX_TS_MS,
    MIN_TS_MS,
    NUMBER_TEXT,
    NUMBER_TRIM,
    NUMBER_WORDS,
    TS_TEXT,
    TS_TRIM,
    WHOLE_TEXT,
    WHOLE_TRIM,
)
from .text import as_text

_I64 = (-(2**63), 2**63 - 1)
#: what an ISO-8601 time with a UTC offset has: Z, + or a - after the date
_OFFSET_MARK = r"(?s)[Zz+]|^.{10,}-"
_WHOLE = re.compile(f"[{WHOLE_TRIM}]*({WHOLE_TEXT})[{WHOLE_TRIM}]*")
_NUMBER = re.compile(f"[{NUMBER_TRIM}]*({NUMBER_TEXT})[{NUMBER_TRIM}]*")
_EPOCH_MS, _TS = re.compile(EPOCH_MS_TEXT), re.compile(TS_TEXT)


def _characters(trim: str) -> str:
    """The characters of an ASCII character class's body, as ``str.strip`` takes them."""
    return "".join(ch for ch in map(chr, range(128)) if re.fullmatch(f"[{trim}]", ch))


_NUMBER_BLANKS, _TS_BLANKS = _characters(NUMBER_TRIM), _characters(TS_TRIM)
#: a text with ``TS_TRIM`` characters at either end
_EDGES = re.compile(f"[{TS_TRIM}].*|.*[{TS_TRIM}]", re.S)
#: ``str`` in a 0-d object array: numpy compares an object array with a type by value only so
_STR = np.empty((), dtype=object)
_STR[()] = str
#: an array or an object: no text, no number
STRUCTURED = (list, tuple, dict, np.ndarray)
#: below this many values, Arrow's fixed cost per call exceeds Python's per value
SMALL = 128
_ARROW_ERRORS = (pa.ArrowException, UnicodeError, TypeError, ValueError, OverflowError)

# -- one value: the rules ----------------------------------------------------------------------------


def plain(value: object) -> object:
    """A field value as JSON can hold it (numpy scalars and arrays, NaN as null)."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool, dict)):
        return value
    return None if pd.isna(value) else str(value)


def _is_missing(v: object) -> bool:
    return v is None or (not isinstance(v, (str, *STRUCTURED)) and bool(pd.isna(v)))


def text(v: object) -> str | None:
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
    return json.dumps(plain(v), separators=(",", ":"))


def blank(t: str | None) -> bool:
    return t is None or t.strip(" ") == ""


def string_list(v: object) -> list[str | None] | None:
    """Spark's reading of a list field: an array's items as text, a single value as a
    one-element list; an object, or a string that looks like a JSON array but is not one: None."""
    if _is_missing(v) or isinstance(v, dict):
        return None
    if isinstance(v, (list, tuple, np.ndarray)):
        return [text(item) for item in v]
    t = text(v)
    stripped = t.strip(" ")
    if stripped.startswith("["):
        try:
            items = json.loads(t)
        except ValueError:
            return None
        return [text(item) for item in items] if isinstance(items, list) else None
    if stripped.startswith("{") or stripped == "":
        return None
    return [t]


def clean(items: list[str | None] | None, *, keep_order: bool = False) -> list[str]:
    """Blank items dropped, deduplicated, sorted (``keep_order``: each at its first place)."""
    if keep_order:
        return list(dict.fromkeys(i for i in items if not blank(i))) if items else []
    return sorted({i for i in items if not blank(i)}) if items else []


def whole(v: object) -> int | None:
    r"""A whole number within int64 (``contract.WHOLE_TEXT``: Spark's try_cast AS BIGINT), else None.

    >>> whole(" 5\x7f"), whole("+5"), whole("\u00a05"), whole("5.0"), whole(5.0)
    (5, 5, None, None, 5)
    """
    if _is_missing(v) or isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, str):
        match = _WHOLE.fullmatch(v)
        n = int(match.group(1)) if match else None
    elif isinstance(v, (int, np.integer)):
        n = int(v)
    elif isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer():
        n = int(v)
    else:
        return None
    return n if n is not None and _I64[0] <= n <= _I64[1] else None


def number(v: object) -> float | None:
    r"""A number (try_cast AS DOUBLE: also its text, ``contract.NUMBER_TEXT`` or one of
    ``NUMBER_WORDS``), else None.

    >>> number(" 1.5d"), number("0x1.8p1"), number("-INF"), number("\u00a05"), number("1_0")
    (1.5, 3.0, -inf, None, None)
    """
    if _is_missing(v) or isinstance(v, (bool, np.bool_, *STRUCTURED)):
        return None
    if isinstance(v, str):
        return _number_text(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _number_text(text: str) -> float | None:
    """A number's text as Spark's cast reads it: Java's ``Double.valueOf``, else one of
    ``NUMBER_WORDS``, in any case."""
    match = _NUMBER.fullmatch(text)
    if match is None:
        return NUMBER_WORDS.get(text.strip(_NUMBER_BLANKS).lower())
    body = match.group(1)
    if body[-1] in "fFdD":  # Java's type suffix
        body = body[:-1]
    if "x" in body or "X" in body:
        return float.fromhex(body)
    return float(body)  # NaN, Infinity and the decimals read as Java reads them


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _epoch_ms_of(v: object) -> float:
    """Epoch ms of one value that is not ISO-8601 text (NaN when unreadable)."""
    if isinstance(v, (dt.datetime, np.datetime64)):
        if pd.isna(v):
            return np.nan
        if isinstance(v, pd.Timestamp):
            v = v.asm8  # UTC, in the Timestamp's own unit
        if isinstance(v, np.datetime64):  # never through nanoseconds: past 2262 they overflow
            return float(v.astype("datetime64[ms]").astype(np.int64))
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return (v - _EPOCH) // dt.timedelta(milliseconds=1)
    n = whole(v)
    return np.nan if n is None else n


# -- a column: the same answers, vectorised -----------------------------------------------------------


def values_of(frame: pd.DataFrame, name: str) -> pd.Series | None:
    """The column, or None when the frame lacks it (every value missing)."""
    return frame[name] if name in frame.columns else None


def _kind(column: pd.Series) -> str:
    """How a column is read: ``bool``, ``int``, ``float``, ``time`` or ``object`` (by value)."""
    dtype = column.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool" if isinstance(dtype, np.dtype) else "object"
    if pd.api.types.is_integer_dtype(dtype):
        return "int"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "time"
    return "object"


def objects_of(column: pd.Series) -> np.ndarray:
    return column.to_numpy(dtype=object)


def _floats(column: pd.Series) -> np.ndarray:
    """An int or float column as a new float64 array, NaN where missing."""
    if isinstance(column.dtype, np.dtype):
        return column.to_numpy().astype(float)
    return column.to_numpy(dtype=float, na_value=np.nan)


def _na(column: pd.Series) -> np.ndarray:
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        return np.zeros(len(column), dtype=bool)
    if isinstance(dtype, np.dtype) and dtype.kind in "fmM":
        return pd.isna(column.to_numpy())
    return column.isna().to_numpy(dtype=bool)


def only_text(values: np.ndarray) -> bool:
    """Whether every value is a ``str`` or missing (one C pass)."""
    return pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty")


def is_str(values: np.ndarray) -> np.ndarray:
    if only_text(values):
        return ~pd.isna(values)
    return np.fromiter((isinstance(v, str) for v in values), bool, len(values))


def each(fn, values: np.ndarray, dtype=object) -> np.ndarray:
    """``fn`` of each value (the per-value reading, for the odd values only)."""
    out = np.empty(len(values), dtype=dtype)
    for i, v in enumerate(values):
        out[i] = fn(v)
    return out


def texts(column: pd.Series | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each value's ``text`` and whether it is an array or object (``STRUCTURED``)."""
    structured = np.zeros(n, dtype=bool)
    if column is None:
        return np.full(n, None, dtype=object), structured
    kind = _kind(column)
    if kind == "bool":
        return np.where(column.to_numpy(), "true", "false").astype(object), structured
    if kind == "int" and isinstance(column.dtype, np.dtype):
        return column.to_numpy().astype(str).astype(object), structured
    values = objects_of(column)
    na = pd.isna(values)
    out = values.copy()
    out[na] = None
    if kind == "object" and only_text(values):
        return out, structured
    odd = ~na & ~is_str(values)
    if odd.any():
        out[odd] = each(text, values[odd])
        structured[odd] = each(lambda v: isinstance(v, STRUCTURED), values[odd], bool)
    return out, structured


def non_texts(column: pd.Series | None, n: int) -> np.ndarray:
    """Which values are present but no string (a number, a boolean, an array or an object)."""
    if column is None:
        return np.zeros(n, dtype=bool)
    if _kind(column) != "object":
        return ~_na(column)
    values = objects_of(column)
    return ~pd.isna(values) & ~is_str(values)


def flags(column: pd.Series | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each ``FLAG`` value (true where true) and whether it is present but no boolean."""
    if column is None:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    if _kind(column) == "bool":
        return column.to_numpy(dtype=bool), np.zeros(n, dtype=bool)
    values = objects_of(column)
    is_bool = np.fromiter((isinstance(v, (bool, np.bool_)) for v in values), bool, n)
    return is_bool & (values == True), ~pd.isna(values) & ~is_bool  # noqa: E712 (elementwise)


def blanks(strings: np.ndarray) -> np.ndarray:
    """Which texts (an object array of str or None) are ``blank``: None, or spaces only."""
    if len(strings) < SMALL:
        return each(lambda t: not isinstance(t, str) or blank(t), strings, bool)
    try:
        arrow = as_text(strings)
        return pc.equal(pc.utf8_trim(arrow, " "), "").fill_null(True).to_numpy(zero_copy_only=False)
    except _ARROW_ERRORS:  # text Arrow cannot hold (a lone surrogate)
        out = pd.isna(strings)
        some = np.flatnonzero(~out)
        out[some] = each(blank, strings[some], bool)
        return out


def missing(column: pd.Series | None, n: int) -> np.ndarray:
    """Which values have a blank ``text`` (absent, null, NaN, "" or spaces)."""
    if column is None:
        return np.ones(n, dtype=bool)
    kind = _kind(column)
    if kind == "bool":
        return np.zeros(n, dtype=bool)
    if kind in ("int", "float", "time"):
        return _na(column)
    return blanks(texts(column, n)[0])


def given(column: pd.Series | None, n: int) -> np.ndarray:
    """Which values are present at all (not absent, null or NaN; "" is present)."""
    if column is None:
        return np.zeros(n, dtype=bool)
    if _kind(column) != "object":
        return ~_na(column)
    return ~pd.isna(objects_of(column))


def wholes(column: pd.Series | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each value as a ``whole`` number (int64, 0 where none) and whether it is one."""
    if column is None:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    kind = _kind(column)
    if kind == "int":
        if isinstance(column.dtype, np.dtype):
            raw, has = column.to_numpy(), np.ones(n, dtype=bool)
        else:  # a nullable integer column
            raw, has = column.to_numpy(dtype=column.dtype.numpy_dtype, na_value=0), ~_na(column)
        if raw.dtype.kind == "u":
            has &= raw <= _I64[1]
        return np.where(has, raw, 0).astype(np.int64), has
    if kind == "float":
        f = _floats(column)
        has = np.isfinite(f) & (f == np.floor(f)) & (f >= -(2.0**63)) & (f < 2.0**63)
        return np.where(has, f, 0).astype(np.int64), has
    if kind in ("bool", "time"):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    read = each(whole, objects_of(column))
    has = read != None  # noqa: E711 (elementwise)
    out = np.zeros(n, dtype=np.int64)
    out[has] = read[has].astype(np.int64)
    return out, has


def numbers(column: pd.Series | None, n: int) -> np.ndarray:
    """Each value as a ``number`` (float64, NaN where none)."""
    if column is None:
        return np.full(n, np.nan)
    kind = _kind(column)
    if kind in ("int", "float"):
        return _floats(column)
    if kind in ("bool", "time"):
        return np.full(n, np.nan)
    return each(lambda v: np.nan if (x := number(v)) is None else x, objects_of(column), float)


def epoch_ms(column: pd.Series) -> np.ndarray:
    """Event times as epoch ms (float, NaN when unreadable or out of [1970, 2200)): epoch ms as
    numbers or digits, ISO-8601 text and datetimes, as Spark reads them.

    >>> epoch_ms(pd.Series([15, "2026-01-01T00:00:15Z", "yesterday", "now", "10:00:00"])).tolist()
    [15.0, 1767225615000.0, nan, nan, nan]
    """
    kind = _kind(column)
    if kind == "time":
        ms = np.where(_na(column), np.nan, column.to_numpy("datetime64[ms]").astype(np.int64))
    elif kind in ("int", "float"):
        ms = _floats(column)
        ms[ms != np.floor(ms)] = np.nan
    else:
        ms = _epoch_ms_of_objects(objects_of(column))
    ms = ms.astype(float)
    ms[(ms < MIN_TS_MS) | (ms >= MAX_TS_MS)] = np.nan
    return ms


def _epoch_ms_of_objects(values: np.ndarray) -> np.ndarray:
    """Text by its shape (``EPOCH_MS_TEXT``, ``TS_TEXT``; any other is no time), ISO-8601
    times parsed by pandas in one call; other values one by one."""
    ms = np.full(len(values), np.nan)
    at = np.flatnonzero(is_str(values))
    strings = values[at]
    epoch = _full_matches(strings, _EPOCH_MS)
    iso = _full_matches(strings, _TS) & ~epoch
    if epoch.any():
        ms[at[epoch]] = each(_epoch_ms_of, strings[epoch], float)
    other = ~pd.isna(values)
    other[at] = False
    if other.any():
        ms[other] = each(_epoch_ms_of, values[other], float)
    if iso.any():
        ms[at[iso]] = _iso_ms(_stripped(strings[iso]))
    return ms


def _full_matches(strings: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    if len(strings) >= SMALL:
        try:
            arrow = pa.array(strings, type=pa.string())
            return pc.match_substring_regex(arrow, f"^(?:{pattern.pattern})$").to_numpy(zero_copy_only=False)
        except _ARROW_ERRORS:
            pass
    return each(lambda t: pattern.fullmatch(t) is not None, strings, bool)


def _stripped(strings: np.ndarray) -> np.ndarray:
    """ISO-8601 texts without the ``TS_TRIM`` characters around them, as plain ``str``."""
    edged = _full_matches(strings, _EDGES) if len(strings) else np.zeros(0, dtype=bool)
    other = np.frompyfunc(type, 1, 1)(strings) != _STR
    strip = np.flatnonzero(edged | other)
    if not strip.size:
        return strings
    out = strings.copy()
    out[strip] = [str(t).strip(_TS_BLANKS) for t in strings[strip]]
    return out


def _iso_ms(strings: np.ndarray) -> np.ndarray:
    """Epoch ms of ISO-8601 ``str`` values (NaN where unreadable), each read as if alone:
    pandas reads a time without an offset in the offset of an earlier one in the same call,
    so times with and without a possible offset are parsed in separate calls."""
    marked = _offset_marks(strings)
    if marked.all() or not marked.any():
        return _to_ms(strings)
    ms = np.empty(len(strings))
    ms[marked], ms[~marked] = _to_ms(strings[marked]), _to_ms(strings[~marked])
    return ms


def _to_ms(strings: np.ndarray) -> np.ndarray:
    parsed = pd.to_datetime(pd.Series(strings, dtype=object), utc=True, format="ISO8601", errors="coerce")
    ns = parsed.dt.tz_localize(None).to_numpy("datetime64[ns]").astype(np.int64)
    return np.where(parsed.isna().to_numpy(), np.nan, ns // 1_000_000)


def _offset_marks(strings: np.ndarray) -> np.ndarray:
    try:
        arrow = pa.array(strings, type=pa.string())
        return pc.match_substring_regex(arrow, _OFFSET_MARK).to_numpy(zero_copy_only=False)
    except _ARROW_ERRORS:
        return each(lambda t: re.search(_OFFSET_MARK, t) is not None, strings, bool)
