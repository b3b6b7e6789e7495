"""Day-2 questions on a checkpoint made by a real stream (``start``, available-now runs).

One checkpoint serves every test (a module fixture): a first run over two files, then a
restart over a third.  The input has every kind of op_id an operator asks about: pending
ones of each condition (one of them across shards, through the mailbox), a completed, an
expired, a rejected and a duplicate one, a late event and an event that matched nothing.
The shard state lives in segment files (``purgatory.state.segment.rows`` tiny), so reading
it goes through the segments.  ``pending`` is compared (chispa) with one engine's
``pending_frame`` for the same input and watermarks: a cross-shard operation must show the
progress one purgatory holding every key has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest
from chispa import assert_df_equality

from spark_purgatory import Purgatory, PurgatoryConfig, start
from spark_purgatory.cli import main
from spark_purgatory.engine.inspection import pending_frame
from spark_purgatory.inspect import (
    at_risk,
    at_risk_table,
    checkpoint_status,
    explain,
    pending_operations,
    pending_table,
    read_checkpoint,
)
from spark_purgatory.inspect.pending_view import arrow_chunk
from spark_purgatory.state import SegmentStore
from spark_purgatory.state.versions import current_formats, package_version
from tests.support.stream_helpers import T0, Files, iso, keys_in_different_shards

pytestmark = pytest.mark.spark

CONFIG = PurgatoryConfig(
    shards=2, tick_ms=100, wheel_size=16, source_max_files_per_trigger=1, state_segment_rows=2
)
COMPARED = [
    "op_id", "keys", "ts", "deadline", "condition", "target", "members", "payload", "matched_events",
    "distinct_sources", "value_sum", "progress", "goal", "offsets", "members_missing", "time_left_ms",
]  # fmt: skip


def o(op_id, keys, ts, timeout_ms, condition="any", **extra):
    return {"op_id": op_id, "keys": [keys] if isinstance(keys, str) else keys, "ts": ts,
            "timeout_ms": timeout_ms, "condition": condition, **extra}  # fmt: skip


def e(key, ts, **extra):
    return {"key": key, "ts": ts, **extra}


def inputs(a: str, b: str) -> list[tuple[list[dict], list[dict]]]:
    """Three files of (operations, events); times in ms after T0."""
    first = (
        [
            o("p-count", "kc", 0, 600_000, "count", target=3.0),
            o("p-all", "kg", 0, 600_000, "all", members=["m1", "m2", "m3"]),
            o("p-sum", "ks", 0, 600_000, "sum", target=100.0, payload="invoice 7"),
            o("p-offset", ["kx", "ky"], 0, 600_000, "offset", target=10.0),
            o("p-cross", [a, b], 0, 600_000, "count", target=5.0),
            o("c-done", "kd", 0, 600_000),
            o("e-gone", "ke", 0, 5_000),
            o("soon-1", "k1", 0, 40_000),
            o("soon-2", "k2", 0, 44_000),
            o("later", "k3", 0, 50_000),
            {"op_id": "r-bad", "keys": ["kr"], "ts": 0, "timeout_ms": 1_000, "condition": "count"},
        ],
        [
            e("kc", 10, source="r1"),
            e("kg", 10, source="m2"),
            e("ks", 10, value=40.0),
            e("kx", 10, value=12.0),
            e("ky", 10, value=4.0),
            e(a, 10, source="s1"),
            e(b, 11, source="s2"),
            e("kd", 20),
        ],
    )
    second = ([o("p-count", "kc", 40_000, 1_000)], [e("pad", 40_000)])  # a duplicate op_id
    third = (
        [o("n-new", "kn", 45_000, 100_000)],
        [e("kc", 20_000, source="r9"), e("ke", 31_000), e("kc", 45_000, source="r2")],  # late; no_operation
    )
    return [first, second, third]


def json_line(row: dict) -> str:
    return json.dumps({**row, "ts": iso(T0 + row["ts"])})


def engine_rows(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{**r, "ts": T0 + r["ts"]} for r in rows])


class Checkpoint:
    def __init__(
        self, root: str, files: Files, first_batch: int, first_pending: pd.DataFrame, final: pd.DataFrame
    ):
        self.root, self.files = root, files
        self.output = os.path.join(root, "out")
        self.checkpoint = files.checkpoint
        self.first_batch, self.first_pending, self.final_pending = first_batch, first_pending, final


@pytest.fixture(scope="module")
def made(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("inspect"))
    a, b = keys_in_different_shards(CONFIG.shards, 2)
    files = Files(root)
    batches = inputs(a, b)
    for ops, events in batches[:2]:
        files.add([json_line(r) for r in ops], [json_line(r) for r in events])

    def run() -> None:
        query = start(files.ops, files.events, output=os.path.join(root, "out"), checkpoint=files.checkpoint,
                      config=CONFIG, spark=spark)  # fmt: skip
        query.await_termination()
        query.stop()

    run()
    first_batch = read_checkpoint(files.checkpoint).last_batch
    files.add([json_line(r) for r in batches[2][0]], [json_line(r) for r in batches[2][1]])
    run()  # a restart from the checkpoint

    # one purgatory, the same input, the same watermarks (each file's min over both inputs - 10 s)
    p = Purgatory(CONFIG)
    p.process(engine_rows(batches[0][0]), engine_rows(batches[0][1]), watermark_ms=0)
    p.process(engine_rows(batches[1][0]), engine_rows(batches[1][1]), watermark_ms=T0 - 10_000)
    p.process(None, None, watermark_ms=T0 + 30_000)
    first = pending_frame(p)
    p.process(engine_rows(batches[2][0]), engine_rows(batches[2][1]), watermark_ms=T0 + 30_000)
    p.process(None, None, watermark_ms=T0 + 35_000)
    return Checkpoint(root, files, first_batch, first, pending_frame(p))


def as_spark(spark, frame: pd.DataFrame):
    return spark.createDataFrame(pa.Table.from_batches([arrow_chunk(frame, {"ts", "deadline", "watermark"})]))


@pytest.mark.parametrize("when", ["mid-stream", "after the restart"])
def test_pending_equals_one_purgatorys_pending_for_the_same_input(spark, made, when):
    mid = when == "mid-stream"
    actual = pending_operations(made.checkpoint, spark=spark, batch_id=made.first_batch if mid else None)
    expected = as_spark(spark, made.first_pending if mid else made.final_pending)
    assert_df_equality(  # in op_id order (chispa's own ordering cannot sort a map column)
        actual.select(COMPARED).orderBy("op_id"),
        expected.select(COMPARED).orderBy("op_id"),
        ignore_nullable=True,
    )
    batches = {r.batch_id for r in actual.select("batch_id").distinct().collect()}
    assert batches == {made.first_batch if mid else read_checkpoint(made.checkpoint).last_batch}


@pytest.mark.parametrize("when", ["mid-stream", "after the restart"])
def test_pending_table_reads_the_same_rows_from_the_files_without_spark(made, when):
    mid = when == "mid-stream"
    got = pending_table(made.checkpoint, batch_id=made.first_batch if mid else None)
    expected = pa.Table.from_batches(
        [arrow_chunk(made.first_pending if mid else made.final_pending, {"ts", "deadline", "watermark"})]
    )
    assert got.schema == expected.schema
    assert (
        got.select(COMPARED).sort_by("op_id").to_pylist()
        == expected.select(COMPARED).sort_by("op_id").to_pylist()
    )
    assert set(got.column("batch_id").to_pylist()) == {
        made.first_batch if mid else read_checkpoint(made.checkpoint).last_batch
    }
    cross = got.filter(pa.compute.equal(got.column("op_id"), "p-cross")).to_pylist()
    assert [(r["shard"], r["progress"]) for r in cross] == [(CONFIG.shards, 2.0)]  # once, the cross group


def test_a_cross_shard_operation_appears_once_from_the_cross_shard_group(spark, made):
    rows = pending_operations(made.checkpoint, spark=spark).filter("op_id = 'p-cross'").collect()
    assert [(r.shard, r.matched_events, r.distinct_sources, r.progress) for r in rows] == [
        (CONFIG.shards, 2, 2, 2.0)
    ]


def test_the_state_was_read_through_segment_files(spark, made):
    store = SegmentStore(os.path.join(made.checkpoint, "purgatory-state"))
    assert store.segments(), "the state under test lives in segment files"
    assert pending_operations(made.checkpoint, spark=spark).count() == len(made.final_pending)


def test_at_risk_lists_the_operations_due_within_the_horizon_earliest_first(spark, made):
    """Spark's ``at_risk`` and ``at_risk_table`` (the files without Spark) give the same rows."""
    fields = ["op_id", "time_left_ms", "still_needed", "progress_text"]
    found = {}
    for within in ("10s", "1h"):
        rows = at_risk(made.checkpoint, within=within, spark=spark).collect()
        table_rows = [
            tuple(r[f] for f in fields) for r in at_risk_table(made.checkpoint, within=within).to_pylist()
        ]
        assert table_rows == [tuple(r[f] for f in fields) for r in rows]
        found[within] = rows
    assert [(r.op_id, r.time_left_ms, r.progress_text) for r in found["10s"]] == [
        ("soon-1", 5_000, "no event yet"),
        ("soon-2", 9_000, "no event yet"),
    ]
    wide = {r.op_id: r for r in found["1h"]}
    assert {"soon-1", "soon-2"} < set(wide)
    assert wide["p-count"].progress_text == "2 of 3 sources" and wide["p-count"].still_needed == 1.0
    assert wide["p-all"].progress_text == "1 of 3 members, missing m1, m3"
    assert wide["p-offset"].progress_text == "lowest key at 4 of 10"
    assert wide["p-sum"].progress_text == "sum 40 of 100"


def test_explain_tells_where_each_kind_of_op_id_is(spark, made):
    stories = {
        s.op_id: s
        for s in explain(
            ["p-count", "c-done", "e-gone", "r-bad", "nowhere"],
            output=made.output,
            checkpoint=made.checkpoint,
            spark=spark,
        )
    }
    assert {k: s.state for k, s in stories.items()} == {
        "p-count": "pending", "c-done": "completed", "e-gone": "expired", "r-bad": "rejected",
        "nowhere": "unknown",
    }  # fmt: skip
    pending = stories["p-count"]
    assert pending.pending["distinct_sources"] == 2 and pending.pending["progress_text"] == "2 of 3 sources"
    assert [d["reason"] for d in pending.duplicates] == ["duplicate_op_id"]
    assert [json.loads(r["raw"])["source"] for r in pending.late_events] == ["r9"]
    assert stories["r-bad"].rejected[0]["reason"] == "missing_target"
    assert [(r["key"], r["reason"]) for r in stories["e-gone"].unmatched_events] == [("ke", "no_operation")]
    assert stories["c-done"].outcome["status"] == "completed"
    assert stories["c-done"].outcome["keys"] == ["kd"]  # a single key, as the outcomes table holds it
    assert "pending in shard" in pending.summary() and stories["nowhere"].notes


def test_status_reads_the_last_batch_and_counts_pending_by_shard(spark, made):
    report = checkpoint_status(made.checkpoint, output=made.output, spark=spark)
    assert report["checkpoint"]["watermark_ms"] == T0 + 35_000
    assert report["checkpoint"]["written_by"] == package_version()  # the version record's
    assert report["checkpoint"]["formats"] == current_formats()
    assert report["pending"] == len(made.final_pending)
    assert report["tables"]["outcomes"]["rows"] == 2  # c-done, e-gone
    assert report["tables"]["rejected"]["rows"] == 3  # r-bad, the duplicate, the late event


def cli(*args: str) -> subprocess.CompletedProcess:
    """The command line in a process that cannot start a JVM: no command here may need one."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "JAVA_HOME": "/nonexistent-java",
    }
    return subprocess.run(
        [sys.executable, "-m", "spark_purgatory", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_command_line_answers_at_risk_and_explain(made):
    risk = cli("at-risk", "--within", "10s", "--checkpoint", made.checkpoint, "--json")
    assert risk.returncode == 0, risk.stderr
    assert [json.loads(line)["op_id"] for line in risk.stdout.splitlines()] == ["soon-1", "soon-2"]
    told = cli(
        "explain", "--output", made.output, "--no-state", "--json", "c-done", "e-gone", "r-bad", "p-count"
    )
    assert told.returncode == 0, told.stderr
    states = {s["op_id"]: (s["state"], len(s["duplicates"])) for s in json.loads(told.stdout)}
    assert states == {
        "c-done": ("completed", 0), "e-gone": ("expired", 0), "r-bad": ("rejected", 0),
        "p-count": ("unknown", 1),
    }  # fmt: skip
    table = cli("explain", "--output", made.output, "--no-state", "e-gone")
    assert table.returncode == 0 and table.stdout.startswith("e-gone: expired at")


def test_the_command_line_answers_pending_status_and_explain_without_a_jvm(made):
    pending = cli("pending", "--checkpoint", made.checkpoint)
    assert pending.returncode == 0 and not pending.stderr, pending.stderr
    assert f"{len(made.final_pending)} pending" in pending.stdout
    assert "1 of 3 members, missing m1, m3" in pending.stdout  # which members are missing
    lines = cli("pending", "--checkpoint", made.checkpoint, "--json")
    rows = [json.loads(line) for line in lines.stdout.splitlines()]
    assert sorted(r["op_id"] for r in rows) == sorted(made.final_pending["op_id"])
    assert {r["op_id"]: r["offsets"] for r in rows}["p-offset"] == {"kx": 12.0, "ky": 4.0}
    status = cli("status", "--checkpoint", made.checkpoint, "--output", made.output, "--json")
    assert status.returncode == 0 and not status.stderr, status.stderr
    report = json.loads(status.stdout)
    assert report["pending"] == len(made.final_pending) and report["pending_from"].startswith("state")
    told = cli(
        "explain", "--checkpoint", made.checkpoint, "--output", made.output, "--json", "p-all", "c-done"
    )
    assert told.returncode == 0 and not told.stderr, told.stderr
    stories = {s["op_id"]: s for s in json.loads(told.stdout)}
    assert stories["p-all"]["state"] == "pending" and stories["p-all"]["pending"]["members_missing"] == [
        "m1",
        "m3",
    ]
    assert stories["c-done"]["state"] == "completed"
    missing = cli("pending", "--checkpoint", "/nonexistent/chk")  # a failure's code and one line
    assert (missing.returncode, missing.stderr) == (
        1,
        "spark-purgatory: no such checkpoint: /nonexistent/chk\n",
    )


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["pending", "--checkpoint", "/nonexistent/chk"], 1, "no such checkpoint: /nonexistent/chk"),
        (["status", "--checkpoint", "{out}"], 1, "not a streaming checkpoint"),
        (["at-risk", "--checkpoint", "{chk}", "--within", "soon"], 2, "not a horizon"),
        (["pending", "--checkpoint", "{chk}", "--set", "purgatory.shards=x"], 2, "purgatory.shards"),
    ],
)
def test_the_command_line_fails_in_one_line(made, args, code, message, capsys):
    """``main`` as the command runs it, in this process (a failing command's own process, its
    exit code and its one line: the test above)."""
    done = main([a.format(out=made.output, chk=made.checkpoint) for a in args])
    err = capsys.readouterr().err
    assert done == code
    assert message in err and len(err.strip().splitlines()) == 1
