"""Typed input: DataFrames whose columns follow the input contract, validated as they are.

Parquet files streamed as typed columns give the outcomes the same rows give as JSON; a
missing or wrongly typed column stops the query before it starts, naming the column; a bad
row gets the same reason from typed columns, JSON text and Kafka records.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
import types

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.contract import EVENT_INPUT, OPERATION_INPUT
from spark_purgatory.job import parse_args
from spark_purgatory.spark import checks
from spark_purgatory.spark.batch import purgatory_batch
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.output import outcomes_of, rejected_of
from spark_purgatory.spark.sources import (
    InputSchemaError,
    parse_events,
    parse_operations,
    read_batch,
    read_stream,
    source_format_of,
)
from spark_purgatory.workload import generate, write_json_lines
from tests.support.stream_helpers import T0, Files, replicas_warning, run_stream

pytestmark = pytest.mark.spark

CONFIG = PurgatoryConfig(shards=2, watermark_delay="2 seconds")
OUTCOME = ["op_id", "status", "resolved_at_ms", "matched_events"]


def _write_parquet(frame: pd.DataFrame, schema: pa.Schema, directory: str, files: int, edges) -> None:
    """``frame`` (ts in epoch ms) as ``files`` Parquet files cut at ``edges``, in time order."""
    os.makedirs(directory, exist_ok=True)
    frame = frame.assign(ts=pd.to_datetime(frame["ts"], unit="ms", utc=True))
    slice_of = np.searchsorted(edges, frame["ts"].astype("int64") // 1_000_000, side="right") - 1
    stamp = time.time() - 100
    for i in range(files):
        path = os.path.join(directory, f"part-{i:04d}.parquet")
        part = frame[slice_of == i].reindex(columns=schema.names)
        pq.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False), path)
        os.utime(path, (stamp + i, stamp + i))


def test_parquet_stream_gives_the_json_outcomes(spark, tmp_path):
    work = generate(300, seed=7, ops_per_second=100)
    files = Files(str(tmp_path))
    op_ts, ev_ts = work.operations["ts"], work.events["ts"]
    edges = np.linspace(min(op_ts.min(), ev_ts.min()), max(op_ts.max(), ev_ts.max()) + 1, 3)
    _write_parquet(work.operations, OPERATION_INPUT, files.ops, 2, edges)
    _write_parquet(work.events, EVENT_INPUT, files.events, 2, edges)
    json_ops, json_events = str(tmp_path / "json-ops"), str(tmp_path / "json-events")
    write_json_lines(work, json_ops, json_events, files=2)

    with replicas_warning():
        run = run_stream(spark, files, CONFIG, fmt="parquet")

    assert len(run.rejected) == 0 and len(run.outcomes) > 100
    # the micro-batch's time (ts_in_future): with the checks JAR, read by generated code
    # (BatchMillis, by reference: the same code every micro-batch) and every projection is
    # generated code; without it, by a lambda, which keeps its projection out of generated
    # code: that projection holds the input's own columns, not the reading (its record
    # struct) nor the checks (sql_text.latest_passed)
    projections = [line for line in run.plan.splitlines() if "Project [" in line]
    lambdas = [line for line in projections if "lambdafunction" in line]
    if checks.batch_millis(spark):
        timed = [line for line in projections if "batch_millis(" in line]
        assert len(timed) >= 2 and not lambdas  # each input's
        assert all(line.lstrip(" :+-").startswith("*(") for line in projections), projections
    else:
        assert len(lambdas) >= 2  # each input's (the events' replicas read theirs again)
        assert not [line for line in lambdas if "struct(" in line or "spark_purgatory_" in line], lambdas
    final = max(run.watermarks.values())
    as_json = purgatory_batch(
        read_batch(spark, json_ops, kind="operations"),
        read_batch(spark, json_events, kind="events"),
        CONFIG,
        final_watermark_ms=final,
    )
    streamed = spark.createDataFrame(
        run.outcomes[OUTCOME].astype({"resolved_at_ms": "int64", "matched_events": "int64"})
    )
    expected = as_json.where("kind = 'outcome'").select(*OUTCOME).cache()  # compared twice below
    assert_df_equality(expected, streamed, ignore_row_order=True, ignore_nullable=True)
    typed_batch = purgatory_batch(
        read_batch(spark, files.ops, "parquet", kind="operations"),
        read_batch(spark, files.events, "parquet", kind="events"),
        CONFIG,
        final_watermark_ms=final,
    )
    assert_df_equality(
        expected, typed_batch.where("kind = 'outcome'").select(*OUTCOME), ignore_row_order=True
    )
    expected.unpersist()


def test_wrong_or_missing_columns_fail_at_start(spark, tmp_path):
    # a Parquet stream whose timeout_ms is text: refused when the query is built
    ops_dir, events_dir = str(tmp_path / "ops"), str(tmp_path / "events")
    os.makedirs(ops_dir)
    pd.DataFrame({"op_id": ["a"], "key": ["k"], "ts": [T0], "timeout_ms": ["5000"]}).to_parquet(
        os.path.join(ops_dir, "part-0.parquet")
    )
    os.makedirs(events_dir)
    pd.DataFrame({"key": ["k"], "ts": [T0]}).to_parquet(os.path.join(events_dir, "part-0.parquet"))
    ops = read_stream(spark, ops_dir, "parquet", kind="operations")
    evs = read_stream(spark, events_dir, "parquet", kind="events")
    with pytest.raises(InputSchemaError, match=r"'timeout_ms' is string, expected a whole number"):
        purgatory_stream(ops, evs, CONFIG)

    no_op_id = spark.createDataFrame([("k", T0, 5)], "key string, ts long, timeout_ms long")
    with pytest.raises(InputSchemaError, match=r"no column 'op_id' \(string\)"):
        purgatory_batch(no_op_id, spark.createDataFrame([("k", T0)], "key string, ts long"), CONFIG)
    bad_keys = spark.createDataFrame(
        [("a", [1], T0, 5)], "op_id string, keys array<int>, ts long, timeout_ms long"
    )
    with pytest.raises(InputSchemaError, match=r"'keys' is array<int>, expected array<string>"):
        parse_operations(bad_keys, max_timeout_ms=10)
    bad_ts = spark.createDataFrame([("k", "2026-01-01")], "key string, ts string")
    with pytest.raises(InputSchemaError, match=r"'ts' is string, expected timestamp"):
        parse_events(bad_ts)
    misspelled = spark.createDataFrame(
        [("a", "k", T0, 5, "all")], "op_id string, key string, ts long, timeout_ms long, condtion string"
    )
    with pytest.raises(
        InputSchemaError, match=r"column 'condtion' is no field of the contract; did you mean 'condition'"
    ):
        parse_operations(misspelled, max_timeout_ms=10)
    other = spark.createDataFrame([("k", T0, "crm")], "key string, ts long, source_system string")
    parse_events(other)  # a column the contract does not know, and no misspelling: ignored


_TS = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
_OPS_SCHEMA = (
    "op_id string, key string, keys array<string>, ts timestamp, timeout_ms long, condition string, "
    "target double, members array<string>, payload string"
)


def _op(**fields) -> dict:
    return {
        "op_id": "o",
        "key": "k",
        "keys": None,
        "ts": _TS,
        "timeout_ms": 5,
        "condition": None,
        "target": None,
        "members": None,
        "payload": None,
        **fields,
    }


BAD_OPERATIONS = [
    (_op(), None),
    (_op(op_id=None), "missing_op_id"),
    (_op(op_id=" "), "missing_op_id"),
    (_op(key=None), "missing_key"),
    (_op(key=None, keys=[" ", None]), "missing_key"),
    (_op(ts=None), "missing_ts"),
    (_op(ts=dt.datetime(2300, 1, 1, tzinfo=dt.timezone.utc)), "bad_ts"),
    (_op(timeout_ms=None), "missing_timeout_ms"),
    (_op(timeout_ms=-1), "negative_timeout"),
    (_op(timeout_ms=10**12), "timeout_above_max"),
    (_op(condition="most"), "unknown_condition"),
    (_op(condition="count"), "missing_target"),
    (_op(condition="sum", target=math.nan), "bad_target"),
    (_op(condition="all", members=[]), "missing_members"),
    (_op(condition=" COUNT ", target=2.0, keys=["b", "a", "a"]), None),
    (_op(condition="Sum", target=1.0), None),
    (_op(condition="\u0130ll", members=["r1"]), "unknown_condition"),  # dotted capital I: not "all"
    (_op(condition="quorum", target=2.0, members=["r2", "r1", "r2"]), None),
    (_op(condition="quorum", target=2.0, members=["r1", " "]), "target_above_members"),
    (_op(condition="quorum", members=["r1"]), "missing_target"),
    (_op(target=1.0), "unused_target"),  # a field the condition does not use: never ignored
    (_op(condition="all", members=["r1"], target=math.nan), "unused_target"),  # NaN is there
    (_op(condition="count", target=2.0, members=["r1", "r2"]), "unused_members"),
    (_op(members=[" "]), None),  # no member given
]
_EVENTS_SCHEMA = "key string, ts timestamp, op_id string, source string, value double"


def _ev(**fields) -> dict:
    return {"key": "k", "ts": _TS, "op_id": None, "source": None, "value": None, **fields}


BAD_EVENTS = [
    (_ev(), None),
    (_ev(key=None), "missing_key"),
    (_ev(key="  "), "missing_key"),
    (_ev(ts=None), "missing_ts"),
    (_ev(value=math.inf), "bad_value"),
    (_ev(value=math.nan), "bad_value"),
    (_ev(op_id=" ", source="r1", value=3.0), None),
]


def _as_json(row: dict) -> str:
    return json.dumps({k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in row.items()})


def _reasons(spark, rows: list[dict], schema: str, parse) -> dict[str, list]:
    """Each row's reason as typed columns, as JSON text and as a Kafka record's value."""
    lines = [_as_json(r) for r in rows]
    typed = spark.createDataFrame([tuple(r.values()) for r in rows], schema)
    text = spark.createDataFrame([(line,) for line in lines], "value string")
    kafka = spark.createDataFrame(
        [(None, line.encode(), "t", 0, i, None, 0) for i, line in enumerate(lines)],
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int",
    )
    assert [source_format_of(df) for df in (typed, text, kafka)] == ["typed", "json", "kafka"]
    return {
        name: [r.reason for r in parse(df).collect()]
        for name, df in (("typed", typed), ("json", text), ("kafka", kafka))
    }


def test_the_same_reasons_from_typed_json_and_kafka_input(spark):
    expected = [reason for _, reason in BAD_OPERATIONS]
    got = _reasons(
        spark,
        [r for r, _ in BAD_OPERATIONS],
        _OPS_SCHEMA,
        lambda df: parse_operations(df, max_timeout_ms=1000),
    )
    assert got == {"typed": expected, "json": expected, "kafka": expected}
    expected = [reason for _, reason in BAD_EVENTS]
    got = _reasons(spark, [r for r, _ in BAD_EVENTS], _EVENTS_SCHEMA, parse_events)
    assert got == {"typed": expected, "json": expected, "kafka": expected}


def test_an_operations_keys_come_out_in_their_order_from_every_reading(spark):
    """docs/contract.md: an operation's keys in the order given, each once, blank ones
    dropped (the outcome's ``keys``; a rejected row's ``key`` is the first), from typed
    columns (with the project's JVM function or without), JSON text and Kafka values."""
    rows = [_op(key=None, keys=["b", " ", "a", "b", "c"]), _op(key=None, keys=["z", "y"], timeout_ms=-1)]
    lines = [_as_json(r) for r in rows]
    typed = spark.createDataFrame([tuple(r.values()) for r in rows], _OPS_SCHEMA)
    text = spark.createDataFrame([(line,) for line in lines], "value string")
    for df in (typed, text):
        parsed = parse_operations(df, max_timeout_ms=1000).collect()
        assert [(r.keys, r.reason) for r in parsed] == [
            (["b", "a", "c"], None),
            (["z", "y"], "negative_timeout"),
        ]


def test_typed_rows_keep_raw_only_when_rejected(spark):
    typed = spark.createDataFrame([tuple(r.values()) for r, _ in BAD_OPERATIONS[:2]], _OPS_SCHEMA)
    rows = parse_operations(typed, max_timeout_ms=1000).collect()
    assert rows[0].raw is None and rows[0].reason is None
    assert json.loads(rows[1].raw) == {"key": "k", "ts": "2026-01-01T00:00:00.000Z", "timeout_ms": 5}


def test_a_typed_operation_rejected_at_routing_keeps_its_record(spark):
    """With cross-shard operations switched off, routing rejects an operation whose keys span
    shards (``cross_shard_keys``) after parsing found it valid: its ``rejected`` row still
    shows the record, as for any rejection."""
    keys = ["a", "b", "c", "d", "e"]
    shard = dict(zip(keys, shards_of(np.array(keys, dtype=object), 2), strict=True))
    apart = next([x, y] for x in keys for y in keys if shard[x] != shard[y])
    together = next([x, y] for x in keys for y in keys if x < y and shard[x] == shard[y])
    ops = spark.createDataFrame(
        [
            tuple(_op(op_id="apart", key=None, keys=apart).values()),
            tuple(_op(op_id="together", key=None, keys=together).values()),
        ],
        _OPS_SCHEMA,
    )
    events = spark.createDataFrame([tuple(_ev(key=apart[0]).values())], _EVENTS_SCHEMA)
    config = PurgatoryConfig(shards=2, cross_shard_operations=False)
    out = purgatory_batch(ops, events, config).cache()  # read twice below, computed once
    rejected = {r.op_id: (r.reason, r.raw) for r in rejected_of(out).collect()}
    assert set(rejected) == {"apart"}
    reason, raw = rejected["apart"]
    assert reason == "cross_shard_keys"
    assert json.loads(raw)["keys"] == apart
    assert {r.op_id for r in outcomes_of(out).collect()} == {"together"}
    out.unpersist()


class _NoClasses:
    def forName(self, name):  # noqa: N802 - the JVM's spelling
        raise RuntimeError(f"ClassNotFoundException: {name}")


def test_delta_source_is_refused_without_the_delta_data_source():
    # a session whose JVM lacks Delta's classes (the stand-in of test_accumulator)
    jvm = types.SimpleNamespace(java=types.SimpleNamespace(lang=types.SimpleNamespace(Class=_NoClasses())))
    session = types.SimpleNamespace(_jvm=jvm, read=None, readStream=None)
    with pytest.raises(ValueError, match="Delta data source is not on this session's classpath"):
        read_stream(session, "/in", "delta", kind="operations")
    settings = parse_args(
        [
            "--ops-path",
            "o",
            "--events-path",
            "e",
            "--output-path",
            "x",
            "--checkpoint-path",
            "c",
            "--source-format",
            "delta",
        ]
    )
    assert settings.source_format == "delta"
