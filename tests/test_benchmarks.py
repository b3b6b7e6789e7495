"""The side-by-side benchmark runs end to end at a tiny size, so the harness cannot rot.

Speed is not asserted here (benchmarks print measured ratios; see the README); this checks
that every contender runs on real Spark, that the operator agrees with Spark's join on every
completed order, and that the report prints each target beside its figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_comparison_and_scaling_harness_runs_and_agrees_with_the_join(tmp_path):
    figures_file = tmp_path / "figures.json"
    run = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "bench_operator.py"),
            "--smoke",
            "--json",
            str(figures_file),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    for contender in (
        "stateless floor",
        "operator, no-op sink",
        "operator + accumulator (Delta)",
        "stream-stream left-outer join",
        "per-key applyInPandasWithState",
    ):
        assert contender in out
    assert "agreement with the join: yes" in out
    for target in ("target >= 3.0x", "target >= 50.0x", "target <= 1.25x", "target <= 2.0x"):
        assert target in out
    figures = json.loads(figures_file.read_text())["figures"]
    assert figures["agree"] == 1.0
    assert set(figures) >= {"vs_join", "vs_per_key", "vs_floor", "scaling"}
    assert all(value > 0 for value in figures.values())
