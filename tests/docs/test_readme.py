"""The README: its examples, marked to be run, and what ``make demo`` prints.

Every ```python block in README.md preceded by a ``<!-- readme-test: NAME -->`` line is taken,
in order, into one script (the blocks share a session and variables, as in one notebook), the
README's prefix ``/tmp/spark-purgatory-readme/`` replaced by a temporary directory.
``test_wheel_install.py`` runs that script where a user pastes it, in a fresh Python with the
wheel installed and a plain ``SparkSession.builder...getOrCreate()`` session (the README
creates it), and compares the Delta tables it wrote with the Spark-free engine
(``PurgatoryTester``, ``engine`` here) on the same input files:

* ``tables/`` (the stream, ``start``) with the engine at the stream's final watermark, read
  from the checkpoint's offset log (``final_watermark``);
* ``backfill/`` (``backfill``) with the engine once every deadline has passed.

Here: every ```python block is marked, the README stays a front door of at most 400 lines, its
configuration table is the code's, and its demo block is what ``make demo`` prints.
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
from spark_purgatory.testing import PurgatoryTester
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


def test_every_python_block_of_the_readme_is_marked_to_run():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    python_blocks = re.findall(r"^```python\n", text, re.M)
    assert len(python_blocks) == len(readme_blocks(text)), "a ```python block without a readme-test marker"
    names = [name for name, _ in readme_blocks(text)]
    assert set(REQUIRED) <= set(names), f"README.md marks {names}, expected at least {list(REQUIRED)}"


def test_the_readme_is_a_front_door_of_at_most_400_lines():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 400
    assert "(docs/contract.md)" in text  # the contract is a page of the docs, linked from here


def test_the_readme_configuration_table_is_the_codes():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert config_table_problems(section(text, "Configuration")) == []


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


#: a wheel or sdist named in the docs: ``spark_purgatory-VERSION-py3-none-any.whl`` or ``...tar.gz``
_DIST_NAME = re.compile(r"spark_purgatory-([0-9][\w.+]*?)(?:-py3-none-any\.whl|\.tar\.gz)")


def test_every_wheel_the_docs_install_is_the_version_the_build_makes():
    """A user pastes these lines after ``make dist``: a name from an earlier release is a
    file that is not there.  The build names its files after ``__version__`` normalised
    (PEP 440, as setuptools writes it)."""
    from packaging.version import Version

    from spark_purgatory import __version__

    built = str(Version(__version__))
    paths = [README] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    paths += glob.glob(os.path.join(ROOT, "notebooks", "*.py"))
    named = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for version in _DIST_NAME.findall(f.read()):
                named.setdefault(version, []).append(os.path.relpath(path, ROOT))
    assert built in named, "the README's install line names no wheel"
    assert set(named) == {built}, {v: sorted(set(p)) for v, p in named.items() if v != built}


def test_the_readme_documents_every_extra():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    with open(README, encoding="utf-8") as f:
        install = section(f.read(), "Install")
    first_cells = re.findall(r"^\| ([^|]+) \|", install, re.M)
    rows = {name for cell in first_cells for name in re.findall(r"`([\w-]+)`", cell)}
    assert extras <= rows, f"extras the README's Install table does not name: {sorted(extras - rows)}"
