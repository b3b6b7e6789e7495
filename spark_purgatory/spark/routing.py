"""Routing: every parsed row to the shard that owns its keys, with stubs (and replicas).

Shape of the operator's input::

    operations -> parse -> route_operations -> watermark --+
                                                            +-> union -> groupBy(shard)
    events ----> parse -> route_events -----> watermark --+       .applyInPandasWithState

**Sharded watchers.**  Rows go to ``purgatory.shards`` groups by
``pmod(xxhash64(shard key), shards)``, as Kafka shards its WatcherLists by key hash.  A row
rejected at parse goes to the shard of its raw text.  The shard key is the key, or its part
before the first ``purgatory.shard.key.delimiter``.

**Across shards.**  An operation whose keys span shards lives in the cross-shard group
(number ``shards``) and leaves a *stub* in each primary shard of its keys, which hands the
events it matches on through the mailbox.  Without a mailbox the cross-shard group gets a
*replica* of every event instead; static input (``route``) sends replicas only of events a
cross-shard operation watches.

**One outcome per op_id.**  When an operation's registry shard (``peer``) is not its home, a
*claim* copy goes to the registry.

With the project's JAR the copies come from one JVM call each; the SQL here is the
reference and the fallback, and gives the same rows.

Invariant: every parsed row leaves routing at least once, in the one schema
``ROUTED_SCHEMA``: an operation (or its stubs), an event (or its replica), or a bad row
carrying its raw text and reason.
"""

from __future__ import annotations

import warnings

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..config import InputLimits, PurgatoryConfig
from ..contract import (
    CROSS_SHARD_KEYS,
    DUPLICATE_OP_ID,
    SOURCE_EVENTS,
    SOURCE_OPERATIONS,
    ms_column,
)
from ..handoff.reaper import CLOCK_LINE
from ..handoff.shard_handoff import hands_off, registers
from ..handoff.wake import END_LINE
from ..shard.labels import shard_labels
from ..shard.roles import (
    FLAGS,
    LIST_COLUMNS,
    ROLE_BAD,
    ROLE_CLAIM,
    ROLE_CLOCK,
    ROLE_END,
    ROLE_EVENT,
    ROLE_OPERATION,
    ROLE_REPLICA,
    ROLE_STUB,
    ROLE_WAKE,
    ROLES,
    SHARED_COLUMNS,
    SIDES,
    carries,
)
from .checks import event_rows, operation_routes, operation_rows, wake_rows
from .routed_rows import ROUTED_SCHEMA, first_of, typed_projection
from .sql_text import sql_string, with_latest
from .typed_columns import events_arguments, flag_sql, operations_arguments

_TS_SQL = f"`{ms_column('ts')}`"

# SQL text in few projections, not ``Column`` calls: each of those is a Py4J round trip
# while the query is built.


def _sql_shard_of(key: str, config: PurgatoryConfig) -> str:
    """The shard of the key expression ``key``: ``pmod(xxhash64(shard key), shards)``."""
    delimiter = config.shard_key_delimiter
    shard_key = f"substring_index({key}, {sql_string(delimiter)}, 1)" if delimiter else key
    return f"CAST(pmod(xxhash64({shard_key}), {int(config.shards)}L) AS INT)"


def _shard_or_bad(shard: str, config: PurgatoryConfig) -> str:
    """A JVM call's shard (SQL), or, where the call gives -1 (a rejected row), the shard of the
    row's ``raw`` text, rendered after the call (``_sql_bad_shard``)."""
    return f"CASE WHEN {shard} < 0 THEN {_sql_bad_shard(config.shards)} ELSE {shard} END"


def _sql_bad_shard(shards: int) -> str:
    """A row rejected at parse: the shard of its raw text, which only reports it."""
    return f"CAST(pmod(xxhash64(raw), {int(shards)}L) AS INT)"


def _as_routed(
    rows: DataFrame, side: str, config: PurgatoryConfig, *, role_coded: bool = False, **columns: str
) -> DataFrame:
    """``rows`` in ``ROUTED_SCHEMA``: the given columns (SQL over ``rows``' columns), then the
    row's own, then nulls; ``raw`` kept only for rejected rows; ``shard`` given as a number,
    leaving as its label; ``role`` given as its name, or (``role_coded``) as its place in
    ``ROLES``.  Lists leave as JSON text only where needed (``roles.LIST_COLUMNS``).
    """
    own = set(rows.columns)
    labels = [int(label) for label in shard_labels(config.groups)]

    def given(name: str) -> str:
        if name in columns:
            return columns[name]
        return f"`{name}`" if name in own else "NULL"

    keys = given("keys")

    def field_value(name: str) -> str:  # one input field's SQL, before sharing
        if name == "raw" and name not in columns:
            return "CASE WHEN reason IS NOT NULL THEN raw END" if "raw" in own else "NULL"
        if name == "key" and side == SOURCE_OPERATIONS:
            return f"CASE WHEN size({keys}) = 1 THEN get({keys}, 0) END"
        if name in LIST_COLUMNS and given(name) != "NULL":
            least = 2 if name == "keys" else 1
            return f"CASE WHEN size({given(name)}) >= {least} THEN to_json({given(name)}) END"
        return given(name)

    def value_of(name: str) -> str:  # the routed column's SQL, before its type is made sure of
        if name == "side":
            return f"{SIDES.index(side)}Y"
        if name == "role" and not role_coded:
            named = " ".join(f"WHEN {sql_string(role)} THEN {code}Y" for code, role in enumerate(ROLES))
            return f"CASE {given(name)} {named} END"
        if name in SHARED_COLUMNS:  # the first given of the fields that share it
            return first_of([field_value(f) for f in SHARED_COLUMNS[name] if carries(side, f)])
        if name in FLAGS:  # never null (a reader's flag is not), as a mark's: pandas gets numpy's bools
            return "false" if field_value(name) == "NULL" else field_value(name)
        return field_value(name)

    values = {f.name: value_of(f.name) for f in ROUTED_SCHEMA.fields}
    return typed_projection(rows, values, labels)


def _route_operations(parsed_ops: DataFrame, config: PurgatoryConfig, *, claims: bool = True) -> DataFrame:
    """Operations: in their keys' shard, or (keys across shards) in the cross-shard group
    plus a stub per primary shard; cross-shard ones rejected when those are switched off;
    with the op_id registry (``registers``) a claim for the op_id's registry shard when that
    is not the operation's home.

    Each row becomes its copies by one ``posexplode`` of a list of shard numbers (the
    operation, then its stubs, then its claim): a filter and a union would scan the input
    once per branch.
    """
    registering = claims and registers(config)
    function = operation_routes(parsed_ops.sparkSession)
    if function:
        return _routed_by(function, parsed_ops, config, registering)
    shards = int(config.shards)
    every = f"array_distinct(transform(keys, _k -> {_sql_shard_of('_k', config)}))"
    # one key (nearly every operation): no lambda, which Spark evaluates outside generated code
    one = f"array({_sql_shard_of('get(keys, 0)', config)})"
    ops = parsed_ops.selectExpr("*", f"CASE WHEN size(keys) = 1 THEN {one} ELSE {every} END AS _shards")
    if not config.cross_shard_operations:
        crossing = "reason IS NULL AND size(_shards) > 1"
        reason = f"CASE WHEN {crossing} THEN '{CROSS_SHARD_KEYS}' ELSE reason END"
        ops = ops.withColumn("reason", F.expr(reason))
    home = f"CASE WHEN size(_shards) > 1 THEN {shards} ELSE get(_shards, 0) END"
    # an operation whose keys span shards is outside the registry (``engine.registry``)
    of_op_id = f"CAST(pmod(xxhash64(op_id, 'registry'), {shards}L) AS INT)"
    registry = f"CASE WHEN size(_shards) > 1 THEN -1 ELSE {of_op_id} END" if registering else "-1"
    ops = ops.selectExpr("*", f"{home} AS _home", f"{registry} AS _registry")
    claim = "reason IS NULL AND _registry >= 0 AND _registry != _home"
    copies = (
        f"CASE WHEN reason IS NOT NULL THEN array({_sql_bad_shard(shards)}) "
        f"ELSE concat(CASE WHEN size(_shards) > 1 THEN concat(array({shards}), _shards) ELSE _shards END, "
        f"CASE WHEN {claim} THEN array(_registry) ELSE array() END) END"
    )
    rows = ops.selectExpr("*", f"{copies} AS _copies").selectExpr(
        "*", "posexplode(_copies) AS (_copy, _shard)"
    )
    role = (
        f"CASE WHEN reason IS NOT NULL THEN '{ROLE_BAD}' "
        f"WHEN {claim} AND _copy = size(_copies) - 1 THEN '{ROLE_CLAIM}' "
        f"WHEN _copy > 0 THEN '{ROLE_STUB}' ELSE '{ROLE_OPERATION}' END"
    )
    rows = rows.selectExpr("*", f"{role} AS _role")
    peer = f"CASE _role WHEN '{ROLE_OPERATION}' THEN _registry WHEN '{ROLE_CLAIM}' THEN _home END"
    # a stub watches only the keys of its shard (a lambda, evaluated for stubs alone)
    own_keys = f"filter(keys, _k -> {_sql_shard_of('_k', config)} = _shard)"
    keys = f"CASE WHEN _role = '{ROLE_STUB}' THEN {own_keys} ELSE keys END"
    return _as_routed(rows, SOURCE_OPERATIONS, config, shard="_shard", role="_role", keys=keys, peer=peer)


def _routes_settings(config: PurgatoryConfig, registering: bool) -> str:
    """The routes' last arguments (``checks``)."""
    crossing = str(bool(config.cross_shard_operations)).lower()
    return f"{_shards_sql(config)}, {crossing}, {str(registering).lower()}"


def _shards_sql(config: PurgatoryConfig) -> str:
    """The shard count and the shard key delimiter (null: the whole key) as JVM arguments."""
    delimiter = config.shard_key_delimiter
    return f"{int(config.shards)}, {sql_string(delimiter) if delimiter else 'CAST(NULL AS STRING)'}"


def _routed_by(function: str, parsed_ops: DataFrame, config: PurgatoryConfig, registering: bool) -> DataFrame:
    """``_route_operations`` by the JVM function ``function`` (``checks``): one call gives
    the reason and the copies (shard, role, peer, keys), which ``inline`` makes rows."""
    call = f"{function}(keys, op_id, reason, raw, {_routes_settings(config, registering)})"
    kept = [f"`{c}`" for c in parsed_ops.columns if c != "reason"]
    # as in route_typed_operations: the copies apart before ``inline_outer`` (never empty)
    routes = parsed_ops.selectExpr(*kept, f"{call} AS _route").selectExpr(
        *kept, "_route.reason AS reason", "_route.copies AS _copies"
    )
    return _copies_routed(routes.selectExpr(*kept, "reason", "inline_outer(_copies)"), config, "_shard")


def _copies_routed(rows: DataFrame, config: PurgatoryConfig, shard: str) -> DataFrame:
    """An operation's copies as a JVM call gives them (``_role``, ``_keys``, ``_peer``), routed."""
    copies = {"role": "_role", "keys": "_keys", "peer": "_peer"}
    return _as_routed(rows, SOURCE_OPERATIONS, config, shard=shard, role_coded=True, **copies)


def route_typed_operations(
    df: DataFrame,
    config: PurgatoryConfig,
    *,
    max_timeout_ms: int,
    max_future_ms: int | None,
    limits: InputLimits,
) -> DataFrame | None:
    """Typed operations checked and routed by one JVM call: the rows of
    ``route_operations(parse_operations(df))``; None without the function (the caller parses,
    then routes).  A rejected row's ``raw`` is rendered after the call, and its shard is
    that text's."""
    function = operation_rows(df.sparkSession)
    if not function:
        return None
    df = with_latest(df, max_future_ms)
    kept, record, arguments, read = operations_arguments(df, max_timeout_ms, limits)
    call = f"{function}({arguments}, {_routes_settings(config, registers(config))})"
    # taken before the copies are made, so each copy carries only what it needs
    fields = df.selectExpr(*kept, f"{call} AS _rows").selectExpr(
        *[sql if sql in (name, f"`{name}`") else f"{sql} AS {name}" for name, sql in read.items()],
        f"_rows.{_TS_SQL} AS {_TS_SQL}",
        "_rows.reason AS reason",
        "_rows.condition AS condition",
        "_rows.members AS members",
        "_rows.copies AS _copies",
        f"CASE WHEN _rows.reason IS NOT NULL THEN to_json({record}) END AS raw",
    )
    columns = [*read, _TS_SQL, "reason", "condition", "members", "raw"]
    # never empty, so ``inline_outer`` is ``inline`` without the filter Spark would infer and
    # push down to the scan (a second call of the function)
    rows = fields.selectExpr(*columns, "inline_outer(_copies)")
    return _copies_routed(rows, config, _shard_or_bad("_shard", config))


def route_events(
    parsed_events: DataFrame, config: PurgatoryConfig, *, replicas: bool | None = None
) -> DataFrame:
    """The events input routed to their key's shard (its rejected rows too), in
    ``ROUTED_SCHEMA``; with ``replicas`` also a copy of each in the cross-shard group (by
    default a stream's choice: every event without a mailbox, module docstring)."""
    replicas = _replicating(config) if replicas is None else replicas
    bad = _sql_bad_shard(config.shards)
    # the role by its number: what the optimizer would rewrite a named role into, every batch
    event, rejected = ROLES.index(ROLE_EVENT), ROLES.index(ROLE_BAD)
    home = _as_routed(
        parsed_events,
        SOURCE_EVENTS,
        config,
        shard=f"CASE WHEN reason IS NULL THEN {_sql_shard_of('key', config)} ELSE {bad} END",
        role=f"CASE WHEN reason IS NULL THEN {event}Y ELSE {rejected}Y END",
        role_coded=True,
    )
    if not replicas:
        return home
    copies = parsed_events.where("reason IS NULL")
    return home.unionByName(_replicas(copies, config))


def _replicas(events: DataFrame, config: PurgatoryConfig, **columns: str) -> DataFrame:
    """Valid events as replicas in the cross-shard group (``columns`` as ``_as_routed``'s)."""
    replica = str(ROLES.index(ROLE_REPLICA))
    shard = str(int(config.shards))
    return _as_routed(events, SOURCE_EVENTS, config, shard=shard, role=replica, role_coded=True, **columns)


def _cross_shard_keys(parsed_ops: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The distinct keys (``key``) that valid cross-shard operations watch."""
    ops = parsed_ops.where("reason IS NULL")
    ops = ops.where(f"size(array_distinct(transform(keys, _k -> {_sql_shard_of('_k', config)}))) > 1")
    return ops.selectExpr("explode(keys) AS key").distinct()


def route_operations(parsed_ops: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The operations input routed (operations, stubs, its rejected rows), in ``ROUTED_SCHEMA``."""
    return _route_operations(parsed_ops, config)


def _replicating(config: PurgatoryConfig) -> bool:
    """Does a stream's events input send a replica of every event (no mailbox: module
    docstring)?  Said once a stream when the mailbox was asked for."""
    replicas = config.cross_shard_operations and config.shards > 1 and not hands_off(config)
    if replicas and config.cross_shard_handoff == "mailbox":
        warnings.warn(
            "purgatory.state.path is not set: multi-key operations across shards get a replica "
            "of every event (one group sees all events); set it (query.start does) for the "
            "mailbox hand-off",
            RuntimeWarning,
            stacklevel=3,
        )
    return replicas


def route_typed_events(
    df: DataFrame, config: PurgatoryConfig, *, max_future_ms: int | None
) -> DataFrame | None:
    """Typed events checked and routed by one JVM call, as ``route_typed_operations``: the
    rows of ``route_events(parse_events(df))``; None without the function."""
    function = event_rows(df.sparkSession)
    if not function:
        return None
    df = with_latest(df, max_future_ms)
    kept, record, arguments = events_arguments(df)
    call = f"{function}({arguments}, {_shards_sql(config)})"
    value = "value" if "value" in kept else "NULL AS value"
    cancel = f"{flag_sql(df, 'cancel')} AS cancel"
    fields = df.selectExpr(*kept, f"{call} AS _rows").selectExpr(
        "key",
        value,
        cancel,
        "_rows",
        f"CASE WHEN _rows.reason IS NOT NULL THEN to_json({record}) END AS raw",
    )
    columns = {name: f"_rows.{name}" for name in ("reason", "op_id", "source", ms_column("ts"))}
    columns["raw"] = "raw"  # null but for rejected rows
    shard = _shard_or_bad("_rows.shard", config)
    home = _as_routed(
        fields, SOURCE_EVENTS, config, shard=shard, role="_rows.role", role_coded=True, **columns
    )
    if not _replicating(config):
        return home
    return home.unionByName(_replicas(fields.where("_rows.reason IS NULL"), config, **columns))


def route_wake(lines: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """The wake input (``handoff.wake``) in ``ROUTED_SCHEMA``: a wake line is a row for the
    cross-shard group (for every group with the op_id registry); the end mark one
    ``ROLE_END`` row for every group; a clock line one ``ROLE_CLOCK`` row for every group,
    its watermark in ``ts_ms``.  The JVM call, when there is one, gives the same rows."""
    function = wake_rows(lines.sparkSession)
    if function:
        marks = f"{sql_string(END_LINE)}, {sql_string(CLOCK_LINE)}"
        call = f"{function}(value, {marks}, {int(config.shards)}, {str(registers(config)).lower()})"
        rows = lines.selectExpr(f"inline_outer({call})")  # never empty: inline's filter not inferred
        clock = {ms_column("ts"): "_clock"}
        return _as_routed(
            rows, ROLE_WAKE, config, shard="_shard", role="_role", role_coded=True, raw="NULL", **clock
        )
    is_end = f"trim(value) = {sql_string(END_LINE)}"
    is_clock = f"startswith(trim(value), {sql_string(CLOCK_LINE + ' ')})"
    shards = int(config.shards)
    # with the op_id registry, a wake line calls every group: verdicts go to any shard
    woken = f"sequence(0, {shards})" if registers(config) else f"array({shards})"
    every = f"{is_end} OR {is_clock}"
    clock_at = len(CLOCK_LINE) + 2  # the watermark after "clock " (1-based)
    role = f"CASE WHEN {is_end} THEN '{ROLE_END}' WHEN {is_clock} THEN '{ROLE_CLOCK}' ELSE '{ROLE_WAKE}' END"
    rows = lines.selectExpr(
        f"explode(CASE WHEN {every} THEN sequence(0, {shards}) ELSE {woken} END) AS _shard",
        f"{role} AS _role",
        f"CASE WHEN {is_clock} THEN CAST(substring(trim(value), {clock_at}) AS BIGINT) END AS _clock",
        "CAST(NULL AS STRING) AS reason",
        "CAST(NULL AS STRING) AS raw",
    )
    return _as_routed(rows, ROLE_WAKE, config, shard="_shard", role="_role", **{ms_column("ts"): "_clock"})


def route(parsed_ops: DataFrame, parsed_events: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Static input routed in one call (batch mode): operations, stubs, events, and replicas
    of the events whose key a cross-shard operation watches, in ``ROUTED_SCHEMA``."""
    events = route_events(parsed_events, config, replicas=False)
    if config.dedup_scope == "global" and config.shards > 1:
        parsed_ops = _repeats_rejected(parsed_ops, config)
    if config.cross_shard_operations and config.shards > 1:
        watched = parsed_events.where("reason IS NULL").join(
            _cross_shard_keys(parsed_ops, config), on="key", how="left_semi"
        )
        events = events.unionByName(_replicas(watched, config))
    return _route_operations(parsed_ops, config, claims=False).unionByName(events)


def _repeats_rejected(parsed_ops: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """Static input: every copy of a repeated op_id but one rejected ``duplicate_op_id``,
    whichever shard its keys hash to; the one kept is the registry's choice (the earliest
    ``ts``, then the lowest home shard, then input order), and copies whose keys span shards
    are checked among themselves, as the cross-shard group does."""
    shards = int(config.shards)
    every = f"array_distinct(transform(keys, _k -> {_sql_shard_of('_k', config)}))"
    home = f"CASE WHEN size({every}) > 1 THEN {shards} ELSE {_sql_shard_of('get(keys, 0)', config)} END"
    valid = "reason IS NULL AND op_id IS NOT NULL"
    # an operation whose keys span shards is outside the registry: such copies among themselves
    rank = (
        f"CASE WHEN {valid} THEN row_number() OVER (PARTITION BY op_id, reason IS NULL, {home} = {shards} "
        f"ORDER BY {_TS_SQL}, {home}, monotonically_increasing_id()) END"
    )
    ranked = parsed_ops.selectExpr("*", f"{rank} AS _rank")
    reason = f"CASE WHEN _rank > 1 THEN '{DUPLICATE_OP_ID}' ELSE reason END"
    return ranked.withColumn("reason", F.expr(reason)).drop("_rank")
