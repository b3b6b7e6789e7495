"""The documentation site builds strictly, and its reference pages say what the code declares.

* ``mkdocs build --strict`` passes (a broken link, a missing page, an object mkdocstrings
  cannot find fail it), and the built API page has an entry for every public name;
* the contract page's input and output tables, and its rejection reasons, are the contract
  module's (``contract.OPERATION_INPUT``, ``contract.TABLES``, ``contract.REASONS``);
* the configuration page has every key with the code's default (``docs_tables``);
* the hooks that let other branches' pages arrive later leave the nav and links strict.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from spark_purgatory.contract import ALL_REASONS, EVENT_INPUT, OPERATION_INPUT, REASONS, TABLES
from tests.support.docs_tables import config_table_problems, plain, section, table_rows

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")


def page(name: str) -> str:
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        return f.read()


def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", os.path.join(DOCS, "hooks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the build ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> str:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = str(tmp_path_factory.mktemp("site"))
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", out],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_site_builds_strictly(site):
    for built in ("index.html", "contract/index.html", "api/index.html", "cookbook/payments/index.html"):
        assert os.path.exists(os.path.join(site, built)), built


def test_the_api_reference_documents_every_public_name(site):
    with open(os.path.join(site, "api", "index.html"), encoding="utf-8") as f:
        html = f.read()
    names = hooks().public_names()
    assert {n for n, _ in names} >= {"start", "backfill", "Purgatory", "PurgatoryTester"}
    missing = [path for _, path in names if f'id="{path}"' not in html]
    assert missing == [], f"the API page has no entry for {missing}"


# -- the contract page -------------------------------------------------------------------------------


def test_the_contract_page_lists_the_input_fields():
    for heading, schema in (("Operations", OPERATION_INPUT), ("Completion events", EVENT_INPUT)):
        fields = [plain(row[0]) for row in table_rows(section(page("contract.md"), heading))]
        assert fields == schema.names, heading


@pytest.mark.parametrize("table", ["outcomes", "unmatched_events", "rejected"])  # metrics: docs/metrics.md
def test_the_contract_page_shows_each_output_table_as_declared(table):
    rows = table_rows(section(page("contract.md"), table))
    shown = [(plain(name), plain(kind).replace("&lt;", "<").replace("&gt;", ">")) for name, kind, _ in rows]
    assert shown == [(f.name, str(f.type)) for f in TABLES[table].schema]


def test_the_contract_page_lists_every_rejection_reason_with_its_meaning_and_stage():
    rows = table_rows(section(page("contract.md"), "Rejection reasons"))
    assert [(plain(reason), meaning, stage) for reason, meaning, stage in rows] == list(ALL_REASONS)
    assert [plain(reason) for reason, _, _ in rows] == list(REASONS)


# -- the configuration page --------------------------------------------------------------------------


def test_the_configuration_page_has_every_key_with_its_default():
    assert config_table_problems(page("configuration.md")) == []


def test_the_configuration_check_catches_a_wrong_default_and_a_missing_key():
    text = page("configuration.md").replace("| `purgatory.tick.ms` | 100 |", "| `purgatory.tick.ms` | 10 |")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("| `job.master`"))
    problems = config_table_problems(text)
    assert any("purgatory.tick.ms" in p and "'10'" in p for p in problems)
    assert any("job.master" in p for p in problems)


# -- the hooks ---------------------------------------------------------------------------------------


def test_nav_entries_of_pages_not_yet_in_docs_are_left_out(tmp_path):
    (tmp_path / "here.md").write_text("# here")
    nav = [
        {"Home": "here.md"},
        {"Later": "later.md"},
        {"Group": ["here.md", {"Gone": "later.md"}]},
        {"Empty": [{"Gone": "later.md"}]},
    ]
    assert hooks()._present(nav, str(tmp_path)) == [{"Home": "here.md"}, {"Group": ["here.md"]}]


def test_links_wait_only_for_pages_other_branches_bring(tmp_path):
    text = "See [End of input](end-of-input.md#how) and [nothing](nothing.md)."
    assert hooks().unlink_missing(text, str(tmp_path)) == "See End of input and [nothing](nothing.md)."
    (tmp_path / "end-of-input.md").write_text("# End")
    assert hooks().unlink_missing(text, str(tmp_path)) == text


def test_doctest_examples_are_fenced_as_code_outside_fences_only():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_doctests", os.path.join(DOCS, "griffe_doctests.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Intro.\n\n>>> 1 + 1\n2\n\nAfter.\n\n```python\n>>> inside\n```"
    assert module.fence_doctests(text) == (
        "Intro.\n\n```pycon\n>>> 1 + 1\n2\n```\n\nAfter.\n\n```python\n>>> inside\n```"
    )
