"""The product contract, declared once: input fields, rejection reasons, output tables.

The readers of the input read a record by ``inputs`` and check it by ``rules``, rejecting it
with ``reasons``; the output frames, the operator's output schema and the Delta tables'
schemas (``TABLES``) are declared here, as Arrow types, so the engine needs no Spark.

Invariants: a column, a status, a kind or a reason is spelled here and nowhere else; a
reason means the same thing whichever reader gives it.

>>> OUTCOME_COLUMNS[:3]
['op_id', 'keys', 'status']
>>> [t.name for t in TABLES.values()]
['outcomes', 'unmatched_events', 'rejected', 'metrics', 'warnings']
>>> OUTCOMES.partition_by, OUTCOMES.time_columns
('resolved_date', ('op_ts', 'deadline', 'resolved_at'))
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .inputs import *  # noqa: F403 - the input contract, re-exported
from .inputs import SOURCE_EVENTS, SOURCE_OPERATIONS
from .inputs import __all__ as _inputs
from .reasons import *  # noqa: F403 - the reasons, re-exported
from .reasons import __all__ as _reasons
from .rules import *  # noqa: F403 - the checks, re-exported
from .rules import __all__ as _rules

__all__ = [
    *_inputs,
    *_reasons,
    *_rules,
    "COMPLETED",
    "EXPIRED",
    "CANCELLED",
    "STATUSES",
    "KIND_OUTCOME",
    "KIND_UNMATCHED",
    "KIND_REJECTED",
    "KIND_METRICS",
    "KIND_WARNING",
    "GAUGES",
    "COUNTS",
    "ROW_COUNTS",
    "GROUP_ROWS",
    "RELAYED",
    "AFTER_RESOLUTION",
    "NO_OPERATION",
    "CANCEL_AFTER_RESOLUTION",
    "CANCEL_NO_OPERATION",
    "TableContract",
    "OUTCOMES",
    "UNMATCHED_EVENTS",
    "REJECTED",
    "METRICS",
    "WARNINGS",
    "SINK_METRICS",
    "PROPOSED_WATERMARKS",
    "PARTITION_MAXIMA",
    "TABLES",
    "OUTCOME_COLUMNS",
    "UNMATCHED_COLUMNS",
    "REJECTED_COLUMNS",
    "WARNING_COLUMNS",
    "OPERATOR_OUTPUT",
    "ms_column",
    "PENDING",
    "PENDING_COLUMNS",
    "PENDING_TIME_COLUMNS",
]

# -- names -------------------------------------------------------------------------------------------

#: an outcome's status: the condition held, the deadline passed, or a cancel event withdrew it
COMPLETED, EXPIRED, CANCELLED = "completed", "expired", "cancelled"
STATUSES: tuple[str, ...] = (COMPLETED, EXPIRED, CANCELLED)

#: what a row of the operator's output is (its ``kind`` column)
KIND_OUTCOME, KIND_UNMATCHED, KIND_REJECTED, KIND_METRICS = "outcome", "unmatched", "rejected", "metrics"
#: ... and a warning: an operation with ``warn_ms`` still pending at ``deadline - warn_ms``
KIND_WARNING = "warning"

#: input rows of one shard call, relayed ones included (the busiest group's share shows a funnel)
GROUP_ROWS = "group_rows"
#: rows a primary shard posted to the mailbox in one call (``handoff.wake``: the sink wakes the
#: cross-shard group for them)
RELAYED = "relayed"
#: the per-shard gauges of a ``metrics`` row
GAUGES: tuple[str, ...] = ("pending", "buffered", "watched", GROUP_ROWS, RELAYED)


#: why an event is in ``unmatched_events``: in the window of an operation resolved without it,
#: or of none; a cancel event's own two (it withdrew nothing: the operation had resolved, or
#: none was pending on its key or op_id at its time, e.g. its deadline had passed)
AFTER_RESOLUTION, NO_OPERATION = "after_resolution", "no_operation"
CANCEL_AFTER_RESOLUTION, CANCEL_NO_OPERATION = "cancel_after_resolution", "cancel_no_operation"

# -- output tables -----------------------------------------------------------------------------------

_TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class TableContract:
    """One output table: its Delta schema, its partition column and who fills which column.

    The engine fills every column up to and including ``batch_id``, with event times
    (``time_columns``) as int64 epoch milliseconds; the writer turns those into timestamps
    and adds the columns after ``batch_id`` (``emitted_at`` and the date partition).
    """

    name: str
    kind: str  # the kind of operator output row that fills it
    schema: pa.Schema
    partition_by: str
    time_columns: tuple[str, ...]

    @property
    def engine_columns(self) -> list[str]:
        """The columns the engine's frames carry, in table order (ending with ``batch_id``)."""
        names = self.schema.names
        return names[: names.index("batch_id") + 1]

    @property
    def writer_columns(self) -> list[str]:
        """The columns the writer adds after ``batch_id``."""
        names = self.schema.names
        return names[names.index("batch_id") + 1 :]

    def conformed(self, rows: pa.RecordBatch | pa.Table, columns: list[str] | None = None) -> pa.Table:
        """``rows`` with this table's ``columns`` (default: all), in order and of their types;
        a column the rows lack as nulls.  Rows staged by an earlier version (a checkpoint
        continued after an upgrade, ``docs/upgrading.md``) lack the columns added since; a
        table's columns are only ever added, nullable, so such rows read as its older rows do.

        >>> old = pa.table({"key": ["k"], "ts": pa.array([0], _TS), "reason": ["late"]})
        >>> UNMATCHED_EVENTS.conformed(old, ["key", "value"]).to_pylist()
        [{'key': 'k', 'value': None}]
        """
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        fields = [self.schema.field(name) for name in (columns or self.schema.names)]
        have = set(table.schema.names)
        arrays = [
            table.column(f.name) if f.name in have else pa.nulls(table.num_rows, f.type) for f in fields
        ]
        return pa.Table.from_arrays(arrays, names=[f.name for f in fields]).cast(pa.schema(fields))


OUTCOMES = TableContract(
    "outcomes",
    KIND_OUTCOME,
    pa.schema(
        [
            ("op_id", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("status", pa.string()),
            ("op_ts", _TS),
            ("deadline", _TS),
            ("resolved_at", _TS),
            ("latency_ms", pa.int64()),
            ("matched_events", pa.int64()),
            ("progress", pa.float64()),
            ("condition", pa.string()),
            ("target", pa.float64()),
            ("payload", pa.string()),
            # who answered (``engine.answered``): an ``all`` or ``quorum``'s members who
            # reported and those who did not, a ``count``'s distinct sources; null otherwise
            ("reported", pa.list_(pa.string())),
            ("missing", pa.list_(pa.string())),
            ("batch_id", pa.int64()),
            ("emitted_at", _TS),
            ("resolved_date", pa.date32()),
        ]
    ),
    partition_by="resolved_date",
    time_columns=("op_ts", "deadline", "resolved_at"),
)
UNMATCHED_EVENTS = TableContract(
    "unmatched_events",
    KIND_UNMATCHED,
    pa.schema(
        [
            ("key", pa.string()),
            ("ts", _TS),
            ("op_id", pa.string()),
            ("source", pa.string()),
            ("value", pa.float64()),
            ("reason", pa.string()),
            ("batch_id", pa.int64()),
            ("event_date", pa.date32()),
        ]
    ),
    partition_by="event_date",
    time_columns=("ts",),
)
REJECTED = TableContract(
    "rejected",
    KIND_REJECTED,
    pa.schema(
        [
            ("source", pa.string()),
            ("raw", pa.string()),
            ("reason", pa.string()),
            # the record's op_id and key when it has readable ones (an operation's first key):
            # what happened to one payment is then a filter, not a search through ``raw``
            ("op_id", pa.string()),
            ("key", pa.string()),
            ("batch_id", pa.int64()),
            ("rejected_date", pa.date32()),
        ]
    ),
    partition_by="rejected_date",
    time_columns=(),
)
#: one row per micro-batch and shard call, for charts and SQL alerts (docs/metrics.md): the
#: shard fills the columns up to ``batch_id``, the sink those that need every shard of the
#: batch (``SINK_METRICS``), ``emitted_at`` and the date partition (of ``batch_time``).
METRICS = TableContract(
    "metrics",
    KIND_METRICS,
    pa.schema(
        [
            ("shard", pa.int32()),
            ("batch_time", _TS),
            ("input_operations", pa.int64()),
            ("input_events", pa.int64()),
            (GROUP_ROWS, pa.int64()),
            (RELAYED, pa.int64()),
            ("pending", pa.int64()),
            ("watched", pa.int64()),
            ("buffered", pa.int64()),
            ("completed", pa.int64()),
            ("expired", pa.int64()),
            ("cancelled", pa.int64()),
            ("unmatched", pa.int64()),
            ("rejected", pa.int64()),
            ("warned", pa.int64()),
            ("latency_p50_ms", pa.int64()),
            ("latency_p95_ms", pa.int64()),
            ("latency_p99_ms", pa.int64()),
            ("latency_max_ms", pa.int64()),
            ("expiry_lag_ms", pa.int64()),
            ("watermark", _TS),
            ("state_bytes", pa.int64()),
            ("batch_id", pa.int64()),
            ("operations_watermark", _TS),
            ("events_watermark", _TS),
            ("busiest_share", pa.float64()),
            ("emitted_at", _TS),
            ("metrics_date", pa.date32()),
        ]
    ),
    partition_by="metrics_date",
    time_columns=("watermark", "batch_time"),
)
#: one row per operation still pending at ``deadline - warn_ms`` in event time (``warned_at``),
#: written when the watermark reaches that time, or with its outcome if that comes first;
#: progress and who answered over its events before ``warned_at`` (``engine.delayed``)
WARNINGS = TableContract(
    "warnings",
    KIND_WARNING,
    pa.schema(
        [
            ("op_id", pa.string()),
            ("keys", pa.list_(pa.string())),
            ("deadline", _TS),
            ("warned_at", _TS),
            ("progress", pa.float64()),
            ("reported", pa.list_(pa.string())),
            ("missing", pa.list_(pa.string())),
            ("payload", pa.string()),
            ("batch_id", pa.int64()),
            ("emitted_at", _TS),
            ("warned_date", pa.date32()),
        ]
    ),
    partition_by="warned_date",
    time_columns=("deadline", "warned_at"),
)
#: the metrics columns the sink fills from every shard call of the micro-batch
SINK_METRICS: tuple[str, ...] = ("operations_watermark", "events_watermark", "busiest_share")
#: what a shard call proposes for each input's watermark (the largest event time of that
#: input among its rows minus the input's delay; null without such rows), by input: the sink
#: keeps the running maximum (``METRICS``' ``operations_watermark`` / ``events_watermark``)
PROPOSED_WATERMARKS: dict[str, str] = {
    SOURCE_OPERATIONS: "proposed_operations_watermark_ms",
    SOURCE_EVENTS: "proposed_events_watermark_ms",
}
#: what a shard call reports of its Kafka rows: the largest event time per input and
#: partition, as text (``handoff.partitions``: the watermark per Kafka partition)
PARTITION_MAXIMA = "partition_maxima"
#: table name -> contract, in the order the tables are written
TABLES: dict[str, TableContract] = {
    t.name: t for t in (OUTCOMES, UNMATCHED_EVENTS, REJECTED, METRICS, WARNINGS)
}
#: the counts that are a table's rows, by the count's name
ROW_COUNTS: dict[str, TableContract] = {
    "unmatched": UNMATCHED_EVENTS,
    "rejected": REJECTED,
    "warned": WARNINGS,
}
#: the counts of a ``metrics`` row, and of the progress line, the handle's totals and the
#: charts: outcomes by status, then the rows of ``ROW_COUNTS``' tables
COUNTS: tuple[str, ...] = (*STATUSES, *ROW_COUNTS)

OUTCOME_COLUMNS = OUTCOMES.engine_columns
UNMATCHED_COLUMNS = UNMATCHED_EVENTS.engine_columns
REJECTED_COLUMNS = REJECTED.engine_columns
WARNING_COLUMNS = WARNINGS.engine_columns

# -- the operator's output ---------------------------------------------------------------------------


def ms_column(name: str) -> str:
    """The operator output's name for an event-time column: it travels as epoch ms."""
    return f"{name}_ms"


def _operator_output() -> pa.Schema:
    """One schema for every kind of row: ``kind``, ``shard``, the tables' engine columns
    (event times as ``<name>_ms`` int64, no ``batch_id``), the per-shard gauges, the proposed
    watermarks and the Kafka partitions' largest event times."""
    fields: dict[str, pa.DataType] = {"kind": pa.string(), "shard": pa.int32()}
    for table in TABLES.values():
        for field in table.schema:
            if field.name == "batch_id":
                break
            if field.name in table.time_columns:
                fields.setdefault(ms_column(field.name), pa.int64())
            else:
                fields.setdefault(field.name, field.type)
    gauges = {name: pa.int64() for name in GAUGES}
    fields.update(gauges, **{ms_column("watermark"): pa.int64()})
    fields.update(dict.fromkeys(PROPOSED_WATERMARKS.values(), pa.int64()))
    fields[PARTITION_MAXIMA] = pa.string()
    return pa.schema(list(fields.items()))


#: the operator's output rows (times as epoch ms); the Spark layer derives its schema from this
OPERATOR_OUTPUT = _operator_output()


# -- pending operations (read from a checkpoint: ``spark_purgatory.inspect``) -----------------------

#: one row per pending operation with its progress so far (``inspect.pending_operations``):
#: ``progress`` / ``goal`` in the condition's own measure (docs/operating.md), ``offsets`` per
#: key for ``offset``, ``members_missing`` for ``all`` and ``quorum``, ``time_left_ms`` to
#: the deadline from ``watermark``, and the micro-batch whose state was read (``batch_id``)
PENDING = pa.schema(
    [
        ("op_id", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("shard", pa.int32()),
        ("ts", _TS),
        ("deadline", _TS),
        ("condition", pa.string()),
        ("target", pa.float64()),
        ("members", pa.list_(pa.string())),
        ("payload", pa.string()),
        ("matched_events", pa.int64()),
        ("distinct_sources", pa.int64()),
        ("value_sum", pa.float64()),
        ("progress", pa.float64()),
        ("goal", pa.float64()),
        ("offsets", pa.map_(pa.string(), pa.float64())),
        ("members_missing", pa.list_(pa.string())),
        ("time_left_ms", pa.int64()),
        ("watermark", _TS),
        ("batch_id", pa.int64()),
    ]
)
PENDING_COLUMNS = PENDING.names
#: the event-time columns of ``PENDING`` (epoch ms in the engine's frame)
PENDING_TIME_COLUMNS = ("ts", "deadline", "watermark")
