"""Sources: parse operations and completion events in Spark SQL, and say why a row is bad.

Two readers feed one set of checks (``contract.rules``).  **JSON text** (JSON-lines files
read as text, Kafka records' ``value``): a line that fits the contract's types is read once
with them (the *typed reading*), any other field by field as text (the *lenient reading*),
with the same result.  **Typed columns** (Parquet, Delta, a DataFrame with the contract's
columns) are read as they are.  Each row comes out with the canonical columns, its ``raw``
text and a ``reason``: null when valid, else the first check that fails.

Invariant: parsing never drops a row; a row that cannot be understood becomes a row with a
reason.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from .. import contract as c
from ..config import InputLimits
from ..contract import (
    EPOCH_MS_TEXT,
    EVENT_CHECKS,
    EVENT_COLUMNS,
    FLAG,
    ID,
    OPERATION_CHECKS,
    OPERATION_COLUMNS,
    POISON_COLUMN,
    RAW_KEPT_CHARS,
    RAW_TRUNCATED,
    READINGS,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    STRING,
    STRING_LITERAL,
    TIME,
    TS_TEXT,
    WHOLE,
    Check,
    first_reason,
    read_as,
)
from .checks import event_checks, operation_checks
from .formats import (
    EVENTS_PARQUET_SCHEMA,
    OPERATIONS_PARQUET_SCHEMA,
    SourceFormat,
    read_batch,
    read_stream,
    source_format_of,
)
from .schema import CONTRACTS, InputSchemaError
from .sql_checks import SqlChecks, misspelled
from .sql_text import (
    FieldReading,
    in_range,
    latest_carried,
    parsed_columns,
    sql_blank,
    sql_filled,
    sql_string,
    whole_text,
    with_latest,
)
from .typed_columns import event_fields, events_checked, kept_raw, operation_fields, operations_checked

__all__ = [
    "SourceFormat",
    "InputSchemaError",
    "source_format_of",
    "OPERATIONS_PARQUET_SCHEMA",
    "EVENTS_PARQUET_SCHEMA",
    "parse_operations",
    "parse_events",
    "read_stream",
    "read_batch",
]

#: fields that must be text: read as variants, so that an array or object is ``bad_<field>``
_TEXT_FIELDS = read_as(ID, STRING)
#: fields the lenient reading takes as variants: the text ones, and flags (a string is no flag)
_VARIANT_FIELDS = read_as(ID, STRING, FLAG)

# Every other field is read as text, so a wrong type becomes a reason, not a failed query.
# Single-quoted strings are no JSON (``malformed_json``, as on every path).
_CORRUPT = "_corrupt_record"
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT, "allowSingleQuotes": "false"}

# SQL text in few projections, not ``Column`` calls (a Py4J round trip each at build time).


def _json_schema(contract: pa.Schema) -> T.StructType:
    fields = [
        T.StructField(name, T.VariantType() if name in _VARIANT_FIELDS else T.StringType())
        for name in [*contract.names, _CORRUPT]
    ]
    return T.StructType(fields)


def _get(struct: str, field: str) -> str:
    """The field ``field`` of the struct expression ``struct`` (``struct[field]`` as a ``Column``)."""
    return f"{struct}[{sql_string(field)}]"


def _raw(df: DataFrame, fmt: str) -> DataFrame:
    """The column ``raw``, the record's text; for Kafka also ``_kafka``, where it came from."""
    # invalid UTF-8 (replaced by U+FFFD) would otherwise fail the Arrow hand-over to Python
    if fmt == "json":
        return df.selectExpr("make_valid_utf8(value) AS raw", *latest_carried(df))
    if fmt == "kafka":
        origin = f"{_kafka_origin(df)} AS {_KAFKA}"
        return df.selectExpr(f"{_utf8('value')} AS raw", origin, *latest_carried(df))
    raise ValueError(f"not a text format: {fmt!r}")


#: a Kafka record's coordinates, carried beside its value until its reason is known
_KAFKA = "_kafka"
#: the Kafka source's columns a rejected record's ``raw`` names, in this order (``headers``
#: too when the source was asked for them: ``includeHeaders``)
KAFKA_RECORD_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def _utf8(binary: str) -> str:
    return f"make_valid_utf8(CAST({binary} AS STRING))"


def _kafka_origin(df: DataFrame) -> str:
    """The record without its value: topic, partition, offset, timestamp, key (as text) and
    headers (values as text), those of them the DataFrame has."""
    fields = []
    for name in KAFKA_RECORD_FIELDS:
        if name == "value" or name not in df.columns:
            continue
        column = f"`{name}`"
        if name == "key":
            column = _utf8(column)
        elif name == "headers":
            header = f"struct({_get('_h', 'key')} AS key, {_utf8(_get('_h', 'value'))} AS value)"
            column = f"transform({column}, _h -> {header})"
        fields.append(f"{column} AS `{name}`")
    return f"struct({', '.join(fields)})"


def _epoch_ms(text: str) -> str:
    """Epoch ms from ``contract.TS_TEXT`` or ``EPOCH_MS_TEXT`` text; null if neither or out of
    range (``try_to_timestamp`` alone reads more: a time without a date, a zone by name)."""
    ms = (
        f"CASE WHEN {text} RLIKE {whole_text(EPOCH_MS_TEXT)} THEN try_cast({text} AS BIGINT) "
        f"WHEN {text} RLIKE {whole_text(TS_TEXT)} THEN unix_millis(try_to_timestamp({text})) END"
    )
    return in_range(ms)


_NOT_BRACKET = r"[^\[\]{}]"


def _poison(text: str, limits: InputLimits) -> str:
    """SQL for ``engine.lines.poison``'s reason (measuring the depth only for a record with
    more opening brackets than the limit), else null."""
    depth = int(limits.depth)
    openers = f"(length({text}) - length(translate({text}, '[{{', '')))"
    strings = f"regexp_replace({text}, {sql_string(STRING_LITERAL)}, '')"
    brackets = f"regexp_replace({strings}, {sql_string(_NOT_BRACKET)}, '')"
    step = "IF(_c IN ('[', '{'), 1, -1)"
    running = (
        f"aggregate(split({brackets}, ''), named_struct('d', 0, 'm', 0), "
        f"(_a, _c) -> named_struct('d', _a.d + {step}, 'm', greatest(_a.m, _a.d + {step}))).m"
    )
    return (
        f"CASE WHEN octet_length({text}) > {int(limits.record_bytes)} THEN '{c.RECORD_TOO_LARGE}' "
        f"WHEN {openers} > {depth} AND {running} > {depth} THEN '{c.TOO_DEEP}' END"
    )


def _truncated_raw() -> str:
    """``raw``, a ``record_too_large`` record's cut as ``contract.truncated`` cuts it."""
    before, after = RAW_TRUNCATED.split("{bytes}")
    # one concat: a concat inside another is flattened by the optimizer in every micro-batch
    note = f"{sql_string(before)}, octet_length(raw), {sql_string(after)}"
    cut = f"concat(substring(raw, 1, {RAW_KEPT_CHARS}), {note})"
    return f"CASE WHEN reason = '{c.RECORD_TOO_LARGE}' THEN {cut} ELSE raw END AS raw"


def parse_operations(
    df: DataFrame,
    fmt: SourceFormat = "auto",
    *,
    max_timeout_ms: int,
    max_future_ms: int | None = None,
    limits: InputLimits | None = None,
) -> DataFrame:
    """Canonical operations (``contract.OPERATION_COLUMNS``, ``ts`` as ``ts_ms``) with ``raw``
    and ``reason`` (null when valid).  Typed input with a missing or wrongly typed column
    raises ``InputSchemaError`` here.  ``limits``: ``input.max.*`` (the defaults when None).
    """
    limits = limits or InputLimits()
    fmt = source_format_of(df, fmt)
    function = operation_checks(df.sparkSession) if fmt == "typed" else None
    df = with_latest(df, max_future_ms)
    if function:
        return operations_checked(df, function, max_timeout_ms, limits)
    fields = operation_fields(df) if fmt == "typed" else _json_fields(df, fmt, SOURCE_OPERATIONS, limits)
    bounds = limits.bounds(max_timeout_ms, max_future_ms)
    return _with_reason(fields, OPERATION_CHECKS, bounds, OPERATION_COLUMNS)


def parse_events(
    df: DataFrame,
    fmt: SourceFormat = "auto",
    *,
    max_future_ms: int | None = None,
    limits: InputLimits | None = None,
) -> DataFrame:
    """Canonical completion events with ``raw`` and ``reason``, as ``parse_operations``."""
    fmt = source_format_of(df, fmt)
    function = event_checks(df.sparkSession) if fmt == "typed" else None
    df = with_latest(df, max_future_ms)
    if function:
        return events_checked(df, function)
    fields = (
        event_fields(df) if fmt == "typed" else _json_fields(df, fmt, SOURCE_EVENTS, limits or InputLimits())
    )
    bounds = InputLimits().bounds(None, max_future_ms)
    return _with_reason(fields, EVENT_CHECKS, bounds, EVENT_COLUMNS)


def _with_reason(
    fields: DataFrame, checks: tuple[Check, ...], bounds: dict, canonical: list[str]
) -> DataFrame:
    """The parsed rows with the first of ``checks`` that fails as their reason (``bounds``:
    the limits' values); typed input gets its ``raw`` text only when rejected."""
    reason = first_reason(checks, SqlChecks(fields.columns), bounds)
    out = fields.selectExpr("*", f"{reason} AS reason")
    if POISON_COLUMN in fields.columns:  # a record too large keeps its start and its size in ``raw``
        out = out.selectExpr(*[_truncated_raw() if c == "raw" else f"`{c}`" for c in out.columns])
    # an op_id that is an array or object is none (``rejected``'s op_id, as the pandas validator)
    columns = {name: f"`{name}`" for name in parsed_columns(canonical)}
    columns["op_id"] = "CASE WHEN NOT _bad_op_id THEN op_id END"
    if "_record" in fields.columns:
        columns["raw"] = f"CASE WHEN {kept_raw('reason', 'keys' in canonical)} THEN to_json(_record) END"
    elif _KAFKA in fields.columns:  # a rejected Kafka record is found by topic, partition, offset
        columns["raw"] = f"CASE WHEN reason IS NOT NULL THEN {_kafka_raw(fields)} ELSE raw END"
        columns["part"] = _kafka_partition(fields)
    return out.selectExpr(*[f"{value} AS `{name}`" for name, value in columns.items()])


def _kafka_partition(fields: DataFrame) -> str:
    """SQL for a Kafka record's topic and partition as one number (``handoff.partitions``):
    the topic's hash in the high bits, the partition in the low 20; below 2^52, so exact in
    the float column pandas makes of a column with nulls."""
    have = set(fields.schema[_KAFKA].dataType.fieldNames())
    topic = f"CAST(hash({_KAFKA}.topic) AS BIGINT) + 2147483648" if "topic" in have else "0"
    return f"({topic}) * 1048576 + {_KAFKA}.`partition`"


def _kafka_raw(fields: DataFrame) -> str:
    """SQL for a rejected Kafka record's ``raw``: the record as one JSON object, its value as
    text, in ``KAFKA_RECORD_FIELDS`` order."""
    have = set(fields.schema[_KAFKA].dataType.fieldNames())
    parts = [
        f"'{name}', " + ("raw" if name == "value" else f"{_KAFKA}.`{name}`")
        for name in KAFKA_RECORD_FIELDS
        if name == "value" or name in have
    ]
    return f"to_json(named_struct({', '.join(parts)}))"


# -- JSON text: files, Kafka values ------------------------------------------------------------------


def _from_json(schema: T.StructType) -> str:
    """``raw`` read with ``schema``, a malformed line kept in ``_corrupt_record``; a poison
    record is not read (null)."""
    options = ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in _JSON_OPTIONS.items())
    text = f"CASE WHEN {POISON_COLUMN} IS NULL THEN raw END"
    return f"from_json({text}, {sql_string(schema.simpleString())}, map({options}))"


def _json_fields(df: DataFrame, fmt: str, source: str, limits: InputLimits) -> DataFrame:
    """``raw`` and each field as the checks expect it, from the typed reading where the line
    allows it (``_plain``), else from the lenient one: a column of its own, read only for
    the lines that need it and named by each field (inline copies made the plan much larger)."""
    text = _raw(df, fmt)
    carried = [_KAFKA] if fmt == "kafka" else []
    carried += latest_carried(df)  # for the future-time check (``sql_checks``)
    text = text.selectExpr("raw", *carried, f"{_poison('raw', limits)} AS {POISON_COLUMN}")
    carried.append(POISON_COLUMN)
    typed_schema, lenient_schema = _JSON_SCHEMAS[source]
    named = f"{misspelled(tuple(READINGS[source]))} AS _misspelled"
    rows = text.selectExpr("raw", *carried, f"{_from_json(typed_schema)} AS t", named)
    carried.append("_misspelled")
    plain = [f"t IS NOT NULL AND {_get('t', _CORRUPT)} IS NULL"]
    plain += [_plain_field(_get("t", f), f) for f in _TEXT_FIELDS if f in typed_schema.fieldNames()]
    rows = rows.selectExpr("raw", *carried, "t", " AND ".join(f"({p})" for p in plain) + " AS _plain")
    lenient = _from_json(lenient_schema)
    # null elsewhere, without the typed null of an ELSE (a cast the optimizer folds)
    lenient = f"CASE WHEN NOT _plain AND {POISON_COLUMN} IS NULL THEN {lenient} END AS j"
    rows = rows.selectExpr("raw", *carried, "t", "_plain", lenient)
    fast, slow = _TypedJson("t").fields(source), _LenientJson("j").fields(source)
    return rows.selectExpr(
        "raw",
        *carried,
        *[f"CASE WHEN _plain THEN {fast[name]} ELSE {slow[name]} END AS `{name}`" for name in fast],
    )


def _plain(text: str) -> str:
    """Text the typed reading gives exactly as the lenient one does: null, or not the JSON text
    of an array, an object or a non-integer number (whose spelling the two readings differ on)."""
    first = f"substring({text}, 1, 1)"
    # NOT (first IN ('[', '{') OR (first RLIKE '[-0-9]' AND (text RLIKE '[.eE]' OR length > 18))),
    # as the optimizer would rewrite it
    not_number = f"(NOT ({first} RLIKE '[-0-9]') OR (NOT ({text} RLIKE '[.eE]') AND length({text}) <= 18))"
    return f"({text} IS NULL OR (NOT ({first} IN ('[', '{{')) AND {not_number}))"


#: text fields that hold a string or nothing (``bad_<field>`` otherwise, a number included)
_STRING_ONLY = read_as(STRING)


def _plain_field(text: str, field: str) -> str:
    """``_plain`` for the text field ``field``; for a string-only field also not the text of a
    number or boolean, which only the lenient reading tells from a string of its digits."""
    if field not in _STRING_ONLY:
        return _plain(text)
    number = f"({text} RLIKE '^-?[0-9]' OR {text} IN ('true', 'false'))"
    return f"({_plain(text)} AND NOT coalesce({number}, false))"


def _typed_json_schema(contract: pa.Schema) -> T.StructType:
    """The contract's Spark types, the event time as text (a number there is epoch ms)."""
    fields = [
        T.StructField(f.name, T.StringType() if f.name == "ts" else f.dataType)
        for f in from_arrow_schema(contract).fields
    ]
    return T.StructType([*fields, T.StructField(_CORRUPT, T.StringType())])


class _TypedJson(FieldReading):
    """The typed reading of the JSON struct ``struct``: the event time as text."""

    def __init__(self, struct: str):
        self.struct = struct

    def field(self, name: str) -> str:
        return _get(self.struct, name)

    def absent(self, name: str, reading: str) -> str:
        return sql_blank(self.field(name)) if reading == TIME else super().absent(name, reading)

    def value(self, name: str, reading: str) -> str:
        return _epoch_ms(self.field(name)) if reading == TIME else self.field(name)


class _LenientJson(_TypedJson):
    """The lenient reading of the JSON struct ``struct``: every field as its text."""

    @property
    def malformed(self) -> str:  # type: ignore[override]
        return f"({self.struct} IS NULL OR {_get(self.struct, _CORRUPT)} IS NOT NULL)"

    def text(self, name: str) -> str:
        """A text field as a string: a number or boolean as its JSON text."""
        return f"variant_get({self.field(name)}, '$', 'string')"

    def wrong(self, name: str, reading: str) -> str:
        """An ``ID`` that is an array or object; a ``STRING`` that is anything but a string; a
        ``FLAG`` that is anything but a boolean."""
        kind = f"schema_of_variant({self.field(name)})"
        only = "BOOLEAN" if reading == FLAG else "STRING"
        wrong = f"{kind} RLIKE '^(ARRAY|OBJECT)'" if reading == ID else f"{kind} NOT IN ('{only}', 'VOID')"
        return f"coalesce({wrong}, false)"

    def flag(self, name: str) -> str:
        return f"coalesce(try_variant_get({self.field(name)}, '$', 'boolean'), false)"

    def listed(self, name: str) -> str:
        """A JSON array of strings, or a single string standing for a list of one (an object:
        null, by the CASE's own null: a typed null is a cast the optimizer folds every batch)."""
        text = self.field(name)
        trimmed = f"trim({text})"
        return (
            f"CASE WHEN startswith({trimmed}, '[') THEN from_json({text}, 'array<string>') "
            f"WHEN NOT startswith({trimmed}, '{{') AND {sql_filled(text)} THEN array({text}) END"
        )

    def absent(self, name: str, reading: str) -> str:
        # a blank value is ``bad_value``, a blank target ``missing_target`` (as in pandas)
        return f"{self.field(name)} IS NULL" if name == "value" else sql_blank(self.field(name))

    def value(self, name: str, reading: str) -> str:
        if reading == TIME:
            return _epoch_ms(self.field(name))
        return f"try_cast({self.field(name)} AS {'BIGINT' if reading == WHOLE else 'DOUBLE'})"


#: each input's JSON schemas: the typed reading's and the lenient one's
_JSON_SCHEMAS = {source: (_typed_json_schema(c), _json_schema(c)) for source, c in CONTRACTS.items()}
