"""Sources: read operations and completion events, parse them, and say why a row is bad.

Every input format is reduced to one path: the record's JSON text.  JSON-lines files are
read as text (so a malformed line keeps its exact bytes), Parquet rows are rendered with
``to_json``, and Kafka records carry JSON in ``value``.  Parsing and validation are Spark SQL
expressions (no Python per row); each row comes out with the canonical columns, its ``raw``
text and a ``reason`` that is null for valid rows and otherwise names the first problem.

The checks are those of the pandas validator (``engine.validation``, whose docstring says how
a field is read), in the order of ``contract.OPERATION_REASONS`` / ``EVENT_REASONS``: a row
gets the same reason on either path.  ``op_id``, ``source`` and ``payload`` are read as
variants, to tell a string or number (its text) from an array or object (``bad_<field>``).

Invariant: parsing never drops a row; a row that cannot be understood becomes a row with a
reason.
"""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..contract import (
    EVENT_COLUMNS,
    EVENT_INPUT,
    EVENT_REASONS,
    MAX_TS_MS,
    OPERATION_COLUMNS,
    OPERATION_INPUT,
    OPERATION_REASONS,
    SOURCE_OPERATIONS,
    ms_column,
)
from ..engine.conditions import ALL, ANY, CONDITION_NAMES, CONDITIONS, NEEDS_TARGET

__all__ = [
    "SourceFormat",
    "OPERATIONS_PARQUET_SCHEMA",
    "EVENTS_PARQUET_SCHEMA",
    "parse_operations",
    "parse_events",
    "read_stream",
    "read_batch",
]

SourceFormat = Literal["json", "parquet", "kafka"]

#: schemas for Parquet inputs (the SPEC's input contract as Spark types)
OPERATIONS_PARQUET_SCHEMA: T.StructType = from_arrow_schema(OPERATION_INPUT)
EVENTS_PARQUET_SCHEMA: T.StructType = from_arrow_schema(EVENT_INPUT)

#: fields that must be text: read as variants, so that an array or object is ``bad_<field>``
_TEXT_FIELDS = ("op_id", "source", "payload")

# Every other field is read as text first (Spark keeps the JSON text of numbers and arrays),
# so a wrong type becomes a reason instead of a failed query; only broken JSON is "corrupt".
_CORRUPT = "_corrupt_record"
_ANY, _ALL = str(CONDITION_NAMES[ANY]), str(CONDITION_NAMES[ALL])
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}


def _json_schema(contract: pa.Schema) -> T.StructType:
    fields = [
        T.StructField(name, T.VariantType() if name in _TEXT_FIELDS else T.StringType())
        for name in [*contract.names, _CORRUPT]
    ]
    return T.StructType(fields)


_OPS_JSON = _json_schema(OPERATION_INPUT)
_EVENTS_JSON = _json_schema(EVENT_INPUT)


def _text(field: str) -> Column:
    """A text field (``_TEXT_FIELDS``) as a string: a number or boolean as its JSON text."""
    return F.variant_get(F.col(f"j.{field}"), "$", "string")


def _structured(field: str) -> Column:
    """The field holds a JSON array or object."""
    return F.coalesce(F.schema_of_variant(F.col(f"j.{field}")).rlike("^(ARRAY|OBJECT)"), F.lit(False))


def _parsed_columns(canonical: list[str]) -> list[str]:
    """What a parser returns: the canonical columns (event time as epoch ms), ``raw``, ``reason``."""
    return [*[ms_column(c) if c == "ts" else c for c in canonical], "raw", "reason"]


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


def _clean(items: Column) -> Column:
    """Blank items dropped, deduplicated, sorted."""
    return F.array_sort(F.array_distinct(F.filter(items, lambda i: ~_blank(i))))


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


def _epoch_ms(name: str) -> Column:
    """Epoch ms from an ISO-8601 timestamp or a number of epoch ms; null if neither or out of range."""
    text = F.col(name)
    numeric = F.expr(f"try_cast({name} AS BIGINT)")
    parsed = F.unix_millis(F.try_to_timestamp(text))
    ms = F.when(text.rlike(r"^\s*-?[0-9]+\s*$"), numeric).otherwise(parsed)
    return F.when((ms >= 0) & (ms < MAX_TS_MS), ms)


def _blank(c: Column) -> Column:
    return c.isNull() | (F.trim(c) == "")


def _ts_checks(max_future_ms: int | None) -> dict[str, Column]:
    """Missing, unreadable or out-of-range event time, or one too far in the future.

    One far-future row would move the watermark and expire every pending operation, so rows
    more than ``purgatory.max.future.ms`` ahead of the micro-batch's processing time are
    rejected (``current_timestamp()`` is fixed per micro-batch, so a replay decides alike).
    """
    checks = {"missing_ts": _blank(F.col("_t")), "bad_ts": F.col(ms_column("ts")).isNull()}
    if max_future_ms is not None:
        now_ms = F.unix_millis(F.current_timestamp())
        checks["ts_in_future"] = F.col(ms_column("ts")) > now_ms + F.lit(int(max_future_ms))
    return checks


def _not_finite(number: Column) -> Column:
    return number.isNull() | F.isnan(number) | (F.abs(number) == F.lit(float("inf")))


def _first_reason(checks: dict[str, Column], order: tuple[str, ...]) -> Column:
    """The first reason in ``order`` (the contract's) whose check failed; null if none did."""
    unknown = set(checks) - set(order)
    if unknown:
        raise ValueError(f"checks for reasons outside the contract's order: {sorted(unknown)}")
    expr = F.lit(None).cast("string")
    for reason in reversed(order):
        if reason in checks:
            expr = F.when(checks[reason], F.lit(reason)).otherwise(expr)
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
    out = rows.select(
        "raw",
        (F.col("j").isNull() | F.col(f"j.{_CORRUPT}").isNotNull()).alias("_malformed"),
        _text("op_id").alias("op_id"),
        _structured("op_id").alias("_bad_op_id"),
        _clean(keys).alias("keys"),
        F.col("j.ts").alias("_t"),
        F.col("j.timeout_ms").alias("_timeout"),
        F.lower(F.trim(F.coalesce(F.col("j.condition"), F.lit(_ANY)))).alias("condition"),
        F.col("j.target").alias("_target"),
        _clean(_string_list(F.col("j.members"))).alias("members"),
        _text("payload").alias("payload"),
        _structured("payload").alias("_bad_payload"),
    )
    out = out.withColumn(ms_column("ts"), _epoch_ms("_t"))
    out = out.withColumn("timeout_ms", F.expr("try_cast(_timeout AS BIGINT)"))
    out = out.withColumn("target", F.expr("try_cast(_target AS DOUBLE)"))
    condition = F.col("condition")
    needs_target = condition.isin(*[str(CONDITION_NAMES[code]) for code in NEEDS_TARGET])
    checks = {
        "malformed_json": F.col("_malformed"),
        "missing_op_id": _blank(F.col("op_id")),
        "bad_op_id": F.col("_bad_op_id"),
        "missing_key": F.coalesce(F.size("keys"), F.lit(0)) <= 0,
        **_ts_checks(max_future_ms),
        "missing_timeout_ms": _blank(F.col("_timeout")),
        "bad_timeout_ms": F.col("timeout_ms").isNull(),
        "negative_timeout": F.col("timeout_ms") < 0,
        "timeout_above_max": F.col("timeout_ms") > F.lit(max_timeout_ms),
        "unknown_condition": ~condition.isin(*CONDITIONS),
        "missing_target": needs_target & _blank(F.col("_target")),
        "bad_target": needs_target & _not_finite(F.col("target")),
        "missing_members": (condition == _ALL) & (F.coalesce(F.size("members"), F.lit(0)) <= 0),
        "bad_payload": F.col("_bad_payload"),
    }
    out = out.withColumn("reason", _first_reason(checks, OPERATION_REASONS))
    return out.select(*_parsed_columns(OPERATION_COLUMNS))


def parse_events(df: DataFrame, fmt: SourceFormat = "json", *, max_future_ms: int | None = None) -> DataFrame:
    """Canonical completion events with ``raw`` and ``reason`` (null when valid).

    Columns: key, ts_ms, op_id, source, value, raw, reason.
    """
    j = F.from_json(F.col("raw"), _EVENTS_JSON, _JSON_OPTIONS)
    rows = _raw(df, fmt).select("raw", j.alias("j"))
    op_id, source = _text("op_id"), _text("source")
    out = rows.select(
        "raw",
        (F.col("j").isNull() | F.col(f"j.{_CORRUPT}").isNotNull()).alias("_malformed"),
        F.col("j.key").alias("key"),
        F.col("j.ts").alias("_t"),
        F.when(~_blank(op_id), op_id).alias("op_id"),
        _structured("op_id").alias("_bad_op_id"),
        F.when(~_blank(source), source).alias("source"),
        _structured("source").alias("_bad_source"),
        F.col("j.value").alias("_value"),
    )
    out = out.withColumn(ms_column("ts"), _epoch_ms("_t"))
    out = out.withColumn("value", F.expr("try_cast(_value AS DOUBLE)"))
    checks = {
        "malformed_json": F.col("_malformed"),
        "missing_key": _blank(F.col("key")),
        **_ts_checks(max_future_ms),
        "bad_value": F.col("_value").isNotNull() & _not_finite(F.col("value")),
        "bad_op_id": F.col("_bad_op_id"),
        "bad_source": F.col("_bad_source"),
    }
    out = out.withColumn("reason", _first_reason(checks, EVENT_REASONS))
    return out.select(*_parsed_columns(EVENT_COLUMNS))


def _parquet_schema(kind: str) -> T.StructType:
    return OPERATIONS_PARQUET_SCHEMA if kind == SOURCE_OPERATIONS else EVENTS_PARQUET_SCHEMA


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
