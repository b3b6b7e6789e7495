"""The shard task's log line (``PURGATORY_STATE_LOG=1``): its spans between the clock's readings."""

from __future__ import annotations

import json

from spark_purgatory.spark.operator import _log_task


def test_the_task_line_gives_each_span_between_the_clocks_readings_and_the_workers_cpu(capsys):
    _log_task(28_000, 1_700_000_000.25, [10.0, 10.004, 10.204, 10.205, 10.215], 0.1604)
    line = capsys.readouterr().err.strip()
    assert line.startswith("purgatory-task ")
    figures = json.loads(line.removeprefix("purgatory-task "))
    assert figures == {
        "rows": 28_000,
        "began_ms": 1_700_000_000_250,
        "input_ms": 4,
        "step_ms": 200,
        "output_ms": 1,
        "after_ms": 10,
        "cpu_ms": 160,
    }
