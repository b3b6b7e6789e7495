"""The product contract, declared once: input columns, output tables, rejection reasons.

Everything else derives from this module: the engine's output frames (``OUTCOME_COLUMNS`` ...),
the operator's output schema (``OPERATOR_OUTPUT``, turned into a Spark schema by the Spark
layer), the Delta tables' Arrow schemas (``TABLES``), and the rejection vocabulary that both
validators (Spark SQL and pandas) speak.  Types are Arrow types, so the module imports
neither Spark nor Delta and the engine may use it.

Invariants: a column, a status, a kind or a reason is spelled here and nowhere else; a
reason means the same thing whichever validator gives it.

>>> OUTCOME_COLUMNS[:3]
['op_id', 'keys', 'status']
>>> [t.name for t in TABLES.values()]
['outcomes', 'unmatched_events', 'rejected', 'metrics']
>>> OUTCOMES.partition_by, OUTCOMES.time_columns
('resolved_date', ('op_ts', 'deadline', 'resolved_at'))
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "COMPLETED",
    "EXPIRED",
    "KIND_OUTCOME",
    "KIND_UNMATCHED",
    "KIND_REJECTED",
    "KIND_METRICS",
    "GAUGES",
    "GROUP_ROWS",
    "RELAYED",
    "SOURCE_OPERATIONS",
    "SOURCE_EVENTS",
    "AFTER_RESOLUTION",
    "NO_OPERATION",
    "REASONS",
    "LATE",
    "DUPLICATE_OP_ID",
    "OPERATION_REASONS",
    "EVENT_REASONS",
    "OPERATION_COLUMNS",
    "EVENT_COLUMNS",
    "OPERATION_INPUT",
    "EVENT_INPUT",
    "MAX_TS_MS",
    "TableContract",
    "OUTCOMES",
    "UNMATCHED_EVENTS",
    "REJECTED",
    "METRICS",
    "SINK_METRICS",
    "PROPOSED_WATERMARKS",
    "PARTITION_MAXIMA",
    "TABLES",
    "OUTCOME_COLUMNS",
    "UNMATCHED_COLUMNS",
    "REJECTED_COLUMNS",
    "OPERATOR_OUTPUT",
    "ms_column",
    "PENDING",
    "PENDING_COLUMNS",
    "PENDING_TIME_COLUMNS",
]

# -- names -------------------------------------------------------------------------------------------

#: an outcome's status
COMPLETED, EXPIRED = "completed", "expired"

#: what a row of the operator's output is (its ``kind`` column)
KIND_OUTCOME, KIND_UNMATCHED, KIND_REJECTED, KIND_METRICS = "outcome", "unmatched", "rejected", "metrics"

#: input rows of one shard call, relayed ones included (the busiest group's share shows a funnel)
GROUP_ROWS = "group_rows"
#: rows a primary shard posted to the mailbox in one call (``handoff.wake``: the sink wakes the
#: cross-shard group for them)
RELAYED = "relayed"
#: the per-shard gauges of a ``metrics`` row
GAUGES: tuple[str, ...] = ("pending", "buffered", "watched", GROUP_ROWS, RELAYED)

#: which input a rejected row came from (the ``rejected`` table's ``source`` column)
SOURCE_OPERATIONS, SOURCE_EVENTS = "operations", "events"

#: why an event is in ``unmatched_events``
AFTER_RESOLUTION, NO_OPERATION = "after_resolution", "no_operation"

# -- rejection reasons -------------------------------------------------------------------------------

#: every reason a row can be rejected for, and what it means to a person reading ``rejected``
REASONS: dict[str, str] = {
    "record_too_large": "the record's text is longer than input.max.record.bytes (its raw is truncated)",
    "too_deep": "the record nests arrays and objects deeper than input.max.depth",
    "malformed_json": "the record is not a JSON object",
    "missing_op_id": "no op_id, or an empty one",
    "bad_op_id": "op_id is not a string",
    "missing_key": "no key (or keys), or only empty ones",
    "too_many_keys": "more distinct keys than input.max.keys",
    "missing_ts": "no ts",
    "bad_ts": (
        "ts is neither an ISO-8601 timestamp nor epoch ms, or lies outside 1970-2200 "
        "(words such as `now` or `today` are not event times)"
    ),
    "ts_in_future": "ts lies more than purgatory.max.future.ms ahead of processing time",
    "missing_timeout_ms": "no timeout_ms",
    "bad_timeout_ms": "timeout_ms is not a whole number",
    "negative_timeout": "timeout_ms < 0",
    "timeout_above_max": "timeout_ms > purgatory.max.timeout.ms",
    "unknown_condition": "condition is not any, count, sum, all, offset or quorum",
    "missing_target": "count, sum, offset and quorum need a target",
    "bad_target": "target is not a finite number",
    "missing_members": "all and quorum need members",
    "too_many_members": "more distinct members than input.max.members",
    "target_above_members": "a quorum's target is more than its distinct members: it could never hold",
    "unused_target": (
        "a target given to a condition that does not use one (any, all); k of named members is quorum"
    ),
    "unused_members": (
        "members given to a condition that does not use them (any, count, sum, offset); "
        "k of named members is quorum"
    ),
    "bad_payload": "payload is not a string",
    "bad_value": "value is not a finite number",
    "bad_source": "source is not a string",
    "duplicate_op_id": "an operation with this op_id is pending or was resolved recently",
    "late": "event time behind the watermark when the row arrived",
    "cross_shard_keys": "keys span shards and purgatory.cross.shard.operations is off",
}

#: a ``record_too_large`` row's ``raw``: its first ``RAW_KEPT_CHARS`` characters, then this
#: note with the record's size in UTF-8 bytes (both readings write the same text)
RAW_KEPT_CHARS = 1024
RAW_TRUNCATED = "…[truncated: {bytes} bytes]"

#: the reasons the engine itself gives (the validators give the others)
LATE, DUPLICATE_OP_ID = "late", "duplicate_op_id"

#: reasons an operation can get, in the order the validators check them (the first one wins)
OPERATION_REASONS: tuple[str, ...] = (
    "record_too_large",
    "too_deep",
    "malformed_json",
    "missing_op_id",
    "bad_op_id",
    "missing_key",
    "too_many_keys",
    "missing_ts",
    "bad_ts",
    "ts_in_future",
    "missing_timeout_ms",
    "bad_timeout_ms",
    "negative_timeout",
    "timeout_above_max",
    "unknown_condition",
    "missing_target",
    "bad_target",
    "missing_members",
    "too_many_members",
    "target_above_members",
    "unused_target",
    "unused_members",
    "bad_payload",
    "cross_shard_keys",
    "duplicate_op_id",
    "late",
)
#: reasons an event can get, in the order the validators check them
EVENT_REASONS: tuple[str, ...] = (
    "record_too_large",
    "too_deep",
    "malformed_json",
    "missing_key",
    "missing_ts",
    "bad_ts",
    "ts_in_future",
    "bad_value",
    "bad_op_id",
    "bad_source",
    "late",
)

# -- input -------------------------------------------------------------------------------------------

#: the SPEC's operation fields with their Arrow types (``ts`` a timestamp or epoch ms)
OPERATION_INPUT = pa.schema(
    [
        ("op_id", pa.string()),
        ("key", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("timeout_ms", pa.int64()),
        ("condition", pa.string()),
        ("target", pa.float64()),
        ("members", pa.list_(pa.string())),
        ("payload", pa.string()),
    ]
)
#: the SPEC's completion-event fields with their Arrow types
EVENT_INPUT = pa.schema(
    [
        ("key", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("op_id", pa.string()),
        ("source", pa.string()),
        ("value", pa.float64()),
    ]
)
#: event times from 1970 up to (not including) 2200-01-01 are accepted; others are ``bad_ts``
#: (they would overflow, or are nonsense)
MAX_TS_MS = 7_258_118_400_000
#: canonical columns of an operations frame handed to the engine (ts in epoch ms, keys a list)
OPERATION_COLUMNS = [f.name for f in OPERATION_INPUT if f.name != "key"]
#: canonical columns of an events frame handed to the engine (ts in epoch ms)
EVENT_COLUMNS = EVENT_INPUT.names

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
#: one row per micro-batch and shard call, for charts and SQL alerts (docs/metrics.md).  The
#: shard fills the columns up to ``batch_id`` (its gauges after the call, counts of what the
#: call emitted, latency percentiles of what it completed, its state value's size); the sink
#: adds the columns that need every shard of the batch (``SINK_METRICS``): each input's
#: watermark and the busiest group's share, then ``emitted_at`` and the date partition (the
#: date of ``batch_time``, the micro-batch's processing time).
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
            ("unmatched", pa.int64()),
            ("rejected", pa.int64()),
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
TABLES: dict[str, TableContract] = {t.name: t for t in (OUTCOMES, UNMATCHED_EVENTS, REJECTED, METRICS)}

OUTCOME_COLUMNS = OUTCOMES.engine_columns
UNMATCHED_COLUMNS = UNMATCHED_EVENTS.engine_columns
REJECTED_COLUMNS = REJECTED.engine_columns

# -- the operator's output ---------------------------------------------------------------------------


def ms_column(name: str) -> str:
    """The operator output's name for an event-time column: it travels as epoch ms."""
    return f"{name}_ms"


def _operator_output() -> pa.Schema:
    """One schema for every kind of row: ``kind``, ``shard``, the tables' engine columns
    (event times as ``<name>_ms`` int64, no ``batch_id``: the sink knows it), the per-shard
    gauges of ``metrics`` rows, the watermarks they propose (``PROPOSED_WATERMARKS``) and
    their Kafka partitions' largest event times (``PARTITION_MAXIMA``)."""
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

#: one row per pending operation with its progress so far, as ``inspect.pending_operations``
#: returns it: the operation's fields, ``shard`` (the group holding it: a cross-shard
#: operation's is the cross-shard group), ``progress`` / ``goal`` in the condition's own
#: measure (``any``: events, ``count``: events or distinct sources, ``sum``: sum of values,
#: ``all`` and ``quorum``: members reported, ``offset``: the lowest key's progress),
#: ``offsets`` (per key, for ``offset``), ``members_missing`` (for ``all`` and ``quorum``:
#: the members not reported yet), ``time_left_ms`` (deadline minus
#: ``watermark``), and the committed micro-batch whose state was read (``batch_id``)
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
