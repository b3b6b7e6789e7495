"""The contract table: every case the input contract decides, with its answer.

Each case is one record (an operation or an event) as JSON text (``line``: a file's line, a
Kafka record's value) and, where typed columns can hold it, as a typed row (``record``: the
contract's Spark types, or the others typed input may have: epoch ms as a bigint, a
timestamp without a zone, a double timeout, an int target; each record's values say which).  Its
answer is a reason from ``contract.REASONS``, or, for a valid record, the row every reader
must read from it (``row``: the canonical fields, times in epoch ms).  A case whose reason is
decided at a stage a path does not run (``contract.reasons``' stages; the paths' declarations
are in ``test_contract_table``) must come out of that path valid, with the same row.

The records share the settings below (small limits: cheap poison records).  Each case names
itself in its record: an operation's ``op_id`` (or, where the case is about the op_id, its
first key ``k:<name>``), an event's key ``e:<name>`` (or its ``op_id``); the test finds each
path's answer by that name, or by the line for records that have no readable name.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from spark_purgatory import contract as c
from spark_purgatory.config import InputLimits, PurgatoryConfig

UTC = dt.timezone.utc
TS = "2026-01-01T00:00:00Z"
TS_MS = 1_767_225_600_000
TS_DT = dt.datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT_MS = 500
#: the table's limits: small, so that a poison record is cheap
LIMITS = InputLimits(record_bytes=2048, depth=6, keys=4, members=4)
MAX_TIMEOUT_MS = 1000
#: every path reads with these settings: two shards, keys ``k:...`` in one and ``e:...`` in the
#: other (the delimiter), operations across shards refused (``cross_shard_keys``), no state path
#: (no registry across micro-batches: one routed row per record)
CONFIG = PurgatoryConfig(
    shards=2,
    shard_key_delimiter=":",
    cross_shard_operations=False,
    max_timeout_ms=MAX_TIMEOUT_MS,
    input_max_record_bytes=LIMITS.record_bytes,
    input_max_depth=LIMITS.depth,
    input_max_keys=LIMITS.keys,
    input_max_members=LIMITS.members,
    tick_ms=100,
)
#: keys in different shards (``shards_of``: ``a`` in 0, ``b`` in 1; the test checks)
ACROSS_SHARDS = ["a:1", "b:1"]
#: the watermark a ``late`` case arrives behind (the tester's second micro-batch)
LATE_WATERMARK_MS = TS_MS + 1000

#: a field left out of the record
ABSENT: Any = object()
#: the typed record follows from the JSON one (``_typed``)
AUTO: Any = object()
#: a pandas frame of the typed record gets the case's own answer
SAME: Any = object()


@dataclass(frozen=True)
class Case:
    """One record and the contract's answer for it (module docstring)."""

    name: str
    source: str
    reason: str | None
    line: str | bytes | None
    record: dict | None
    #: the record holds a value a typed Spark column cannot (the engine's records only)
    records_only: bool = False
    #: the row every reader reads from a valid record, and, for a record rejected after
    #: reading, every reader that does not run that stage (None for a line of no record)
    row: dict | None = None
    #: sent in a micro-batch behind ``LATE_WATERMARK_MS``, where the shards judge lateness
    late: bool = False
    #: the answer of a pandas frame of the typed record, where pandas' own meaning differs
    #: (``SAME``: none): its NaN is a missing value (docs/contract.md, "Operations")
    in_frames: Any = SAME
    identities: tuple[str, ...] = field(default=())
    #: a record two checks fail (``PAIRS``): both reasons, in the contract's order (the first
    #: is ``reason``; a path that does not run its stage gives the second)
    reasons: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The case's name with its input's (names are unique per input)."""
        return f"{'op' if self.source == c.SOURCE_OPERATIONS else 'ev'}:{self.name}"

    @property
    def stage(self) -> str | None:
        return c.STAGE_OF[self.reason] if self.reason else None


def _without_absent(record: dict) -> dict:
    return {k: v for k, v in record.items() if v is not ABSENT}


def _typed(record: dict, source: str) -> dict | None:
    """The JSON record as typed columns, when each value fits its contract type as it is
    (the event time ``TS`` as its timestamp); None otherwise."""
    schema = c.OPERATION_INPUT if source == c.SOURCE_OPERATIONS else c.EVENT_INPUT
    out = {}
    for name, value in record.items():
        if name not in schema.names:
            return None
        kind = schema.field(name).type
        if value is None:
            out[name] = None
        elif name == "ts":
            if value != TS:
                return None
            out[name] = TS_DT
        elif str(kind) == "string" and isinstance(value, str):
            out[name] = value
        elif str(kind).startswith("list") and isinstance(value, list):
            if not all(item is None or isinstance(item, str) for item in value):
                return None
            out[name] = value
        elif str(kind) == "int64" and isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
        elif str(kind) == "double" and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
        elif str(kind) == "bool" and isinstance(value, bool):
            out[name] = value
        else:
            return None
    return out


def _case(
    name: str,
    source: str,
    reason: str | None,
    record: dict,
    base_row: dict,
    *,
    line: str | bytes | None | Any = AUTO,
    typed: dict | None | Any = AUTO,
    row: dict | None = None,
    **flags: Any,
) -> Case:
    record = _without_absent(record)
    if line is AUTO:
        line = json.dumps(record, ensure_ascii=False)
    if typed is AUTO:
        typed = _typed(record, source)
    elif isinstance(typed, dict):
        typed = _without_absent({**_typed_base(record, source), **typed})
    expected = {**base_row, **(row or {})}
    identities = tuple(
        str(record[k]) for k in ("op_id", "key") if isinstance(record.get(k), str) and record[k].strip()
    )
    if isinstance(record.get("keys"), list) and record["keys"] and isinstance(record["keys"][0], str):
        identities += (record["keys"][0],)
    return Case(name, source, reason, line, typed, row=expected, identities=identities, **flags)


def _typed_base(record: dict, source: str) -> dict:
    """The typed record's fields that follow from the JSON one (the rest are given)."""
    plain = {k: v for k, v in record.items() if k in ("op_id", "key") and isinstance(v, str)}
    return {**plain, "ts": TS_DT, **({"timeout_ms": TIMEOUT_MS} if source == c.SOURCE_OPERATIONS else {})}


#: the keywords of ``op`` and ``ev`` that are no field of the record
_OPTIONS = ("line", "typed", "row", "records_only", "late", "in_frames")


def op(name: str, reason: str | None = None, **fields: Any) -> Case:
    """An operation case: ``{"op_id": name, "key": "k:<name>", "ts": TS, "timeout_ms": 500}``
    with ``fields`` (``ABSENT`` leaves one out); ``line=``, ``typed=``, ``row=`` and the flags
    as ``_case``'s."""
    options = {k: fields.pop(k) for k in _OPTIONS if k in fields}
    record = {"op_id": name, "key": f"k:{name}", "ts": TS, "timeout_ms": TIMEOUT_MS, **fields}
    base_row = {
        "op_id": name,
        "keys": (f"k:{name}",),
        "ts": TS_MS,
        "deadline": TS_MS + TIMEOUT_MS,
        "condition": "any",
        "target": None,
        "members": (),
        "payload": None,
    }
    return _case(name, c.SOURCE_OPERATIONS, reason, record, base_row, **options)


def ev(name: str, reason: str | None = None, **fields: Any) -> Case:
    """An event case: ``{"key": "e:<name>", "ts": TS}`` with ``fields``, as ``op``'s."""
    options = {k: fields.pop(k) for k in _OPTIONS if k in fields}
    record = {"key": f"e:{name}", "ts": TS, **fields}
    base_row = {"key": f"e:{name}", "ts": TS_MS, "op_id": None, "source": None, "value": None}
    base_row["cancel"] = False
    return _case(name, c.SOURCE_EVENTS, reason, record, base_row, **options)


def raw(name: str, source: str, reason: str, line: str | bytes) -> Case:
    """A line that is no record of the contract's shape at all (its text is its identity)."""
    return Case(name, source, reason, line, None)


def _year(year: int) -> dt.datetime:
    return dt.datetime(year, 1, 1, tzinfo=UTC)


FUTURE = "2100-01-01T00:00:00Z"
FUTURE_DT = dt.datetime(2100, 1, 1, tzinfo=UTC)

# fmt: off
OPERATIONS: list[Case] = [
    # -- valid, and how each field is read ---------------------------------------------------------
    op("plain"),
    op("keys-in-order", key=ABSENT, keys=["k:b", "k:a", "k:b", " ", None], row={"keys": ("k:b", "k:a")}),
    op("keys-and-key", keys=["k:keys-and-key"], key="k:other"),
    op("keys-one-string", key=ABSENT, keys="k:keys-one-string", typed=None),
    op("keys-json-text", key=ABSENT, keys='["k:x", "k:y"]', typed=None, row={"keys": ("k:x", "k:y")}),
    op("keys-object-key", keys={"x": 1}, typed=None),  # an object is no list: ``key`` stands in
    op("keys-empty-key", c.MISSING_KEY, keys=[]),  # an empty list is there: ``key`` does not stand in
    op("key-number", key=7, keys=ABSENT, typed=None, row={"keys": ("7",)}),
    op("op-id-number", op_id=42, typed=None, row={"op_id": "42"}),
    op("op-id-true", op_id=True, typed=None, row={"op_id": "true"}),
    op("op-id-tab", op_id="\tx", row={"op_id": "\tx"}),  # a tab is text, not blank
    op("op-id-nbsp", op_id="\u00a0", row={"op_id": "\u00a0"}),
    op("op-id-tab-only", op_id="\t", row={"op_id": "\t"}),
    op("key-nbsp", key="\u00a0", op_id="key-nbsp", row={"keys": ("\u00a0",)}),
    op("keys-number-item", key=ABSENT, keys=["k:a", 1, None, " "], typed=None, row={"keys": ("k:a", "1")}),
    op("ts-digits", ts="1767225600000", typed=None),
    op("ts-number", ts=1767225600000, typed={"ts": TS_MS}),
    op("ts-number-float", c.BAD_TS, ts=1767225600000.0, typed=None),  # "1767225600000.0": no epoch ms
    op("ts-spaces", ts=" 2026-01-01T00:00:00Z "),
    op("ts-java-space", ts="\x0b1767225600000\r", typed=None),
    op("ts-controls", ts="\x012026-01-01T00:00:00Z\x7f", typed=None),
    op("ts-date", ts="2026-01-01"),
    op("ts-month", ts="2026-01"),
    op("ts-one-digit", ts="2026-1-1"),
    op("ts-hour", ts="2026-01-01T10", row={"ts": TS_MS + 36_000_000, "deadline": TS_MS + 36_000_000 + 500}),
    op("ts-space", ts="2026-01-01 00:00", typed=None),
    op("ts-offset", ts="2026-01-01T05:00:00+05:00"),
    op("ts-offset-compact", ts="2026-01-01T05:30:00+0530"),
    op("ts-offset-hours", ts="2025-12-31T19:00:00-05"),
    op("ts-offset-spaced", ts="2026-01-01 05:00:00 +05:00"),
    op("ts-fraction", ts="2026-01-01T00:00:00.5Z", row={"ts": TS_MS + 500, "deadline": TS_MS + 1000}),
    op("ts-nanos", ts="2026-01-01T00:00:00.0009999Z"),
    op("ts-epoch", ts=5, typed={"ts": 5}, row={"ts": 5, "deadline": 505}),
    op("ts-typed-ntz", typed={"ts": dt.datetime(2026, 1, 1)}),
    op("timeout-text", timeout_ms="5", typed=None, row={"deadline": TS_MS + 5}),
    op("timeout-spaces", timeout_ms=" 5 ", typed=None, row={"deadline": TS_MS + 5}),
    op("timeout-controls", timeout_ms="\x00+5\x7f", typed=None, row={"deadline": TS_MS + 5}),
    op("timeout-zero", timeout_ms=0, row={"deadline": TS_MS}),
    op("timeout-max", timeout_ms=MAX_TIMEOUT_MS, row={"deadline": TS_MS + MAX_TIMEOUT_MS}),
    op("timeout-whole-double", line=None, typed={"timeout_ms": 5.0}, row={"deadline": TS_MS + 5}),
    op("count", condition="count", target=2, row={"condition": "count", "target": 2.0}),
    op("count-spelled", condition=" COUNT ", target="10", typed=None,
       row={"condition": "count", "target": 10.0}),
    op("count-kelvin", c.UNKNOWN_CONDITION, condition="\u212aount", target=1),  # the Kelvin sign lowers to k
    op("sum-suffix", condition="sum", target="1.5d", typed=None, row={"condition": "sum", "target": 1.5}),
    op("sum-hex", condition="sum", target="0x1.8p1", typed=None, row={"condition": "sum", "target": 3.0}),
    op("sum-exponent", condition="sum", target=" 1e2 ", typed=None,
       row={"condition": "sum", "target": 100.0}),
    op("sum-target-int", line=None, typed={"condition": "sum", "target": 3},
       row={"condition": "sum", "target": 3.0}),
    op("offset", condition="offset", target=5, row={"condition": "offset", "target": 5.0}),
    op("all", condition="all", members=["m2", "m1", "m1", " "],
       row={"condition": "all", "members": ("m1", "m2")}),
    op("all-one-member", condition="all", members="m1", typed=None,
       row={"condition": "all", "members": ("m1",)}),
    op("quorum", condition=" Quorum ", target="2", members=["m1", "m2", "m1"], typed=None,
       row={"condition": "quorum", "target": 2.0, "members": ("m1", "m2")}),
    op("quorum-typed", condition="quorum", target=2, members=["m2", "m1"],
       row={"condition": "quorum", "target": 2.0, "members": ("m1", "m2")}),
    op("quorum-zero", condition="quorum", target=0, members="m1", typed=None,
       row={"condition": "quorum", "target": 0.0, "members": ("m1",)}),
    op("target-blank", target=" ", typed=None),  # blank text is no target
    op("target-null", target=None),
    op("members-empty", members=[]),
    op("members-blank", members=[" ", None]),
    op("payload", payload="42", row={"payload": "42"}),
    op("payload-null", payload=None),
    op("multi-key", key=ABSENT, keys=["k:m1", "k:m2"], row={"keys": ("k:m1", "k:m2")}),
    op("keys-at-limit", key=ABSENT, keys=["k:1", "k:2", "k:3", "k:4", "k:1", " "],
       row={"keys": ("k:1", "k:2", "k:3", "k:4")}),
    op("payload-utf8-fits", payload="é" * 900, row={"payload": "é" * 900}),
    op("payload-brackets", payload='[[[[[[[["\\"[[[[', row={"payload": '[[[[[[[["\\"[[[['}),
    op("trailing-text", typed=None, row={"ts": 0, "deadline": 5},
       line='{"op_id": "trailing-text", "key": "k:trailing-text", "ts": 0, "timeout_ms": 5} and more'),
    op("bad-utf8", typed=None, row={"keys": ("k:bad-utf8\ufffd",)},
       line=b'{"op_id": "bad-utf8", "key": "k:bad-utf8\xff", "ts": "2026-01-01T00:00:00Z",'
            b' "timeout_ms": 500}'),
    # -- poison records (LIMITS) ----------------------------------------------------------------------
    op("too-large", c.RECORD_TOO_LARGE, payload="x" * 2100, typed=None),
    op("too-large-utf8", c.RECORD_TOO_LARGE, payload="é" * 1100, typed=None),  # 1,100 characters, 2,200 B
    op("too-deep", c.TOO_DEEP, condition="count", target=[[[[[[1]]]]]], typed=None),  # an object, six arrays
    op("as-deep-as-allowed", c.BAD_TARGET, condition="count", target=[[[[[1]]]]], typed=None),
    raw("unterminated", c.SOURCE_OPERATIONS, c.TOO_DEEP, '{"op_id": "unterminated", "payload": "[[[[[[[['),
    raw("deep-broken", c.SOURCE_OPERATIONS, c.TOO_DEEP, '{"op_id": "deep-broken", ' + "[" * 40),
    # -- malformed ------------------------------------------------------------------------------------
    raw("array", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, "[1, 2]"),
    raw("number", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, "42"),
    raw("null", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, "null"),
    raw("empty-line", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, ""),
    raw("array-of-object", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '[{"op_id": "a", "key": "k", "ts": 0}]'),
    raw("single-quotes", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, "{'op_id': 'single-quotes'}"),
    raw("leading-zero", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '{"op_id": "leading-zero", "timeout_ms": 05}'),
    raw("plus-number", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '{"op_id": "plus-number", "timeout_ms": +5}'),
    raw("comment", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '{"op_id": /* no */ "comment"}'),
    raw("raw-tab", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '{"op_id": "raw\ttab", "key": "k"}'),
    raw("bad-escape", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '{"op_id": "bad\\qescape", "key": "k"}'),
    raw("vertical-tab-first", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '\x0b{"op_id": "vt"}'),
    raw("byte-order-mark", c.SOURCE_OPERATIONS, c.MALFORMED_JSON, '\ufeff{"op_id": "bom"}'),
    op("spaces-first", typed=None, row={"ts": 5, "deadline": 10},
       line='  \t{"op_id": "spaces-first", "key": "k:spaces-first", "ts": 5, "timeout_ms": 5}'),
    op("field-twice", typed=None, row={"ts": 5, "deadline": 10},  # the last one
       line='{"op_id": "x", "op_id": "field-twice", "key": "k:field-twice", "ts": 5, "timeout_ms": 5}'),
    op("field-case", typed=None, row={"ts": 5, "deadline": 10},  # a field's name is its case too
       line='{"OP_ID": "x", "op_id": "field-case", "Key": "x", "key": "k:field-case", "ts": 5,'
            ' "timeout_ms": 5}'),
    op("lone-surrogate", typed=None, row={"ts": 5, "deadline": 10, "payload": "?"},
       line='{"op_id": "lone-surrogate", "key": "k:lone-surrogate", "ts": 5, "timeout_ms": 5,'
            ' "payload": "\\ud800"}'),
    op("target-overflow", c.BAD_TARGET, typed=None,
       line='{"op_id": "target-overflow", "key": "k:target-overflow", "ts": 5, "timeout_ms": 5,'
            ' "condition": "sum", "target": 1e400}'),
    # -- unknown fields: ignored, unless a small edit away from a known one (contract.resembles) --------
    op("unknown-field", extra="x", typed=None),
    op("unknown-short-field", kye="x", typed=None),  # four characters: too short to be a misspelling
    op("unknown-far-field", conditions_met="all", typed=None),
    op("misspelled-condition", c.MISSPELLED_FIELD, condtion="all", typed=None),
    op("misspelled-timeout", c.MISSPELLED_FIELD, timout_ms=5, typed={"timout_ms": 5}, records_only=True),
    # -- each field's reasons -------------------------------------------------------------------------
    op("no-op-id", c.MISSING_OP_ID, op_id=ABSENT),
    op("op-id-blank", c.MISSING_OP_ID, op_id="  "),
    op("op-id-null", c.MISSING_OP_ID, op_id=None),
    op("op-id-object", c.BAD_OP_ID, op_id={}, typed={"op_id": {"a": 1}}, records_only=True),
    op("op-id-array", c.BAD_OP_ID, op_id=[1], typed=None),
    op("no-key", c.MISSING_KEY, key=ABSENT),
    op("key-blank", c.MISSING_KEY, key=" "),
    op("keys-blank", c.MISSING_KEY, key=ABSENT, keys=[" ", None]),
    op("keys-empty", c.MISSING_KEY, key=ABSENT, keys=[]),
    op("keys-broken-text", c.MISSING_KEY, key=ABSENT, keys="[broken", typed=None),
    op("too-many-keys", c.TOO_MANY_KEYS, key=ABSENT, keys=["k:1", "k:2", "k:3", "k:4", "k:5"]),
    op("no-ts", c.MISSING_TS, ts=ABSENT, typed={"ts": None}),
    op("ts-empty", c.MISSING_TS, ts="", typed=None),
    op("ts-blank", c.MISSING_TS, ts="  ", typed=None),
    op("ts-month-13", c.BAD_TS, ts="2026-13-01", typed=None),
    op("ts-now", c.BAD_TS, ts="now", typed=None),
    op("ts-today", c.BAD_TS, ts=" today ", typed=None),
    op("ts-time-only", c.BAD_TS, ts="10:00:00", typed=None),  # Spark: today at 10:00
    op("ts-t-time-only", c.BAD_TS, ts="T10:00", typed=None),
    op("ts-zone-name", c.BAD_TS, ts="2026-01-01T10:00:00 Europe/Paris", typed=None),
    op("ts-zone-utc", c.BAD_TS, ts="2026-01-01T10:00:00 UTC", typed=None),
    op("ts-zone-gmt", c.BAD_TS, ts="2026-01-01T10:00:00GMT+1", typed=None),
    op("ts-offset-no-seconds", c.BAD_TS, ts="2026-01-01T10:00Z", typed=None),
    op("ts-offset-seconds", c.BAD_TS, ts="2026-01-01T10:00:00+05:30:15", typed=None),
    op("ts-offset-19", c.BAD_TS, ts="2026-01-01T10:00:00+19:00", typed=None),
    op("ts-single-digit-hour", c.BAD_TS, ts="2026-01-01T1", typed=None),
    op("ts-nbsp", c.BAD_TS, ts="\u00a02026-01-01T00:00:00Z", typed=None),
    op("ts-digits-nbsp", c.BAD_TS, ts="\u00a05", typed=None),
    op("ts-digits-plus", c.BAD_TS, ts="+5", typed=None),
    op("ts-negative", c.BAD_TS, ts=-5, typed={"ts": -5}),
    op("ts-array", c.BAD_TS, ts=[1], typed=None),
    op("ts-nan", c.BAD_TS, ts=float("nan"), typed=None),
    op("ts-fraction-ms", c.BAD_TS, ts=5.5, typed=None),
    op("ts-year-9999", c.BAD_TS, ts="9999-12-31T23:59:59Z", typed={"ts": _year(9999)}),
    op("ts-year-9999-ms", c.BAD_TS, ts=253402300799000, typed={"ts": 253402300799000}),
    op("ts-before-1970", c.BAD_TS, ts="1969-12-31T23:59:59Z", typed={"ts": _year(1969)}),
    op("ts-year-2300", c.BAD_TS, ts="2300-01-01T00:00:00Z", typed={"ts": _year(2300)}),
    op("ts-future", c.TS_IN_FUTURE, ts=FUTURE, typed={"ts": FUTURE_DT},
       row={"ts": 4_102_444_800_000, "deadline": 4_102_444_800_500}),
    op("no-timeout", c.MISSING_TIMEOUT_MS, timeout_ms=ABSENT, typed={"timeout_ms": None}),
    op("timeout-empty", c.MISSING_TIMEOUT_MS, timeout_ms="", typed=None),
    op("timeout-fraction-text", c.BAD_TIMEOUT_MS, timeout_ms="5.0", typed=None),
    op("timeout-fraction", c.BAD_TIMEOUT_MS, timeout_ms=5.0, typed=None),  # a JSON number's text
    op("timeout-double", c.BAD_TIMEOUT_MS, typed={"timeout_ms": 5.5}, line=None),
    op("timeout-true", c.BAD_TIMEOUT_MS, timeout_ms=True, typed=None),
    op("timeout-huge", c.BAD_TIMEOUT_MS, timeout_ms=12345678901234567890, typed=None),
    op("timeout-nbsp", c.BAD_TIMEOUT_MS, timeout_ms="\u00a05", typed=None),
    op("timeout-infinity", c.BAD_TIMEOUT_MS, timeout_ms=float("inf"), typed=None),
    op("timeout-negative", c.NEGATIVE_TIMEOUT, timeout_ms=-1),
    op("timeout-above-max", c.TIMEOUT_ABOVE_MAX, timeout_ms=MAX_TIMEOUT_MS + 1),
    op("timeout-10-18", c.TIMEOUT_ABOVE_MAX, timeout_ms=10**18),
    op("condition-most", c.UNKNOWN_CONDITION, condition="most"),
    op("condition-empty", c.UNKNOWN_CONDITION, condition=""),
    op("condition-tab", c.UNKNOWN_CONDITION, condition=" count\t", target=1),
    op("condition-dotted-i", c.UNKNOWN_CONDITION, condition="\u0130ll", members=["m"]),
    op("count-no-target", c.MISSING_TARGET, condition="count"),
    op("sum-blank-target", c.MISSING_TARGET, condition="sum", target="", typed=None),
    op("sum-target-word", c.BAD_TARGET, condition="sum", target="soon", typed=None),
    op("sum-target-true", c.BAD_TARGET, condition="sum", target=True, typed=None),
    op("count-target-nan", c.BAD_TARGET, condition="count", target=float("nan"), in_frames=c.MISSING_TARGET),
    op("count-target-inf", c.BAD_TARGET, condition="count", target=float("-inf")),
    op("sum-target-infinity-word", c.BAD_TARGET, condition="sum", target=" -INF ", typed=None),
    op("sum-target-nbsp", c.BAD_TARGET, condition="sum", target="\u00a05", typed=None),
    op("sum-target-arabic-digit", c.BAD_TARGET, condition="sum", target="\u0663", typed=None),
    op("sum-target-underscore", c.BAD_TARGET, condition="sum", target="1_0", typed=None),
    op("sum-target-array", c.BAD_TARGET, condition="sum", target=[2], typed=None),
    op("all-no-members", c.MISSING_MEMBERS, condition="all"),
    op("all-blank-members", c.MISSING_MEMBERS, condition="all", members=[" ", None]),
    op("all-members-object", c.MISSING_MEMBERS, condition="all", members={"m": 1}, typed=None),
    op("too-many-members", c.TOO_MANY_MEMBERS, condition="all", members=["1", "2", "3", "4", "5"]),
    op("too-many-members-any", c.TOO_MANY_MEMBERS, members=["1", "2", "3", "4", "5"]),
    op("quorum-above-one", c.TARGET_ABOVE_MEMBERS, condition="quorum", target=2, members="m1", typed=None),
    op("quorum-above-members", c.TARGET_ABOVE_MEMBERS, condition="quorum", target=3, members=["m", "n", "n"]),
    op("any-target", c.UNUSED_TARGET, target=1),
    op("any-target-nan", c.UNUSED_TARGET, target=float("nan"), in_frames=None),
    op("any-target-word", c.UNUSED_TARGET, target="soon", typed=None),
    op("any-target-true", c.UNUSED_TARGET, target=True, typed=None),
    op("any-target-array", c.UNUSED_TARGET, target=[2], typed=None),
    op("any-target-empty", target="", typed=None),  # empty text is no target
    op("all-target", c.UNUSED_TARGET, condition="all", members=["m1"], target=0),
    op("count-members", c.UNUSED_MEMBERS, condition="count", target=1, members=["m1"]),
    op("any-members", c.UNUSED_MEMBERS, members="m1", typed=None),
    op("any-members-json-text", c.UNUSED_MEMBERS, members='["m1"]', typed=None),
    op("any-members-object", members={"m": 1}, typed=None),  # an object is no list: no members
    op("sum-members-number", c.UNUSED_MEMBERS, condition="sum", target=1, members=[1], typed=None),
    op("warn", warn_ms=100),
    op("warn-whole-timeout", warn_ms=TIMEOUT_MS),
    op("warn-null", warn_ms=None),
    op("warn-text", warn_ms="100", typed=None),
    op("warn-zero", c.BAD_WARN_MS, warn_ms=0),
    op("warn-negative", c.BAD_WARN_MS, warn_ms=-5),
    op("warn-above-timeout", c.BAD_WARN_MS, warn_ms=TIMEOUT_MS + 1),
    op("warn-fraction", c.BAD_WARN_MS, warn_ms="1.5", typed=None),
    op("warn-word", c.BAD_WARN_MS, warn_ms="soon", typed=None),
    op("warn-and-payload", c.BAD_WARN_MS, warn_ms=0, payload=[1], typed=None),  # the warning first
    op("payload-array", c.BAD_PAYLOAD, payload=[1], typed=None),
    op("payload-number", c.BAD_PAYLOAD, payload=42, typed={"payload": 42}, records_only=True),
    op("payload-fraction", c.BAD_PAYLOAD, payload=-1.5, typed=None),
    op("payload-true", c.BAD_PAYLOAD, payload=True, typed=None),
    # -- decided after reading ------------------------------------------------------------------------
    op("across-shards", c.CROSS_SHARD_KEYS, key=ABSENT, keys=ACROSS_SHARDS, row={"keys": (*ACROSS_SHARDS,)}),
    op("plain-again", c.DUPLICATE_OP_ID, op_id="plain", ts="2026-01-01T00:00:01Z",  # a second later
       typed={"op_id": "plain", "ts": TS_DT + dt.timedelta(seconds=1)},
       row={"op_id": "plain", "ts": TS_MS + 1000, "deadline": TS_MS + 1500}),
    op("late", c.LATE, late=True),
]

EVENTS: list[Case] = [
    ev("plain"),
    ev("targeted", op_id="o-1", source="s-1", value=2.5, row={"op_id": "o-1", "source": "s-1", "value": 2.5}),
    ev("ids-numbers", source="s", op_id=7, typed=None, row={"op_id": "7", "source": "s"}),
    ev("ids-blank", source="", op_id=" "),
    ev("ids-tab", source="\t", op_id="\t", row={"op_id": "\t", "source": "\t"}),
    ev("value-text", value="12", typed=None, row={"value": 12.0}),
    ev("value-suffix", value=" 12f", typed=None, row={"value": 12.0}),
    ev("value-null", value=None),
    ev("value-int", line=None, typed={"value": 3}, row={"value": 3.0}),
    ev("key-number", key=8, op_id="key-number", typed=None, row={"key": "8", "op_id": "key-number"}),
    ev("key-array", key=["k"], op_id="key-array", typed=None, row={"key": '["k"]', "op_id": "key-array"}),
    ev("ts-digits", ts=1767225600000, typed={"ts": TS_MS}),
    ev("ts-ntz", typed={"ts": dt.datetime(2026, 1, 1)}),
    ev("ts-offset", ts="2026-01-01T01:00:00+01"),
    raw("not-json", c.SOURCE_EVENTS, c.MALFORMED_JSON, " not json"),
    ev("too-large", c.RECORD_TOO_LARGE, source="x" * 2100, typed=None),
    ev("too-deep", c.TOO_DEEP, value=[[[[[[1]]]]]], typed=None),
    ev("misspelled-value", c.MISSPELLED_FIELD, valeu=1, typed=None),
    ev("misspelled-source", c.MISSPELLED_FIELD, sourse="s", typed={"sourse": "s"}, records_only=True),
    ev("no-key", c.MISSING_KEY, key=ABSENT, op_id="no-key"),
    ev("key-blank", c.MISSING_KEY, key="  ", op_id="key-blank"),
    ev("no-ts", c.MISSING_TS, ts=ABSENT, typed={"ts": None}),
    ev("ts-month-13", c.BAD_TS, ts="2026-13-01", typed=None),
    ev("ts-now", c.BAD_TS, ts="now", typed=None),
    ev("ts-nan", c.BAD_TS, ts=float("nan"), typed=None),
    ev("ts-time-only", c.BAD_TS, ts="T10:00:00", typed=None),
    ev("ts-before-1970", c.BAD_TS, typed={"ts": _year(1969)}, line=None),
    ev("ts-future", c.TS_IN_FUTURE, ts=FUTURE, typed={"ts": FUTURE_DT}, row={"ts": 4_102_444_800_000}),
    ev("value-empty", c.BAD_VALUE, value="", typed=None),
    ev("value-true", c.BAD_VALUE, value=True, typed=None),
    ev("value-word", c.BAD_VALUE, value="-Infinity"),
    ev("value-nan", c.BAD_VALUE, value=float("nan"), in_frames=None),
    ev("value-inf", c.BAD_VALUE, value=float("inf")),
    ev("value-nbsp", c.BAD_VALUE, value="\u00a012", typed=None),
    ev("op-id-array", c.BAD_OP_ID, op_id=[1], typed=None),
    ev("op-id-object", c.BAD_OP_ID, op_id={"a": 1}, typed={"op_id": {"a": 1}}, records_only=True),
    ev("source-number", c.BAD_SOURCE, source=17, typed={"source": 17}, records_only=True),
    ev("source-digits", source="17", row={"source": "17"}),
    ev("source-false", c.BAD_SOURCE, source=False, typed=None),
    ev("source-object", c.BAD_SOURCE, source={"a": 1}, typed=None),
    ev("cancel", op_id="o-2", cancel=True, row={"op_id": "o-2", "cancel": True}),
    ev("cancel-false", cancel=False),
    ev("cancel-null", cancel=None),
    ev("cancel-text", c.BAD_CANCEL, cancel="true", typed=None),
    ev("cancel-number", c.BAD_CANCEL, cancel=1, typed={"cancel": 1}, records_only=True),
    ev("cancel-array", c.BAD_CANCEL, cancel=[True], typed=None),
    ev("misspelled-cancel", c.MISSPELLED_FIELD, cancle=True, typed=None),
    ev("late", c.LATE, late=True),
]
# fmt: on


# -- pairs: every two reasons one record can have, the first in the contract's order -------------------
#
# Each reason's change to a valid record (``op``'s, ``ev``'s): its fields (``ABSENT`` leaves
# one out, and a condition is named where a check depends on it, so that two changes that set
# it differently do not make one record), the typed record's values where the JSON text's do
# not fit a typed column as they are (``_JSON``: the change has no typed record), the row a
# path that does not run its stage reads, and whether it is sent behind the watermark.  Two
# changes make one record when the fields they share have the same values.

_JSON: Any = object()
_HALF = "2026-01-01T00:00:00.5Z"  # after ``plain``'s time, before ``LATE_WATERMARK_MS``
_HALF_ROW = {"ts": TS_MS + 500, "deadline": TS_MS + 1000}


def _change(fields: dict, typed: Any = None, row: dict | None = None, late: bool = False) -> dict:
    return {"fields": fields, "typed": typed or {}, "row": row or {}, "late": late}


_OPERATION_CHANGES: dict[str, Any] = {
    c.RECORD_TOO_LARGE: lambda n: _change({"payload": "x" * 2100}, _JSON),
    c.TOO_DEEP: lambda n: _change({"payload": [[[[[[1]]]]]]}, _JSON),
    c.MISSPELLED_FIELD: lambda n: _change({"condtion": "all"}, _JSON),
    c.MISSING_OP_ID: lambda n: _change({"op_id": ABSENT}),
    c.BAD_OP_ID: lambda n: _change({"op_id": [1]}, _JSON),
    c.MISSING_KEY: lambda n: _change({"key": " ", "keys": ABSENT}),
    c.TOO_MANY_KEYS: lambda n: _change({"key": ABSENT, "keys": [f"k:{n}-{i}" for i in range(5)]}),
    c.MISSING_TS: lambda n: _change({"ts": ABSENT}),
    c.BAD_TS: lambda n: _change({"ts": "now"}, _JSON),
    c.TS_IN_FUTURE: lambda n: _change(
        {"ts": FUTURE}, {"ts": FUTURE_DT}, {"ts": 4_102_444_800_000, "deadline": 4_102_444_800_500}
    ),
    c.MISSING_TIMEOUT_MS: lambda n: _change({"timeout_ms": ABSENT}),
    c.BAD_TIMEOUT_MS: lambda n: _change({"timeout_ms": "5.0"}, _JSON),
    c.NEGATIVE_TIMEOUT: lambda n: _change({"timeout_ms": -1}),
    c.TIMEOUT_ABOVE_MAX: lambda n: _change({"timeout_ms": MAX_TIMEOUT_MS + 1}),
    c.UNKNOWN_CONDITION: lambda n: _change({"condition": "most"}),
    c.MISSING_TARGET: lambda n: _change({"condition": "count", "target": ABSENT}),
    c.BAD_TARGET: lambda n: _change({"condition": "count", "target": float("-inf")}),
    c.MISSING_MEMBERS: lambda n: _change({"condition": "all", "members": ABSENT}),
    c.TOO_MANY_MEMBERS: lambda n: _change({"members": ["1", "2", "3", "4", "5"]}),
    c.TARGET_ABOVE_MEMBERS: lambda n: _change({"condition": "quorum", "target": 3, "members": ["m", "n"]}),
    c.UNUSED_TARGET: lambda n: _change({"condition": "any", "target": 1}),
    c.UNUSED_MEMBERS: lambda n: _change({"condition": "any", "members": ["m1"]}),
    c.BAD_WARN_MS: lambda n: _change({"warn_ms": 0}),
    c.BAD_PAYLOAD: lambda n: _change({"payload": [1]}, _JSON),
    c.CROSS_SHARD_KEYS: lambda n: _change(
        {"key": ABSENT, "keys": [f"a:{n}", f"b:{n}"]}, row={"keys": (f"a:{n}", f"b:{n}")}
    ),
    c.LATE: lambda n: _change(
        {"ts": _HALF}, {"ts": TS_DT + dt.timedelta(milliseconds=500)}, _HALF_ROW, late=True
    ),
    c.DUPLICATE_OP_ID: lambda n: _change(
        {"op_id": "plain", "ts": _HALF},
        {"ts": TS_DT + dt.timedelta(milliseconds=500)},
        {"op_id": "plain", **_HALF_ROW},
    ),
}
_EVENT_CHANGES: dict[str, Any] = {
    c.RECORD_TOO_LARGE: lambda n: _change({"source": "x" * 2100}, _JSON),
    c.TOO_DEEP: lambda n: _change({"value": [[[[[[1]]]]]]}, _JSON),
    c.MISSPELLED_FIELD: lambda n: _change({"sourse": "s"}, _JSON),
    c.MISSING_KEY: lambda n: _change({"key": "  ", "op_id": n}),
    c.MISSING_TS: lambda n: _change({"ts": ABSENT}),
    c.BAD_TS: lambda n: _change({"ts": "now"}, _JSON),
    c.TS_IN_FUTURE: lambda n: _change({"ts": FUTURE}, {"ts": FUTURE_DT}, {"ts": 4_102_444_800_000}),
    c.BAD_VALUE: lambda n: _change({"value": float("inf")}),
    c.BAD_OP_ID: lambda n: _change({"op_id": [1]}, _JSON),
    c.BAD_SOURCE: lambda n: _change({"source": False}, _JSON),
    c.BAD_CANCEL: lambda n: _change({"cancel": "yes"}, _JSON),
    c.LATE: lambda n: _change({"ts": TS}, late=True),
}


def _pair(first: str, second: str, source: str) -> Case | None:
    """The record both changes make, or None when they set a field differently."""
    operations = source == c.SOURCE_OPERATIONS
    name = f"pair-{first}-{second}"
    changes = _OPERATION_CHANGES if operations else _EVENT_CHANGES
    a, b = changes[first](name), changes[second](name)
    shared = set(a["fields"]) & set(b["fields"])
    if any(a["fields"][f] != b["fields"][f] for f in shared):
        return None
    fields = {**a["fields"], **b["fields"]}
    if a["typed"] is _JSON or b["typed"] is _JSON:
        typed = None
    else:
        overrides = {**a["typed"], **b["typed"], **{f: None for f, v in fields.items() if v is ABSENT}}
        typed = _typed(_without_absent({k: v for k, v in fields.items() if k not in overrides}), source)
        typed = None if typed is None else {**typed, **overrides}
    options = {"typed": typed, "row": {**a["row"], **b["row"]}, "late": a["late"] or b["late"]}
    case = (op if operations else ev)(name, first, **fields, **options)
    if typed is not None and not set(case.identities) - {"plain"}:
        case = dataclasses.replace(case, record=None)  # a typed row of no name of its own cannot be found
    return dataclasses.replace(case, reasons=(first, second))


def _pairs(source: str, order: tuple[str, ...]) -> list[Case]:
    changes = _OPERATION_CHANGES if source == c.SOURCE_OPERATIONS else _EVENT_CHANGES
    drawn = [r for r in order if r in changes]
    pairs = (_pair(a, b, source) for i, a in enumerate(drawn) for b in drawn[i + 1 :])
    return [p for p in pairs if p is not None]


#: every two reasons one record can have, each pair one record (``_pair``)
PAIRS: list[Case] = _pairs(c.SOURCE_OPERATIONS, c.OPERATION_REASONS) + _pairs(
    c.SOURCE_EVENTS, c.EVENT_REASONS
)

CASES: list[Case] = OPERATIONS + EVENTS + PAIRS
