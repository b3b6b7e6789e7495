"""Test helpers for users' own scenarios: an in-memory harness, ``assert_outcomes``, a session.

Kafka tests its purgatory with a mock timer advanced by hand; Spark 4.2's ``TwsTester``
drives a stateful processor in memory.  This module gives the purgatory the same:

* ``PurgatoryTester`` feeds operations and events (the SPEC's input contract, as lists of
  dicts, pandas frames, or raw JSON lines as the job reads them) to the Spark-free engine
  one micro-batch at a time, moves the watermark by hand and keeps the three tables' rows:
  milliseconds per scenario, no JVM.
* ``assert_outcomes(actual, expected)`` compares outcomes on a few columns whatever the row
  order, from a Spark DataFrame, a pandas DataFrame or a list of dicts; times may be ISO-8601
  strings, datetimes or epoch ms on either side; a difference is an ``AssertionError`` naming
  the differing cells.
* ``spark_session()`` and the ``purgatory_spark`` pytest fixture give a local session with
  the job's settings for tests of the Spark path.

Invariant: the harness runs exactly what ``Purgatory.process`` runs (which reads event times
and rejects bad rows with the reasons the Spark parser gives) and only keeps the results.

>>> t = PurgatoryTester({"purgatory.tick.ms": 100})
>>> t.add_operations([{"op_id": "produce-1", "key": "orders-0", "ts": "2026-01-01T00:00:00Z",
...                    "timeout_ms": 30_000, "condition": "count", "target": 2},
...                   {"op_id": "produce-2", "key": "orders-1", "ts": "2026-01-01T00:00:05Z",
...                    "timeout_ms": 30_000}])
>>> t.add_events([{"key": "orders-0", "ts": "2026-01-01T00:00:12Z", "source": "broker-1"},
...               {"key": "orders-0", "ts": "2026-01-01T00:00:15Z", "source": "broker-2"}])
>>> t.step().completed, t.pending
(1, 1)
>>> t.advance_watermark("2026-01-01T00:00:40Z")
>>> t.step().expired, t.pending
(1, 0)
>>> assert_outcomes(t.outcomes(), [
...     {"op_id": "produce-1", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
...     {"op_id": "produce-2", "status": "expired", "resolved_at": "2026-01-01T00:00:35Z"},
... ])

Dependencies: the harness and ``assert_outcomes`` need only pandas; the fixture needs pytest,
and chispa (for your own DataFrame comparisons) comes beside it with the ``testing`` extra
(``pip install "spark-purgatory[testing]"``) and are imported only when used.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import pandas as pd

from . import BatchResult, Purgatory, PurgatoryConfig
from .config import InputLimits
from .contract import (
    MAX_TS_MS,
    OUTCOME_COLUMNS,
    OUTCOMES,
    REJECTED_COLUMNS,
    UNMATCHED_COLUMNS,
    UNMATCHED_EVENTS,
)
from .engine.batch import with_keys
from .engine.fields import texts, values_of
from .engine.lines import json_lines
from .engine.list_fields import clean_lists
from .engine.validation import epoch_ms, record_json
from .spark.key_hash import shards_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame
    from pyspark.sql import SparkSession

__all__ = [
    "Rows",
    "Outcomes",
    "Time",
    "PurgatoryTester",
    "assert_outcomes",
    "spark_session",
    "purgatory_spark",
]

#: input rows: a pandas DataFrame or a list of dicts with the SPEC's input columns, or JSON
#: lines (a list of str or bytes, one record each, or one text of lines)
Rows: TypeAlias = "pd.DataFrame | Sequence[Mapping[str, Any]] | Sequence[str | bytes] | str | bytes"
#: outcomes to compare: ``Rows`` or a Spark DataFrame
Outcomes: TypeAlias = "pd.DataFrame | Sequence[Mapping[str, Any]] | SparkDataFrame"
#: an event time: epoch ms, an ISO-8601 string (``"2026-01-01T00:00:15Z"``) or a datetime
Time: TypeAlias = "int | str | datetime"

_EPOCH = pd.Timestamp(0, tz="UTC")


# -- times -------------------------------------------------------------------------------------------


def _utc(ms: Any) -> pd.DatetimeIndex:
    """Epoch ms (float64, NaN for none) as UTC Timestamps, NaT for NaN, through int64.

    Not ``pd.to_datetime(floats, unit="ms")``: with a NaN among the floats, pandas 2.3 now and
    then rounds uninitialised values and raises ``FloatingPointError`` ("overflow encountered
    in multiply"; seen in ``tests/engine/test_validation_fields.py``'s own use of it).

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


# -- the harness -------------------------------------------------------------------------------------


class PurgatoryTester:
    """One shard's purgatory driven by hand, one micro-batch per ``step()``.

    ``add_operations`` and ``add_events`` queue input; ``advance_watermark`` sets the
    watermark of the next micro-batch; ``step()`` runs the queued input through
    ``Purgatory.process`` at that watermark.  As in a Spark micro-batch, input behind the
    batch's watermark is rejected as ``late``: step before moving the watermark past input
    you queued.  Like ``TwsTester``, the watermark does not follow the event times by itself.

    Results accumulate across batches: ``outcomes()``, ``unmatched()`` and ``rejected()``
    return every row so far with the SPEC's columns (``batch_id`` is the step's number, from
    0).  Event times come back as UTC Timestamps, as in the Delta tables (``times="ms"`` for
    the engine's epoch ms).  ``purgatory`` is the engine underneath, for what the harness
    does not show (``save_state(t.purgatory)``, ``t.purgatory.watched``).

    Raw lines are taken as the job takes a file's lines or Kafka values: each is parsed as
    JSON (bytes as UTF-8) and validated by the engine's rules, so a line that is no JSON
    object is rejected ``malformed_json`` with the line as ``raw``.

    The harness is one shard, but it decides what depends on shards as Spark does: of two
    copies of an ``op_id`` in one micro-batch with equal ``ts`` the copy whose keys live in
    the lower-numbered shard (``purgatory.shards``, ``purgatory.shard.key.delimiter``) is
    kept, as the ``op_id`` registry keeps it.  What it does not show: ``cross_shard_keys``
    (never given), the one limit of the registry (an ``op_id`` used by an operation whose keys
    span shards and by one whose keys do not gets one outcome here, two on Spark;
    docs/contract.md), ``purgatory.dedup.scope=shard`` (a repeat in another shard is still
    refused here), and the ``ts_in_future`` check, which needs processing time.

    >>> t = PurgatoryTester({"purgatory.tick.ms": 10})
    >>> t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 100}])
    >>> t.add_events([{"key": "k", "ts": 40}])
    >>> t.step().outcomes[["op_id", "status", "resolved_at"]].values.tolist()
    [['a', 'completed', 40]]
    >>> t.outcome("a")["resolved_at"]
    Timestamp('1970-01-01 00:00:00.040000+0000', tz='UTC')
    """

    def __init__(self, config: PurgatoryConfig | Mapping[str, object] | None = None) -> None:
        """``config``: a ``PurgatoryConfig`` or its dotted keys (``{"purgatory.tick.ms": 100}``)."""
        if config is not None and not isinstance(config, PurgatoryConfig):
            config = PurgatoryConfig.from_mapping(config)
        self.purgatory = Purgatory(config)
        self._watermark = 0  # Spark's first micro-batch runs at watermark 0
        self._operations: list[pd.DataFrame] = []
        self._events: list[pd.DataFrame] = []
        self._results: list[BatchResult] = []

    # -- input -------------------------------------------------------------------------------------

    def add_operations(self, rows: Rows) -> None:
        """Queue operations for the next ``step()``: ``op_id``, ``key`` or ``keys``, ``ts``,
        ``timeout_ms``, optional ``condition``, ``target``, ``members``, ``payload``; as
        records (dicts, a frame) or as JSON lines (str or bytes, as the job reads them).

        >>> t = PurgatoryTester()
        >>> t.add_operations(['{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 10}', 'not json'])
        >>> t.step().rejected[["raw", "reason"]].values.tolist()
        [['not json', 'malformed_json']]
        """
        self._operations.append(_input_frame(rows, self.purgatory.config.input_limits))

    def add_events(self, rows: Rows) -> None:
        """Queue completion events for the next ``step()``: ``key``, ``ts``, optional
        ``op_id``, ``source``, ``value``; as records or JSON lines (``add_operations``)."""
        self._events.append(_input_frame(rows, self.purgatory.config.input_limits))

    def advance_watermark(self, to: Time) -> None:
        """Set the watermark of the next ``step()``; it never goes back (``ValueError``), and
        it is an event time the contract accepts (1970 up to ``contract.MAX_TS_MS``)."""
        ms = epoch_ms(pd.Series([to], dtype=object))
        if np.isnan(ms[0]):
            _check_readable(to)
            raise ValueError(f"not an event time: {to!r} (expected epoch ms, ISO-8601 or a datetime)")
        if int(ms[0]) < self._watermark:
            raise ValueError(
                f"the watermark never goes back: it is at {self._watermark} ms, asked for {to!r}"
            )
        self._watermark = int(ms[0])

    # -- running -----------------------------------------------------------------------------------

    def step(self) -> BatchResult:
        """Run one micro-batch with the queued input at the current watermark.

        Returns this batch's rows as the engine gives them (times in epoch ms).
        """
        batch_id = len(self._results)
        operations, events = _collect(_with_raw(self._operations)), _collect(_with_raw(self._events))
        operations = _shard_order(operations, self.purgatory.config)
        self._operations, self._events = [], []
        result = self.purgatory.process(operations, events, watermark_ms=self._watermark, batch_id=batch_id)
        self._results.append(result)
        return result

    def end_input(self) -> BatchResult:
        """The end of input, as a stream's (``start(..., end_of_input=True)``): the queued
        input, if any, in a micro-batch at the current watermark, then one more micro-batch
        at a watermark past every deadline, so what is pending expires at its deadline and
        every buffered event is counted or reported.  Returns that last micro-batch's rows.

        >>> t = PurgatoryTester()
        >>> t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 500}])
        >>> t.end_input().outcomes[["op_id", "status", "resolved_at"]].values.tolist()
        [['a', 'expired', 500]]
        """
        from .handoff.end_of_input import end_watermark_ms

        if self._operations or self._events:
            self.step()
        config = self.purgatory.config
        latest = self.purgatory.latest_deadline()
        self._watermark = end_watermark_ms(config.max_timeout_ms, config.tick_ms, latest)
        return self.step()

    # -- results -----------------------------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The watermark of the next ``step()``, in epoch ms."""
        return self._watermark

    @property
    def pending(self) -> int:
        """Operations waiting for their condition or their deadline."""
        return self.purgatory.pending

    def outcomes(self, *, times: Literal["timestamp", "ms"] = "timestamp") -> pd.DataFrame:
        """Every outcome so far (the ``outcomes`` table's engine columns, ending with ``batch_id``)."""
        frame = _collect([r.outcomes for r in self._results], OUTCOME_COLUMNS)
        return _with_timestamps(frame, OUTCOMES.time_columns) if times == "timestamp" else frame

    def unmatched(self, *, times: Literal["timestamp", "ms"] = "timestamp") -> pd.DataFrame:
        """Every event reported in ``unmatched_events`` so far, with its ``reason``."""
        frame = _collect([r.unmatched for r in self._results], UNMATCHED_COLUMNS)
        return _with_timestamps(frame, UNMATCHED_EVENTS.time_columns) if times == "timestamp" else frame

    def rejected(self) -> pd.DataFrame:
        """Every rejected row so far: ``source``, ``raw``, ``reason``, ``batch_id``."""
        return _collect([r.rejected for r in self._results], REJECTED_COLUMNS)

    def outcome(self, op_id: str) -> dict[str, Any] | None:
        """The outcome of one operation as a dict, or None while it has none (or is unknown)."""
        rows = self.outcomes()
        rows = rows.loc[rows["op_id"] == op_id]
        return rows.iloc[0].to_dict() if len(rows) else None


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


def _shard_order(operations: pd.DataFrame, config: PurgatoryConfig) -> pd.DataFrame:
    """The micro-batch's operations with the copies of each repeated op_id in the order of
    their keys' shards (stable; every other row where it was): of copies with equal ``ts``
    the engine keeps the first, and Spark's registry the one of the lowest-numbered shard
    (``engine.registry``; an operation whose keys span shards counts as the cross-shard
    group, number ``purgatory.shards``)."""
    n = len(operations)
    if n < 2 or "op_id" not in operations.columns:
        return operations
    op_id, _ = texts(values_of(operations, "op_id"), n)
    repeated = np.flatnonzero(
        pd.Series(op_id, dtype=object).duplicated(keep=False).to_numpy() & ~pd.isna(op_id)
    )
    if repeated.size == 0:
        return operations
    keys, _, _ = clean_lists(values_of(with_keys(operations.iloc[repeated]), "keys"), repeated.size)
    home = np.array([_home(k, config) for k in keys], dtype=np.int64)
    order = repeated[np.lexsort((repeated, home))]
    positions = np.arange(n)
    positions[repeated] = order
    return operations.iloc[positions].reset_index(drop=True)


def _home(keys: list[str], config: PurgatoryConfig) -> int:
    """The shard an operation lives in on Spark: its keys' (``spark.key_hash``), or the
    cross-shard group's when they span shards."""
    if not len(keys):
        return config.shards + 1  # invalid: rejected before any copy is compared
    shards = np.unique(shards_of(np.asarray(keys, dtype=object), config.shards, config.shard_key_delimiter))
    return int(shards[0]) if shards.size == 1 else config.shards


def _collect(frames: list[pd.DataFrame], columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of ``frames`` in order (only ``columns``, if given); empty frames add nothing."""
    filled = [f for f in frames if len(f)]
    if not filled:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns or []})
    rows = pd.concat(filled, ignore_index=True)
    return rows if columns is None else rows[columns]


# -- assert_outcomes ---------------------------------------------------------------------------------


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

    A Spark DataFrame's compared columns are collected (outcomes in a test are few), so every
    form is compared the same way.  A difference raises ``AssertionError`` (what
    ``pytest.raises(AssertionError)`` and pytest's own report expect), naming each ``op_id``
    that differs and the differing cells:

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
                if not _same(a[c], e[c])
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


def _same(a: object, b: object) -> bool:
    return _plain(a) == _plain(b)


# -- Spark sessions ----------------------------------------------------------------------------------


def spark_session(
    app_name: str = "spark-purgatory-tests",
    *,
    config: PurgatoryConfig | None = None,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local session for tests, with the job's settings (``runtime.session.local_session``):
    the workers on this interpreter, UTC, quiet logs, and
    ``purgatory.shards + 1`` shuffle partitions so each shard gets its own partition.

    Example::

        spark = spark_session(config=PurgatoryConfig(shards=2))
        outcomes = outcomes_of(purgatory_batch(ops_df, events_df, PurgatoryConfig(shards=2)))
    """
    from .runtime.session import local_session

    shards = (config or PurgatoryConfig()).shards
    return local_session(app_name, master=master, shuffle_partitions=shards + 1, conf=dict(conf or {}))


def _purgatory_spark() -> Iterator[SparkSession]:
    """A session-scoped local session (``spark_session()``), stopped at the end of the run.

    Enable it in a ``conftest.py`` with ``pytest_plugins = ["spark_purgatory.testing"]``::

        def test_batch(purgatory_spark):
            ops = purgatory_spark.createDataFrame([...])
    """
    session = spark_session()
    yield session
    session.stop()


try:  # with pytest installed this module is also a pytest plugin offering the fixture
    import pytest
except ImportError:  # pragma: no cover - the harness and assert_outcomes work without pytest
    purgatory_spark = _purgatory_spark
else:
    purgatory_spark = pytest.fixture(scope="session", name="purgatory_spark")(_purgatory_spark)
