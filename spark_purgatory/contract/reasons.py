"""The rejection reasons: each a named constant, what it means, and where it is decided.

A rejected row says why in one word.  Each reason is declared here once, with its meaning for
a person reading ``rejected`` and its *stage*, which says which inputs can give it and which
readers decide it:

==============  ============================================================================
``READ``        the record's text, before any field is read: JSON text only (files, Kafka)
``TYPE``        a field of a JSON type it cannot have: input that can hold any value (JSON,
                records handed to the engine); a typed column holds only its type
``FIELD``       a field's value: every input, every reader
``CLOCK``       the processing time: the stream's readers (a backfill, ``PurgatoryTester``
                and the engine on its own have no processing time to compare with)
``ROUTING``     the shards the keys live in: Spark's routing, before the shards
``REGISTRY``    the op_ids the shards remember: the engine, after reading
``WATERMARK``   the watermark when the row arrives: the engine, after reading
==============  ============================================================================

Invariant: a reason means the same thing whichever reader gives it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "READ",
    "TYPE",
    "FIELD",
    "CLOCK",
    "ROUTING",
    "REGISTRY",
    "WATERMARK",
    "STAGES",
    "Reason",
    "RECORD_TOO_LARGE",
    "TOO_DEEP",
    "MALFORMED_JSON",
    "MISSPELLED_FIELD",
    "MISSING_OP_ID",
    "BAD_OP_ID",
    "MISSING_KEY",
    "TOO_MANY_KEYS",
    "MISSING_TS",
    "BAD_TS",
    "TS_IN_FUTURE",
    "MISSING_TIMEOUT_MS",
    "BAD_TIMEOUT_MS",
    "NEGATIVE_TIMEOUT",
    "TIMEOUT_ABOVE_MAX",
    "UNKNOWN_CONDITION",
    "MISSING_TARGET",
    "BAD_TARGET",
    "MISSING_MEMBERS",
    "TOO_MANY_MEMBERS",
    "TARGET_ABOVE_MEMBERS",
    "UNUSED_TARGET",
    "UNUSED_MEMBERS",
    "BAD_PAYLOAD",
    "BAD_VALUE",
    "BAD_SOURCE",
    "BAD_CANCEL",
    "BAD_WARN_MS",
    "DUPLICATE_OP_ID",
    "LATE",
    "CROSS_SHARD_KEYS",
    "ALL_REASONS",
    "REASONS",
    "STAGE_OF",
    "RAW_KEPT_CHARS",
    "RAW_TRUNCATED",
]

# -- stages ------------------------------------------------------------------------------------------

READ, TYPE, FIELD, CLOCK, ROUTING, REGISTRY, WATERMARK = (
    "read",
    "type",
    "field",
    "clock",
    "routing",
    "registry",
    "watermark",
)
#: every stage, in the order a row meets them
STAGES: tuple[str, ...] = (READ, TYPE, FIELD, CLOCK, ROUTING, REGISTRY, WATERMARK)


class Reason(NamedTuple):
    """One rejection reason: its word, its meaning, its stage (module docstring)."""

    name: str
    meaning: str
    stage: str


# -- the reasons -------------------------------------------------------------------------------------

RECORD_TOO_LARGE = "record_too_large"
TOO_DEEP = "too_deep"
MALFORMED_JSON = "malformed_json"
MISSPELLED_FIELD = "misspelled_field"
MISSING_OP_ID = "missing_op_id"
BAD_OP_ID = "bad_op_id"
MISSING_KEY = "missing_key"
TOO_MANY_KEYS = "too_many_keys"
MISSING_TS = "missing_ts"
BAD_TS = "bad_ts"
TS_IN_FUTURE = "ts_in_future"
MISSING_TIMEOUT_MS = "missing_timeout_ms"
BAD_TIMEOUT_MS = "bad_timeout_ms"
NEGATIVE_TIMEOUT = "negative_timeout"
TIMEOUT_ABOVE_MAX = "timeout_above_max"
UNKNOWN_CONDITION = "unknown_condition"
MISSING_TARGET = "missing_target"
BAD_TARGET = "bad_target"
MISSING_MEMBERS = "missing_members"
TOO_MANY_MEMBERS = "too_many_members"
TARGET_ABOVE_MEMBERS = "target_above_members"
UNUSED_TARGET = "unused_target"
UNUSED_MEMBERS = "unused_members"
BAD_WARN_MS = "bad_warn_ms"
BAD_PAYLOAD = "bad_payload"
BAD_VALUE = "bad_value"
BAD_SOURCE = "bad_source"
BAD_CANCEL = "bad_cancel"
DUPLICATE_OP_ID = "duplicate_op_id"
LATE = "late"
CROSS_SHARD_KEYS = "cross_shard_keys"

#: every reason, in the order of the contract page's table: an operation's in the order they
#: apply (``rules.OPERATION_CHECKS``), an event's own after ``bad_payload``
ALL_REASONS: tuple[Reason, ...] = (
    Reason(
        RECORD_TOO_LARGE,
        "the record's text is longer than input.max.record.bytes (its raw is truncated)",
        READ,
    ),
    Reason(TOO_DEEP, "the record nests arrays and objects deeper than input.max.depth", READ),
    Reason(MALFORMED_JSON, "the record is not a JSON object", READ),
    Reason(
        MISSPELLED_FIELD,
        "a field the contract does not know, a small edit away from one it does (condtion, timout_ms)",
        TYPE,
    ),
    Reason(MISSING_OP_ID, "no op_id, or an empty one", FIELD),
    Reason(BAD_OP_ID, "op_id is not a string", TYPE),
    Reason(MISSING_KEY, "no key (or keys), or only empty ones", FIELD),
    Reason(TOO_MANY_KEYS, "more distinct keys than input.max.keys", FIELD),
    Reason(MISSING_TS, "no ts", FIELD),
    Reason(
        BAD_TS,
        "ts is neither an ISO-8601 timestamp nor epoch ms, or lies outside 1970-2200 "
        "(a time without a date, a zone by name, or words such as `now` are not event times)",
        FIELD,
    ),
    Reason(TS_IN_FUTURE, "ts lies more than purgatory.max.future.ms ahead of processing time", CLOCK),
    Reason(MISSING_TIMEOUT_MS, "no timeout_ms", FIELD),
    Reason(BAD_TIMEOUT_MS, "timeout_ms is not a whole number", FIELD),
    Reason(NEGATIVE_TIMEOUT, "timeout_ms < 0", FIELD),
    Reason(TIMEOUT_ABOVE_MAX, "timeout_ms > purgatory.max.timeout.ms", FIELD),
    Reason(UNKNOWN_CONDITION, "condition is not any, count, sum, all, offset or quorum", FIELD),
    Reason(MISSING_TARGET, "count, sum, offset and quorum need a target", FIELD),
    Reason(BAD_TARGET, "target is not a finite number", FIELD),
    Reason(MISSING_MEMBERS, "all and quorum need members", FIELD),
    Reason(TOO_MANY_MEMBERS, "more distinct members than input.max.members", FIELD),
    Reason(
        TARGET_ABOVE_MEMBERS,
        "a quorum's target is more than its distinct members: it could never hold",
        FIELD,
    ),
    Reason(
        UNUSED_TARGET,
        "a target given to a condition that does not use one (any, all); k of named members is quorum",
        FIELD,
    ),
    Reason(
        UNUSED_MEMBERS,
        "members given to a condition that does not use them (any, count, sum, offset); "
        "k of named members is quorum",
        FIELD,
    ),
    Reason(BAD_WARN_MS, "warn_ms is not a whole number from 1 to timeout_ms", FIELD),
    Reason(BAD_PAYLOAD, "payload is not a string", TYPE),
    Reason(BAD_VALUE, "value is not a finite number", FIELD),
    Reason(BAD_SOURCE, "source is not a string", TYPE),
    Reason(BAD_CANCEL, 'cancel is not true or false (a JSON boolean: the string "true" is not)', TYPE),
    Reason(CROSS_SHARD_KEYS, "keys span shards and purgatory.cross.shard.operations is off", ROUTING),
    Reason(LATE, "event time behind the watermark when the row arrived", WATERMARK),
    Reason(DUPLICATE_OP_ID, "an operation with this op_id is pending or was resolved recently", REGISTRY),
)

#: every reason a row can be rejected for, and what it means to a person reading ``rejected``
REASONS: dict[str, str] = {r.name: r.meaning for r in ALL_REASONS}
#: each reason's stage (module docstring)
STAGE_OF: dict[str, str] = {r.name: r.stage for r in ALL_REASONS}

#: a ``record_too_large`` row's ``raw``: its first ``RAW_KEPT_CHARS`` characters, then this
#: note with the record's size in UTF-8 bytes (both readings write the same text)
RAW_KEPT_CHARS = 1024
RAW_TRUNCATED = "…[truncated: {bytes} bytes]"
