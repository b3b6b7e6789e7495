"""One shard call's output rows: its outcomes, unmatched events, rejected rows and one metrics
row, in the operator's one output schema (``contract.OPERATOR_OUTPUT``).

The rows leave as a pandas frame PySpark hands to Spark (``output_rows``), or as Arrow
tables, one per kind, for a shard that stages them itself (``output_parts``).

Invariants: every column comes from the contract; the metrics row is a call's last.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from ..contract import (
    COMPLETED,
    EXPIRED,
    GAUGES,
    KIND_METRICS,
    KIND_OUTCOME,
    KIND_REJECTED,
    KIND_UNMATCHED,
    KIND_WARNING,
    METRICS,
    OPERATOR_OUTPUT,
    OUTCOMES,
    PARTITION_MAXIMA,
    PROPOSED_WATERMARKS,
    REJECTED,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    UNMATCHED_EVENTS,
    WARNINGS,
    TableContract,
    ms_column,
)
from ..engine.purgatory import BatchResult, Purgatory
from ..handoff.partitions import maxima_text
from ..handoff.wake import is_end_watermark
from .input import INPUT_ROLES, proposed_watermarks
from .roles import ROLE_BAD, ROLES, SIDES

_OUTPUT_COLUMNS = OPERATOR_OUTPUT.names
#: the columns pandas holds as objects (strings and lists): a missing value is None there
_OBJECT_COLUMNS = [f.name for f in OPERATOR_OUTPUT if pa.types.is_string(f.type) or pa.types.is_list(f.type)]
_WATERMARK = "watermark"
#: a rejected row's columns in the output (``contract.REJECTED``'s, but ``batch_id``)
_REJECTED_ROWS = [c for c in REJECTED.engine_columns if c != "batch_id"]
_LATENCY_COLUMNS = [c for c in METRICS.schema.names if c.startswith("latency_")]
#: the percentiles of ``_LATENCY_COLUMNS``, in their order
_PERCENTILES = (50, 95, 99, 100)
_BAD = ROLES.index(ROLE_BAD)
#: the text columns of a few distinct values (an outcome's status and condition, a rejected
#: row's source and reason): converted to Arrow by value, not string by string (``_few_texts``)
_FEW_TEXTS = frozenset({"status", "condition", "source", "reason"})
#: most distinct values ``_few_texts`` looks for before it converts string by string
_MOST_TEXTS = 8


def _ms_names(table: TableContract) -> dict[str, str]:
    return {name: ms_column(name) for name in table.time_columns}


def shard_figures(
    p: Purgatory,
    routed: pd.DataFrame,
    delays_ms: dict[str, int],
    *,
    batch_time_ms: int,
    group_rows: int = 0,
    relayed: int = 0,
    proposed: dict[str, int | None] | None = None,
) -> dict[str, int | str | None]:
    """What a shard call reports beside its rows, read before its state is saved: its gauges,
    the micro-batch's time, the input rows it got per input (rows rejected at parse included,
    stubs and replicas not, so they sum over the shards), the watermark each input's rows
    propose and, for Kafka rows, each partition's largest event time.

    ``group_rows``: the rows it handled, relayed ones included; ``relayed``: the rows it posted
    to the mailbox; ``proposed``: ``input.proposed_watermarks``, when the caller has them."""
    role = routed["role"].to_numpy(np.int8)  # places in ``roles.ROLES`` and ``SIDES``
    side = routed["side"].to_numpy(np.int8)
    ts = routed[ms_column("ts")].to_numpy()
    figures: dict[str, int | str | None] = dict(
        zip(GAUGES, (p.pending, p.buffered_events, p.watched, group_rows, relayed), strict=True)
    )
    figures[ms_column("batch_time")] = int(batch_time_ms)
    proposed = proposed_watermarks(routed, delays_ms) if proposed is None else proposed
    for source, (own, _copy) in INPUT_ROLES.items():
        mine = side == SIDES.index(source)
        figures[f"input_{source}"] = int(np.count_nonzero(mine & ((role == own) | (role == _BAD))))
        figures[PROPOSED_WATERMARKS[source]] = proposed[source]
    figures[PARTITION_MAXIMA] = _partition_maxima(routed, role, side, ts)
    return figures


def _partition_maxima(routed: pd.DataFrame, role: np.ndarray, side: np.ndarray, ts: np.ndarray) -> str | None:
    """The largest event time of the call's Kafka rows per input and partition, rows rejected
    at parse not counted; None for files."""
    if "part" not in routed:
        return None
    part = routed["part"].to_numpy(dtype=np.float64, na_value=np.nan)
    timed = ~np.isnan(part) & (role != _BAD)
    if not timed.any():
        return None
    by_input: dict[str, dict[int, int]] = {}
    for source in (SOURCE_OPERATIONS, SOURCE_EVENTS):
        mine = timed & (side == SIDES.index(source))
        if mine.any():
            frame = pd.DataFrame({"part": part[mine].astype(np.int64), "ts": ts[mine].astype(np.int64)})
            largest = frame.groupby("part", sort=True)["ts"].max()
            by_input[source] = dict(zip(largest.index.tolist(), largest.tolist(), strict=True))
    return maxima_text(by_input)


def output_rows(
    shard: int,
    result: BatchResult,
    bad: pd.DataFrame,
    figures: dict[str, int | str | None],
    wm: int,
    *,
    state_bytes: int | None = None,
) -> pd.DataFrame:
    """A shard's micro-batch as ``OUTPUT_SCHEMA`` rows: its outcomes, unmatched events,
    rejected rows (the engine's and ``bad``) and one metrics row (``figures``, the counts,
    the latency percentiles, the watermark ``wm`` and ``state_bytes``)."""
    metrics, maxima = _call_metrics(result, bad, figures, wm, state_bytes, _Status.of(result.outcomes))
    gauges = _Part(KIND_METRICS, {name: np.zeros(1, np.int64) for name in GAUGES}, 1)
    outcomes, *others = _row_parts(result, bad)
    if outcomes.rows:
        outcomes = outcomes._replace(columns=_with_single_key(outcomes.columns))
    out = _stacked([part for part in [outcomes, *others, gauges] if part.rows])
    # the metrics row (the last) carries the figures; exact, not through a float column
    n = len(out)
    for name, value in metrics.items():
        data, mask = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
        if value is not None:
            data[-1], mask[-1] = value, False
        out[name] = pd.arrays.IntegerArray(data, mask)
    text = np.full(n, None, dtype=object)
    text[-1] = maxima
    out[PARTITION_MAXIMA] = text
    out["shard"] = np.int32(shard)
    return out


def output_parts(
    shard: int,
    result: BatchResult,
    bad: pd.DataFrame,
    figures: dict[str, int | str | None],
    wm: int,
    *,
    state_bytes: int | None = None,
) -> list[pa.Table]:
    """``output_rows``' rows as Arrow tables of ``OPERATOR_OUTPUT``, one per kind that has any
    (the metrics row's last), each converted on its own; an outcome's keys all in ``keys``, as
    the ``outcomes`` table holds them."""
    status = _Status.of(result.outcomes)
    metrics, maxima = _call_metrics(result, bad, figures, wm, state_bytes, status)
    tables = [_arrow_part(part, shard, status) for part in _row_parts(result, bad) if part.rows]
    row = {"kind": KIND_METRICS, "shard": shard, **dict.fromkeys(GAUGES, 0)}  # a gauge not given is 0
    row.update(metrics, **{PARTITION_MAXIMA: maxima})  # as ``output_rows``' metrics row
    tables.append(pa.Table.from_pylist([row], schema=OPERATOR_OUTPUT))
    return tables


class _Part(NamedTuple):
    """One kind's rows as the output names its columns (the engine's arrays, not copied)."""

    kind: str
    columns: dict[str, np.ndarray]
    rows: int


def _part(
    kind: str, frame: pd.DataFrame, names: dict[str, str] | None = None, columns: list[str] | None = None
) -> _Part:
    """``frame``'s ``columns`` (all but ``batch_id``, which the writer adds, by default) under
    their output names; none of a frame without rows (the usual unmatched and rejected)."""
    if not len(frame):
        return _Part(kind, {}, 0)
    names = names or {}
    taken = [c for c in frame.columns if c != "batch_id"] if columns is None else columns
    return _Part(kind, {names.get(c, c): frame[c].to_numpy() for c in taken}, len(frame))


def _row_parts(result: BatchResult, bad: pd.DataFrame) -> list[_Part]:
    """The call's rows by kind, in the output's order, with the output's column names (an
    outcome's keys all in ``keys``)."""
    return [
        _part(KIND_OUTCOME, result.outcomes, _ms_names(OUTCOMES)),
        _part(KIND_UNMATCHED, result.unmatched, _ms_names(UNMATCHED_EVENTS)),
        _part(KIND_REJECTED, result.rejected, columns=_REJECTED_ROWS),
        _part(KIND_REJECTED, bad),
        _part(KIND_WARNING, result.warnings, _ms_names(WARNINGS)),
    ]


class _Status(NamedTuple):
    """Which outcomes of a call completed and which expired, found once for its counts, its
    latencies and its Arrow column."""

    completed: np.ndarray
    expired: np.ndarray

    @classmethod
    def of(cls, outcomes: pd.DataFrame) -> _Status:
        status = outcomes["status"].to_numpy()
        completed = status == COMPLETED
        expired = ~completed
        expired[expired] = status[expired] == EXPIRED  # the others only: most completed
        return cls(completed, expired)


def _call_metrics(
    result: BatchResult,
    bad: pd.DataFrame,
    figures: dict[str, int | str | None],
    wm: int,
    state_bytes: int | None,
    status: _Status,
) -> tuple[dict[str, int | str | None], str | None]:
    """The metrics row's figures (all whole numbers or null), and its partition maxima text."""
    figures = dict(figures)
    maxima = figures.pop(PARTITION_MAXIMA, None)
    outcomes = result.outcomes
    metrics = {
        **figures,
        "completed": int(np.count_nonzero(status.completed)),
        "expired": int(np.count_nonzero(status.expired)),
        # the third status: the outcomes neither completed nor expired
        "cancelled": len(outcomes) - int(np.count_nonzero(status.completed | status.expired)),
        "unmatched": len(result.unmatched),
        "rejected": len(result.rejected) + len(bad),
        "warned": len(result.warnings),
        **_latencies(outcomes["latency_ms"].to_numpy()[status.completed]),
        "expiry_lag_ms": None
        if is_end_watermark(wm)  # expired because the input ended, not late: no lag to report
        else _expiry_lag(
            outcomes["resolved_at"].to_numpy()[status.expired], figures.get(ms_column("batch_time"))
        ),
        ms_column(_WATERMARK): wm,
        "state_bytes": state_bytes,
    }
    return metrics, maxima  # type: ignore[return-value]


def _arrow_part(part: _Part, shard: int, status: _Status | None = None) -> pa.Table:
    """One kind's rows in ``OPERATOR_OUTPUT``: its columns typed (NaN and None as null), the
    others null."""
    n = part.rows
    columns = []
    for field in OPERATOR_OUTPUT:
        if field.name == "kind":
            column = pa.repeat(pa.scalar(part.kind, field.type), n)
        elif field.name == "shard":
            column = pa.repeat(pa.scalar(shard, field.type), n)
        elif field.name == "status" and status is not None and part.kind == KIND_OUTCOME:
            column = _status_text(part.columns[field.name], status)
        elif field.name in part.columns:
            column = _arrow(part.columns[field.name], field)
        else:
            column = pa.nulls(n, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=OPERATOR_OUTPUT)


def _arrow(values: np.ndarray, field: pa.Field) -> pa.Array:
    """One column as ``field`` types it: a few-valued text column by value (``_few_texts``);
    else converted, NaN and None as null."""
    if field.name in _FEW_TEXTS and values.dtype == object:
        return _few_texts(values)
    return pa.array(values, type=field.type, from_pandas=True)


def _status_text(values: np.ndarray, status: _Status) -> pa.Array:
    """The outcomes' ``status`` as Arrow from the masks ``_Status`` found."""
    if not (status.completed | status.expired).all():
        return pa.array(values, type=pa.string(), from_pandas=True)
    return pa.array([COMPLETED, EXPIRED], pa.string()).take(status.expired.view(np.int8))


def _few_texts(values: np.ndarray) -> pa.Array:
    """An object column of a few distinct strings as an Arrow string array, gathered from its
    distinct values, not converted per row; other columns the plain way."""
    n = len(values)
    codes = np.zeros(n, np.int8)
    left = np.ones(n, dtype=bool)
    found: list[str] = []
    while n:
        first = int(np.argmax(left))
        value = values[first]
        if len(found) == _MOST_TEXTS or not isinstance(value, str):
            return pa.array(values, type=pa.string(), from_pandas=True)
        try:
            same = np.asarray(values == value, dtype=bool)
        except TypeError:  # a missing value that compares as missing (pandas' NA)
            return pa.array(values, type=pa.string(), from_pandas=True)
        codes[same] = len(found)
        found.append(value)
        left &= ~same
        if not left.any():
            break
    if len(found) == 1:  # one value (an outcome's condition, mostly): no gather
        return pa.repeat(pa.scalar(found[0], pa.string()), n)
    return pa.array(found, pa.string()).take(codes)


def _latencies(latency: np.ndarray) -> dict[str, int | None]:
    """Nearest-rank percentiles (a latency that occurred) of the completed outcomes' ``latency``,
    by a partial sort.

    >>> _latencies(np.array([30, 10, 20, 40]))
    {'latency_p50_ms': 20, 'latency_p95_ms': 40, 'latency_p99_ms': 40, 'latency_max_ms': 40}
    """
    n = len(latency)
    if not n:
        return dict.fromkeys(_LATENCY_COLUMNS)
    ranks = [max(-(-q * n // 100) - 1, 0) for q in _PERCENTILES]  # ceil(q n / 100), exact in integers
    values = np.partition(latency.astype(np.int64, copy=False), ranks)[ranks]
    return {name: int(v) for name, v in zip(_LATENCY_COLUMNS, values, strict=True)}


def _expiry_lag(expired: np.ndarray, batch_time_ms: int | str | None) -> int | None:
    """How long after its deadline, on the processing clock, the call's latest expiry was
    decided: the micro-batch's time minus the earliest deadline it expired (``expired``: their
    ``resolved_at``); null when it expired nothing."""
    if not len(expired) or batch_time_ms is None:
        return None
    return int(batch_time_ms) - int(np.min(expired.astype(np.int64)))


def _with_single_key(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A single key goes back in ``key``; ``keys`` holds only the lists of other lengths."""
    keys = columns["keys"]
    single = np.fromiter(map(len, keys), np.int64, count=len(keys)) == 1
    key = np.full(len(keys), None, dtype=object)
    key[single] = [k[0] for k in keys[single]]
    multi = keys.copy()
    multi[single] = None
    return {**columns, "key": key, "keys": multi}


def _stacked(parts: list[_Part]) -> pd.DataFrame:
    """The parts one after another in ``OUTPUT_SCHEMA``'s columns, each with its ``kind``; a
    column a part lacks is null there."""
    kinds = np.array([part.kind for part in parts], dtype=object)
    columns: dict[str, np.ndarray] = {"kind": np.repeat(kinds, [part.rows for part in parts])}
    for name in _OUTPUT_COLUMNS[1:]:
        null = None if name in _OBJECT_COLUMNS else np.nan
        values = np.concatenate(
            [part.columns[name] if name in part.columns else np.full(part.rows, null) for part in parts]
        )
        if null is None:  # Arrow wants None, not NaN, for a missing string or array
            values = values.astype(object, copy=False)
            values[pd.isna(values)] = None
        columns[name] = values
    return pd.DataFrame(columns, copy=False)
