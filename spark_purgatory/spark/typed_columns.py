"""Typed input: Parquet, a Delta table stream, any DataFrame with the input contract's columns.

Read as they are: the schema is checked when the query is built (``InputSchemaError``), and
only a rejected row is rendered to JSON for its ``raw``.  Three readings give the same rows:
SQL (``*_fields``), the JVM checks (``*_checked``), and the JVM calls that check and route at
once (``*_arguments``).

Invariant: a typed row gets the reason, and the fields, that its JSON text would get.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..config import InputLimits
from ..contract import (
    EVENT_COLUMNS,
    EVENT_INPUT,
    MAX_TS_MS,
    NUMBER,
    OPERATION_COLUMNS,
    OPERATION_INPUT,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    TIME,
    WHOLE,
    ms_column,
)
from .checks import checks_table
from .schema import check_typed
from .sql_text import (
    LATEST,
    FieldReading,
    in_range,
    latest_passed,
    parsed_columns,
    sql_string,
)


def operation_fields(df: DataFrame) -> DataFrame:
    """Each operation field from typed columns (checked first: ``InputSchemaError``)."""
    return _fields(df, OPERATION_INPUT, SOURCE_OPERATIONS)


def event_fields(df: DataFrame) -> DataFrame:
    """Each event field from typed columns (checked first: ``InputSchemaError``)."""
    return _fields(df, EVENT_INPUT, SOURCE_EVENTS)


class _Columns(FieldReading):
    """The typed columns of ``df`` (``c``: ``_typed_columns``), each number of its own type."""

    def __init__(self, df: DataFrame, c: dict[str, str]):
        self.df, self.c = df, c

    def field(self, name: str) -> str:
        return self.c[name]

    def value(self, name: str, reading: str) -> str:
        read = {TIME: _typed_epoch_ms, WHOLE: _typed_whole, NUMBER: _double}[reading]
        return read(self.c[name], _type_of(self.df, name))

    def flag(self, name: str) -> str:
        return flag_sql(self.df, name)


def _fields(df: DataFrame, contract: pa.Schema, source: str) -> DataFrame:
    c = _typed_columns(df, contract, source)
    fields = {"_record": _record(df, contract), **_Columns(df, c).fields(source)}
    latest = latest_passed(df, fields[ms_column("ts")])
    return df.selectExpr(*[f"{sql} AS `{name}`" for name, sql in fields.items()], *latest)


def operations_checked(df: DataFrame, function: str, max_timeout_ms: int, limits: InputLimits) -> DataFrame:
    """Typed operations checked by the JVM function ``function``: one call for the reason and
    the cleaned keys, condition and members, the other fields read as ``operation_fields``
    reads them."""
    c = _typed_columns(df, OPERATION_INPUT, SOURCE_OPERATIONS)
    fields = _operation_fields(df, c)
    ts_ms = ms_column("ts")
    read = df.selectExpr(
        f"{_record(df, OPERATION_INPUT)} AS _record",
        f"{fields['op_id']} AS op_id",
        f"{c['keys']} AS _keys",
        f"{c['key']} AS _key",
        *_event_time(df, c),
        f"{c['timeout_ms']} IS NULL AS _no_timeout_ms",
        f"{fields['timeout_ms']} AS timeout_ms",
        f"{c['condition']} AS _condition",
        f"{fields['target']} AS target",
        f"{c['members']} AS _members",
        f"{fields['payload']} AS payload",
        f"{c['warn_ms']} IS NULL AS _no_warn_ms",
        f"{fields['warn_ms']} AS warn_ms",
    )
    names, latest = sql_string(checks_table(max_timeout_ms, limits)), _latest(df)
    arguments = (
        f"op_id, _keys, _key, `{ts_ms}`, _no_ts, {latest}, timeout_ms, _no_timeout_ms, "
        f"{int(max_timeout_ms)}L, _condition, target, _members, warn_ms, _no_warn_ms, {names}"
    )
    return _checked(read, f"{function}({arguments})", OPERATION_COLUMNS, ("keys", "condition", "members"))


def operations_arguments(
    df: DataFrame, max_timeout_ms: int, limits: InputLimits
) -> tuple[list[str], str, str, dict[str, str]]:
    """Typed operations as the JVM check-and-route call reads them, straight from ``df``'s
    columns: the contract's columns ``df`` has, a row's record, the call's arguments (the
    event time unchecked, with the range's end), and the fields routed as read."""
    c = _typed_columns(df, OPERATION_INPUT, SOURCE_OPERATIONS)
    fields = _operation_fields(df, c)
    names = sql_string(checks_table(max_timeout_ms, limits))
    arguments = (
        f"{c['op_id']}, {c['keys']}, {c['key']}, {_epoch_ms_read(c['ts'], _type_of(df, 'ts'))}, "
        f"{int(MAX_TS_MS)}L, {_latest(df)}, {fields['timeout_ms']}, "
        f"{c['timeout_ms']} IS NULL, {int(max_timeout_ms)}L, {c['condition']}, "
        f"{fields['target']}, {c['members']}, {fields['warn_ms']}, {c['warn_ms']} IS NULL, {names}"
    )
    return _present(df, OPERATION_INPUT), _record(df, OPERATION_INPUT), arguments, fields


def _operation_fields(df: DataFrame, c: dict[str, str]) -> dict[str, str]:
    """The operation fields every typed reading takes as they are read."""
    return {
        "op_id": c["op_id"],
        "timeout_ms": _typed_whole(c["timeout_ms"], _type_of(df, "timeout_ms")),
        "target": _double(c["target"], _type_of(df, "target")),
        "payload": c["payload"],
        "warn_ms": _typed_whole(c["warn_ms"], _type_of(df, "warn_ms")),
    }


def events_checked(df: DataFrame, function: str) -> DataFrame:
    """Typed events checked by the JVM function ``function``, as ``operations_checked``: one
    call for the reason, op_id and source."""
    c = _typed_columns(df, EVENT_INPUT, SOURCE_EVENTS)
    ts_ms = ms_column("ts")
    read = df.selectExpr(
        f"{_record(df, EVENT_INPUT)} AS _record",
        f"{c['key']} AS key",
        *_event_time(df, c),
        f"{_double(c['value'], _type_of(df, 'value'))} AS value",
        f"{c['op_id']} AS _op_id",
        f"{c['source']} AS _source",
        f"{flag_sql(df, 'cancel')} AS cancel",
    )
    call = f"{function}(key, `{ts_ms}`, _no_ts, {_latest(df)}, value, _op_id, _source)"
    return _checked(read, call, EVENT_COLUMNS, ("op_id", "source"))


def events_arguments(df: DataFrame) -> tuple[list[str], str, str]:
    """Typed events as the JVM check-and-route call reads them, as ``operations_arguments``."""
    c = _typed_columns(df, EVENT_INPUT, SOURCE_EVENTS)
    ts_read = _epoch_ms_read(c["ts"], _type_of(df, "ts"))
    arguments = (
        f"{c['key']}, {ts_read}, {int(MAX_TS_MS)}L, {_latest(df)}, "
        f"{_double(c['value'], _type_of(df, 'value'))}, {c['op_id']}, {c['source']}"
    )
    return _present(df, EVENT_INPUT), _record(df, EVENT_INPUT), arguments


def _event_time(df: DataFrame, c: dict[str, str]) -> list[str]:
    """The event time as both JVM checks read it: absent, as epoch ms, and past the latest
    time accepted."""
    ts_read = _typed_epoch_ms(c["ts"], _type_of(df, "ts"))
    return [f"{c['ts']} IS NULL AS _no_ts", f"{ts_read} AS `{ms_column('ts')}`", *latest_passed(df, ts_read)]


def _latest(df: DataFrame) -> str:
    """The latest event time accepted, as the functions take it (null: no limit)."""
    return f"`{LATEST}`" if LATEST in df.columns else "CAST(NULL AS BIGINT)"


def _checked(read: DataFrame, call: str, canonical: list[str], fields: tuple[str, ...]) -> DataFrame:
    """The parsed columns: the call's reason and ``fields``, the rest as read."""
    checked = read.selectExpr("*", f"{call} AS _checked")
    columns = {name: f"`{name}`" for name in parsed_columns(canonical)}
    for name in (*fields, "reason"):
        columns[name] = f"_checked.{name}"
    raw_kept = kept_raw("_checked.reason", "keys" in fields, "_checked.keys")
    columns["raw"] = f"CASE WHEN {raw_kept} THEN to_json(_record) END"
    return checked.selectExpr(*[f"{value} AS `{name}`" for name, value in columns.items()])


def kept_raw(reason: str, operations: bool, keys: str = "keys") -> str:
    """When a typed row is rendered to JSON for its ``raw``: when rejected, and for an
    operation with several keys also when valid, since routing may still reject it
    (``cross_shard_keys``)."""
    return f"({reason} IS NOT NULL OR size({keys}) > 1)" if operations else f"{reason} IS NOT NULL"


def _typed_columns(df: DataFrame, contract: pa.Schema, source: str) -> dict[str, str]:
    """The contract's columns of a typed input (null where an optional one is absent), as SQL;
    ``InputSchemaError`` naming every missing or wrongly typed column."""
    check_typed(df, source)
    spark_types = from_arrow_schema(contract)
    have = set(df.columns)
    return {
        f.name: f"`{f.name}`" if f.name in have else f"CAST(NULL AS {f.dataType.simpleString()})"
        for f in spark_types.fields
    }


def flag_sql(df: DataFrame, name: str) -> str:
    """A flag column as a boolean, false where null or absent (no null the optimizer folds)."""
    return f"coalesce(`{name}`, false)" if name in df.columns else "false"


def _type_of(df: DataFrame, name: str) -> T.DataType | None:
    return df.schema[name].dataType if name in df.columns else None


def _present(df: DataFrame, contract: pa.Schema) -> list[str]:
    """The contract's columns ``df`` has, in the contract's order."""
    return [name for name in contract.names if name in df.columns]


def _record(df: DataFrame, contract: pa.Schema) -> str:
    """The row's contract columns, rendered as ``raw`` only if the row is rejected."""
    return f"struct({', '.join(f'`{name}`' for name in _present(df, contract))})"


def _typed_epoch_ms(ts: str, spark_type: T.DataType | None) -> str:
    """Epoch ms of a timestamp (a zone-less one read as UTC) or of epoch ms; null if out of range."""
    return in_range(_epoch_ms_read(ts, spark_type))


def _epoch_ms_read(ts: str, spark_type: T.DataType | None) -> str:
    """Epoch ms of a timestamp (a zone-less one read as UTC) or of epoch ms, any range."""
    if isinstance(spark_type, T.TimestampType):
        return f"unix_millis({ts})"
    if isinstance(spark_type, T.TimestampNTZType):  # the input's own `ts` (no Python timestampdiff)
        return f"timestampdiff(MILLISECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', {ts})"
    return ts if isinstance(spark_type, T.LongType) else f"CAST({ts} AS BIGINT)"


def _double(number: str, spark_type: T.DataType | None) -> str:
    """A number as a double (a double column as it is: the optimizer would drop the cast
    again every batch)."""
    if spark_type is None or isinstance(spark_type, T.DoubleType):  # absent: a typed null already
        return number
    return f"CAST({number} AS DOUBLE)"


def _typed_whole(number: str, spark_type: T.DataType | None) -> str:
    """A whole number within bigint: integers, and a float's whole values (as pandas reads
    them); null otherwise."""
    if spark_type is None or isinstance(spark_type, T.LongType):  # absent: a typed null already
        return number
    if isinstance(spark_type, T.IntegralType):
        return f"CAST({number} AS BIGINT)"
    d = f"CAST({number} AS DOUBLE)"
    return f"CASE WHEN ({d} % 1 = 0) AND (abs({d}) < {2**63}D) THEN CAST({d} AS BIGINT) END"
