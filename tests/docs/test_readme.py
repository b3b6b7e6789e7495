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

import ast
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
from tests.support.docs_tables import config_table_problems, section

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def test_every_python_block_of_the_readme_runs_here():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    python_blocks = re.findall(r"^```python\n", text, re.M)
    assert len(python_blocks) == len(readme_blocks(text)), "a ```python block without a readme-test marker"


def test_the_readme_is_a_front_door_of_at_most_400_lines():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 400
    assert "(docs/contract.md)" in text  # the contract is a page of the docs, linked from here


def test_the_readme_configuration_table_is_the_codes():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert config_table_problems(section(text, "Configuration")) == []


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


# -- what the demo prints ----------------------------------------------------------------------------

DEMO_MARK = "<!-- demo-output -->"
#: figures that depend on the machine's speed or the clock, masked before comparing
_TIMING = [
    (re.compile(r"\d[\d,]*(\.\d+)? rows/s"), "R rows/s"),
    (re.compile(r"\bin \d+(\.\d+)? s\b"), "in T s"),
    (re.compile(r"\b\d+ Delta commits\b"), "C Delta commits"),
]
_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d ")  # the job's log lines: a clock, then per-batch figures


def demo_block(text: str) -> list[str]:
    """The lines of the code block after the README's demo marker, without the command line."""
    after = text.split(DEMO_MARK, 1)[1]
    match = re.search(r"```[^\n]*\n(.*?)^```", after, re.S | re.M)
    assert match, f"no code block after {DEMO_MARK}"
    return [line for line in match.group(1).splitlines() if not line.startswith("$ ")]


def comparable(line: str) -> str:
    """A printed line with what varies from run to run masked: the timings everywhere, and every
    figure of a log line (which micro-batch takes which file is Spark's choice)."""
    if _LOG_LINE.match(line):
        return " ".join(re.sub(r"\d[\d,.:T+-]*", "N", line).split())  # figures and their padding
    for pattern, mask in _TIMING:
        line = pattern.sub(mask, line)
    counts = re.search(r"\{.*\}$", line)  # reason counts: equal counts come in either order
    if counts:
        line = line[: counts.start()] + repr(sorted(ast.literal_eval(counts.group(0)).items()))
    return line.rstrip()


def demo_differences(shown: list[str], printed: list[str]) -> list[str]:
    """What the shown block gets wrong: each shown line must be a printed line (masked), in the
    printed order, with ``...`` standing for lines left out; from the summary on (the line
    ``N operations + M events through Spark``) nothing may be left out."""
    printed = [comparable(p) for p in printed if p.strip()]
    problems, at = [], 0
    for line in shown:
        if line.strip() in ("...", "…") or "writing input files" in line:  # elision; tqdm's bar (stderr)
            continue
        want = comparable(line)
        try:
            at = printed.index(want, at) + 1
        except ValueError:
            problems.append(f"shown but not printed (in this order): {line!r}")
    summary = next((i for i, p in enumerate(printed) if "events through Spark" in p), None)
    shown_summary = next((i for i, s in enumerate(shown) if "events through Spark" in s), None)
    if summary is None or shown_summary is None:
        problems.append("the summary line ('... events through Spark ...') is missing")
    else:
        expected = printed[summary:]
        got = [comparable(s) for s in shown[shown_summary:] if s.strip()]
        if got != expected:
            problems.append("the summary differs:\n" + "\n".join(expected))
    return problems


def test_the_demo_comparison_masks_timings_and_catches_a_wrong_figure():
    printed = [
        "generating 30,000 operations and 65,560 events into demo-output/input",
        "02:36:04 batch     2  in   12,031  pending     8,851  completed    2,299",
        "02:36:09 done: batches=5",
        "30,000 operations + 65,560 events through Spark in 46.0 s (2,079 rows/s incl. start-up), "
        "3 Delta commits",
        "outcomes: 29,034, duplicates: 0",
    ]
    shown = [
        "generating 30,000 operations and 65,560 events into demo-output/input",
        "11:12:13 batch     2  in      531  pending     8,000  completed    2,000",
        "...",
        "30,000 operations + 65,560 events through Spark in 61.5 s (1,555 rows/s incl. start-up), "
        "5 Delta commits",
        "outcomes: 29,034, duplicates: 0",
    ]
    printed.insert(-1, "rejected: 3 {'late': 1, 'bad_ts': 1, 'missing_key': 1}")
    shown.insert(-1, "rejected: 3 {'bad_ts': 1, 'missing_key': 1, 'late': 1}")
    assert demo_differences(shown, printed) == []
    wrong = [*shown[:-1], "outcomes: 29,035, duplicates: 0"]
    assert demo_differences(wrong, printed)


@pytest.mark.spark
def test_the_readme_shows_what_make_demo_prints(tmp_path):
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    done = subprocess.run(  # what `make demo` runs, with its default size
        [sys.executable, "-m", "spark_purgatory.demo", "--out", str(tmp_path / "demo-output")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    printed = done.stdout.replace(str(tmp_path / "demo-output"), "demo-output").splitlines()
    with open(README, encoding="utf-8") as f:
        shown = demo_block(f.read())
    problems = demo_differences(shown, printed)
    assert problems == [], "README.md's demo block is not what `make demo` prints:\n" + "\n".join(
        problems + ["", "it printed:", *printed]
    )
    # what it printed is there: the four tables and the two pictures
    tables = tmp_path / "demo-output" / "tables"
    for table in ("outcomes", "unmatched_events", "rejected", "metrics"):
        assert DeltaTable(str(tables / table)).to_pyarrow_table().num_rows > 0, table
    for png in ("latency_histogram.png", "outcomes_over_time.png"):
        assert (tables / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
