"""kill -9 the job at each accumulator fault point and at a random moment; exactly once after."""

from __future__ import annotations

import pytest
from crash_harness import check, run

pytestmark = pytest.mark.spark


def test_job_survives_kill_minus_nine_with_exactly_once_outputs(tmp_path):
    plan = ["fault=committed:1", "fault=manifest:1", "fault=staged:3", "random"]
    result = run(str(tmp_path / "crash"), n_ops=1200, files=10, plan=plan, feed_seconds=2.0, seed=3)
    killed = [k for k in result["kills"] if k["returncode"] == -9 and k["reached"]]
    assert len(killed) == len(plan), result["kills"]  # every run died by SIGKILL where planned
    check(result)
