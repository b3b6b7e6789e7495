"""Sources: read operations and completion events, parse them, and say why a row is bad.

Every input format is reduced to one path: the record's JSON text.  JSON-lines files are
read as text (so a malformed line keeps its exact bytes), Parquet rows are rendered with
``to_json``, and Kafka records carry JSON in ``value``.  Parsing and validation are Spark SQL
expressions (no Python per row); each row comes out with the canonical columns, its ``raw``
text and a ``reason`` that is null for valid rows and otherwise names the first problem, in
the vocabulary of ``conditions.validate_operations`` / ``validate_events``.

Invariant: parsing never drops a row; a row that cannot be understood becomes a row with a
reason.

>>> sorted(EVENT_REASONS)
['bad_ts', 'bad_value', 'malformed_json', 'missing_key', 'missing_ts', 'ts_in_future']
"""

from __future__ import annotations

from typing import Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

__all__ = [
    "SourceFormat",
    "OPERATION_REASONS",
    "EVENT_REASONS",
    "OPERATIONS_PARQUET_SCHEMA",
    "EVENTS_PARQUET_SCHEMA",
    "parse_operations",
    "parse_events",
    "read_stream",
    "read_batch",
]

SourceFormat = Literal["json", "parquet", "kafka"]

OPERATION_REASONS = {
    "malformed_json",
    "missing_op_id",
    "missing_key",
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
}
EVENT_REASONS = {"malformed_json", "missing_key", "missing_ts", "bad_ts", "ts_in_future", "bad_value"}

# Every field is read as text first (Spark keeps the JSON text of numbers and arrays), so a
# wrong type becomes a reason instead of a failed query; only broken JSON is "corrupt".
_CORRUPT = "_corrupt_record"
_OPS_JSON = T.StructType(
    [
        T.StructField(name, T.StringType())
        for name in (
            "op_id",
            "key",
            "keys",
            "ts",
            "timeout_ms",
            "condition",
            "target",
            "members",
            "payload",
            _CORRUPT,
        )
    ]
)
_EVENTS_JSON = T.StructType(
    [T.StructField(name, T.StringType()) for name in ("key", "ts", "op_id", "source", "value", _CORRUPT)]
)
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}


def _string_list(text: Column) -> Column:
    """A JSON array of strings, or a single string standing for a one-element list.

    A JSON object (Spark hands its text to a string field) is not a key: null.
    """
    trimmed = F.trim(text)
    as_array = F.from_json(text, "array<string>")
    return (
        F.when(trimmed.startswith("["), as_array)
        .when(trimmed.startswith("{"), F.lit(None).cast("array<string>"))
        .when(~_blank(text), F.array(text))
    )


#: schemas for Parquet inputs (the SPEC's input contract as Spark types)
OPERATIONS_PARQUET_SCHEMA = T.StructType(
    [
        T.StructField("op_id", T.StringType()),
        T.StructField("key", T.StringType()),
        T.StructField("keys", T.ArrayType(T.StringType())),
        T.StructField("ts", T.TimestampType()),
        T.StructField("timeout_ms", T.LongType()),
        T.StructField("condition", T.StringType()),
        T.StructField("target", T.DoubleType()),
        T.StructField("members", T.ArrayType(T.StringType())),
        T.StructField("payload", T.StringType()),
    ]
)
EVENTS_PARQUET_SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("op_id", T.StringType()),
        T.StructField("source", T.StringType()),
        T.StructField("value", T.DoubleType()),
    ]
)


def _raw(df: DataFrame, fmt: SourceFormat) -> DataFrame:
    """One column ``raw``: the record's text."""
    # invalid UTF-8 (replaced by U+FFFD) would otherwise fail the Arrow hand-over to Python
    if fmt == "json":
        return df.select(F.make_valid_utf8(F.col("value")).alias("raw"))
    if fmt == "kafka":
        return df.select(F.make_valid_utf8(F.col("value").cast("string")).alias("raw"))
    if fmt == "parquet":
        return df.select(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    raise ValueError(f"unknown source format {fmt!r}; allowed: json, parquet, kafka")


# event times outside [1970, 2200) are rejected as bad_ts: they would overflow or be nonsense
MAX_TS_MS = 7_258_118_400_000


def _epoch_ms(name: str) -> Column:
    """Epoch ms from an ISO-8601 timestamp or a number of epoch ms; null if neither or out of range."""
    text = F.col(name)
    numeric = F.expr(f"try_cast({name} AS BIGINT)")
    parsed = F.unix_millis(F.try_to_timestamp(text))
    ms = F.when(text.rlike(r"^\s*-?[0-9]+\s*$"), numeric).otherwise(parsed)
    return F.when((ms >= 0) & (ms < MAX_TS_MS), ms)


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def _ts_checks(max_future_ms: int | None) -> list[tuple[str, Column]]:
    """Missing, unreadable or out-of-range event time, or one too far in the future.

    One far-future row would move the watermark and expire every pending operation, so rows
    more than ``purgatory.max.future.ms`` ahead of the micro-batch's processing time are
    rejected (``current_timestamp()`` is fixed per micro-batch, so a replay decides alike).
    """
    checks = [
        ("missing_ts", _blank(F.col("_t"))),
        ("bad_ts", F.col("ts_ms").isNull()),
    ]
    if max_future_ms is not None:
        now_ms = F.unix_millis(F.current_timestamp())
        checks.append(("ts_in_future", F.col("ts_ms") > now_ms + F.lit(int(max_future_ms))))
    return checks


def _first_reason(checks: list[tuple[str, Column]]) -> Column:
    expr = F.lit(None).cast("string")
    for reason, failed in reversed(checks):
        expr = F.when(failed, F.lit(reason)).otherwise(expr)
    return expr


def parse_operations(
    df: DataFrame, fmt: SourceFormat = "json", *, max_timeout_ms: int, max_future_ms: int | None = None
) -> DataFrame:
    """Canonical operations with ``raw`` and ``reason`` (null when valid).

    Columns: op_id, keys (sorted distinct), ts_ms, timeout_ms, condition (lower case), target,
    members (sorted distinct), payload, raw, reason.
    """
    j = F.from_json(F.col("raw"), _OPS_JSON, _JSON_OPTIONS)
    rows = _raw(df, fmt).select("raw", j.alias("j"))
    keys = F.coalesce(_string_list(F.col("j.keys")), F.when(~_blank(F.col("j.key")), F.array(F.col("j.key"))))
    keys = F.array_sort(F.array_distinct(F.filter(keys, lambda k: ~_blank(k))))
    members = F.array_sort(F.array_distinct(F.filter(_string_list(F.col("j.members")), lambda m: ~_blank(m))))
    out = rows.select(
        "raw",
        (F.col("j").isNull() | F.col(f"j.{_CORRUPT}").isNotNull()).alias("_malformed"),
        F.col("j.op_id").alias("op_id"),
        keys.alias("keys"),
        F.col("j.ts").alias("_t"),
        F.col("j.timeout_ms").alias("_timeout"),
        F.lower(F.trim(F.coalesce(F.col("j.condition"), F.lit("any")))).alias("condition"),
        F.col("j.target").alias("_target"),
        members.alias("members"),
        F.col("j.payload").alias("payload"),
    )
    out = out.withColumn("ts_ms", _epoch_ms("_t"))
    out = out.withColumn("timeout_ms", F.expr("try_cast(_timeout AS BIGINT)"))
    out = out.withColumn("target", F.expr("try_cast(_target AS DOUBLE)"))
    needs_target = F.col("condition").isin("count", "sum", "offset")
    reason = _first_reason(
        [
            ("malformed_json", F.col("_malformed")),
            ("missing_op_id", _blank(F.col("op_id"))),
            ("missing_key", F.coalesce(F.size("keys"), F.lit(0)) <= 0),
            *_ts_checks(max_future_ms),
            ("missing_timeout_ms", _blank(F.col("_timeout"))),
            ("bad_timeout_ms", F.col("timeout_ms").isNull()),
            ("negative_timeout", F.col("timeout_ms") < 0),
            ("timeout_above_max", F.col("timeout_ms") > F.lit(max_timeout_ms)),
            ("unknown_condition", ~F.col("condition").isin("any", "count", "sum", "all", "offset")),
            ("missing_target", needs_target & _blank(F.col("_target"))),
            ("bad_target", needs_target & (F.col("target").isNull() | F.isnan("target"))),
            (
                "missing_members",
                (F.col("condition") == "all") & (F.coalesce(F.size("members"), F.lit(0)) <= 0),
            ),
        ]
    )
    return out.withColumn("reason", reason).select(
        "op_id", "keys", "ts_ms", "timeout_ms", "condition", "target", "members", "payload", "raw", "reason"
    )


def parse_events(df: DataFrame, fmt: SourceFormat = "json", *, max_future_ms: int | None = None) -> DataFrame:
    """Canonical completion events with ``raw`` and ``reason`` (null when valid).

    Columns: key, ts_ms, op_id, source, value, raw, reason.
    """
    j = F.from_json(F.col("raw"), _EVENTS_JSON, _JSON_OPTIONS)
    rows = _raw(df, fmt).select("raw", j.alias("j"))
    out = rows.select(
        "raw",
        (F.col("j").isNull() | F.col(f"j.{_CORRUPT}").isNotNull()).alias("_malformed"),
        F.col("j.key").alias("key"),
        F.col("j.ts").alias("_t"),
        F.when(~_blank(F.col("j.op_id")), F.col("j.op_id")).alias("op_id"),
        F.when(~_blank(F.col("j.source")), F.col("j.source")).alias("source"),
        F.col("j.value").alias("_value"),
    )
    out = out.withColumn("ts_ms", _epoch_ms("_t"))
    out = out.withColumn("value", F.expr("try_cast(_value AS DOUBLE)"))
    reason = _first_reason(
        [
            ("malformed_json", F.col("_malformed")),
            ("missing_key", _blank(F.col("key"))),
            *_ts_checks(max_future_ms),
            ("bad_value", F.col("_value").isNotNull() & (F.col("value").isNull() | F.isnan("value"))),
        ]
    )
    return out.withColumn("reason", reason).select(
        "key", "ts_ms", "op_id", "source", "value", "raw", "reason"
    )


def _parquet_schema(kind: str) -> T.StructType:
    return OPERATIONS_PARQUET_SCHEMA if kind == "operations" else EVENTS_PARQUET_SCHEMA


def read_stream(
    spark: SparkSession,
    path: str,
    fmt: SourceFormat = "json",
    *,
    kind: Literal["operations", "events"] = "operations",
    max_files_per_trigger: int | None = None,
    kafka_options: dict[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame over ``path`` (a directory, or a Kafka topic for ``kafka``)."""
    if fmt == "kafka":
        reader = spark.readStream.format("kafka").option("subscribe", path)
        for key, value in (kafka_options or {}).items():
            reader = reader.option(key, value)
        return reader.load()
    reader = spark.readStream
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
    if fmt == "json":
        return reader.format("text").load(path)
    if fmt == "parquet":
        return reader.schema(_parquet_schema(kind)).parquet(path)
    raise ValueError(f"unknown source format {fmt!r}; allowed: json, parquet, kafka")


def read_batch(
    spark: SparkSession, path: str, fmt: SourceFormat = "json", *, kind: Literal["operations", "events"]
) -> DataFrame:
    """The static counterpart of ``read_stream`` (for replays and backfills)."""
    if fmt == "json":
        return spark.read.format("text").load(path)
    if fmt == "parquet":
        return spark.read.schema(_parquet_schema(kind)).parquet(path)
    raise ValueError(f"batch reads support json and parquet, not {fmt!r}")
