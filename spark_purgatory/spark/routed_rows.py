"""The routed row in Spark: its schema as Spark types it and the projection every route ends in.

What a routed row holds is declared Spark-free in ``shard.roles``.

Invariant: every routed row has exactly ``ROUTED_SCHEMA``'s columns, in its order and types.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..shard.roles import ROUTED
from .sql_text import literal_column

#: the operator's input as Spark types it (``shard.roles.ROUTED``)
ROUTED_SCHEMA: T.StructType = from_arrow_schema(ROUTED)


def typed_projection(rows: DataFrame, values: dict[str, str], labels: list[int]) -> DataFrame:
    """``rows`` projected to ``ROUTED_SCHEMA``: each column's SQL in ``values`` ("NULL": none),
    ``shard``'s a number that leaves as its label in ``labels``.  Written as the optimizer
    leaves it (``sql_text.sql_filled``): a cast only where the type differs, no alias of a
    column to its own name, nulls and labels as typed literals."""
    given = {name: sql for name, sql in values.items() if sql != "NULL"}
    probe = rows.selectExpr(*[f"{sql} AS `{n}`" for n, sql in given.items()])
    types = {f.name: f.dataType for f in probe.schema}
    spark = rows.sparkSession
    out = []
    for field in ROUTED_SCHEMA.fields:
        name, ddl = field.name, field.dataType.simpleString()
        sql = values[name]
        if sql == "NULL":
            out.append(literal_column(spark, None, ddl).alias(name))
            continue
        typed = sql if types[name] == field.dataType else f"CAST({sql} AS {ddl})"
        if name == "shard":
            out.append(_label_of(spark, labels, typed).alias(name))
            continue
        out.append(F.expr(typed if typed == f"`{name}`" else f"{typed} AS `{name}`"))
    return rows.select(*out)


def _label_of(spark: SparkSession, labels: list[int], shard: str) -> Column:
    """The label of the shard number ``shard`` (SQL): the operator's group key, hence its state
    key, which checkpoints recorded as ``integer NOT NULL`` (Spark refuses a restart whose
    key became nullable).  ``element_at`` keeps it non-nullable under ANSI mode; without ANSI
    a ``coalesce`` (never taken) says so."""
    label = F.element_at(literal_column(spark, labels, "array<int>"), F.expr(f"{shard} + 1"))
    if str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "false":
        label = F.coalesce(label, F.lit(labels[0]))
    return label


def first_of(values: list[str]) -> str:
    """SQL for the first non-null of ``values`` (no ``coalesce`` over literal nulls)."""
    given = [v for v in values if v != "NULL"]
    if not given:
        return "NULL"
    return given[0] if len(given) == 1 else f"coalesce({', '.join(given)})"
