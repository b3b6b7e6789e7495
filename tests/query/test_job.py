"""The job as users run it: the command line, Delta tables out, a second run continuing.

The command line's refusals run ``jobs/purgatory_job.py`` in a process of its own (they end
before a session starts); the runs are its ``main`` in the worker's session (a job process
with a JVM of its own is every crash test's, and ``make demo``'s progress lines on a fresh
process's standard output are ``test_readme.py``'s)."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from spark_purgatory import job
from spark_purgatory.workload import Workload, generate
from tests.support.stream_helpers import arriving_input

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")


def read(path: str, table: str):
    return DeltaTable(os.path.join(path, table)).to_pyarrow_table()


def with_votes(work: Workload) -> Workload:
    """``work`` and two quorums of 2 of ana/bo/chen: ``vote-1`` hears bo and a non-member (it
    expires), ``vote-2`` chen then ana (it completes; bo reports after)."""
    t0 = int(work.operations["ts"].min())
    quorum = {"timeout_ms": 5_000, "condition": "quorum", "target": 2.0, "members": ["ana", "bo", "chen"]}
    votes = [
        {"op_id": v, "keys": [v], "ts": t0 + 1_000, "payload": None, **quorum} for v in ("vote-1", "vote-2")
    ]
    said = [("vote-1", 2_000, "bo"), ("vote-1", 2_500, "zed"), ("vote-2", 1_500, "chen")]
    said += [("vote-2", 1_800, "ana"), ("vote-2", 2_200, "bo")]
    events = [
        {"key": k, "ts": t0 + at, "op_id": None, "source": who, "value": float("nan")} for k, at, who in said
    ]
    return Workload(
        pd.concat([work.operations, pd.DataFrame(votes)], ignore_index=True).sort_values("ts", kind="stable"),
        pd.concat([work.events, pd.DataFrame(events)], ignore_index=True).sort_values("ts", kind="stable"),
        work.expected_completed + 1,
    )


def test_bad_configuration_stops_the_job_at_start_naming_the_key(tmp_path, capsys):
    """The script's exit code and standard error in a process of its own; the other refusals
    through its ``main`` (the script is ``sys.exit(console())``, and ``console`` is ``main``)."""
    base = ["--ops-path", "x", "--events-path", "y", "--output-path", "z", "--checkpoint-path", str(tmp_path)]
    bad = subprocess.run(
        [sys.executable, JOB, *base, "--set", "purgatory.tick.ms=soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "purgatory.tick.ms must be an integer" in bad.stderr
    assert job.main([*base, "--set", "purgatory.tick=5"]) == 2
    unknown = capsys.readouterr().err
    assert "unknown configuration key 'purgatory.tick'" in unknown
    assert "purgatory.tick.ms" in unknown  # the allowed keys are listed
    assert job.main([*base, "--trigger", "sometimes"]) == 2
    assert "available-now" in capsys.readouterr().err


@pytest.mark.spark
def test_job_writes_delta_tables_and_continues_from_the_checkpoint(spark, tmp_path, capsys):
    # the watermark is the slower input's (the operations end 15 s in): short timeouts expire
    work = with_votes(generate(1500, seed=11, ops_per_second=100, timeout_ms=5_000))
    ops, events, deliver = arriving_input(tmp_path / "data", work, files=6, malformed=4)

    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    args = [
        "--ops-path",
        str(ops),
        "--events-path",
        str(events),
        "--output-path",
        out,
        "--checkpoint-path",
        chk,
        "--conf",
        os.path.join(ROOT, "conf", "local.conf"),
        "--set",
        "source.max.files.per.trigger=1",
        "--set",
        "watermark.delay=2 seconds",
    ]

    deliver(range(0, 1))  # one micro-batch, then the rest in a second run
    assert job.main(args) == 0, capsys.readouterr().err[-3000:]  # the command line's exit code
    printed = capsys.readouterr().out
    assert "batch     0" in printed and "pending" in printed  # the progress line, on standard output
    after_first = read(out, "outcomes").num_rows
    assert after_first > 0

    deliver(range(1, 6))
    totals = job.run(job.parse_args(args))  # a second run on the checkpoint the first left
    assert totals["batches"] >= 1

    outcomes = read(out, "outcomes")
    ids = outcomes.column("op_id").to_pylist()
    assert len(ids) == len(set(ids)), "an operation has two outcomes"
    assert len(ids) > after_first
    assert set(ids) <= set(work.operations["op_id"])
    statuses = set(outcomes.column("status").to_pylist())
    assert statuses == {"completed", "expired"}
    latency = pc.subtract(
        pc.cast(outcomes.column("resolved_at"), "int64"), pc.cast(outcomes.column("op_ts"), "int64")
    )
    assert pc.all(pc.equal(pc.divide(latency, 1000), outcomes.column("latency_ms"))).as_py()
    rejected = read(out, "rejected")
    assert rejected.num_rows == 4 and set(rejected.column("source").to_pylist()) == {"operations", "events"}
    assert totals["pending"] == len(work.operations) - len(ids)
    # who answered, in the table: each quorum's, and every ``all``'s members split in two
    who = outcomes.select(["op_id", "status", "reported", "missing"]).to_pylist()
    answered = {r["op_id"]: r for r in who}
    assert [tuple(answered[v].values())[1:] for v in ("vote-1", "vote-2")] == [
        ("expired", ["bo"], ["ana", "chen"]),
        ("completed", ["ana", "chen"], ["bo"]),
    ]
    members = work.operations.set_index("op_id")["members"]
    alls = set(work.operations.query("condition == 'all'")["op_id"])
    of_all = [o for o in answered.values() if o["op_id"] in alls]
    assert of_all and all(sorted(o["reported"] + o["missing"]) == sorted(members[o["op_id"]]) for o in of_all)


def test_without_purgatory_shards_the_job_leaves_the_count_to_the_checkpoint_or_the_session():
    """Not configured: ``run`` takes the checkpoint's count, or the session's parallelism
    (``state.layout.default_shards``, tested with Spark in ``test_rescale_spark.py``)."""
    base = ["--ops-path", "o", "--events-path", "e", "--output-path", "t", "--checkpoint-path", "c"]
    assert not job.parse_args(base).shards_configured
    assert job.parse_args([*base, "--set", "purgatory.shards=3"]).shards_configured
    local = os.path.join(ROOT, "conf", "local.conf")  # make demo's: 2 shards, said
    assert job.parse_args([*base, "--conf", local]).shards_configured
