"""The documentation's runnable pages run as they stand and print what they show.

A runnable page is one of ``RUNNABLE`` (every cookbook page, the contract, getting started,
testing).  Its ```python blocks run in order in one namespace, as in one notebook, in this
process (a page that builds a ``SparkSession`` gets this test worker's session back from
``getOrCreate()``).  A ```text block that follows a python block, with only blank lines
between them, is what that block prints; a python block without one must print nothing.  So a
page cannot show output the code does not give, and a changed behaviour fails here, naming the
page and the block.
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")
RUNNABLE = sorted(
    [os.path.relpath(p, DOCS) for p in glob.glob(os.path.join(DOCS, "cookbook", "*.md"))]
    + ["contract.md", "getting-started.md", "testing.md"]
)
RUNNABLE.remove(os.path.join("cookbook", "index.md"))  # the cookbook's table of contents


def _uses_spark(page: str) -> bool:
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        return "SparkSession" in f.read()


#: the pages as test parameters, those that build a session marked ``spark``
PAGES = [pytest.param(p, marks=[pytest.mark.spark] if _uses_spark(p) else []) for p in RUNNABLE]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def page_blocks(text: str) -> list[tuple[str, str | None]]:
    """(code, expected output or None) for each ```python block of a page, in order."""
    fences = [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]
    blocks: list[tuple[str, str | None]] = []
    for i, (lang, body, _, end) in enumerate(fences):
        if lang != "python":
            continue
        following = fences[i + 1] if i + 1 < len(fences) else None
        shown = None
        if following and following[0] == "text" and not text[end : following[2]].strip():
            shown = following[1]
        blocks.append((body, shown))
    return blocks


def test_a_text_block_is_the_output_of_the_python_block_just_above():
    page = (
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "prose\n```python\nx = 2\n```\nprose between\n```text\nnot an output\n```\n"
        "```bash\nmake test\n```\n"
    )
    assert page_blocks(page) == [("print(1)\n", "1\n"), ("x = 2\n", None)]


def _normal(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_and_prints_what_it_shows(page, request):
    with open(os.path.join(DOCS, page), encoding="utf-8") as f:
        text = f.read()
    blocks = page_blocks(text)
    assert blocks, f"docs/{page} has no python block"
    if "SparkSession" in text:
        request.getfixturevalue("spark")  # the worker's session, which the page's getOrCreate() returns
    namespace: dict = {"__name__": f"docs.{page}"}
    # a fresh interpreter has no handler on the library's logger; an earlier test here (the
    # job's) may have given it one that prints INFO lines to stdout
    library_log = logging.getLogger("spark_purgatory")
    request.addfinalizer(lambda level=library_log.level: library_log.setLevel(level))
    library_log.setLevel(logging.WARNING)
    for number, (code, shown) in enumerate(blocks, 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"docs/{page} block {number}", "exec"), namespace)
        printed = out.getvalue()
        if shown is None:
            assert printed == "", f"docs/{page} block {number} prints but shows no ```text block:\n{printed}"
        else:
            assert _normal(printed) == _normal(shown), (
                f"docs/{page} block {number} printed:\n{printed}\nbut the page shows:\n{shown}"
            )
