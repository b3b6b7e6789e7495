"""One rejection vocabulary: every line of the hostile corpus gets the same reason from the
Spark SQL validator (``spark.sources``) and the pandas one (``engine.validation``), and the
reason the corpus expects.

The pandas side reads each line as ``PurgatoryTester`` does (``engine.lines``: the line's
fields, or ``malformed_json`` when it is no JSON object).  ``duplicate_op_id`` and ``late``
are decided by the engine after validation, so both validators accept those lines.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.lines import json_lines
from spark_purgatory.engine.validation import validate_events, validate_operations
from spark_purgatory.spark.sources import parse_events, parse_operations

pytestmark = pytest.mark.spark
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpus")
CONFIG = PurgatoryConfig()
DECIDED_BY_THE_ENGINE = {"duplicate_op_id", "late"}


# how fields are read, beyond the corpus: text for numbers, lists from strings, blanks, ISO forms
_TS = "2026-01-01T00:00:00Z"
_ABSENT = object()


def _record(base: dict, **fields) -> str:
    record = {**base, **fields}
    return json.dumps({k: v for k, v in record.items() if v is not _ABSENT})


def _op(**fields) -> str:
    return _record({"op_id": "a", "keys": ["k"], "ts": _TS, "timeout_ms": 5}, **fields)


def _ev(**fields) -> str:
    return _record({"key": "k", "ts": _TS}, **fields)


EDGE_OPERATIONS = [
    _op(keys="solo"),
    _op(keys='["x","y"]'),
    _op(keys="[broken"),
    _op(keys=["a", 1, None, " "]),
    _op(op_id=True),
    _op(op_id=" "),
    _op(op_id={}),
    _op(keys=[], key="k"),
    _op(keys={"x": 1}, key="k"),
    _op(keys=_ABSENT, key=5),
    _op(ts="1767225600000"),
    _op(ts=" 2026-01-01T00:00:00Z "),
    _op(ts="2026-01-01"),
    _op(ts="2026-01-01 10:00:00"),
    _op(ts="2026-01-01T00:00:00+05:00"),
    _op(ts=-5),
    _op(ts=""),
    _op(ts=[1]),
    _op(timeout_ms="5"),
    _op(timeout_ms=" 5 "),
    _op(timeout_ms="5.0"),
    _op(timeout_ms=True),
    _op(timeout_ms=""),
    _op(timeout_ms=12345678901234567890),
    _op(condition=" COUNT ", target="10"),
    _op(condition="sum", target=True),
    _op(condition="sum", target=""),
    _op(condition="", target=1),
    _op(condition="all", members="m1"),
    _op(condition="all", members=[" ", None]),
    _op(payload=None),
    _op(payload=[1]),
    _op(payload=42),
    _op(payload="42"),
    _op(payload=-1.5),
    _op(payload=True),
    _op(timeout_ms=5.0),
    _op(ts=1767225600000.0),
    _op(keys=["b", "a"]),
    "[1, 2]",
    "42",
    "null",
    "{}",
    "",
    '[{"op_id": "a", "keys": ["k"], "ts": 0, "timeout_ms": 5}]',
    '{"op_id": "a", "keys": ["k"], "ts": 0, "timeout_ms": 5} and more',
]
EDGE_EVENTS = [
    _ev(value=""),
    _ev(key="  "),
    _ev(source=5, op_id=7),
    _ev(source="", op_id=" "),
    _ev(value="12"),
    _ev(value=True),
    _ev(value=None),
    _ev(value="-Infinity"),
    _ev(key=["k"]),
    _ev(ts=1767225600000),
    _ev(ts="2026-13-01"),
    _ev(ts="now"),  # pandas' current time, Spark's null: no event time either way
    _ev(ts=" today "),
    _ev(source={"a": 1}, op_id=[1]),
    _ev(source=17),
    _ev(source="17"),
    _ev(source=False),
    _ev(source=None),
    " not json",
]


def corpus_lines(name: str) -> list[str]:
    """The file's lines as Spark's text source reads them (invalid UTF-8 replaced)."""
    with open(os.path.join(CORPUS, f"{name}.jsonl"), "rb") as f:
        return [line.decode("utf-8", errors="replace") for line in f.read().split(b"\n")[:-1]]


def expected_reasons(name: str) -> list[str | None]:
    with open(os.path.join(CORPUS, "expected.json"), encoding="utf-8") as f:
        reasons = json.load(f)["reasons"][name]
    return [None if r in DECIDED_BY_THE_ENGINE else r for r in reasons]


def spark_reasons(spark, lines: list[str], parse) -> list[str | None]:
    by_raw = {}
    for row in parse(spark.createDataFrame([(line,) for line in lines], "value string")).collect():
        by_raw.setdefault(row.raw, set()).add(row.reason)
    assert all(len(reasons) == 1 for reasons in by_raw.values()), by_raw  # equal lines, equal reasons
    return [next(iter(by_raw[line])) for line in lines]


def pandas_reasons(lines: list[str], validate) -> list[str | None]:
    reasons = []
    for line in lines:
        _, rejected = validate(json_lines([line]))
        reasons.append(rejected["reason"].iloc[0] if len(rejected) else None)
    return reasons


def disagreements(lines, expected, by_spark, by_pandas) -> list[tuple]:
    rows = zip(lines, expected, by_spark, by_pandas, strict=True)
    return [(line[:80], e, s, p) for line, e, s, p in rows if not e == s == p]


@pytest.mark.parametrize("name", ["ops-1", "ops-2"])
def test_operations_get_the_same_reason_from_both_validators(spark, name):
    now_ms = int(time.time() * 1000)
    lines = corpus_lines(name)
    limits = {"max_timeout_ms": CONFIG.max_timeout_ms, "max_future_ms": CONFIG.max_future_ms}
    by_spark = spark_reasons(spark, lines, lambda df: parse_operations(df, **limits))
    by_pandas = pandas_reasons(lines, lambda frame: validate_operations(frame, now_ms=now_ms, **limits))
    assert disagreements(lines, expected_reasons(name), by_spark, by_pandas) == []


@pytest.mark.parametrize("name", ["events-1", "events-2"])
def test_events_get_the_same_reason_from_both_validators(spark, name):
    now_ms = int(time.time() * 1000)
    lines = corpus_lines(name)
    by_spark = spark_reasons(spark, lines, lambda df: parse_events(df, max_future_ms=CONFIG.max_future_ms))
    by_pandas = pandas_reasons(
        lines, lambda frame: validate_events(frame, now_ms=now_ms, max_future_ms=CONFIG.max_future_ms)
    )
    assert disagreements(lines, expected_reasons(name), by_spark, by_pandas) == []


def test_edge_records_get_the_same_reason_from_both_validators(spark):
    limits = {"max_timeout_ms": 1000}
    by_spark = spark_reasons(spark, EDGE_OPERATIONS, lambda df: parse_operations(df, **limits))
    by_pandas = pandas_reasons(EDGE_OPERATIONS, lambda frame: validate_operations(frame, **limits))
    assert disagreements(EDGE_OPERATIONS, by_spark, by_spark, by_pandas) == []
    by_spark = spark_reasons(spark, EDGE_EVENTS, parse_events)
    by_pandas = pandas_reasons(EDGE_EVENTS, validate_events)
    assert disagreements(EDGE_EVENTS, by_spark, by_spark, by_pandas) == []
