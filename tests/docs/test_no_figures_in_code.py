"""No measured figure in the code: docstrings and comments say what and why, the docs keep the numbers.

A timing, a speed-up or a before/after figure goes stale the day the code around it changes,
and nobody re-measures a docstring.  Those live in ``docs/performance.md`` and
``docs/performance-history.md``; the code keeps its reason and a pointer there, as Kafka's
``Shards = 512 // Shard the watcher list to reduce lock contention`` does.

What counts as a figure (``figures_in``): ``N -> M`` with a number on each side; a quantity
``instead of`` / ``against`` / ``versus`` another; ``N x faster``, ``ten times faster``, ``3-100x
more``, ``N% of the CPU``, ``a third of the cost``, ``half the time``; an approximate time
(``~100 ms``, ``about 2 ms``); and any time or size next to a word of measurement (measured,
benchmark, JFR, median, alternated, took, ...).  A configuration default (``default 500 ms``),
a contract rule (``one wheel tick``), a worked example (``tick 1 ms, wheel size 20``) or a
layout fact (``4 bytes an entry``) is none of these.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: (file relative to its scanned folder's parent, text of the flagged line): kept short, each a
#: reason in the code that happens to look like a figure
ALLOWED: set[tuple[str, str]] = set()

_NUM = r"~?\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUM}(?:\s*[-–]\s*{_NUM})?"
_TIME = r"(?:ns|µs|us|ms|s|sec|seconds?|mins?|minutes?)"
_SIZE = r"(?:B|KB|kB|KiB|MB|MiB|GB|GiB|bytes?)"
_QTY = rf"{_RANGE}\s*(?:{_TIME}|{_SIZE}|x|×)(?![\w/])"
_FRACTION = r"(?:half|a (?:third|quarter|fifth|sixth|tenth|ninth))"
_CUE = (
    r"measured|measure|benchmark\w*|bench_\w+|profile_\w+|\bJFR\b|strace|cProfile|medians?|"
    r"alternated|\btook\b|on these (?:\d+ )?(?:machines|cores)|loaded \d+ cores|\d+ loaded cores|"
    r"with the other core busy|here with"
)

#: each pattern with what it catches
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("before -> after", re.compile(rf"(?<![\w\]`)]){_RANGE}\s*(?:{_TIME}|{_SIZE}|x)?\s*(?:->|→)\s*{_NUM}")),
    (
        "one figure against another",
        re.compile(
            rf"{_RANGE}\s*(?:{_TIME}|{_SIZE}|x|calls|rows)?,?\s+"
            rf"(?:instead of|against|versus|vs\.?|not)\s+{_NUM}"
        ),
    ),
    (
        "a speed-up",
        re.compile(
            rf"(?:{_RANGE}\s*(?:x|×)|\b(?:two|three|four|five|six|seven|eight|nine|ten|several|\d+) times)\s+"
            r"(?:faster|slower|more|less|larger|smaller|cheaper|costlier|what)\b"
        ),
    ),
    (
        "a share of the time",
        re.compile(rf"{_RANGE}\s*%\s+of\s+(?:the\s+)?[\w' ]{{0,30}}?\b(?:CPU|time|wall)\b"),
    ),
    (
        "a fraction of the cost",
        re.compile(rf"\b{_FRACTION}\s+(?:of\s+)?(?:the\s+|its\s+)?(?:[\w']+\s+)?(?:cost|time|CPU)\b"),
    ),
    ("an approximate time", re.compile(rf"(?:~|\babout |\broughly |\baround ){_RANGE}\s*{_TIME}\b")),
]
#: a time or size within this many characters of a word of measurement
_NEAR = 100
_QTY_RE = re.compile(_QTY)
_CUE_RE = re.compile(_CUE, re.IGNORECASE)


def _docstrings(tree: ast.AST) -> list[list[tuple[int, str]]]:
    """Each docstring of a module, class or function as its lines, with their line numbers."""
    blocks = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            start = first.value.lineno
            blocks.append([(start + i, line) for i, line in enumerate(first.value.value.splitlines())])
    return blocks


def _comments(lines: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Comments on consecutive lines as one block each (a sentence may run over several)."""
    blocks: list[list[tuple[int, str]]] = []
    for number, text in lines:
        if blocks and blocks[-1][-1][0] == number - 1:
            blocks[-1].append((number, text))
        else:
            blocks.append([(number, text)])
    return blocks


def _python_blocks(source: str) -> list[list[tuple[int, str]]]:
    comments = [
        (tok.start[0], tok.string.lstrip("#:").strip())
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    return _docstrings(ast.parse(source)) + _comments(comments)


def _conf_blocks(source: str) -> list[list[tuple[int, str]]]:
    comments = [
        (n, line.split("#", 1)[1].strip())
        for n, line in enumerate(source.splitlines(), 1)
        if line.lstrip().startswith("#")
    ]
    return _comments(comments)


def figures_in_text(blocks: list[list[tuple[int, str]]]) -> list[tuple[int, str, str]]:
    """(line, what, the line's text) for every figure in these blocks of docstring or comment."""
    found = []
    for block in blocks:
        # the block as one text (a sentence may run over lines), with where each line starts
        text, starts = "", []
        for number, line in block:
            starts.append((len(text), number, line))
            text += line.strip() + " "
        for what, pattern in PATTERNS:
            for match in pattern.finditer(text):
                found.append((*_line_at(starts, match.start()), what))
        for match in _QTY_RE.finditer(text):
            near = text[max(0, match.start() - _NEAR) : match.end() + _NEAR]
            if _CUE_RE.search(near):
                found.append((*_line_at(starts, match.start()), "a figure beside a word of measurement"))
    return sorted({(n, what, line.strip()) for n, line, what in found})


def _line_at(starts: list[tuple[int, int, str]], offset: int) -> tuple[int, str]:
    """The (number, text) of the line a block's joined text has at ``offset``."""
    _, number, line = starts[0]
    for start, n, content in starts:
        if start > offset:
            break
        number, line = n, content
    return number, line


def figures_in(folder: Path) -> list[str]:
    """``file:line: what: text`` for every figure in the docstrings and comments under
    ``folder`` (Python files, and ``.conf`` files' comments), minus ``ALLOWED``."""
    report = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".py":
            blocks = _python_blocks(path.read_text(encoding="utf-8"))
        elif path.suffix == ".conf":
            blocks = _conf_blocks(path.read_text(encoding="utf-8"))
        else:
            continue
        name = path.relative_to(folder.parent).as_posix()
        for number, what, line in figures_in_text(blocks):
            if (name, line) not in ALLOWED:
                report.append(f"{name}:{number}: {what}: {line}")
    return report


@pytest.mark.parametrize("folder", ["spark_purgatory", "jobs", "conf"])
def test_no_docstring_or_comment_gives_a_measured_figure(folder: str) -> None:
    found = figures_in(ROOT / folder)
    assert not found, (
        "measured figures in docstrings or comments: move each to docs/performance-history.md "
        "(or the page that has its story) and leave the reason and a pointer:\n" + "\n".join(found)
    )


def _flagged(text: str) -> bool:
    return bool(figures_in_text([[(1, line) for line in text.splitlines()]]))


@pytest.mark.parametrize(
    "text",
    [
        "an idle shard's task 140 -> 45 ms",
        "a round of three small appends 5.3 -> 4.3 s",
        "building the operator's plan takes 0.8 s instead of 1.4 s",
        "found, not imported: 50 ms, not 1 s",
        "RocksDB's checkpoint (6.4-6.9 s against\n2.6-4.3 s of commits per 100k operations)",
        "costs 3-100x more on the shard's handle arrays",
        "ten times faster where first has no repeated value",
        "an interval per row (2-3% of the routing stage's CPU in JFR)",
        "a third of numpy's cost on the small arrays of a call",
        "collections (a third of the validator's time with 10,000-row frames)",
        "it made the plan Spark re-optimizes each micro-batch nine times larger",
        "Arrow's own buffer, not io.BytesIO: half the time for a state value",
        "each Python task then waits ~100 ms on delayed acknowledgements",
        "one walk took 110-117 ms here with the other core busy",
        "the optimizer took a tenth (benchmarks/bench_batch.py:\n4-6 s)",
    ],
)
def test_a_measured_figure_is_found(text: str) -> None:
    assert _flagged(text)


@pytest.mark.parametrize(
    "text",
    [
        "linger.ms: how long a batch may wait (default 500 ms)",
        "an operation expires within one wheel tick of its deadline",
        "Worked example (tick 1 ms, wheel size 20, now 0): level 0 covers [0, 20) with 1 ms buckets",
        "runs [8] -> [8, 8] -> merged [16]",
        "its ids as 32-bit offsets from its smallest one (12 bytes an entry)",
        "Stop the broker (SIGTERM, then SIGKILL after 15 s)",
        "``processing-time=10s`` -> ``10 seconds``",
        "Rescale a stopped checkpoint: its shards, ``S`` -> ``N``",
        'the horizon: ms, ``"10s"``, ``"15m"``, ``"1h"``',
    ],
)
def test_a_default_a_rule_or_an_example_is_not_a_figure(text: str) -> None:
    assert not _flagged(text)
