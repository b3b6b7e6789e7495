"""The input contract: the fields of operations and events, their types, bounds and limits,
the conditions, and how a field's text is read.

Every reader of the input (Spark SQL, the JVM checks, the engine's pandas readers) reads a
record by these declarations.

**How a value is read.**  Each field has a reading (``READINGS``).  Spark's own casts are the
reference for text, since the job reads with them; the engine's readers follow them to the
character:

* a text is *blank* when it is empty or spaces (U+0020) only (``BLANK``: Spark's ``trim``);
* a whole number is ``[+-]?[0-9]+`` within int64, U+0000-U+0020 and U+007F around it ignored
  (``WHOLE_TRIM``, ``WHOLE_TEXT``: Spark's cast to ``BIGINT``);
* a number is what Java's ``Double.valueOf`` reads, U+0000-U+0020 around it ignored
  (``NUMBER_TRIM``, ``NUMBER_TEXT``), or one of ``NUMBER_WORDS`` in any case: Spark's cast
  to ``DOUBLE``;
* an event time in text is epoch ms (``EPOCH_MS_TEXT``) or an ISO-8601 date and time
  (``TS_TEXT``): a date, optionally a time after ``T`` or a space, and after the seconds
  optionally ``Z`` or an offset up to ±18:00; a time without an offset is UTC.  A time
  without a date or a zone by name is no event time (Spark would read them differently).

The patterns are written in the syntax Java's, Python's and RE2's regular expressions share
(no ``\\s``, no ``\\d``), without anchors: a reader matches the whole text.

Invariant: a field's text means the same value to every reader, or no value to every reader.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "SOURCE_OPERATIONS",
    "SOURCE_EVENTS",
    "OPERATION_INPUT",
    "EVENT_INPUT",
    "OPERATION_COLUMNS",
    "EVENT_COLUMNS",
    "OPERATION_REQUIRED",
    "EVENT_REQUIRED",
    "ID",
    "TEXT",
    "STRING",
    "LIST",
    "WHOLE",
    "NUMBER",
    "TIME",
    "FLAG",
    "READINGS",
    "read_as",
    "CONDITIONS",
    "DEFAULT_CONDITION",
    "TARGETED",
    "WITH_MEMBERS",
    "TARGET_COUNTS_MEMBERS",
    "MIN_TS_MS",
    "MAX_TS_MS",
    "MIN_TIMEOUT_MS",
    "MAX_TIMEOUT_MS",
    "MAX_FUTURE_MS",
    "MAX_RECORD_BYTES",
    "MAX_DEPTH",
    "DEEPEST_MAX_DEPTH",
    "MAX_KEYS",
    "MAX_MEMBERS",
    "BLANK",
    "WHOLE_TRIM",
    "WHOLE_TEXT",
    "NUMBER_TRIM",
    "NUMBER_TEXT",
    "NUMBER_WORDS",
    "EPOCH_MS_TEXT",
    "TS_TRIM",
    "TS_TEXT",
    "STRING_LITERAL",
]

# -- fields and types --------------------------------------------------------------------------------

#: the two inputs, as a rejected row names the one it came from (``rejected``'s ``source``)
SOURCE_OPERATIONS, SOURCE_EVENTS = "operations", "events"

#: the SPEC's operation fields with their Arrow types (``ts`` a timestamp or epoch ms)
OPERATION_INPUT = pa.schema(
    [
        ("op_id", pa.string()),
        ("key", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("timeout_ms", pa.int64()),
        ("condition", pa.string()),
        ("target", pa.float64()),
        ("members", pa.list_(pa.string())),
        ("payload", pa.string()),
        ("warn_ms", pa.int64()),
    ]
)
#: the SPEC's completion-event fields with their Arrow types
EVENT_INPUT = pa.schema(
    [
        ("key", pa.string()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("op_id", pa.string()),
        ("source", pa.string()),
        ("value", pa.float64()),
        ("cancel", pa.bool_()),
    ]
)
#: an operation's required fields (and ``key`` or ``keys``); every other field may be absent
OPERATION_REQUIRED: tuple[str, ...] = ("op_id", "ts", "timeout_ms")
#: an event's required fields
EVENT_REQUIRED: tuple[str, ...] = ("key", "ts")
#: how a field's JSON value is read: ``ID`` a string, or a number or boolean standing for its
#: text (an array or object is ``bad_<field>``); ``TEXT`` any value as its text; ``STRING`` a
#: string or nothing (else ``bad_<field>``); ``LIST`` a list of ``TEXT`` items, or one standing
#: for a list of one; ``WHOLE``, ``NUMBER`` and ``TIME`` as their text says (module docstring);
#: ``FLAG`` a JSON boolean or nothing (else ``bad_<field>``: a string ``"true"`` too)
ID, TEXT, STRING, LIST, WHOLE, NUMBER, TIME = "id", "text", "string", "list", "whole", "number", "time"
FLAG = "flag"
#: each field's reading, by input
READINGS: dict[str, dict[str, str]] = {
    SOURCE_OPERATIONS: {
        "op_id": ID,
        "key": TEXT,
        "keys": LIST,
        "ts": TIME,
        "timeout_ms": WHOLE,
        "condition": TEXT,
        "target": NUMBER,
        "members": LIST,
        "payload": STRING,
        "warn_ms": WHOLE,
    },
    SOURCE_EVENTS: {"key": TEXT, "ts": TIME, "op_id": ID, "source": STRING, "value": NUMBER, "cancel": FLAG},
}


def read_as(*readings: str) -> tuple[str, ...]:
    """The fields of either input read in one of ``readings``, in the contract's order.

    >>> read_as(ID, STRING)
    ('op_id', 'payload', 'source')
    """
    fields = {**READINGS[SOURCE_OPERATIONS], **READINGS[SOURCE_EVENTS]}
    return tuple(name for name, reading in fields.items() if reading in readings)


#: canonical columns of an operations frame handed to the engine (ts in epoch ms, keys a list)
OPERATION_COLUMNS = [f.name for f in OPERATION_INPUT if f.name != "key"]
#: canonical columns of an events frame handed to the engine (ts in epoch ms)
EVENT_COLUMNS = EVENT_INPUT.names

# -- conditions --------------------------------------------------------------------------------------

#: the conditions an operation may name, trimmed, in any case (``engine.conditions``: their codes)
CONDITIONS: tuple[str, ...] = ("any", "count", "sum", "all", "offset", "quorum")
#: an operation's condition when it names none
DEFAULT_CONDITION = "any"
#: the conditions that need a ``target`` (``missing_target``) and use it; no other does
#: (``unused_target``)
TARGETED: tuple[str, ...] = ("count", "sum", "offset", "quorum")
#: the conditions that need ``members`` (``missing_members``) and use them; no other does
#: (``unused_members``)
WITH_MEMBERS: tuple[str, ...] = ("all", "quorum")
#: the condition whose target counts members: one above them could never hold
#: (``target_above_members``)
TARGET_COUNTS_MEMBERS: tuple[str, ...] = ("quorum",)

# -- bounds and limits (the limits' keys and checks: ``config``) ---------------------------------------

#: event times from 1970 (``MIN_TS_MS``) up to, not including, 2200-01-01 (``MAX_TS_MS``);
#: others are ``bad_ts`` (they would overflow, or are nonsense)
MIN_TS_MS = 0
MAX_TS_MS = 7_258_118_400_000
#: the least ``timeout_ms`` (``negative_timeout`` below it)
MIN_TIMEOUT_MS = 0
#: ``purgatory.max.timeout.ms``'s default: 7 days (``timeout_above_max`` above it)
MAX_TIMEOUT_MS = 7 * 86_400_000
#: ``purgatory.max.future.ms``'s default: a day ahead of processing time (``ts_in_future``)
MAX_FUTURE_MS = 86_400_000
#: ``input.max.record.bytes``'s default: 1 MiB of UTF-8 (``record_too_large``)
MAX_RECORD_BYTES = 1024 * 1024
#: ``input.max.depth``'s default (``too_deep``), and the deepest it may be set: Spark's JSON
#: reader refuses deeper records by itself
MAX_DEPTH, DEEPEST_MAX_DEPTH = 32, 500
#: ``input.max.keys`` and ``input.max.members``'s defaults (``too_many_keys``, ``too_many_members``)
MAX_KEYS, MAX_MEMBERS = 1000, 1000

# -- how text is read (module docstring) ---------------------------------------------------------------

#: the character a blank text consists of (Spark's ``trim``)
BLANK = " "
#: the characters around a whole number that are ignored, as a character class's body
WHOLE_TRIM = r"\x00-\x20\x7f"
#: a whole number's text once trimmed (and within int64)
WHOLE_TEXT = r"[+-]?[0-9]+"
#: the characters around a number that are ignored (Java's ``String.trim``)
NUMBER_TRIM = r"\x00-\x20"
_DIGITS, _HEX = "[0-9]+", "[0-9a-fA-F]+"
_EXPONENT = f"[eE][+-]?{_DIGITS}"
#: a number's text once trimmed: Java's ``Double.valueOf`` grammar (its javadoc's pattern)
NUMBER_TEXT = (
    f"[+-]?(?:NaN|Infinity|(?:(?:{_DIGITS}\\.?(?:{_DIGITS})?(?:{_EXPONENT})?"
    f"|\\.{_DIGITS}(?:{_EXPONENT})?"
    f"|(?:0[xX]{_HEX}\\.?|0[xX](?:{_HEX})?\\.{_HEX})[pP][+-]?{_DIGITS})[fFdD]?))"
)
#: the words a number's text may also be, trimmed and in any case (Spark's special values)
NUMBER_WORDS: dict[str, float] = {
    "inf": float("inf"),
    "+inf": float("inf"),
    "infinity": float("inf"),
    "+infinity": float("inf"),
    "-inf": float("-inf"),
    "-infinity": float("-inf"),
    "nan": float("nan"),
}
#: an event time in epoch ms: digits among the white space of Java's ``\\s``, then read as a
#: whole number (so a fraction, or a sign other than ``-``, is no epoch ms)
EPOCH_MS_TEXT = r"[\t\n\x0b\x0c\r ]*-?[0-9]+[\t\n\x0b\x0c\r ]*"
#: the characters around an ISO-8601 event time that are ignored (Spark's ``trimAll``)
TS_TRIM = WHOLE_TRIM
_OFFSET = "(?:Z|[+-](?:0[0-9]|1[0-7])(?::?[0-5][0-9])?|[+-]18(?::?00)?)"
_TIME = f"[T ](?:[0-9]{{2}}|[0-9]{{1,2}}:[0-9]{{1,2}}(?::[0-9]{{1,2}}(?:\\.[0-9]+)?(?: ?{_OFFSET})?)?)"
#: an ISO-8601 event time (module docstring), with the characters ``TS_TRIM`` around it
TS_TEXT = f"[{TS_TRIM}]*[0-9]{{4}}-[0-9]{{1,2}}(?:-[0-9]{{1,2}}(?:{_TIME})?)?[{TS_TRIM}]*"
#: a JSON string literal, quotes and escapes included, in possessive form (no backtracking
#: stack on a long string in Java's regular expressions)
STRING_LITERAL = r'"(?:[^"\\]++|\\[\s\S])*+"'
