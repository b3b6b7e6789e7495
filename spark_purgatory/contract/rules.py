"""The input checks as data: each check's reason, field, test, bound and conditions, in the
order every reader applies them (the first check that applies gives the reason).

A check is a row of ``OPERATION_CHECKS`` / ``EVENT_CHECKS`` (``Check``); its *test* is one
word of a small vocabulary that every reader implements once:

==============  ============================================================================
``poison``      the record's text is poison (its reason: too large, too deep): JSON text only
``malformed``   the record's text is no JSON object: JSON text only
``misspelled``  the record has a field the contract does not know that ``resembles`` one it
                does: JSON text and records (a typed input's columns are checked at start)
``absent``      the field has no value (null; blank text; a list without a non-blank item)
``wrong_type``  the field holds a JSON type it cannot have (JSON, records): typed columns never
``unreadable``  the field is given and its text reads as no value of its type
``not_finite``  the field is given and is no finite number
``below``       the field's value is less than the bound
``above``       the field's value is more than the bound (a list field as bound: its length)
``more``        the list field has more items than the bound
``future``      the event time is later than the latest a micro-batch accepts: readers with a
                processing clock only
``unknown``     the field's value is none of the bound's names
``given``       the field has a value
``after``       decided after reading (routing, the registry, the watermark): no reader's
==============  ============================================================================

A bound is a number, a configuration key (``LIMITS``) or another field; ``when`` names the
conditions a check applies to (None: every one).

Invariant: the order of the checks is the order the contract page states, and the only one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from .inputs import CONDITIONS, MIN_TIMEOUT_MS, TARGET_COUNTS_MEMBERS, TARGETED, WITH_MEMBERS
from .reasons import (
    BAD_CANCEL,
    BAD_OP_ID,
    BAD_PAYLOAD,
    BAD_SOURCE,
    BAD_TARGET,
    BAD_TIMEOUT_MS,
    BAD_TS,
    BAD_VALUE,
    BAD_WARN_MS,
    CROSS_SHARD_KEYS,
    DUPLICATE_OP_ID,
    LATE,
    MALFORMED_JSON,
    MISSING_KEY,
    MISSING_MEMBERS,
    MISSING_OP_ID,
    MISSING_TARGET,
    MISSING_TIMEOUT_MS,
    MISSING_TS,
    MISSPELLED_FIELD,
    NEGATIVE_TIMEOUT,
    RAW_KEPT_CHARS,
    RAW_TRUNCATED,
    RECORD_TOO_LARGE,
    TARGET_ABOVE_MEMBERS,
    TIMEOUT_ABOVE_MAX,
    TOO_DEEP,
    TOO_MANY_KEYS,
    TOO_MANY_MEMBERS,
    TS_IN_FUTURE,
    UNKNOWN_CONDITION,
    UNUSED_MEMBERS,
    UNUSED_TARGET,
)

__all__ = [
    "POISON",
    "MALFORMED",
    "MISSPELLED",
    "ABSENT",
    "WRONG_TYPE",
    "UNREADABLE",
    "NOT_FINITE",
    "BELOW",
    "ABOVE",
    "MORE",
    "FUTURE",
    "UNKNOWN",
    "GIVEN",
    "AFTER",
    "TESTS",
    "LIMITS",
    "Check",
    "OPERATION_CHECKS",
    "EVENT_CHECKS",
    "OPERATION_REASONS",
    "EVENT_REASONS",
    "Reader",
    "first_reason",
    "table_text",
    "POISON_COLUMN",
    "MALFORMED_COLUMN",
    "truncated",
    "MIN_MISSPELLED",
    "MAX_EDITS",
    "resembles",
]

# -- the tests (module docstring) ----------------------------------------------------------------------

#: every test a check may name
_WORDS = "poison malformed misspelled absent wrong_type unreadable not_finite below above more future unknown"
TESTS: tuple[str, ...] = (*_WORDS.split(), "given", "after")
POISON, MALFORMED, MISSPELLED, ABSENT, WRONG_TYPE, UNREADABLE, NOT_FINITE, BELOW = TESTS[:8]
ABOVE, MORE, FUTURE, UNKNOWN, GIVEN, AFTER = TESTS[8:]

#: the bounds that are settings: each configuration key a check may name (``config``)
LIMITS: tuple[str, ...] = (
    "input.max.record.bytes",
    "input.max.depth",
    "input.max.keys",
    "input.max.members",
    "purgatory.max.timeout.ms",
    "purgatory.max.future.ms",
)


class Check(NamedTuple):
    """One check: ``test`` of ``field`` (``""``: the record) against ``bound`` fails with
    ``reason``, for an operation whose condition is among ``when`` (None: any)."""

    reason: str
    field: str
    test: str
    bound: int | str | tuple[str, ...] | None = None
    when: tuple[str, ...] | None = None


def _others(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(name for name in CONDITIONS if name not in names)


_READ_CHECKS = (
    Check(RECORD_TOO_LARGE, "", POISON, "input.max.record.bytes"),
    Check(TOO_DEEP, "", POISON, "input.max.depth"),
    Check(MALFORMED_JSON, "", MALFORMED),
    Check(MISSPELLED_FIELD, "", MISSPELLED),
)
_TIME_CHECKS = (
    Check(MISSING_TS, "ts", ABSENT),
    Check(BAD_TS, "ts", UNREADABLE),
    Check(TS_IN_FUTURE, "ts", FUTURE, "purgatory.max.future.ms"),
)

#: an operation's checks, in the order they apply
OPERATION_CHECKS: tuple[Check, ...] = (
    *_READ_CHECKS,
    Check(MISSING_OP_ID, "op_id", ABSENT),
    Check(BAD_OP_ID, "op_id", WRONG_TYPE),
    Check(MISSING_KEY, "keys", ABSENT),
    Check(TOO_MANY_KEYS, "keys", MORE, "input.max.keys"),
    *_TIME_CHECKS,
    Check(MISSING_TIMEOUT_MS, "timeout_ms", ABSENT),
    Check(BAD_TIMEOUT_MS, "timeout_ms", UNREADABLE),
    Check(NEGATIVE_TIMEOUT, "timeout_ms", BELOW, MIN_TIMEOUT_MS),
    Check(TIMEOUT_ABOVE_MAX, "timeout_ms", ABOVE, "purgatory.max.timeout.ms"),
    Check(UNKNOWN_CONDITION, "condition", UNKNOWN, CONDITIONS),
    Check(MISSING_TARGET, "target", ABSENT, when=TARGETED),
    Check(BAD_TARGET, "target", NOT_FINITE, when=TARGETED),
    Check(MISSING_MEMBERS, "members", ABSENT, when=WITH_MEMBERS),
    Check(TOO_MANY_MEMBERS, "members", MORE, "input.max.members"),
    Check(TARGET_ABOVE_MEMBERS, "target", ABOVE, "members", when=TARGET_COUNTS_MEMBERS),
    Check(UNUSED_TARGET, "target", GIVEN, when=_others(TARGETED)),
    Check(UNUSED_MEMBERS, "members", GIVEN, when=_others(WITH_MEMBERS)),
    # the warning's lead: within the timeout (a field as bound: its value)
    Check(BAD_WARN_MS, "warn_ms", UNREADABLE),
    Check(BAD_WARN_MS, "warn_ms", BELOW, 1),
    Check(BAD_WARN_MS, "warn_ms", ABOVE, "timeout_ms"),
    Check(BAD_PAYLOAD, "payload", WRONG_TYPE),
    Check(CROSS_SHARD_KEYS, "keys", AFTER),
    # the watermark before the registry: a shard judges lateness on arrival, by its own
    # watermark alone; only an operation it admits is looked up by op_id, across shards too
    # (``engine.registry``), so a late repeat is ``late`` on every path, however many shards
    Check(LATE, "ts", AFTER),
    Check(DUPLICATE_OP_ID, "op_id", AFTER),
)
#: a completion event's checks, in the order they apply
EVENT_CHECKS: tuple[Check, ...] = (
    *_READ_CHECKS,
    Check(MISSING_KEY, "key", ABSENT),
    *_TIME_CHECKS,
    Check(BAD_VALUE, "value", NOT_FINITE),
    Check(BAD_OP_ID, "op_id", WRONG_TYPE),
    Check(BAD_SOURCE, "source", WRONG_TYPE),
    Check(BAD_CANCEL, "cancel", WRONG_TYPE),
    Check(LATE, "ts", AFTER),
)


def _reasons(checks: tuple[Check, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(check.reason for check in checks))


#: reasons an operation can get, in the order the checks give them (the first one wins)
OPERATION_REASONS = _reasons(OPERATION_CHECKS)
#: reasons an event can get, in the order the checks give them
EVENT_REASONS = _reasons(EVENT_CHECKS)


class Reader(Protocol):
    """What a reader implements to interpret the checks: a method per test (``TESTS``, but
    ``after``), each ``(field, bound)`` -> the reader's predicate, or None where it cannot
    give it; ``among`` (the condition is one of the names), ``both`` (a conjunction) and
    ``first`` (the first reason whose predicate holds; none when none does)."""

    def among(self, names: tuple[str, ...]) -> Any: ...

    def both(self, a: Any, b: Any) -> Any: ...

    def first(self, pairs: list[tuple[str, Any]]) -> Any: ...


def first_reason(checks: tuple[Check, ...], reader: Reader, limits: Mapping[str, int | None]) -> Any:
    """The first failing check's reason, as ``reader`` computes it: each check's test through
    the reader's method of that name, its bound resolved (``limits``: each key's value; a key
    whose value is None turns its check off), gated by its conditions."""
    pairs = []
    for check in checks:
        if check.test == AFTER:
            continue
        bound = check.bound
        if isinstance(bound, str) and bound in LIMITS:
            bound = limits.get(bound)
            if bound is None:
                continue
        test: Callable[[str, Any], Any] = getattr(reader, check.test)
        predicate = test(check.field, bound if check.test != POISON else check.reason)
        if predicate is None:
            continue
        if check.when is not None:
            predicate = reader.both(reader.among(check.when), predicate)
        pairs.append((check.reason, predicate))
    return reader.first(pairs)


def table_text(checks: tuple[Check, ...], limits: Mapping[str, int | None]) -> str:
    """The checks as the JVM checks read them: one check a line, ``reason test field bound
    when`` separated by tabs (a bound's limit resolved, names separated by spaces, ``-`` for
    none: the latest event time accepted comes with each row); the checks no typed row can
    fail (its text's, its types') and those decided after reading are left out."""
    lines = []
    for check in checks:
        if check.test in (POISON, MALFORMED, MISSPELLED, WRONG_TYPE, AFTER):
            continue
        bound = (
            limits.get(check.bound) if isinstance(check.bound, str) and check.bound in LIMITS else check.bound
        )
        text = " ".join(bound) if isinstance(bound, tuple) else "-" if bound is None else str(bound)
        when = " ".join(check.when) if check.when is not None else "-"
        lines.append("\t".join((check.reason, check.test, check.field, text, when)))
    return "\n".join(lines)


# -- the record's own checks, as a reader of text marks them --------------------------------------------

#: the column that names a poison record's reason (``record_too_large``, ``too_deep``), else null
POISON_COLUMN = "_poison"
#: the column that marks a record that is no JSON object (``malformed_json``)
MALFORMED_COLUMN = "_malformed"


def truncated(raw: str) -> str:
    """A ``record_too_large`` record's ``raw``: its first ``RAW_KEPT_CHARS`` characters, then
    ``RAW_TRUNCATED`` with its size in UTF-8 bytes (the SQL readers cut it alike)."""
    return raw[:RAW_KEPT_CHARS] + RAW_TRUNCATED.format(bytes=len(raw.encode("utf-8")))


# -- unknown fields -------------------------------------------------------------------------------------
#
# A field the contract does not know is ignored (a producer may send more than this operator
# reads), unless it is a small edit away from one it knows: a misspelled ``condtion: "all"``
# would otherwise quietly be an ``any``.  A small edit: a name of ``MIN_MISSPELLED`` characters
# or more, at most ``MAX_EDITS`` single-character insertions, deletions or substitutions from
# a field of the same input (Levenshtein's distance, case counted: Spark's ``levenshtein``).

MIN_MISSPELLED, MAX_EDITS = 5, 2


def resembles(name: str, known: tuple[str, ...]) -> str | None:
    """The field of ``known`` that ``name`` is a small edit away from (above), else None.

    >>> resembles("condtion", ("condition", "target")), resembles("OP_ID", ("op_id",))
    ('condition', None)
    """
    if len(name) < MIN_MISSPELLED or name in known:
        return None
    for field in known:
        if abs(len(field) - len(name)) <= MAX_EDITS and _distance(name, field) <= MAX_EDITS:
            return field
    return None


def _distance(a: str, b: str) -> int:
    """Levenshtein's distance between ``a`` and ``b``."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[-1]
