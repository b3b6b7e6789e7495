"""Routing: every parsed row to the shard that owns its keys, with stubs and replicas.

Shape of the operator's input::

    operations -> parse -> route_operations -> watermark --+
                                                            +-> union -> groupBy(shard)
    events ----> parse -> route_events -----> watermark --+       .applyInPandasWithState

**Sharded watchers.**  Rows are routed to ``purgatory.shards`` groups by
``pmod(xxhash64(key), shards)`` (Kafka shards its WatcherLists by key hash the same way);
the group key is then replaced by the shard's label (``labels.shard_labels``) so that each
group gets its own Spark partition.  A rejected-at-parse row goes to the shard of its raw
text, which spreads bad input evenly.

**Multi-key operations across shards.**  An operation whose keys all hash to one shard lives
there.  One whose keys span shards is *cross-shard*: it lives in an extra group, the
cross-shard shard (number ``shards``), which also receives a *replica* of every event, so it
sees every event of every key its operations watch and evaluates the condition over their
union exactly as SPEC says.  In each primary shard of its keys the operation leaves a *stub*:
a watcher that never completes and emits nothing, whose only job is to mark the events it
matches as matched, so that the primary shard (which alone reports unmatched events) does not
report them.  Replicas are never reported, rejected or counted as late by the cross-shard
shard; stubs are never reported by the primaries (the engine honours the ``stub`` and
``replica`` flags; this module creates them).  Cost: with cross-shard operations enabled,
every event is processed twice (set ``purgatory.cross.shard.operations=false`` to reject
cross-shard operations instead, as ``cross_shard_keys``, and skip the replicas).  A stub lives
until its operation's deadline, even when the operation completed earlier.

Invariant: every parsed row leaves ``route`` at least once, in the one schema
``ROUTED_SCHEMA``: an operation (or its stubs), an event (and its replica), or a bad row
carrying its raw text and reason.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..config import PurgatoryConfig
from ..contract import EVENT_INPUT, OPERATION_INPUT, SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column
from .labels import shard_labels

__all__ = [
    "ROUTED_SCHEMA",
    "ROUTED_COLUMNS",
    "ROLE_OPERATION",
    "ROLE_STUB",
    "ROLE_EVENT",
    "ROLE_REPLICA",
    "ROLE_BAD",
    "route",
    "route_operations",
    "route_events",
]

#: a routed row's role (its ``role`` column): what the shard does with it
ROLE_OPERATION, ROLE_STUB, ROLE_EVENT, ROLE_REPLICA, ROLE_BAD = "op", "stub", "event", "replica", "bad"


def _routed_schema() -> T.StructType:
    """``shard``, ``role``, ``side`` (which input), the operation and event fields (event time
    as epoch ms), and ``raw`` / ``reason`` for rows rejected at parse."""
    fields: dict[str, pa.DataType] = {"shard": pa.int32(), "role": pa.string(), "side": pa.string()}
    for field in (*OPERATION_INPUT, *EVENT_INPUT):
        if field.name == "ts":
            fields[ms_column("ts")] = pa.int64()
        else:
            fields.setdefault(field.name, field.type)
    fields.update(raw=pa.string(), reason=pa.string())
    return from_arrow_schema(pa.schema(list(fields.items())))


#: the operator's input: operations, stubs, events, replicas and rejected-at-parse rows
ROUTED_SCHEMA: T.StructType = _routed_schema()
ROUTED_COLUMNS: list[str] = ROUTED_SCHEMA.fieldNames()

# where a parsed row goes: one struct per copy (``keys``: the keys a stub watches there)
_DESTINATIONS = "array<struct<role:string,shard:int,keys:array<string>>>"


def _shard_of(key: Column, shards: int) -> Column:
    return F.pmod(F.xxhash64(key), F.lit(shards)).cast("int")


def _destination(role: str, shard: Column | int, keys: Column | None = None) -> Column:
    return F.struct(
        F.lit(role).alias("role"),
        F.lit(shard).cast("int").alias("shard"),
        (keys if keys is not None else F.lit(None)).cast("array<string>").alias("keys"),
    )


def _destinations(*destinations: Column) -> Column:
    return F.array(*destinations).cast(_DESTINATIONS)


def _bad_destination(shards: int) -> Column:
    """A row rejected at parse: the shard of its raw text, which only reports it."""
    return _destinations(_destination(ROLE_BAD, _shard_of(F.col("raw"), shards)))


def _as_routed(rows: DataFrame, side: str, **columns: Column) -> DataFrame:
    """``rows`` (exploded, the destination in ``_d``) in ``ROUTED_SCHEMA``: the given columns,
    then the row's own, then nulls; ``raw`` is kept only for rejected rows."""
    columns = {
        "shard": F.col("_d.shard"),
        "role": F.col("_d.role"),
        "side": F.lit(side),
        "raw": F.when(F.col("reason").isNotNull(), F.col("raw")),
        **columns,
    }
    own = set(rows.columns)
    return rows.select(
        *[
            (columns[f.name] if f.name in columns else F.col(f.name) if f.name in own else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in ROUTED_SCHEMA.fields
        ]
    )


def _route_operations(parsed_ops: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Operations: in their keys' shard, or (keys across shards) in the cross-shard group
    plus a stub per primary shard; cross-shard ones rejected when those are switched off."""
    shards = config.shards
    ops = parsed_ops.withColumn(
        "_shards", F.array_distinct(F.transform("keys", lambda k: _shard_of(k, shards)))
    )
    single = _destinations(_destination(ROLE_OPERATION, F.col("_shards")[0], F.col("keys")))
    spread = F.concat(
        _destinations(_destination(ROLE_OPERATION, shards, F.col("keys"))),
        F.transform(
            "_shards",
            lambda s: _destination(ROLE_STUB, s, F.filter("keys", lambda k: _shard_of(k, shards) == s)),
        ),
    ).cast(_DESTINATIONS)
    is_cross = F.size("_shards") > 1
    reason = F.col("reason")
    if not config.cross_shard_operations:
        reason = F.when(reason.isNull() & is_cross, F.lit("cross_shard_keys")).otherwise(reason)
    ops = ops.withColumn("reason", reason)
    destinations = (
        F.when(F.col("reason").isNotNull(), _bad_destination(shards)).when(is_cross, spread).otherwise(single)
    )
    rows = ops.select("*", F.explode(destinations).alias("_d"))
    # one watched key travels as a plain string in `key` (`keys` null): an array column costs
    # ~3x more to hand to Python than the rest of the row together (measured)
    keys = F.coalesce(F.col("_d.keys"), F.col("keys"))
    one_key = F.coalesce(F.size(keys) == 1, F.lit(False))
    return _as_routed(rows, SOURCE_OPERATIONS, keys=F.when(~one_key, keys), key=F.when(one_key, keys[0]))


def _route_events(parsed_events: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Events: in their key's shard, plus a replica in the cross-shard group when there is one."""
    shards = config.shards
    home = _destination(ROLE_EVENT, _shard_of(F.col("key"), shards))
    if config.cross_shard_operations and shards > 1:
        destinations = _destinations(home, _destination(ROLE_REPLICA, shards))
    else:
        destinations = _destinations(home)
    destinations = F.when(F.col("reason").isNotNull(), _bad_destination(shards)).otherwise(destinations)
    return _as_routed(parsed_events.select("*", F.explode(destinations).alias("_d")), SOURCE_EVENTS)


def _labelled(routed: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """``shard`` from the shard's number to its label (``labels.shard_labels``)."""
    labels = F.array(*[F.lit(label) for label in shard_labels(config.shards + 1)])
    return routed.withColumn("shard", F.element_at(labels, F.col("shard") + 1))


def route_operations(parsed_ops: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The operations input routed (operations, stubs, its rejected rows), in ``ROUTED_SCHEMA``."""
    return _labelled(_route_operations(parsed_ops, config), config)


def route_events(parsed_events: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The events input routed (events, replicas, its rejected rows), in ``ROUTED_SCHEMA``."""
    return _labelled(_route_events(parsed_events, config), config)


def route(parsed_ops: DataFrame, parsed_events: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Assign every parsed row to a shard (see the module docstring); ``ROUTED_SCHEMA`` for all.

    ``shard`` holds the shard's label (``labels.shard_labels``), the group key of the operator.
    The stream declares a watermark per input between ``route_operations`` / ``route_events``
    and the union (``operator``); static input is routed here in one call.
    """
    return route_operations(parsed_ops, config).unionByName(route_events(parsed_events, config))
