"""SQL text the input readers share: literals, blank and finite tests, lists cleaned, the
condition's name, the event time's range and the latest event time a micro-batch accepts.

Each function returns Spark SQL text over the expressions it is given (``selectExpr``: one
Py4J call per projection, not one per ``Column`` function).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contract import (
    CONDITIONS,
    DEFAULT_CONDITION,
    FLAG,
    ID,
    LIST,
    MAX_TS_MS,
    MIN_TS_MS,
    READINGS,
    SOURCE_OPERATIONS,
    STRING,
    TEXT,
    TIME,
    ms_column,
)
from .checks import batch_millis
from .per_client import kept

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class FieldReading:
    """How one reading of the input gives a field as SQL (``field``: the field as read); the
    defaults are a typed reading's, whose fields hold a value of their type or null.
    ``fields`` builds every field the checks read from these, by the contract's readings."""

    malformed = "false"

    def field(self, name: str) -> str:
        raise NotImplementedError

    def text(self, name: str) -> str:
        return self.field(name)

    def wrong(self, name: str, reading: str) -> str:
        """The field holds a JSON type its reading does not take (``_bad_<field>``)."""
        return "false"

    def listed(self, name: str) -> str:
        return self.field(name)

    def absent(self, name: str, reading: str) -> str:
        return f"{self.field(name)} IS NULL"

    def value(self, name: str, reading: str) -> str:
        return self.field(name)

    def flag(self, name: str) -> str:
        """A ``FLAG`` field as a boolean, false where absent."""
        return f"coalesce({self.field(name)}, false)"

    def fields(self, source: str) -> dict[str, str]:
        """Each field of ``source`` (``contract.READINGS``) as the checks read it, with its
        ``_no_<field>`` or ``_bad_<field>`` where they ask (``sql_checks``)."""
        out = {"_malformed": self.malformed}
        for name, reading in READINGS[source].items():
            if reading in (ID, STRING):
                text = self.text(name)
                # an event's op_id and source are none where blank; an operation's op_id is
                # required (``missing_op_id``) and its payload carried as it came
                if source != SOURCE_OPERATIONS:
                    text = f"CASE WHEN {sql_filled(text)} THEN {text} END"
                out[name] = text
                out[f"_bad_{name}"] = self.wrong(name, reading)
            elif reading == FLAG:
                out[name] = self.flag(name)
                out[f"_bad_{name}"] = self.wrong(name, reading)
            elif name == "keys":  # ``key`` stands for ``keys``; the keys keep their order
                key = self.field("key")
                given = f"CASE WHEN {sql_filled(key)} THEN array({key}) END"
                out[name] = clean_list(f"coalesce({self.listed(name)}, {given})", keep_order=True)
            elif reading == LIST:
                out[name] = clean_list(self.listed(name))
            elif name == "condition":
                out[name] = condition_name(self.field(name))
            elif reading == TEXT:
                if source != SOURCE_OPERATIONS:  # an operation's key is read in ``keys``
                    out[name] = self.field(name)
            else:
                out[f"_no_{name}"] = self.absent(name, reading)
                out[ms_column(name) if reading == TIME else name] = self.value(name, reading)
        return out


def parsed_columns(canonical: list[str]) -> list[str]:
    """What a parser returns: the canonical columns (event time as epoch ms), ``raw``, ``reason``."""
    return [*[ms_column(c) if c == "ts" else c for c in canonical], "raw", "reason"]


def clean_list(items: str, *, keep_order: bool = False) -> str:
    """Blank items dropped, deduplicated, sorted (``keep_order``: in their order, a repeated
    item at its first place).  A list of one item or none is read without the lambda, which
    Spark evaluates outside generated code.
    """
    full = f"array_distinct(filter({items}, _i -> {sql_filled('_i')}))"
    full = full if keep_order else f"array_sort({full})"
    # the empty list as none of ``items`` (``slice``), not a cast the optimizer would fold
    single = f"CASE WHEN {sql_blank(f'get({items}, 0)')} THEN slice({items}, 1, 0) ELSE {items} END"
    n = f"size({items})"
    return f"CASE WHEN {n} = 0 THEN {items} WHEN {n} = 1 THEN {single} ELSE {full} END"


def in_range(ms: str) -> str:
    """Epoch ms from ``contract.MIN_TS_MS`` (1970) up to ``MAX_TS_MS``, else null (``bad_ts``)."""
    return f"CASE WHEN ({ms}) >= {int(MIN_TS_MS)}L AND ({ms}) < {int(MAX_TS_MS)}L THEN {ms} END"


def latest_ts(max_future_ms: int, millis: str | None = None) -> str:
    """The latest event time a micro-batch accepts, epoch ms: its processing time plus
    ``max_future_ms``.

    ``current_timestamp()`` becomes a constant in the generated code, which would then differ
    and be compiled again in every micro-batch.  ``millis`` (``checks.batch_millis``) reads
    it by reference instead; without it the time is read through a lambda, which Spark
    evaluates outside generated code.
    """
    if millis:
        return f"({millis}(unix_millis(current_timestamp())) + {int(max_future_ms)}L)"
    now = "element_at(transform(array(unix_millis(current_timestamp())), _now -> _now), 1)"
    return f"({now} + {int(max_future_ms)}L)"


#: the column ``with_latest`` adds to an input (a name no contract column has)
LATEST = "_purgatory_latest_ms"


def with_latest(df: DataFrame, max_future_ms: int | None) -> DataFrame:
    """``df`` with ``LATEST`` (``latest_ts``) beside its own columns; ``df`` itself when no
    event time is too far ahead (``max_future_ms`` None).  A projection of its own: without
    the checks JAR it holds a lambda, which keeps it out of generated code, so it holds
    nothing else.
    """
    if max_future_ms is None:
        return df
    latest = latest_ts(max_future_ms, batch_millis(df.sparkSession))
    return df.selectExpr("*", f"{latest} AS `{LATEST}`")


def latest_carried(df: DataFrame) -> list[str]:
    """``LATEST`` as a projection of ``df`` carries it on (nothing when ``df`` has none)."""
    return [f"`{LATEST}`"] if LATEST in df.columns else []


def latest_passed(df: DataFrame, ts_ms: str) -> list[str]:
    """``LATEST`` where the event time ``ts_ms`` is past it, null elsewhere, as a projection
    of ``df`` (nothing when ``df`` has none): all the checks need.

    ``LATEST`` is named twice on purpose: Catalyst's ``CollapseProject`` does not merge a
    costly column named twice, so the input's whole reading stays out of ``with_latest``'s
    projection, which runs outside generated code without the checks JAR.
    """
    if LATEST not in df.columns:
        return []
    return [f"CASE WHEN ({ts_ms}) > `{LATEST}` THEN `{LATEST}` END AS `{LATEST}`"]


def condition_name(given: str) -> str:
    """The condition's name, trimmed and in lower case (``any`` when absent).

    Lower case by ``translate`` of the ASCII capitals and the Kelvin sign (the one other
    character whose lower case is an ASCII letter), not ``lower``, which builds ICU's tables
    in the first task (docs/troubleshooting.md, "The first micro-batch is slow").
    """
    capitals = "ABCDEFGHIJKLMNOPQRSTUVWXYZ\u212a"
    name = f"trim(coalesce({given}, {sql_string(DEFAULT_CONDITION)}))"
    # a name already in lower case (nearly all) skips ``translate``'s cost per character
    lowered = f"translate({name}, {sql_string(capitals)}, {sql_string(capitals[:-1].lower() + 'k')})"
    return f"CASE WHEN {sql_in(name, list(CONDITIONS))} THEN {name} ELSE {lowered} END"


def sql_blank(name: str) -> str:
    """Null or blank text (``contract.BLANK``: Spark's ``trim`` trims spaces only)."""
    return f"({name} IS NULL OR trim({name}) = '')"


def sql_filled(name: str) -> str:
    """Text neither null nor blank, written as Spark's optimizer leaves ``NOT sql_blank``.

    A stream's plan is optimized again in every micro-batch, and each rewrite the optimizer
    makes costs its batch of rules another pass over the whole plan.  So the input's SQL is
    written as the optimizer leaves it: no literal of another type than its comparison's, no
    cast of a constant, no ``IN`` of one value, no ``NOT`` of an ``OR``
    (``tests/spark/test_sql_text.py``)."""
    return f"({name} IS NOT NULL AND NOT (trim({name}) = ''))"


def whole_text(pattern: str) -> str:
    """A Spark SQL literal for ``RLIKE``: the contract's ``pattern`` matching the whole text
    (``\\z``: Java's ``$`` also matches before a final line terminator)."""
    return sql_string(f"^(?:{pattern})\\z")


def sql_not_finite(name: str) -> str:
    # infinite: above the largest double (a literal; ``double('Infinity')`` is a cast)
    return f"({name} IS NULL OR isnan({name}) OR abs({name}) > {_LARGEST_DOUBLE})"


#: ``Double.MAX_VALUE`` as a Spark SQL double literal
_LARGEST_DOUBLE = "1.7976931348623157E308D"


def sql_in(name: str, values: list[str]) -> str:
    """``name`` among ``values``; ``=`` for one value (what the optimizer makes of it)."""
    if len(values) == 1:
        return f"{name} = {sql_string(str(values[0]))}"
    return f"{name} IN ({', '.join(sql_string(str(v)) for v in values)})"


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def literal_column(spark: Any, value: list[int] | None, ddl: str) -> Any:
    """``value`` (None, or a list of ints) as a literal ``Column`` of the Spark type ``ddl``.

    SQL text has no typed null nor literal array, only expressions the optimizer folds into
    literals every micro-batch (``sql_filled``); on Spark Connect the column is that SQL.  A
    list's type has ``containsNull = false``, as ``array(0, 1)``'s has, which keeps the
    operator's state key ``shard`` non-nullable, as checkpoints recorded it.
    """
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        from pyspark.sql import functions as F

        if value is None:
            return F.expr(f"CAST(NULL AS {ddl})")
        element = _element_ddl(ddl)
        return F.expr(f"array({', '.join(f'CAST({int(item)} AS {element})' for item in value)})")
    from pyspark.sql.classic.column import Column

    # built once per JVM: a literal is immutable, so one serves every projection
    literals = kept(jvm, "literals")
    key = (ddl, None if value is None else tuple(int(item) for item in value))
    if key not in literals:
        literals[key] = _jvm_literal(spark, jvm, value, ddl)
    return Column(literals[key])


def _jvm_literal(spark: Any, jvm: Any, value: list[int] | None, ddl: str) -> Any:
    """``literal_column``'s JVM ``Column``, built."""
    literal, data_type, expression_utils = _literal_classes(jvm)
    if value is None:
        return expression_utils.column(literal.create(None, data_type.fromDDL(ddl)))
    items = spark.sparkContext._gateway.new_array(jvm.int, len(value))
    for i, item in enumerate(value):
        items[i] = int(item)
    element = data_type.fromDDL(_element_ddl(ddl)).json()
    no_nulls = data_type.fromJson(f'{{"type":"array","elementType":{element},"containsNull":false}}')
    return expression_utils.column(literal.create(items, no_nulls))


def _element_ddl(ddl: str) -> str:
    """``array<int>`` -> ``int``: the element type of a list's literal."""
    if not (ddl.lower().startswith("array<") and ddl.endswith(">")):
        raise ValueError(f"a list's literal needs an array type, got {ddl!r}")
    return ddl[len("array<") : -1]


def _literal_classes(jvm: Any) -> tuple[Any, Any, Any]:
    """Spark's ``Literal``, ``DataType`` and ``ExpressionUtils`` classes, looked up once per client."""
    classes = kept(jvm, "literal classes")
    if not classes:
        classes["all"] = (
            jvm.org.apache.spark.sql.catalyst.expressions.Literal,
            jvm.org.apache.spark.sql.types.DataType,
            jvm.org.apache.spark.sql.classic.ExpressionUtils,
        )
    return classes["all"]
