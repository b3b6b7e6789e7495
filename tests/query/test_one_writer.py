"""One writer per output: a second query on the same checkpoint, or on the same output tables
from another checkpoint, is refused at start in one line; taking the output over is on purpose.

The job's refusals come before its Spark session starts (``job.run``), so they cost no JVM;
``start()``'s own come from the lease (``state.layout.RunLease``) and the tables' recorded
owner (``delta.ownership``).  Catalog tables: ``tests/delta/test_catalog.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.delta.ownership import OutputOwnedError, owner_of
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.query import app_id_of
from spark_purgatory.state.layout import CheckpointBusyError, RunLease
from spark_purgatory.workload import generate, write_json_lines

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")


def _job(ops: str, events: str, out: str, chk: str, *extra: str) -> subprocess.CompletedProcess:
    args = ["--ops-path", ops, "--events-path", events, "--output-path", out, "--checkpoint-path", chk]
    return subprocess.run(
        [sys.executable, JOB, *args, "--set", "job.master=local[1]", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_second_writer_is_refused_in_one_line_and_taking_the_output_over_is_on_purpose(spark, tmp_path):
    work = generate(200, seed=21, ops_per_second=50)
    ops, events = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops, events, files=2, malformed=0)
    out, chk_a, chk_b = str(tmp_path / "out"), str(tmp_path / "chk-a"), str(tmp_path / "chk-b")
    config = PurgatoryConfig(shards=2, watermark_delay="2 seconds")
    first = start(ops, events, output=out, checkpoint=chk_a, config=config, trigger="processing-time=1s")
    try:
        first.process_all_available()
        same_checkpoint = _job(ops, events, str(tmp_path / "elsewhere"), chk_a)
        same_output = _job(ops, events, out, chk_b)
        with pytest.raises(CheckpointBusyError, match="started in this process: stop it first"):
            start(ops, events, output=out, checkpoint=chk_a, config=config)
        with pytest.raises(
            OutputOwnedError, match=f"belongs to the query of checkpoint {chk_a}, not {chk_b}"
        ):
            start(ops, events, output=out, checkpoint=chk_b, config=config)
        assert RunLease(chk_b).holder() is None  # the refused start gave its lease back
    finally:
        first.stop()
    for refused, says in (
        (same_checkpoint, f"error: a query runs on {chk_a} "),
        (same_output, f"error: output table {out}/"),
    ):
        assert refused.returncode == 2, refused.stderr[-2000:]
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(says), refused.stderr[-2000:]
    assert not os.path.exists(os.path.join(tmp_path, "elsewhere"))  # refused before anything was written
    writer = DeltaRsWriter(out)
    assert owner_of(writer, "outcomes") == (app_id_of(chk_a), chk_a)
    took_over = PurgatoryConfig(shards=2, watermark_delay="2 seconds", output_take_over=True)
    with start(ops, events, output=out, checkpoint=chk_b, config=took_over) as q:
        q.await_termination()
    assert owner_of(writer, "metrics") == (app_id_of(chk_b), chk_b)
    with pytest.raises(OutputOwnedError, match=f"checkpoint {chk_b}, not {chk_a}"):  # the old owner's
        start(ops, events, output=out, checkpoint=chk_a, config=config)
