"""The command line without Spark: usage errors, one-line errors, and the table-only questions.

A checkpoint's logs are written here as Spark writes them (``offsets/N``, ``commits/N``), and
the tables with delta-rs, so ``status --no-state`` and ``explain --no-state`` run in
milliseconds; the Spark-backed commands run on a real checkpoint in ``test_inspect``.
"""

from __future__ import annotations

import datetime as dt
import json
import os

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_purgatory.cli import _one_line, main
from spark_purgatory.contract import COUNTS, METRICS, OUTCOMES, REJECTED, UNMATCHED_EVENTS
from spark_purgatory.inspect.checkpoint import InspectError

T0 = 1_767_225_600_000


def fake_checkpoint(root, batches: int = 3, watermark: int = T0 + 30_000) -> str:
    chk = os.path.join(root, "chk")
    for log in ("offsets", "commits", "state/0/0"):
        os.makedirs(os.path.join(chk, log), exist_ok=True)
    meta = {
        "batchWatermarkMs": watermark,
        "batchTimestampMs": T0,
        "conf": {"spark.sql.shuffle.partitions": "3"},
    }
    for batch in range(batches):
        with open(os.path.join(chk, "offsets", str(batch)), "w") as f:
            f.write("v1\n" + json.dumps(meta) + '\n{"logOffset":0}\n')
        with open(os.path.join(chk, "commits", str(batch)), "w") as f:
            f.write("v1\n" + json.dumps({"nextBatchWatermarkMs": watermark}))
    with open(os.path.join(chk, "offsets", str(batches)), "w") as f:  # started, not committed
        f.write("v1\n" + json.dumps(meta) + "\n")
    with open(os.path.join(chk, "purgatory-id"), "w") as f:
        f.write("spark-purgatory-test")
    return chk


def ts(ms: int):
    return pa.scalar(T0 + ms, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")).as_py()


def write(root: str, contract, rows: list[dict], extra: dict | None = None) -> None:
    schema = contract.schema
    for name, kind in (extra or {}).items():
        schema = schema.append(pa.field(name, kind))
    full = [{f.name: r.get(f.name) for f in schema} for r in rows]
    write_deltalake(os.path.join(root, contract.name), pa.Table.from_pylist(full, schema=schema))


@pytest.fixture
def tables(tmp_path):
    out = str(tmp_path / "out")
    write(out, OUTCOMES, [
        {"op_id": "done", "keys": ["k1"], "status": "completed", "op_ts": ts(0), "deadline": ts(5_000),
         "resolved_at": ts(20), "latency_ms": 20, "matched_events": 1, "progress": 1.0, "condition": "any",
         "batch_id": 0},
        {"op_id": "gone", "keys": ["k2"], "status": "expired", "op_ts": ts(0), "deadline": ts(1_000),
         "resolved_at": ts(1_000), "latency_ms": 1_000, "matched_events": 0, "progress": 0.0,
         "condition": "any", "batch_id": 1},
        {"op_id": "vote", "keys": ["k4"], "status": "expired", "op_ts": ts(0), "deadline": ts(1_000),
         "resolved_at": ts(1_000), "latency_ms": 1_000, "matched_events": 2, "progress": 1.0,
         "condition": "quorum", "target": 2.0, "reported": ["bo"], "missing": ["ana", "chen"], "batch_id": 1},
    ])  # fmt: skip
    write(out, UNMATCHED_EVENTS, [
        {"key": "k2", "ts": ts(2_000), "reason": "no_operation", "batch_id": 2},
        {"key": "k2", "ts": ts(9_000_000), "reason": "no_operation", "batch_id": 9},  # hours later
        {"key": "k1", "ts": ts(30), "op_id": "done", "reason": "after_resolution", "batch_id": 1},  # read 2x
    ])  # fmt: skip
    raw = [
        ("operations", {"op_id": "bad", "keys": ["k3"], "ts": T0, "timeout_ms": 5, "condition": "sum"},
         "missing_target"),
        ("operations", {"op_id": "done", "keys": ["k1"], "ts": T0 + 9, "timeout_ms": 5}, "duplicate_op_id"),
        ("operations", {"op_id": "done-2", "keys": ["k1"], "ts": T0 + 9, "timeout_ms": 5}, "late"),
        ("events", {"key": "k2", "ts": T0 + 500}, "late"),
    ]  # fmt: skip
    write(
        out,
        REJECTED,
        [{"source": s, "raw": json.dumps(r), "reason": why, "batch_id": 1} for s, r, why in raw],
    )
    return out


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_explain_without_state_reads_only_the_tables(tables, capsys):
    code, out, err = run(capsys, "explain", "--output", tables, "--json", "done", "gone", "bad", "nowhere")
    assert code == 0, err
    stories = {s["op_id"]: s for s in json.loads(out)}
    assert {k: s["state"] for k, s in stories.items()} == {
        "done": "completed", "gone": "expired", "bad": "rejected", "nowhere": "unknown",
    }  # fmt: skip
    assert [d["reason"] for d in stories["done"]["duplicates"]] == ["duplicate_op_id"]  # "done-2" is not it
    assert [e["reason"] for e in stories["done"]["unmatched_events"]] == ["after_resolution"]
    assert [e["batch_id"] for e in stories["gone"]["unmatched_events"]] == [2]  # in its window only
    assert [json.loads(e["raw"])["key"] for e in stories["gone"]["late_events"]] == ["k2"]
    assert stories["bad"]["rejected"][0]["reason"] == "missing_target"
    assert stories["nowhere"]["notes"]


def test_explain_shows_who_answered_a_resolved_quorum(tables, capsys):
    code, out, err = run(capsys, "explain", "--output", tables, "vote", "gone")
    assert code == 0, err
    assert "  answered: reported bo; missing ana, chen" in out.splitlines()
    assert out.count("answered:") == 1  # not for an ``any``
    code, out, err = run(capsys, "explain", "--output", tables, "--json", "vote")
    (story,) = json.loads(out)
    assert (story["outcome"]["reported"], story["outcome"]["missing"]) == (["bo"], ["ana", "chen"])


def test_explain_reads_an_outcomes_table_written_before_who_answered(tmp_path, capsys):
    out = str(tmp_path / "out")
    older = pa.schema([f for f in OUTCOMES.schema if f.name not in ("reported", "missing")])
    row = {"op_id": "old", "keys": ["k"], "status": "expired", "op_ts": ts(0), "deadline": ts(9),
           "resolved_at": ts(9), "latency_ms": 9, "matched_events": 0, "progress": 0.0, "condition": "all",
           "batch_id": 0}  # fmt: skip
    write_deltalake(os.path.join(out, "outcomes"), pa.Table.from_pylist([row], schema=older))
    write(out, REJECTED, [])
    write(out, UNMATCHED_EVENTS, [])
    code, text, err = run(capsys, "explain", "--output", out, "old")
    assert code == 0, err
    assert text.startswith("old: expired") and "answered" not in text


def test_explain_uses_the_op_id_and_key_columns_of_rejected_when_present(tmp_path, capsys):
    out = str(tmp_path / "out")
    rows = [
        {"source": "operations", "raw": "not json at all", "reason": "malformed_json", "batch_id": 0,
         "op_id": "x-1", "key": None},
        {"source": "events", "raw": "{}", "reason": "late", "batch_id": 0, "op_id": None, "key": "kx"},
    ]  # fmt: skip
    extra = {} if "op_id" in REJECTED.schema.names else {"op_id": pa.string(), "key": pa.string()}
    write(out, REJECTED, rows, extra)
    write(out, OUTCOMES, [])
    write(out, UNMATCHED_EVENTS, [])
    code, text, err = run(capsys, "explain", "--output", out, "--json", "x-1")
    assert code == 0, err
    (story,) = json.loads(text)
    assert (story["state"], story["rejected"][0]["reason"]) == ("rejected", "malformed_json")


def test_status_without_state_reads_the_logs_and_the_tables(tmp_path, tables, capsys):
    chk = fake_checkpoint(str(tmp_path))
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["checkpoint"]["last_committed_batch"] == 2 and report["checkpoint"]["running_batch"] == 3
    assert report["checkpoint"]["watermark"] == "2026-01-01T00:00:30+00:00"
    # a stopped query: expiries wait on Spark's watermark, which status names first
    assert list(report["checkpoint"])[:2] == ["expiry_watermark", "expiry_watermark_is"]
    assert report["checkpoint"]["expiry_watermark"] == report["checkpoint"]["watermark"]
    assert report["checkpoint"]["expiry_watermark_is"].startswith("Spark's watermark of the last committed")
    assert report["checkpoint"]["groups"] == 3 and report["checkpoint"]["app_id"] == "spark-purgatory-test"
    assert {name: t["rows"] for name, t in report["tables"].items()} == {
        "outcomes": 3, "unmatched_events": 3, "rejected": 4,
    }  # fmt: skip
    assert report["pending_by_shard"] is None and any("metrics table" in n for n in report["notes"])
    code, out, _ = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state")
    assert code == 0 and "last_committed_batch" in out and "note: no metrics table" in out
    assert out.index("expiry watermark (decides expiries now)") < out.index(
        "watermark (Spark's, last committed"
    )


def test_status_names_the_operators_clock_when_it_decides_expiries():
    """During a silence the operator's clock (the wall clock less its lag) is ahead of Spark's
    watermark, and it is what expires operations."""
    from spark_purgatory.inspect.countdown import Countdown, iso_text
    from spark_purgatory.inspect.status import _expiry_watermark

    on_clock = _expiry_watermark(
        Countdown(floor_ms=60_000, now_ms=100_000, lag_ms=5_000, on_clock_ms=90_000), 60_000
    )
    assert (
        on_clock["expiry_watermark"] == iso_text(95_000)
        and "operator's clock" in on_clock["expiry_watermark_is"]
    )
    rows_arrive = _expiry_watermark(
        Countdown(floor_ms=60_000, now_ms=100_000, lag_ms=5_000, on_clock_ms=120_000), 60_000
    )
    assert (
        rows_arrive["expiry_watermark"] == iso_text(60_000)
        and "Spark's" in rows_arrive["expiry_watermark_is"]
    )
    assert _expiry_watermark(Countdown(), None)["expiry_watermark"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["pending"], "pending needs --checkpoint"),
        (["explain", "x"], "explain needs --output"),
        (["at-risk", "--checkpoint", "/c", "--within", "soon"], "not a horizon"),
        (["pending", "--checkpoint", "/c", "--set", "purgatory.shard=2"], "unknown configuration key"),
        (["pending", "--checkpoint", "/c", "--conf", "/no/such.conf"], "no such file"),
    ],
)
def test_usage_errors_exit_2_in_one_line(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_argparse_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["frobnicate"])
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda root: os.path.join(root, "missing"), "no such checkpoint"),
        (lambda root: root, "not a streaming checkpoint"),
        (lambda root: fake_checkpoint(root, batches=0), "no committed micro-batch yet"),
    ],
)
def test_questions_that_cannot_be_answered_exit_1_in_one_line(tmp_path, capsys, make, message):
    code, _, err = run(capsys, "pending", "--checkpoint", make(str(tmp_path)))
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1


def test_a_checkpoint_without_operator_state_is_not_a_purgatory_checkpoint(tmp_path, capsys):
    chk = fake_checkpoint(str(tmp_path))
    os.rename(os.path.join(chk, "state"), os.path.join(chk, "elsewhere"))
    code, _, err = run(capsys, "at-risk", "--checkpoint", chk, "--within", "1h")
    assert code == 1 and "not a purgatory checkpoint" in err


def test_an_unreadable_state_version_is_told_in_one_line():
    """What a Spark task's failure looks like when the state value has another format."""
    trace = (
        "An error occurred while calling o99.count.\n: org.apache.spark.SparkException: Job aborted\n"
        'pyspark.errors.exceptions.base.PySparkRuntimeError: ...\n  File "pending.py", line 9\n'
        "spark_purgatory.inspect.checkpoint.InspectError: unreadable state version at batch 4: "
        "unsupported purgatory state format '1' (this version reads 2): start a new checkpoint\n\tat java..."
    )
    assert _one_line(RuntimeError(trace)) == (
        "unreadable state version at batch 4: unsupported purgatory state format '1' (this version reads 2): "
        "start a new checkpoint"
    )
    assert _one_line(InspectError("no such checkpoint: /x")) == "no such checkpoint: /x"


def test_status_takes_each_shards_last_metrics_row_and_each_inputs_watermark(tmp_path, tables, capsys):
    chk = fake_checkpoint(str(tmp_path))
    marks = {1: (ts(1_000), ts(900)), 2: (ts(2_000), ts(1_500))}
    rows = [  # shard 1 had nothing to do in batch 2: its last count is batch 1's
        {"shard": shard, "batch_id": batch, "pending": pending, "operations_watermark": marks[batch][0],
         "events_watermark": marks[batch][1]}
        for shard, batch, pending in ((0, 1, 5), (1, 1, 7), (0, 2, 4))
    ]  # fmt: skip
    metrics = pa.schema([("shard", pa.int32()), ("batch_id", pa.int64()), ("pending", pa.int64()),
                         ("operations_watermark", pa.timestamp("us", tz="UTC")),
                         ("events_watermark", pa.timestamp("us", tz="UTC"))])  # fmt: skip
    write_deltalake(os.path.join(tables, "metrics"), pa.Table.from_pylist(rows, schema=metrics))
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["pending_by_shard"] == {"0": 4, "1": 7} and report["pending"] == 11
    assert report["input_watermarks"] == {
        "operations_watermark": "2026-01-01T00:00:02+00:00",
        "events_watermark": "2026-01-01T00:00:01.500000+00:00",
    }
    assert report["last_batch"]["batch_id"] == 2 and report["tables"]["metrics"]["rows"] == 3


def test_status_counts_every_outcome_status_warnings_and_rejects_of_the_last_micro_batch(
    tmp_path, tables, capsys
):
    chk = fake_checkpoint(str(tmp_path))
    counts = dict(zip(COUNTS, (5, 4, 3, 2, 1, 6), strict=True))  # cancelled 3, warned 6
    write(tables, METRICS, [{"shard": 0, "batch_id": 2, "pending": 1, **counts}])
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["last_batch"]["rows"]
    assert {name: row[name] for name in COUNTS} == counts
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state")
    assert code == 0, err
    table = out[out.index("metrics, batch 2") : out.index("tables")]
    cells = " ".join(table.replace("│", " ").replace("┃", " ").split())
    assert "pending completed expired cancelled unmatched rejected warned" in cells
    assert " 1 5 4 3 2 1 6 " in cells  # pending, then the counts


def test_status_and_at_risk_show_how_late_expiries_were_decided(tmp_path, tables, capsys):
    """``metrics.expiry_lag_ms``: the last micro-batch that expired something, and the worst;
    not the end of input's call, whose expiries were not late (a table written before its lag
    was null holds a negative one there, under the end watermark)."""
    chk = fake_checkpoint(str(tmp_path))
    end = dt.datetime(2200, 1, 8, tzinfo=dt.timezone.utc)  # end_watermark_ms's year
    rows = [
        {"shard": 0, "batch_id": 1, "pending": 3, "expiry_lag_ms": 9_500, "watermark": ts(1_000)},
        {"shard": 1, "batch_id": 1, "pending": 1, "expiry_lag_ms": 2_000, "watermark": ts(1_000)},
        {"shard": 0, "batch_id": 2, "pending": 2, "expiry_lag_ms": 3_100, "watermark": None},
        {
            "shard": 0,
            "batch_id": 3,
            "pending": 2,
            "expiry_lag_ms": None,
            "watermark": ts(2_000),
        },  # none expired
        {
            "shard": 0,
            "batch_id": 4,
            "pending": 0,
            "expiry_lag_ms": -411_700,
            "watermark": end,
        },  # end of input
    ]
    schema = pa.schema([("shard", pa.int32()), ("batch_id", pa.int64()), ("pending", pa.int64()),
                        ("expiry_lag_ms", pa.int64()),
                        ("watermark", pa.timestamp("us", tz="UTC"))])  # fmt: skip
    write_deltalake(os.path.join(tables, "metrics"), pa.Table.from_pylist(rows, schema=schema))
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state", "--json")
    assert code == 0, err
    assert json.loads(out)["expiry_lag"] == {"batch_id": 2, "last_ms": 3_100, "max_ms": 9_500}
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--output", tables, "--no-state")
    assert code == 0, err
    assert "last 3.1 s (batch 2), largest 9.5 s" in " ".join(out.split())


def test_status_falls_back_to_the_sinks_pending_record(tmp_path, capsys):
    chk = fake_checkpoint(str(tmp_path))
    with open(os.path.join(chk, "purgatory-pending"), "w") as f:
        f.write(json.dumps({"batch_id": 2, "pending": {"1": 3, "0": 2}}))
    code, out, err = run(capsys, "status", "--checkpoint", chk, "--no-state", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["pending_by_shard"] == {"0": 2, "1": 3} and "purgatory-pending" in report["pending_from"]
