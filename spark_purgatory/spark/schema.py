"""Input schemas: what a typed input must look like, checked when the query is built.

A column missing or of a type the operator cannot read would fail every row, or the first
micro-batch deep inside Spark, so ``InputSchemaError`` names each such column at start.
Parquet files are also checked for types Spark cannot read at all (nanosecond timestamps).

Invariant: an input that passes these checks never fails a micro-batch for its types.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ..contract import (
    EVENT_INPUT,
    EVENT_REQUIRED,
    OPERATION_INPUT,
    OPERATION_REQUIRED,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    resembles,
)


class InputSchemaError(ValueError):
    """A typed input lacks a required column or has a column of a type the operator cannot read."""


#: the columns a typed input must have (operations also need ``key`` or ``keys``); SPEC § Input
_REQUIRED = {SOURCE_OPERATIONS: OPERATION_REQUIRED, SOURCE_EVENTS: EVENT_REQUIRED}
CONTRACTS = {SOURCE_OPERATIONS: OPERATION_INPUT, SOURCE_EVENTS: EVENT_INPUT}
_NUMBER, _WHOLE_NUMBER = (T.NumericType,), (T.IntegralType,)


def _accepted(arrow_type: pa.DataType) -> tuple[tuple[type, ...], str]:
    """The Spark types a column of the contract's ``arrow_type`` may have, and how to say so."""
    if pa.types.is_timestamp(arrow_type):
        return (T.TimestampType, T.TimestampNTZType, *_WHOLE_NUMBER), "timestamp, or epoch ms as bigint"
    if pa.types.is_list(arrow_type):
        return (T.ArrayType,), "array<string>"
    if pa.types.is_integer(arrow_type):
        return _NUMBER, "a whole number (bigint)"
    if pa.types.is_floating(arrow_type):
        return _NUMBER, "a number (double)"
    if pa.types.is_boolean(arrow_type):
        return (T.BooleanType,), "boolean"
    return (T.StringType,), "string"


def schema_problems(df: DataFrame, source: str) -> list[str]:
    """What keeps ``df`` from being a typed ``source`` input: missing, wrongly typed or
    misspelled columns."""
    types = {f.name: f.dataType for f in df.schema.fields}
    contract = CONTRACTS[source]
    problems = [
        f"no column {name!r} ({_accepted(contract.field(name).type)[1]})"
        for name in _REQUIRED[source]
        if name not in types
    ]
    if source == SOURCE_OPERATIONS and "key" not in types and "keys" not in types:
        problems.append("no column 'key' (string) or 'keys' (array<string>)")
    for field in contract:
        given = types.get(field.name)
        allowed, expected = _accepted(field.type)
        wrong = given is not None and not isinstance(given, allowed)
        if isinstance(given, T.ArrayType) and not isinstance(given.elementType, T.StringType):
            wrong = True
        if wrong:
            problems.append(f"column {field.name!r} is {given.simpleString()}, expected {expected}")
    for name in types:  # a misspelled field would be ignored: refused (``contract.resembles``)
        near = resembles(name, tuple(contract.names))
        if near:
            problems.append(f"column {name!r} is no field of the contract; did you mean {near!r}?")
    return problems


def check_typed(df: DataFrame, source: str) -> None:
    """Raise ``InputSchemaError`` naming every missing, wrongly typed or misspelled column of ``df``."""
    problems = schema_problems(df, source)
    if problems:
        raise InputSchemaError(f"{source} input: " + "; ".join(problems) + f" (columns: {df.columns})")


def check_parquet_schema(schema: pa.Schema, source: str, where: str) -> None:
    """Refuse Parquet columns of the contract that Spark cannot read (nanosecond timestamps),
    saying how to write them."""
    problems = []
    for name in CONTRACTS[source].names:
        if name not in schema.names:
            continue
        arrow_type = schema.field(name).type
        if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns":
            problems.append(
                f"column {name!r} is a nanosecond timestamp ({arrow_type}), which Spark cannot read; "
                f"write it in microseconds (pandas: df.to_parquet(..., coerce_timestamps='us', "
                f"allow_truncated_timestamps=True); pyarrow: pq.write_table(..., coerce_timestamps='us')) "
                f"or as epoch ms (bigint)"
            )
    if problems:
        raise InputSchemaError(f"{source} input {where}: " + "; ".join(problems))
