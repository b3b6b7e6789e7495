"""The contract's checks as Spark SQL text (``SqlChecks``, whose ``first`` is one ``CASE``)
and a JSON line's misspelled-field test.

Invariant: each test means what the pandas reader's test of the same name means
(``engine.validation``): a row gets the same reason on either path.
"""

from __future__ import annotations

from ..contract import EVENT_REQUIRED, MAX_EDITS, MIN_MISSPELLED, OPERATION_REQUIRED, POISON_COLUMN, ms_column
from .sql_text import LATEST, sql_blank, sql_in, sql_not_finite, sql_string

_REQUIRED = frozenset((*OPERATION_REQUIRED, *EVENT_REQUIRED))


class SqlChecks:
    """The SQL reader of the contract's checks: each test SQL text over the columns a reading
    gives (``_no_<field>``: absent; ``_bad_<field>``: a JSON type the field cannot have)."""

    _ABSENT = {
        "op_id": sql_blank("op_id"),
        "key": sql_blank("key"),
        "keys": "coalesce(size(keys), 0) <= 0",
        "members": "coalesce(size(members), 0) <= 0",
    }
    #: a list field's length; and a field's presence, written as the optimizer leaves it
    _COUNT = {"keys": "size(keys)", "members": "coalesce(size(members), 0)"}
    _GIVEN = {"members": "coalesce(size(members), 0) > 0"}
    #: an event time's column: epoch ms
    _TIMES = {"ts": ms_column("ts")}

    def __init__(self, columns: list[str]):
        self.text = POISON_COLUMN in columns

    def poison(self, field: str, reason: str) -> str | None:
        return f"{POISON_COLUMN} = '{reason}'" if self.text else None

    def malformed(self, field: str, bound: None) -> str:
        return "_malformed"

    def misspelled(self, field: str, bound: None) -> str | None:
        return "_misspelled" if self.text else None

    def absent(self, field: str, bound: None) -> str:
        return self._ABSENT.get(field, f"_no_{field}")

    def wrong_type(self, field: str, bound: None) -> str:
        return f"_bad_{field}"

    def unreadable(self, field: str, bound: None) -> str:
        null = f"`{self._TIMES.get(field, field)}` IS NULL"
        # a required field's absence is a check before this one: an optional one's is no reason
        return null if field in _REQUIRED else f"NOT _no_{field} AND {null}"

    def not_finite(self, field: str, bound: None) -> str:
        return f"{self.given(field, None)} AND {sql_not_finite(field)}"

    def below(self, field: str, bound: int) -> str:
        return f"{field} < {int(bound)}L"

    def above(self, field: str, bound: int | str) -> str:
        if isinstance(bound, str):  # another field: a list's length, a number's value
            return f"{field} > {self._COUNT.get(bound, bound)}"
        return f"{field} > {int(bound)}L"

    def more(self, field: str, bound: int) -> str:
        return f"{self._COUNT[field]} > {int(bound)}"

    def future(self, field: str, bound: int) -> str:
        return f"`{self._TIMES[field]}` > `{LATEST}`"  # the limit is in ``LATEST``: ``with_latest``

    def unknown(self, field: str, names: tuple[str, ...]) -> str:
        return f"NOT {sql_in(field, list(names))}"

    def given(self, field: str, bound: None) -> str:
        return self._GIVEN.get(field, f"NOT _no_{field}")

    def among(self, names: tuple[str, ...]) -> str:
        return sql_in("condition", list(names))

    def both(self, a: str, b: str) -> str:
        return f"{a} AND {b}"

    def first(self, pairs: list[tuple[str, str]]) -> str:
        whens = " ".join(f"WHEN {test} THEN '{reason}'" for reason, test in pairs)
        # a CASE of string literals is a string: a cast of it the optimizer drops in every micro-batch
        return f"CASE {whens} END" if whens else "CAST(NULL AS STRING)"


def misspelled(known: tuple[str, ...]) -> str:
    """SQL: does the line name a field the contract does not know that ``contract.resembles``
    one it knows?  Its names are read (each text of five characters or more before a colon)
    only for a line where such a name that is no known field stands."""
    names = "|".join(known)
    near = f'"(?!(?:{names})"[\\t\\n\\r ]*:)[^"\\\\]{{{MIN_MISSPELLED},}}"[\\t\\n\\r ]*:'
    # the names before a colon, outside strings (an escaped quote is no name's end): a JSON
    # reader of the names would refuse a line with NaN, or fail on a name given twice
    name = f'"([^"\\\\]{{{MIN_MISSPELLED},}})"[\\t\\n\\r ]*:'
    fields = f"regexp_extract_all(raw, {sql_string(name)}, 1)"
    close = f"exists(array({', '.join(map(sql_string, known))}), _n -> levenshtein(_f, _n, {MAX_EDITS}) >= 0)"
    unknown = f"length(_f) >= {MIN_MISSPELLED} AND NOT {sql_in('_f', list(known))}"
    test = f"coalesce(exists({fields}, _f -> {unknown} AND {close}), false)"
    return f"CASE WHEN {POISON_COLUMN} IS NULL AND raw RLIKE {sql_string(near)} THEN {test} ELSE false END"
