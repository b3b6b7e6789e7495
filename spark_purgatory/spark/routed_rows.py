"""The routed row in Spark: its schema as Spark types it and the projection every route ends in.

``routing`` routes each input to its shards and ends each route in ``typed_projection``; the
shard step reads the rows back in the Python workers (``shard.input``).  What a routed row
holds, its roles and the columns roles share are declared Spark-free in ``shard.roles``.

Invariant: every routed row has exactly ``ROUTED_SCHEMA``'s columns, in its order and types.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..shard.roles import ROUTED
from .sql_text import literal_column

__all__ = ["ROUTED_SCHEMA", "typed_projection", "first_of"]

#: the operator's input as Spark types it (``shard.roles.ROUTED``)
ROUTED_SCHEMA: T.StructType = from_arrow_schema(ROUTED)


def typed_projection(rows: DataFrame, values: dict[str, str], labels: list[int]) -> DataFrame:
    """``rows`` projected to ``ROUTED_SCHEMA``: each column's SQL in ``values`` ("NULL": none),
    ``shard``'s a number that leaves as its label in ``labels``.

    Written as Spark's optimizer leaves it, since a stream's plan is optimized again in every
    micro-batch and each rewrite costs another pass over the whole plan: a cast only where
    the value's type is not the column's already (one analysis of the values tells), no
    alias of a column to its own name, nulls and the labels as typed literals
    (``sql_text.literal_column``)."""
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
    """The label of the shard number ``shard`` (SQL): the operator's group key, hence the key
    of its state, which must stay ``integer NOT NULL``.

    Spark records a stateful operator's key schema in the checkpoint and refuses a restart
    whose key is nullable where the recorded one is not (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``;
    the reverse it accepts), and every checkpoint since the first release recorded a
    non-nullable ``shard``.  ``element_at`` of a literal array without nulls at a non-null
    index is non-nullable under ANSI mode (Spark's default); a session with
    ``spark.sql.ansi.enabled=false`` gets a ``coalesce`` that says so (never taken: the index
    is always in range), so a checkpoint continues whichever mode each run had."""
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
