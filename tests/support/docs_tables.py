"""Reading the Markdown tables of README.md and docs/ back, to check them against the code.

The configuration keys, the rejection reasons and the output tables are written out for
people in several pages; the code declares them once (``PurgatoryConfig``, ``job._JOB_KEYS``,
``contract.REASONS``, ``contract.TABLES``).  These helpers let a test compare the two, so a
page cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import re

from spark_purgatory.config import _FIELDS_BY_KEY, PurgatoryConfig
from spark_purgatory.job import _JOB_KEYS

#: keys the job passes through by prefix (Kafka's own), documented as ``prefix.*``
PASS_THROUGH = ("kafka.*", "source.kafka.*", "output.kafka.*")


def section(text: str, heading: str) -> str:
    """The text under a Markdown heading (any level), up to the next heading of that level or above."""
    match = re.search(rf"^(#+) {re.escape(heading)}\s*$", text, re.M)
    assert match, f"no heading {heading!r}"
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[match.end() :], re.M)
    return text[match.end() : match.end() + end.start()] if end else text[match.end() :]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row in ``text`` (header and ``|---|`` lines left out)."""
    rows = []
    for block in re.split(r"\n(?!\|)", text):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        for line in lines[2:]:  # the header and the separator
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def plain(cell: str) -> str:
    """A cell without its code marks."""
    return cell.replace("`", "").strip()


def documented_defaults(text: str) -> dict[str, str]:
    """key -> default cell of every configuration table row (a row whose first cell is a `key`)."""
    rows = {}
    for row in table_rows(text):
        if len(row) >= 3 and re.fullmatch(r"`[a-z][\w.*]*`", row[0]):
            key = plain(row[0])
            assert key not in rows, f"{key} is documented twice"
            rows[key] = row[1]
    return rows


def code_defaults() -> dict[str, str]:
    """Every configuration key with its default as the tables write it."""
    config = PurgatoryConfig()
    defaults = {}
    for key, name in _FIELDS_BY_KEY.items():
        value = getattr(config, name)
        defaults[key] = str(value).lower() if isinstance(value, bool) else str(value)
    defaults.update(_JOB_KEYS)
    defaults.update(dict.fromkeys(PASS_THROUGH, ""))
    return defaults


def config_table_problems(text: str) -> list[str]:
    """What a page's configuration tables get wrong against the code (empty when right).

    A default cell must be the code's default (code marks aside), or, for a key whose default
    is empty, empty or a parenthesised note of what applies instead (``(watermark.delay)``).
    """
    documented, expected = documented_defaults(text), code_defaults()
    problems = [f"missing key {k!r} (default {v!r})" for k, v in expected.items() if k not in documented]
    problems += [f"unknown key {k!r}" for k in documented if k not in expected]
    for key in documented.keys() & expected.keys():
        cell, default = plain(documented[key]), expected[key]
        if default == "" and (cell == "" or cell.startswith("(")):
            continue
        if cell != default:
            problems.append(f"{key}: documented default {cell!r}, the code's is {default!r}")
    return problems


assert {f.name for f in dataclasses.fields(PurgatoryConfig)} == set(_FIELDS_BY_KEY.values())
