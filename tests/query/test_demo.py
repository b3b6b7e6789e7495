"""The demo without Spark (``--engine-only``).  The README's first command itself, at its
default size, runs in ``test_readme.py``: what it prints, its tables and its pictures."""

from __future__ import annotations

from spark_purgatory import demo


def test_engine_only_demo_runs_without_spark(capsys):
    demo.main(["--engine-only", "--ops", "2000"])
    assert "duplicates: 0" in capsys.readouterr().out
