"""The README's first command, at a small size: input generated, job run, tables and plots."""

from __future__ import annotations

import os
import re

import pytest
from deltalake import DeltaTable

from spark_purgatory import demo

pytestmark = pytest.mark.spark


def test_demo_produces_delta_tables_summary_and_plots(spark, tmp_path, capsys):
    out = str(tmp_path / "demo")
    demo.main(["--ops", "500", "--out", out, "--files", "6"])
    printed = capsys.readouterr().out
    assert "duplicates: 0" in printed
    # the input is ended: nothing pending, and the output says what the end expired
    ended = re.search(r"still pending: 0 \(input ended after micro-batch \d+: ([\d,]+) operations", printed)
    assert ended and int(ended.group(1).replace(",", "")) > 0, printed
    counts = re.search(r"outcomes: ([\d,]+) for ([\d,]+) operations, duplicates: 0", printed)
    assert counts and counts.group(1) == counts.group(2), printed
    for table in ("outcomes", "rejected"):
        assert DeltaTable(os.path.join(out, "tables", table)).to_pyarrow_table().num_rows > 0
    for png in ("latency_histogram.png", "outcomes_over_time.png"):
        path = os.path.join(out, "tables", png)
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_engine_only_demo_runs_without_spark(capsys):
    demo.main(["--engine-only", "--ops", "2000"])
    assert "duplicates: 0" in capsys.readouterr().out
