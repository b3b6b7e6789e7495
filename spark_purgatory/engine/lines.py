"""JSON lines as the job reads them, without Spark: each line's fields and its text.

As Spark's reader: invalid UTF-8 becomes U+FFFD, a blank line is malformed, an escaped lone
surrogate reads as ``?``, ``NaN`` and ``Infinity`` are accepted and single quotes are not.  A
number with a fraction or exponent, or a constant, keeps its text where the job reads a
field's text.

Invariant: one row per line, in order; a line is malformed exactly when it does not begin
with a JSON object (what follows the object is ignored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..config import InputLimits
from ..contract import (
    MALFORMED_COLUMN,
    NUMBER,
    POISON_COLUMN,
    RECORD_TOO_LARGE,
    STRING_LITERAL,
    TIME,
    TOO_DEEP,
    WHOLE,
    read_as,
)

_STRINGS = re.compile(STRING_LITERAL)
#: fields the job reads from their JSON text as whole numbers or times
_SPELLED_FIELDS = read_as(TIME, WHOLE)
#: fields where a constant (``NaN``, ``Infinity``) keeps its text
_NUMBER_FIELDS = read_as(TIME, WHOLE, NUMBER)
#: what JSON counts as white space before a value
_BLANK = " \t\n\r"


class _Spelled(float):
    """A JSON number with a fraction or an exponent, with its text."""

    text: str


class _Constant(_Spelled):
    """``NaN``, ``Infinity`` or ``-Infinity``, with its text."""


def _spelled(text: str, kind: type[_Spelled] = _Spelled) -> float:
    number = kind(text)
    number.text = text
    return number


_DECODER = json.JSONDecoder(parse_float=_spelled, parse_constant=lambda text: _spelled(text, _Constant))


def _record(line: str) -> dict | None:
    """The line's fields, or None when it is no JSON object."""
    try:
        record, _ = _DECODER.raw_decode(line.lstrip(_BLANK))
    except ValueError:  # json.JSONDecodeError, and a number too large for a float
        return None
    if not isinstance(record, dict):
        return None
    if "\\u" in line:  # an escape may have made a lone surrogate
        record = _encodable(record)
    return {name: _read(name, value) for name, value in record.items()}


#: a UTF-16 surrogate on its own: the escape ``\\ud800`` not part of a pair
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(value: object) -> object:
    """``value`` with each lone surrogate replaced by ``?``, as Java's UTF-8 encoder writes it."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("?", value)
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    if isinstance(value, dict):
        return {_encodable(name): _encodable(item) for name, item in value.items()}
    return value


def _read(name: str, value: object) -> object:
    """A number keeps its text where the job reads the field's text, a float elsewhere."""
    if not isinstance(value, _Spelled):
        return value
    spelled = name in _SPELLED_FIELDS or (isinstance(value, _Constant) and name in _NUMBER_FIELDS)
    return value.text if spelled else float(value)


def nested_deeper(text: str, depth: int) -> bool:
    """Does ``text`` nest arrays and objects deeper than ``depth``?  Brackets inside strings do
    not count.

    >>> nested_deeper('{"a": [[1]], "b": "[[[["}', 3), nested_deeper('{"a": [[1]]}', 2)
    (False, True)
    """
    if text.count("[") + text.count("{") <= depth:
        return False
    brackets = np.frombuffer(_STRINGS.sub("", text).encode("utf-8"), dtype=np.uint8)
    steps = np.isin(brackets, (ord("["), ord("{"))).astype(np.int64)
    steps -= np.isin(brackets, (ord("]"), ord("}")))
    return bool(steps.size) and int(np.cumsum(steps).max()) > depth


def poison(text: str, limits: InputLimits) -> str | None:
    """The reason a line is poison, never to be parsed (``record_too_large``, ``too_deep``)."""
    if len(text) > limits.record_bytes // 4 and len(text.encode("utf-8")) > limits.record_bytes:
        return RECORD_TOO_LARGE
    if nested_deeper(text, limits.depth):
        return TOO_DEEP
    return None


def json_lines(lines: Iterable[str | bytes], *, limits: InputLimits | None = None) -> pd.DataFrame:
    """One row per line: its fields, ``raw``, ``MALFORMED_COLUMN`` and ``POISON_COLUMN``
    (``limits``: the defaults when None).

    >>> f = json_lines(['{"op_id": "a", "ts": 5.0}', b"not json"])
    >>> f[["op_id", "ts", "raw", "_malformed"]].values.tolist()
    [['a', '5.0', '{"op_id": "a", "ts": 5.0}', False], [nan, nan, 'not json', True]]
    """
    texts = [
        line.decode("utf-8", errors="replace") if isinstance(line, (bytes, bytearray)) else line
        for line in lines
    ]
    limits = limits or InputLimits()
    poisoned = [poison(text, limits) for text in texts]
    records = [_record(text) if bad is None else None for text, bad in zip(texts, poisoned, strict=True)]
    frame = pd.DataFrame([r or {} for r in records], index=pd.RangeIndex(len(texts)), dtype=object)
    frame["raw"] = np.array(texts, dtype=object)
    frame[MALFORMED_COLUMN] = np.array([r is None for r in records], dtype=bool)
    frame[POISON_COLUMN] = np.array(poisoned, dtype=object)
    return frame


def poisoned(frame: pd.DataFrame, reason: str) -> np.ndarray:
    if POISON_COLUMN not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return frame[POISON_COLUMN].eq(reason).to_numpy()


def malformed(frame: pd.DataFrame) -> np.ndarray:
    if MALFORMED_COLUMN not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return frame[MALFORMED_COLUMN].eq(True).to_numpy()  # rows that came otherwise: NaN
