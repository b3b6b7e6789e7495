"""A griffe extension: doctest examples in docstrings shown as Python code on the API page.

The package's docstrings carry runnable ``>>>`` examples (pytest runs them as doctests).
Markdown would read their prompts as nested block quotes; this wraps each run of doctest
lines (up to a blank line) in a ``pycon`` fence before mkdocstrings renders the docstring.
Text already inside a fence is left alone.
"""

from __future__ import annotations

import griffe


def fence_doctests(text: str) -> str:
    """``text`` with every doctest run (a ``>>>`` line and what follows up to a blank line) fenced."""
    lines, out, i, fenced = text.split("\n"), [], 0, False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
