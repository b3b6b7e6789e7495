"""The typed operations' checks in the project's JVM function give the rows the SQL gives.

``spark.checks``: with ``.jars/checks`` on the classpath (``make jars`` compiles it), a typed
operation's reason and its cleaned keys, condition and members come from one function call
instead of some hundreds of SQL expression nodes.  The SQL reading is the reference: random
operations (blank and repeated keys, odd condition spellings, timeouts and targets out of
range, events in the future) go through both, and every row must come out the same.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_purgatory.spark import checks, sources
from spark_purgatory.spark.sources import parse_operations

pytestmark = [pytest.mark.spark, pytest.mark.jars("checks")]

_SCHEMA = (
    "op_id string, key string, keys array<string>, ts timestamp, timeout_ms long, condition string, "
    "target double, members array<string>, payload string"
)
_UTC = dt.timezone.utc
_TEXT = st.sampled_from(["", " ", "  a", "a", "b ", "B", "k1", "k2", "\u212a", "\U0001f600", "\uffff", "é"])
_LISTS = st.one_of(st.none(), st.lists(st.one_of(st.none(), _TEXT), max_size=4))
_CONDITIONS = st.one_of(
    st.none(),
    st.sampled_from(
        ["any", "count", "sum", "all", "offset", " COUNT ", "Sum", "\u212aount", "\u0130ll", "most", "", " "]
    ),
)
_TIMES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            dt.datetime(2026, 1, 1, tzinfo=_UTC),
            dt.datetime(1969, 12, 31, tzinfo=_UTC),  # before the epoch: bad_ts
            dt.datetime(2300, 1, 1, tzinfo=_UTC),  # after contract.MAX_TS_MS: bad_ts
            dt.datetime(2100, 1, 1, tzinfo=_UTC),  # readable, too far ahead: ts_in_future
        ]
    ),
)
_OPERATIONS = st.tuples(
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), _TEXT),
    _LISTS,
    _TIMES,
    st.one_of(st.none(), st.sampled_from([-1, 0, 5, 1000, 1001, 10**12])),
    _CONDITIONS,
    st.one_of(st.none(), st.sampled_from([1.0, 0.0, math.nan, math.inf, -math.inf])),
    _LISTS,
    st.one_of(st.none(), _TEXT),
)


def _rows(df, reading: str, monkeypatch) -> list[tuple]:
    """The parsed rows by one reading: ``jar`` (the function) or ``sql`` (its fallback)."""
    with monkeypatch.context() as patched:
        if reading == "sql":
            patched.setattr(sources, "operation_checks", lambda spark: None)
        parsed = parse_operations(df, max_timeout_ms=1000, max_future_ms=86_400_000)
        plan = parsed._jdf.queryExecution().optimizedPlan().toString()
        assert (checks.FUNCTION in plan) == (reading == "jar")
        # NaN == NaN here: a row is the same when its text is
        return [tuple(repr(v) for v in row) for row in parsed.collect()]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_OPERATIONS, min_size=1, max_size=120))
def test_the_function_gives_every_row_the_sql_gives(spark, monkeypatch, operations):
    df = spark.createDataFrame(operations, _SCHEMA)
    jar, sql = _rows(df, "jar", monkeypatch), _rows(df, "sql", monkeypatch)
    assert len(jar) == len(operations)
    assert jar == sql


def test_a_session_without_the_class_reads_the_checks_as_sql(spark, monkeypatch):
    """The fallback is chosen by the class's presence on the driver: a name that is not there
    gives None and registers nothing."""
    monkeypatch.setattr(checks, "CLASS", "sparkpurgatory.NoSuchChecks")
    assert checks.operation_checks(spark) is None
    monkeypatch.undo()
    assert checks.operation_checks(spark) == checks.FUNCTION
    assert checks.condition_names() == "any count sum all offset|count sum offset|all"
