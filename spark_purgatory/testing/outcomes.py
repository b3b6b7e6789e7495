"""``assert_outcomes``: two sets of outcomes compared on a few columns, whatever their form."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd

from ..contract import OUTCOMES
from .inputs import Rows, _timestamps

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame

#: outcomes to compare: ``Rows`` or a Spark DataFrame
Outcomes: TypeAlias = "pd.DataFrame | Sequence[Mapping[str, Any]] | SparkDataFrame"


def assert_outcomes(
    actual: Outcomes,
    expected: Outcomes,
    *,
    columns: Sequence[str] = ("op_id", "status", "resolved_at"),
) -> None:
    """Assert two sets of outcomes are equal on ``columns``, whatever their row order.

    Args:
        actual: the outcomes under test: a Spark DataFrame (``outcomes_of``, a Delta table),
            a pandas DataFrame (``PurgatoryTester.outcomes()``) or a list of dicts.
        expected: the same forms.  Times (``op_ts``, ``deadline``, ``resolved_at``) may be
            epoch ms, ISO-8601 strings or datetimes on either side, in a Spark DataFrame as in
            the others (a Spark timestamp is read as its instant, whatever the session's time
            zone).

    A Spark DataFrame's compared columns are collected (outcomes in a test are few).  A
    difference raises ``AssertionError`` naming each ``op_id`` that differs and the differing
    cells:

    >>> assert_outcomes([{"op_id": "a", "status": "completed", "resolved_at": 15_000}],
    ...                 [{"op_id": "a", "status": "expired", "resolved_at": "1970-01-01T00:00:30Z"}])
    Traceback (most recent call last):
    ...
    AssertionError: outcomes differ in 1 op_id (compared op_id, status, resolved_at):
      'a': status is 'completed', expected 'expired'
      'a': resolved_at is 1970-01-01T00:00:15Z, expected 1970-01-01T00:00:30Z

    Example on Spark::

        outcomes = outcomes_of(purgatory_batch(ops_df, events_df, config))
        assert_outcomes(outcomes, [{"op_id": "a", "status": "completed",
                                    "resolved_at": "2026-01-01T00:00:15Z"}])
    """
    columns = list(columns)
    if "op_id" not in columns:
        raise ValueError(f"columns must include 'op_id' to pair the rows up, got {columns}")
    left = _normalised(_collected(actual, columns, "actual"), columns, "actual")
    right = _normalised(_collected(expected, columns, "expected"), columns, "expected")
    problems = _differences(left, right, columns)
    if problems:
        n = len({op_id for op_id, _ in problems})
        header = f"outcomes differ in {n} op_id{'s' if n > 1 else ''} (compared {', '.join(columns)}):"
        raise AssertionError("\n  ".join([header, *(f"{op_id!r}: {text}" for op_id, text in problems)]))


def _is_spark(frame: object) -> bool:
    # a Spark DataFrame means pyspark is imported already; the pandas path never imports it
    sql = sys.modules.get("pyspark.sql")
    return sql is not None and isinstance(frame, sql.DataFrame)


def _collected(frame: Outcomes, columns: list[str], side: str) -> Rows:
    """A Spark DataFrame's ``columns`` as pandas, its timestamps as epoch ms (an instant:
    ``toPandas`` would give wall-clock times of the session's time zone); other forms as
    they are."""
    if not _is_spark(frame):
        return frame  # type: ignore[return-value]
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{side} has no column {', '.join(map(repr, missing))} (it has {frame.columns})")
    types = {f.name: f.dataType for f in frame.schema.fields}
    return frame.select(
        *(
            F.unix_millis(F.col(c)).alias(c) if isinstance(types[c], T.TimestampType) else F.col(c)
            for c in columns
        )
    ).toPandas()


def _normalised(frame: Rows, columns: list[str], side: str) -> pd.DataFrame:
    """The compared columns only, times as UTC Timestamps, sorted by ``op_id``."""
    pdf = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(list(frame))
    missing = [c for c in columns if c not in pdf.columns]
    if missing:
        raise ValueError(
            f"{side} has no column {', '.join(map(repr, missing))} (it has {list(pdf.columns)}); "
            "pass columns=... to compare fewer"
        )
    times = [c for c in columns if c in OUTCOMES.time_columns]
    pdf = pdf[columns].assign(**{c: _timestamps(pdf[c]) for c in times})
    return pdf.sort_values("op_id", kind="stable").reset_index(drop=True)


def _differences(actual: pd.DataFrame, expected: pd.DataFrame, columns: list[str]) -> list[tuple[str, str]]:
    """(op_id, what differs): per differing cell, missing or surplus op_id, op_id given twice."""
    problems = []
    for side, frame in (("actual", actual), ("expected", expected)):
        counts = frame["op_id"].value_counts()
        problems += [(op_id, f"{n} rows in {side}") for op_id, n in counts[counts > 1].items()]
    left, right = actual.set_index("op_id"), expected.set_index("op_id")
    others = [c for c in columns if c != "op_id"]
    for op_id in left.index.union(right.index).unique():
        if op_id not in right.index:
            problems.append((op_id, f"not expected ({_cells(left.loc[[op_id]].iloc[0], others)})"))
        elif op_id not in left.index:
            problems.append((op_id, f"missing (expected {_cells(right.loc[[op_id]].iloc[0], others)})"))
        else:
            a, e = left.loc[[op_id]].iloc[0], right.loc[[op_id]].iloc[0]
            problems += [
                (op_id, f"{c} is {_show(a[c])}, expected {_show(e[c])}")
                for c in others
                if _plain(a[c]) != _plain(e[c])
            ]
    return problems


def _cells(row: pd.Series, columns: list[str]) -> str:
    return ", ".join(f"{c}={_show(row[c])}" for c in columns)


def _show(value: object) -> str:
    if isinstance(value, pd.Timestamp) and value is not pd.NaT:
        return value.isoformat().replace("+00:00", "Z")
    return repr(_plain(value))


def _plain(value: object) -> object:
    """Lists and arrays as lists, missing values as None, numpy scalars as Python ones."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if value is None or value is pd.NaT or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value
