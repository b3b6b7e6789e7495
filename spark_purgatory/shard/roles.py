"""The routed row, as the shard step reads it: the roles a row carries, the columns roles
share, and the one schema every routed row has (Arrow; ``spark.routed_rows`` gives it to
Spark and ends every route in it).

Every column costs Spark's Arrow writer and PySpark's conversion per row, null or not, so
fields no row has together share a column (``SHARED_COLUMNS``) and lists travel as JSON text
only where a row needs one (``LIST_COLUMNS``).

Invariant: every routed row has exactly ``ROUTED``'s columns, in its order and types; the
engine and the shard step need no Spark to read them.
"""

from __future__ import annotations

import pyarrow as pa

from ..contract import EVENT_INPUT, OPERATION_INPUT, SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column

#: a routed row's role (its ``role`` column): what the shard does with it
ROLE_OPERATION, ROLE_STUB, ROLE_EVENT, ROLE_REPLICA, ROLE_BAD = "op", "stub", "event", "replica", "bad"
#: an operation's claim of its op_id, for the op_id's registry shard (``engine.registry``)
ROLE_CLAIM = "claim"
#: a row that only makes Spark call the cross-shard group (``handoff.wake``)
ROLE_WAKE = "wake"
#: the end of input, for one shard group (``handoff.wake``): it moves that shard past every deadline
ROLE_END = "end"
#: the operator's clock, for one shard group (``handoff.reaper``): its watermark in ``ts_ms``
ROLE_CLOCK = "clock"
#: an input's largest event time in one Spark partition of the micro-batch, for every shard group
#: (``spark.input_stream``'s marks): in ``ts_ms``, the input in ``side``
ROLE_MARK = "mark"
#: the roles and sides as the routed rows carry them: a small number, its name's place here
#: (a string column costs the Arrow hand-off a Python string per row)
ROLES = (
    ROLE_OPERATION,
    ROLE_STUB,
    ROLE_EVENT,
    ROLE_REPLICA,
    ROLE_BAD,
    ROLE_CLAIM,
    ROLE_WAKE,
    ROLE_END,
    ROLE_CLOCK,
    ROLE_MARK,
)
SIDES = (SOURCE_OPERATIONS, SOURCE_EVENTS, ROLE_WAKE)


#: the routed columns that are flags: false where a row has none (a null makes pandas' column objects)
FLAGS = ("cancel",)
#: the routed columns that hold a list as JSON text, null for the usual rows (one key, in
#: ``key``; no members): an array column costs per row even when empty, a null string not
LIST_COLUMNS = ("keys", "members")


#: the fields that travel in a column of another role's, as (routed column, its fields): no
#: routed row has two of them
SHARED_COLUMNS: dict[str, tuple[str, ...]] = {
    "condition": ("reason", "condition", "source"),  # a rejected row's reason; an operation's; an event's
    "target": ("target", "value"),  # an operation's target; an event's value
    "payload": ("raw", "payload"),  # a rejected row's raw text; an operation's payload
}
#: the routed column each shared field travels in
SHARED_IN: dict[str, str] = {field: column for column, fields in SHARED_COLUMNS.items() for field in fields}


def _routed_arrow() -> pa.Schema:
    """``shard``, ``role``, ``side`` (these two as their places in ``ROLES`` and ``SIDES``),
    ``peer`` (an operation's registry shard, a claim's home), ``part`` (a Kafka record's
    topic and partition as one number; null for files), then the input fields (event time as
    epoch ms), shared (``SHARED_COLUMNS``) and lists as text (``LIST_COLUMNS``)."""
    shared = {field for fields in SHARED_COLUMNS.values() for field in fields} - set(SHARED_COLUMNS)
    fields: dict[str, pa.DataType] = {
        "shard": pa.int32(),
        "role": pa.string(),
        "side": pa.string(),
        "peer": pa.int32(),
        "part": pa.int64(),
    }
    for field in (*OPERATION_INPUT, *EVENT_INPUT):
        if field.name == "ts":
            fields[ms_column("ts")] = pa.int64()
        elif field.name not in shared:
            fields.setdefault(field.name, field.type)
    fields.update({name: pa.string() for name in LIST_COLUMNS}, role=pa.int8(), side=pa.int8())
    return pa.schema(list(fields.items()))


#: the operator's input: operations, stubs, events, replicas and rejected-at-parse rows
ROUTED: pa.Schema = _routed_arrow()
ROUTED_COLUMNS: list[str] = ROUTED.names


def carries(side: str, field: str) -> bool:
    """Does a routed row of ``side`` have ``field`` (every side may have a rejected row's)?"""
    if field in ("reason", "raw"):
        return True
    own = OPERATION_INPUT if side == SOURCE_OPERATIONS else EVENT_INPUT if side == SOURCE_EVENTS else ()
    return field in {f.name for f in own}
