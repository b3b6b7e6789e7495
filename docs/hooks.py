"""MkDocs hooks: pages other branches bring, and the generated API reference.

Several pages (``BROUGHT_ELSEWHERE``) are written on other branches; the nav names them and
other pages link to them, so merging a branch is enough to publish its page.  Until a page is
in ``docs/``, its nav entry is left out and links to it are shown as their text (both reported
in the build log, INFO), so ``mkdocs build --strict`` passes before and after; a link to any
other missing page still fails the strict build.
"""

from __future__ import annotations

import logging
import os
import re

log = logging.getLogger("mkdocs.hooks.nav")

#: pages written on other branches (nav entries and links wait for them)
BROUGHT_ELSEWHERE = (
    "end-of-input.md",
    "troubleshooting.md",
    "input-formats.md",
    "operating.md",
    "metrics.md",
    "engine-internals.md",
)


def _present(entry, docs_dir: str):
    """``entry`` with every missing page left out (None when nothing of it is left)."""
    if isinstance(entry, str):
        return entry if "://" in entry or os.path.exists(os.path.join(docs_dir, entry)) else None
    if isinstance(entry, list):
        kept = [e for e in (_present(x, docs_dir) for x in entry) if e is not None]
        return kept or None
    ((title, value),) = entry.items()
    kept = _present(value, docs_dir)
    if kept is None:
        log.info("nav: %s (%s) is not in docs/ yet, left out", title, value)
        return None
    return {title: kept}


def on_config(config, **kwargs):
    config["nav"] = _present(config["nav"], config["docs_dir"]) or []
    return config


# -- the API reference -------------------------------------------------------------------------------

#: the API page's groups: (title, module prefixes under spark_purgatory), in page order
API_GROUPS = (
    ("Running it", ("query", "backfills")),
    ("Operating it: `spark_purgatory.inspect`", ("inspect",)),
    ("The pieces `start` wires", ("spark", "delta")),
    ("The engine, without Spark", ("engine", "config", "state")),
    ("Testing your scenarios: `spark_purgatory.testing`", ("testing",)),
)
API_MARKER = "<!-- public-api -->"


def public_names() -> list[tuple[str, str]]:
    """(name, the path mkdocstrings documents it under) for every name in ``spark_purgatory.__all__``
    and ``spark_purgatory.testing.__all__``: a function or class under the module defining it
    (so a name that moves between modules follows), anything else under the module exporting it."""
    import importlib

    names = []
    for exporter in ("spark_purgatory", "spark_purgatory.testing"):
        module = importlib.import_module(exporter)
        for name in module.__all__:
            obj = getattr(module, name)
            defined_in = getattr(obj, "__module__", None) if callable(obj) else None
            defined_in = defined_in if (defined_in or "").startswith("spark_purgatory") else exporter
            names.append((name, f"{defined_in}.{name}"))
    return names


def api_markdown() -> str:
    """Directives for every public name, grouped by where it lives (``API_GROUPS``)."""
    groups: dict[str, list[str]] = {title: [] for title, _ in API_GROUPS}
    for _, path in public_names():
        inner = path.split(".")[1]
        title = next((t for t, prefixes in API_GROUPS if inner in prefixes), None)
        groups.setdefault(title or "Other", []).append(path)
    parts = []
    for title, paths in groups.items():
        if paths:
            parts.append(f"## {title}\n\n" + "\n\n".join(f"::: {p}" for p in paths))
    return "\n\n".join(parts) + "\n"


def unlink_missing(markdown: str, docs_dir: str) -> str:
    """Links to a page of ``BROUGHT_ELSEWHERE`` that is not in ``docs_dir`` yet, as their text."""
    for name in BROUGHT_ELSEWHERE:
        if not os.path.exists(os.path.join(docs_dir, name)):
            link = re.compile(r"\[([^\]]+)\]\((?:\.\./)*" + re.escape(name) + r"(?:#[^)]*)?\)")
            markdown, n = link.subn(r"\1", markdown)
            if n:
                log.info("links to %s shown as text until it is in docs/", name)
    return markdown


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri == "api.md":
        markdown = markdown.replace(API_MARKER, api_markdown())
    return unlink_missing(markdown, config["docs_dir"])
