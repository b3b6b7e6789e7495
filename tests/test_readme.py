"""The README's examples, pasted as they stand, run and write what the engine computes.

Every ```python block in README.md preceded by a ``<!-- readme-test: NAME -->`` line is taken,
in order, into one script (the blocks share a session and variables, as in one notebook).  The
script runs in a fresh Python with a plain ``SparkSession.builder...getOrCreate()`` session (the
README creates it) and the README's prefix ``/tmp/spark-purgatory-readme/`` replaced by a
temporary directory.  Then the Delta tables it wrote are read back with delta-rs and compared
with the Spark-free engine (``PurgatoryTester``) on the same input files:

* ``tables/`` (the stream, ``start``) with the engine at the stream's final watermark, read
  from the checkpoint's offset log;
* ``backfill/`` (``backfill``) with the engine once every deadline has passed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig
from spark_purgatory.testing import PurgatoryTester, assert_outcomes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PREFIX = "/tmp/spark-purgatory-readme"
#: the blocks the README must carry (more may follow)
REQUIRED = ("stream", "batch")
COMPARED = ("op_id", "status", "resolved_at", "matched_events")
_BLOCK = re.compile(r"^<!-- readme-test: ([\w-]+) -->\s*\n```python\n(.*?)^```", re.S | re.M)


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(name, code) of every marked ```python block, in order."""
    return _BLOCK.findall(text)


def test_blocks_are_found_by_their_marker_only():
    text = (
        "<!-- readme-test: a -->\n```python\nx = 1\n```\n\n```python\nskipped = 1\n```\n"
        "<!-- readme-test: b-2 -->\n```python\ny = x\n```\n"
    )
    assert readme_blocks(text) == [("a", "x = 1\n"), ("b-2", "y = x\n")]


def run_readme(tmp_path) -> str:
    """Run the README's marked blocks as one script with ``PREFIX`` under ``tmp_path``."""
    with open(README, encoding="utf-8") as f:
        blocks = readme_blocks(f.read())
    names = [name for name, _ in blocks]
    assert set(REQUIRED) <= set(names), f"README.md marks {names}, expected at least {list(REQUIRED)}"
    base = str(tmp_path / "readme")
    script = "\n\n".join(f"# --- readme-test: {name}\n{code}" for name, code in blocks)
    path = tmp_path / "readme_examples.py"
    path.write_text(script.replace(PREFIX, base), encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
        PYSPARK_PYTHON=sys.executable,  # the workers on this interpreter, as a user's venv does
        PYSPARK_DRIVER_PYTHON=sys.executable,
        # the README's plain session would open Spark's UI; with tests in parallel, no port to share
        PYSPARK_SUBMIT_ARGS="--conf spark.ui.enabled=false pyspark-shell",
    )
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"the README's examples failed:\n{done.stderr[-4000:]}"
    return base


def json_lines(directory: str) -> list[dict]:
    """The parseable rows of a directory of JSON-lines files (the README writes no bad ones)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def final_watermark(checkpoint: str) -> int:
    """The watermark of the stream's last micro-batch, from Spark's offset log."""
    logs = [p for p in os.listdir(os.path.join(checkpoint, "offsets")) if p.isdigit()]
    with open(os.path.join(checkpoint, "offsets", max(logs, key=int)), encoding="utf-8") as f:
        return int(json.loads(f.read().splitlines()[1])["batchWatermarkMs"])


def engine(base: str, config: PurgatoryConfig, watermark_ms: int) -> PurgatoryTester:
    """The engine over the README's input: everything at watermark 0, then ``watermark_ms``."""
    tester = PurgatoryTester(config)
    tester.add_operations(json_lines(os.path.join(base, "input", "ops")))
    tester.add_events(json_lines(os.path.join(base, "input", "events")))
    tester.step()
    tester.advance_watermark(watermark_ms)
    tester.step()
    return tester


@pytest.mark.spark
def test_the_readme_examples_run_and_write_the_engines_outcomes(tmp_path):
    base = run_readme(tmp_path)
    config = PurgatoryConfig(shards=2, watermark_delay="5 seconds")  # the README's

    streamed = DeltaTable(os.path.join(base, "tables", "outcomes")).to_pandas()
    at_the_end = engine(base, config, final_watermark(os.path.join(base, "checkpoint")))
    assert len(streamed) > 0 and at_the_end.pending > 0, "the stream should end with some still waiting"
    assert_outcomes(streamed, at_the_end.outcomes(), columns=COMPARED)

    backfilled = DeltaTable(os.path.join(base, "backfill", "outcomes")).to_pandas()
    ops = json_lines(os.path.join(base, "input", "ops"))
    past_every_deadline = max(_ms(o["ts"]) + int(o["timeout_ms"]) for o in ops) + config.tick_ms
    resolved = engine(base, config, past_every_deadline)
    assert resolved.pending == 0
    assert_outcomes(backfilled, resolved.outcomes(), columns=COMPARED)
    unmatched = DeltaTable(os.path.join(base, "backfill", "unmatched_events")).to_pandas()
    assert len(unmatched) == len(resolved.unmatched())


def _ms(ts: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
