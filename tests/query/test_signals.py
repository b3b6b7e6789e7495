"""A signal stops the query cleanly: between micro-batches, flushed, exactly once after.

``PurgatoryQuery.stop_on_signals`` on ``start()``'s handle, in this process: the signal is sent
from inside a micro-batch (the sink's ``on_batch``), so the stop must let that batch finish
and commit, refuse the next, flush what lingers, and a restart must continue exactly once.
SIGTERM and SIGINT take the same handler, here for both; the job (``jobs/purgatory_job.py``)
installs it on each attempt's handle, and gets Ctrl-C (SIGINT to its process group) after a
restart in ``tests/delta/test_crash.py``.
"""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.workload import generate, write_json_lines
from tests.support.crash_harness import reference

pytestmark = pytest.mark.spark


def _committed_batches(checkpoint: str) -> set[int]:
    return {int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit()}


def test_sigterm_then_sigint_stop_the_handle_between_micro_batches_and_a_restart_continues_exactly_once(
    spark, tmp_path
):
    work = generate(400, seed=11, ops_per_second=50)
    ops, events = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops, events, files=6, malformed=0)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    config = PurgatoryConfig(
        shards=2,
        watermark_delay="2 seconds",
        accumulator_linger_ms=3_600_000,  # nothing is committed but by the stop
        source_max_files_per_trigger=1,
    )
    signalled: dict[int, int] = {}

    def signal_inside(signum: int, at_batch: int):
        def on_batch(figures: dict) -> None:  # runs inside the micro-batch, on Spark's thread
            if figures["batch_id"] == at_batch and not signalled:
                signalled[signum] = at_batch
                os.kill(os.getpid(), signum)

        return on_batch

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    flushed = []
    try:
        for signum, at_batch in ((signal.SIGTERM, 1), (signal.SIGINT, 3)):
            signalled.clear()
            q = start(
                ops,
                events,
                output=out,
                checkpoint=chk,
                config=config,
                trigger="processing-time=500 milliseconds",
                on_batch=signal_inside(signum, at_batch),
            ).stop_on_signals()
            with q:
                q.await_termination()  # returns once the signal stopped the query
                # stopped, not failed (a micro-batch triggered between the stop's refusal and
                # Spark's stop is refused: Spark records that, the handle does not count it)
                assert not q.is_active and q.exception() is None
                assert at_batch in _committed_batches(chk)  # the signalled batch finished and committed
                assert q.accumulator.destinations(), "rows lingered until the stop"
            assert signalled == {signum: at_batch}
            assert q.accumulator.destinations() == []  # leaving the block flushed them
            flushed.append(q.totals["commits"])
            # the handler is given back after the first signal
            assert signal.getsignal(signum) is before[signum]
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    assert all(flushed)
    with start(ops, events, output=out, checkpoint=chk, config=config) as q:  # the rest
        q.await_termination()
    got = DeltaTable(os.path.join(out, "outcomes")).to_pandas()
    assert got["op_id"].is_unique
    expected, _ = reference(work, config)
    resolved = {
        (r.op_id, r.status, int(pd.Timestamp(r.resolved_at).value // 1_000_000)) for r in got.itertuples()
    }
    assert resolved == {(r.op_id, r.status, int(r.resolved_at)) for r in expected.itertuples()}
