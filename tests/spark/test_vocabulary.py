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

from spark_purgatory.config import InputLimits, PurgatoryConfig
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
    # quorum, and a field the condition does not use: given or not, read as the condition
    # that needs it reads it
    _op(condition=" Quorum ", target="2", members=["m1", "m2", "m1"]),
    _op(condition="quorum", target=2, members="m1"),
    _op(condition="quorum", target=0, members="m1"),
    _op(target="soon"),
    _op(target=""),
    _op(target=" "),
    _op(target=None),
    _op(target=float("nan")),
    _op(target=True),
    _op(target=[2]),
    _op(members=[]),
    _op(members=[" ", None]),
    _op(members="m1"),
    _op(members='["m1"]'),
    _op(members={"m": 1}),
    _op(condition="sum", target=1, members=[1]),
    _op(condition="all", members=["m1"], target=0),
    # the JSON constants NaN and Infinity where a number is read: there, and no finite number
    _op(condition="count", target=float("nan")),
    _op(condition="count", target=float("-inf")),
    _op(ts=float("nan")),
    _op(timeout_ms=float("inf")),
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
    _ev(value=float("nan")),
    _ev(value=float("inf")),
    _ev(ts=float("nan")),
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


# -- poison records: each limit its own reason, on both paths (small limits: cheap records) ----------

POISON_LIMITS = InputLimits(record_bytes=2048, depth=6, keys=4, members=4)


def _poison_op(tag: str, **fields) -> str:
    record = {"op_id": tag, "keys": ["k"], "ts": _TS, "timeout_ms": 5, **fields}
    return json.dumps(record, ensure_ascii=False)  # characters as they are, not \u escapes


#: (line, the reason both validators must give); each line begins with its own op_id
POISON_OPERATIONS = [
    (_poison_op("big", payload="x" * 2100), "record_too_large"),
    (_poison_op("big-utf8", payload="é" * 1100), "record_too_large"),  # 1,100 characters, 2,200 bytes
    (_poison_op("fits-utf8", payload="é" * 900), None),
    (_poison_op("deep", target=[[[[[[1]]]]]], condition="count"), "too_deep"),  # object + 6 arrays
    (_poison_op("as-deep-as-allowed", target=[[[[[1]]]]], condition="count"), "bad_target"),
    (_poison_op("brackets-in-text", payload='[[[[[[[["\\"[[[['), None),
    ('{"op_id": "unterminated", "payload": "[[[[[[[[', "too_deep"),  # no string ends: brackets count
    ('{"op_id": "deep-broken", ' + "[" * 40, "too_deep"),
    (_poison_op("keys", keys=["a", "b", "c", "d", "e"]), "too_many_keys"),
    (_poison_op("keys-repeated", keys=["a", "b", "c", "d", "a", " "]), None),  # four distinct
    (_poison_op("members", condition="all", members=["1", "2", "3", "4", "5"]), "too_many_members"),
    (_poison_op("members-any", members=["1", "2", "3", "4", "5"]), "too_many_members"),
    (_poison_op("timeout", timeout_ms=10**18), "timeout_above_max"),
    (_poison_op("year-9999", ts="9999-12-31T23:59:59Z"), "bad_ts"),
    (_poison_op("year-9999-ms", ts=253402300799000), "bad_ts"),
    ('{"op_id": "bad-utf8", "keys": ["k\ufffd\ufffd"], "ts": "2026-01-01T00:00:00Z", "timeout_ms": 5}', None),
]
POISON_EVENTS = [
    (json.dumps({"key": "big", "ts": _TS, "source": "x" * 2100}), "record_too_large"),
    (json.dumps({"key": "deep", "ts": _TS, "value": [[[[[[1]]]]]]}), "too_deep"),
    (json.dumps({"key": "ok", "ts": _TS}), None),
]


def _poison_by_both(spark, lines: list[str], parse, validate) -> list[tuple]:
    """Per line: the reason and ``raw`` from Spark's reading and from the pandas one."""
    rows = parse(spark.createDataFrame([(line,) for line in lines], "value string")).collect()
    by_start = {row.raw[:24]: (row.reason, row.raw) for row in rows}
    out = []
    for line in lines:
        _, rejected = validate(json_lines([line], limits=POISON_LIMITS))
        pandas = (rejected["reason"].iloc[0], rejected["raw"].iloc[0]) if len(rejected) else (None, line)
        out.append((by_start[line[:24]], pandas))
    return out


def test_poison_records_get_their_own_reason_from_both_validators_and_a_huge_raw_is_cut(spark):
    limits = {"max_timeout_ms": CONFIG.max_timeout_ms, "limits": POISON_LIMITS}
    both = _poison_by_both(
        spark,
        [line for line, _ in POISON_OPERATIONS],
        lambda df: parse_operations(df, **limits),
        lambda frame: validate_operations(frame, **limits),
    )
    assert [(s[0], p[0]) for s, p in both] == [(reason, reason) for _, reason in POISON_OPERATIONS]
    assert [s[1] for s, _ in both] == [p[1] for _, p in both]  # the same raw, cut or not
    big = both[0][0][1]
    assert big == POISON_OPERATIONS[0][0][:1024] + f"…[truncated: {len(POISON_OPERATIONS[0][0])} bytes]"
    utf8 = POISON_OPERATIONS[1][0]
    assert both[1][0][1].endswith(f"…[truncated: {len(utf8.encode())} bytes]") and len(utf8) < 2048
    both = _poison_by_both(
        spark,
        [line for line, _ in POISON_EVENTS],
        lambda df: parse_events(df, limits=POISON_LIMITS),
        lambda frame: validate_events(frame),
    )
    assert [(s[0], p[0]) for s, p in both] == [(reason, reason) for _, reason in POISON_EVENTS]
    assert [s[1] for s, _ in both] == [p[1] for _, p in both]
