"""Every path a record can take into the purgatory, run over the contract table.

A path reads the table's records (its JSON lines, or its typed records) and answers, per
case, with an ``Answer``: the reason, or the row it read, in one form for every path.  The
Spark paths run in two Spark jobs over the whole table: one for every reading (each
DataFrame parsed and routed as a stream routes it; all unioned, collected once), one for
``purgatory_batch``.

Paths (the stages each lacks are declared in ``test_contract_table``):

* ``files``: JSON-lines files (``read_batch``), Spark SQL;
* ``kafka``: Kafka records (a static DataFrame with the Kafka source's columns), Spark SQL;
* ``typed-sql``, ``typed-jvm``, ``typed-rows``: typed columns, read by the SQL, by the JVM
  checks (``OperationChecks`` / ``EventChecks``), and by the stream's check-and-route calls
  (``OperationRows`` / ``EventRows``);
* ``batch``: ``purgatory_batch`` over the files (reading, routing, the engine);
* ``pandas``, ``lines``: the engine's validation of the typed records as a frame, and of the
  JSON lines (``engine.lines``);
* ``tester-lines``, ``tester-records``: ``PurgatoryTester`` (routed to its shards, each group's
  ``ShardStep``).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_purgatory import contract as c
from spark_purgatory.contract import truncated
from spark_purgatory.engine.conditions import CONDITION_NAMES
from spark_purgatory.engine.lines import json_lines
from spark_purgatory.engine.validation import validate_events, validate_operations
from spark_purgatory.shard.input import roles_of, split_input
from spark_purgatory.shard.roles import ROLE_BAD, ROLE_EVENT, ROLE_OPERATION, ROLES
from spark_purgatory.spark import checks, sources
from spark_purgatory.spark.batch import purgatory_batch
from spark_purgatory.spark.routing import (
    route_events,
    route_operations,
    route_typed_events,
    route_typed_operations,
)
from spark_purgatory.spark.sources import parse_events, parse_operations, read_batch
from spark_purgatory.testing import PurgatoryTester

from .table import CASES, CONFIG, LATE_WATERMARK_MS, LIMITS, MAX_TIMEOUT_MS, Case

SPARK_PATHS = ("files", "kafka", "typed-sql", "typed-jvm", "typed-rows", "batch")
PANDAS_PATHS = ("pandas", "lines", "tester-lines", "tester-records")
PATHS = SPARK_PATHS + PANDAS_PATHS
#: the paths that read JSON text; the others read typed records
JSON_PATHS = ("files", "kafka", "batch", "lines", "tester-lines")


class Answer(NamedTuple):
    """What a path made of a record: its reason (None: valid) and the fields it read (the
    canonical row of a valid record; a rejected one's readable ``op_id`` and ``key``), and a
    rejected record's ``raw``."""

    reason: str | None
    fields: dict
    raw: str | None = None


Answers = dict[str, dict[str, Answer]]  # path -> case id -> answer


def runs(case: Case, path: str) -> bool:
    """Does ``path`` read ``case`` (it has the input ``path`` reads)?"""
    if path in JSON_PATHS:
        return case.line is not None
    if path in ("pandas", "tester-records"):
        return case.record is not None
    return case.record is not None and not case.records_only


def text_of(line: str | bytes) -> str:
    """A line as every reader reads it (invalid UTF-8 replaced)."""
    return line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line


# -- one form for every path's answer -------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, (np.ndarray, list, tuple)):
        return tuple(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _valid_operation(row: dict) -> dict:
    """A validated operation (``validate_operations``' frame, ``split_input``'s) as a row."""
    return {
        "op_id": _plain(row["op_id"]),
        "keys": _plain(row["keys"]),
        "ts": int(row["ts"]),
        "deadline": int(row["deadline"]),
        "condition": str(CONDITION_NAMES[int(row["cond"])]),
        "target": _plain(row["target"]),
        "members": _plain(row["members"]) or (),
        "payload": _plain(row["payload"]),
    }


def _valid_event(row: dict) -> dict:
    """A validated event as a row; an unmatched one's ``cancel`` as its reason says."""
    fields = {name: _plain(row[name]) for name in ("key", "ts", "op_id", "source", "value")}
    cancel = row["cancel"] if "cancel" in row else str(row.get("reason")).startswith("cancel_")
    return {**fields, "cancel": bool(cancel)}


def _rejected(row: dict) -> Answer:
    return Answer(row["reason"], {"op_id": _plain(row["op_id"]), "key": _plain(row["key"])}, row["raw"])


def _routed_answers(pdf: pd.DataFrame, source: str) -> list[Answer]:
    """Routed rows (one per record, in order) as the shard reads them (``split_input``): one
    answer per row, in order."""
    ops, events, bad = split_input(pdf.reset_index(drop=True))
    role = roles_of(pdf)
    good = ROLES.index(ROLE_OPERATION if source == c.SOURCE_OPERATIONS else ROLE_EVENT)
    assert set(role) <= {good, ROLES.index(ROLE_BAD)}, f"one routed row per record: {set(role)}"
    read = _valid_operation if source == c.SOURCE_OPERATIONS else _valid_event
    valid = iter((ops if source == c.SOURCE_OPERATIONS else events).to_dict("records"))
    rejected = iter(bad.to_dict("records"))
    return [Answer(None, read(next(valid))) if r == good else _rejected(next(rejected)) for r in role]


# -- the Spark paths ------------------------------------------------------------------------------------

_KAFKA = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int"
)


def _lines(cases: list[Case]) -> list[bytes]:
    return [line if isinstance(line, bytes) else line.encode("utf-8") for line in (k.line for k in cases)]


def _files(directory: str, cases: list[Case]) -> str:
    os.makedirs(directory)
    with open(os.path.join(directory, "part-0.json"), "wb") as f:
        f.write(b"".join(line + b"\n" for line in _lines(cases)))
    return directory


def _kafka(spark: SparkSession, cases: list[Case], topic: str) -> DataFrame:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    lines = enumerate(zip(cases, _lines(cases), strict=True))
    rows = [(k.name.encode(), line, topic, 0, offset, when, 0) for offset, (k, line) in lines]
    return spark.createDataFrame(rows, _KAFKA)


#: the other types a typed input may have (``spark.schema``), one frame of them per input:
#: epoch ms as a bigint, a double timeout and an int target; a timestamp without a zone and
#: an int value
_LOOSE = {
    c.SOURCE_OPERATIONS: {"ts": T.LongType(), "timeout_ms": T.DoubleType(), "target": T.IntegerType()},
    c.SOURCE_EVENTS: {"ts": T.TimestampNTZType(), "value": T.IntegerType()},
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _is_loose(name: str, value: Any) -> bool:
    """Is ``value`` of one of the other types (``_LOOSE``), not the contract's?"""
    if name == "ts":
        return isinstance(value, int) or (isinstance(value, dt.datetime) and value.tzinfo is None)
    return (name == "timeout_ms" and isinstance(value, float)) or (
        name in ("target", "value") and isinstance(value, int) and not isinstance(value, bool)
    )


def _loosened(name: str, value: Any, kind: T.DataType) -> Any:
    """A typed record's value as a column of ``kind`` holds it (the same instant, the same number)."""
    if value is None or not isinstance(kind, (T.LongType, T.TimestampNTZType, T.DoubleType, T.IntegerType)):
        return value
    if isinstance(kind, T.LongType) and isinstance(value, dt.datetime):  # one without a zone is UTC
        return (value.replace(tzinfo=value.tzinfo or dt.timezone.utc) - _EPOCH) // dt.timedelta(
            milliseconds=1
        )
    if isinstance(kind, T.TimestampNTZType) and isinstance(value, int):
        return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)
    if isinstance(kind, T.TimestampNTZType) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(kind, T.DoubleType):
        return float(value)
    if isinstance(kind, T.IntegerType):
        assert float(value).is_integer(), (name, value)
        return int(value)
    return value


def loose(case: Case) -> bool:
    """Is the case's typed record one of the other types' frame (``_LOOSE``)?"""
    return any(_is_loose(name, value) for name, value in case.record.items())


def typed_groups(cases: list[Case], source: str) -> list[tuple[list[Case], T.StructType, list[dict]]]:
    """The typed cases as frames: (cases, schema, their records as it holds them) for the
    contract's types, and for the others (``_LOOSE``) those cases whose record has such a value."""
    from pyspark.sql.pandas.types import from_arrow_schema

    contract = from_arrow_schema(c.OPERATION_INPUT if source == c.SOURCE_OPERATIONS else c.EVENT_INPUT)
    others = T.StructType([T.StructField(f.name, _LOOSE[source].get(f.name, f.dataType)) for f in contract])
    out = []
    for schema, members in (
        (contract, [k for k in cases if not loose(k)]),
        (others, [k for k in cases if loose(k)]),
    ):
        if members:
            kinds = {f.name: f.dataType for f in schema}
            records = [{n: _loosened(n, v, kinds[n]) for n, v in k.record.items()} for k in members]
            out.append((members, schema, records))
    return out


def _typed_frame(spark: SparkSession, records: list[dict], schema: T.StructType) -> DataFrame:
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in records], schema)


def _readings(
    spark: SparkSession, source: str, cases: list[Case], directory: str
) -> list[tuple[str, list[Case], DataFrame]]:
    """(path, its cases in order, their routed rows) of every Spark reading of ``source``."""
    operations = source == c.SOURCE_OPERATIONS
    kind = "operations" if operations else "events"
    reading = dict(max_future_ms=CONFIG.max_future_ms, limits=LIMITS)
    if operations:
        reading["max_timeout_ms"] = MAX_TIMEOUT_MS

    def parsed_and_routed(df: DataFrame, fmt: str = "auto") -> DataFrame:
        if operations:
            return route_operations(parse_operations(df, fmt, **reading), CONFIG)
        return route_events(parse_events(df, fmt, **reading), CONFIG)

    text = [k for k in cases if runs(k, "files")]
    out = [
        (
            "files",
            text,
            parsed_and_routed(read_batch(spark, _files(os.path.join(directory, kind), text), kind=kind)),
        ),
        ("kafka", text, parsed_and_routed(_kafka(spark, text, kind), "kafka")),
    ]
    for group, schema, records in typed_groups([k for k in cases if runs(k, "typed-sql")], source):
        df = _typed_frame(spark, records, schema)
        with pytest.MonkeyPatch.context() as patched:  # the SQL, as without the JAR
            patched.setattr(sources, "operation_checks", lambda spark: None)
            patched.setattr(sources, "event_checks", lambda spark: None)
            out.append(("typed-sql", group, parsed_and_routed(df)))
        jvm = parsed_and_routed(df)
        function = checks.CHECKS[0] if operations else checks.EVENT_CHECKS[0]
        assert function in jvm._jdf.queryExecution().optimizedPlan().toString()
        out.append(("typed-jvm", group, jvm))
        if operations:
            rows = route_typed_operations(df, CONFIG, **reading)
        else:
            rows = route_typed_events(df, CONFIG, max_future_ms=CONFIG.max_future_ms)
        assert rows is not None, "the check-and-route calls are in the JAR"
        out.append(("typed-rows", group, rows))
    return out


def spark_answers(spark: SparkSession, directory: str) -> Answers:
    """Every Spark reading of the table (one job), then ``purgatory_batch`` (another)."""
    answers: Answers = {path: {} for path in SPARK_PATHS}
    parts = []
    for source in (c.SOURCE_OPERATIONS, c.SOURCE_EVENTS):
        cases = [k for k in CASES if k.source == source]
        parts += [(path, source, group, df) for path, group, df in _readings(spark, source, cases, directory)]
    union = None
    for i, (_, _, _, df) in enumerate(parts):
        tagged = df.withColumn("_part", F.lit(i))
        union = tagged if union is None else union.unionByName(tagged)
    collected = union.toPandas()
    for i, (path, source, group, _) in enumerate(parts):
        rows = collected[collected["_part"] == i].drop(columns="_part")
        assert len(rows) == len(group), (path, source, len(rows), len(group))
        answers[path].update(zip([k.id for k in group], _routed_answers(rows, source), strict=True))
    answers["batch"] = _batch_answers(spark, directory)
    return answers


def _batch_answers(spark: SparkSession, directory: str) -> dict[str, Answer]:
    out = purgatory_batch(
        read_batch(spark, os.path.join(directory, "operations"), kind="operations"),
        read_batch(spark, os.path.join(directory, "events"), kind="events"),
        CONFIG,
    ).toPandas()
    kind = out["kind"]
    outcomes = out.loc[
        kind == c.KIND_OUTCOME, ["op_id", "keys", "op_ts_ms", "deadline_ms", "condition", "target", "payload"]
    ]
    outcomes = outcomes.rename(columns={"op_ts_ms": "ts", "deadline_ms": "deadline"})
    unmatched = out.loc[kind == c.KIND_UNMATCHED, ["key", "ts_ms", "op_id", "source", "value", "reason"]]
    unmatched = unmatched.rename(columns={"ts_ms": "ts"})
    rejected = out.loc[kind == c.KIND_REJECTED, ["source", "raw", "reason", "op_id", "key"]]
    return by_identity(outcomes, unmatched, rejected, "batch")


# -- identities (the batch's and the tester's rows come in their own order) ------------------------------


def by_identity(
    outcomes: pd.DataFrame, unmatched: pd.DataFrame, rejected: pd.DataFrame, path: str
) -> dict[str, Answer]:
    """The rows of the output tables, each found by its line or its name."""
    items = []
    for row in outcomes.to_dict("records"):
        keys = _plain(row["keys"]) or ()
        fields = {
            "op_id": row["op_id"],
            "keys": keys,
            "ts": int(row["ts"]),
            "deadline": int(row["deadline"]),
            "condition": row["condition"],
            "target": _plain(row["target"]),
            "payload": _plain(row["payload"]),
        }
        items.append((c.SOURCE_OPERATIONS, Answer(None, fields), None, [row["op_id"], *keys[:1]]))
    for row in unmatched.to_dict("records"):
        fields = _valid_event({**row, "ts": int(row["ts"])})
        items.append((c.SOURCE_EVENTS, Answer(None, fields), None, [row["key"], row["op_id"]]))
    for row in rejected.to_dict("records"):
        items.append((row["source"], _rejected(row), row["raw"], [row["op_id"], row["key"]]))
    return identified(items, path)


def identified(items: Iterable[tuple[str, Answer, str | None, list]], path: str) -> dict[str, Answer]:
    """Each answer's case, by its line or the name in its record (``table``'s docstring):
    ``items`` are (source, answer, raw, names)."""
    found: dict[str, Answer] = {}
    for source, answer, raw, names in items:
        case = _case_of(source, raw, names, path)
        assert case not in found, f"{path}: two rows for {case}"
        found[case] = answer
    return found


_INDEX: dict[tuple, dict[Any, str]] = {}


def _index(source: str, path: str) -> tuple[dict[str, str], dict[str, str]]:
    """(line -> case, unique name -> case) of the cases of ``source`` that ``path`` reads."""
    key = (source, path)
    if key not in _INDEX:
        cases = [k for k in CASES if k.source == source and runs(k, path)]
        lines = {text_of(k.line): k.id for k in cases if k.line is not None}
        lines.update({truncated(text): name for text, name in list(lines.items())})  # record_too_large
        counts: dict[str, int] = {}
        for k in cases:
            for name in set(k.identities):
                counts[name] = counts.get(name, 0) + 1
        names = {n: k.id for k in cases for n in k.identities if counts[n] == 1}
        _INDEX[key] = (lines, names)
    return _INDEX[key]


def _case_of(source: str, raw: str | None, names: Iterable[Any], path: str) -> str:
    lines, unique = _index(source, path)
    if raw is not None and raw in lines:
        return lines[raw]
    for name in names:
        if isinstance(name, str) and name in unique:
            return unique[name]
    raise AssertionError(f"{path}: a {source} row of no case: raw={raw!r}, names={list(names)}")


# -- the pandas paths -----------------------------------------------------------------------------------


def _frames(cases: list[Case], source: str) -> list[tuple[list[Case], pd.DataFrame]]:
    """The typed records as frames, as ``typed_groups`` has them, records-only ones too."""
    groups = [
        (group, records)
        for group, _, records in typed_groups([k for k in cases if not k.records_only], source)
    ]
    only = [k for k in cases if k.records_only]
    if only:
        groups.append((only, [k.record for k in only]))
    return [(group, pd.DataFrame(records)) for group, records in groups]


def pandas_answers() -> Answers:
    """The engine's validation of the typed records and of the lines; ``PurgatoryTester``'s."""
    now_ms = int(time.time() * 1000)
    answers: Answers = {path: {} for path in PANDAS_PATHS}
    for source in (c.SOURCE_OPERATIONS, c.SOURCE_EVENTS):
        if source == c.SOURCE_OPERATIONS:

            def validate(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
                return validate_operations(
                    frame,
                    max_timeout_ms=MAX_TIMEOUT_MS,
                    now_ms=now_ms,
                    max_future_ms=CONFIG.max_future_ms,
                    limits=LIMITS,
                )
        else:

            def validate(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
                return validate_events(frame, now_ms=now_ms, max_future_ms=CONFIG.max_future_ms)

        cases = [k for k in CASES if k.source == source]
        records = [k for k in cases if runs(k, "pandas")]
        for _, frame in _frames(records, source):
            answers["pandas"].update(_validated(frame, validate, source, "pandas"))
        text = [k.line for k in cases if runs(k, "lines")]
        answers["lines"].update(_validated(json_lines(text, limits=LIMITS), validate, source, "lines"))
    answers["tester-lines"] = _tester_answers("tester-lines")
    answers["tester-records"] = _tester_answers("tester-records")
    return answers


def _validated(frame: pd.DataFrame, validate, source: str, path: str) -> dict[str, Answer]:
    """The validator's two frames, each row found by its line or its name."""
    valid, rejected = validate(frame)
    read = _valid_operation if source == c.SOURCE_OPERATIONS else _valid_event
    items = []
    for row in valid.to_dict("records"):
        fields = read(row)
        names = (
            [fields["op_id"], *fields["keys"][:1]]
            if source == c.SOURCE_OPERATIONS
            else [fields["key"], fields["op_id"]]
        )
        items.append((source, Answer(None, fields), row.get("raw"), names))
    for row in rejected.to_dict("records"):
        items.append((source, _rejected(row), row["raw"], [row["op_id"], row["key"]]))
    return identified(items, path)


def _tester_answers(path: str) -> dict[str, Answer]:
    """One ``PurgatoryTester``: every record at watermark 0, the late ones behind
    ``LATE_WATERMARK_MS``, then the end of input (every operation resolved, every event
    reported)."""
    tester = PurgatoryTester(CONFIG)
    for late in (False, True):
        if late:
            tester.advance_watermark(LATE_WATERMARK_MS)
        for source in (c.SOURCE_OPERATIONS, c.SOURCE_EVENTS):
            cases = [k for k in CASES if k.source == source and k.late == late and runs(k, path)]
            add = tester.add_operations if source == c.SOURCE_OPERATIONS else tester.add_events
            if path == "tester-lines":
                add([k.line for k in cases])
            else:
                for _, frame in _frames(cases, source):
                    add(frame)
        tester.step()
    tester.end_input()
    return by_identity(
        tester.outcomes(times="ms").rename(columns={"op_ts": "ts"}),
        tester.unmatched(times="ms"),
        tester.rejected(),
        path,
    )
