"""One rejection vocabulary on the hostile corpus: every line of it gets the same reason from
the Spark SQL validator (``spark.sources``) and the pandas one (``engine.validation``), and the
reason the corpus expects.  Each field's readings, each reason and the poison records, on
every path, are the contract table's (``tests/contract``).

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
