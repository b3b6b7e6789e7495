"""The package's layers, as declared in pyproject.toml, hold: no circle, no import back up.

import-linter checks the contracts on the package's real import graph (grimp); a reversed copy of
the layers must break, so the check is known to catch an arrow that runs back up.  What it does
not see is checked here from the source (``ast``): no circle among the modules of one folder,
imports inside functions counted, in the package, the benchmarks and the testbed; and no import
of the benchmarks from the tests.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lint(config: Path) -> subprocess.CompletedProcess:
    lint = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    command = [sys.executable, "-c", lint, "--config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def test_every_contract_of_the_package_is_kept():
    done = _lint(ROOT / "pyproject.toml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout


def test_an_import_back_up_a_layer_breaks_the_contract(tmp_path):
    text = (ROOT / "pyproject.toml").read_text()
    # the Spark host below the Delta output: spark.operator's import of delta.staging now runs up
    layers = '    "spark",\n    "shard",\n    "delta",\n'
    swapped = text.replace(layers, '    "delta",\n    "spark",\n    "shard",\n')
    assert swapped != text
    config = tmp_path / "pyproject.toml"
    config.write_text(swapped)
    done = _lint(config)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout and "spark_purgatory.delta" in done.stdout


# -- what import-linter does not see: imports made inside functions, and other top-level folders ----


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports, at its top or inside a function (a relative import
    made absolute), with ``module.name`` for each name taken by ``from module import name``:
    that may be a submodule."""
    module = _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _circles_in_folders(top: str) -> list[list[str]]:
    """The import circles among the modules of one folder, for every folder under ``top``:
    each a list of module names (Tarjan's strongly connected components)."""
    files = {_module_of(path): path for path in (ROOT / top).rglob("*.py")}
    graph = {
        name: sorted(
            other
            for other in _imported(path) & files.keys()
            if other != name and files[other].parent == path.parent
        )
        for name, path in files.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = stack[stack.index(name) :]
            del stack[stack.index(name) :]
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    return circles


@pytest.mark.parametrize("top", ["spark_purgatory", "benchmarks", "testbed"])
def test_no_import_circle_inside_a_folder(top):
    """Two modules of one folder never import each other, directly or round a longer loop,
    imports inside functions counted (the layer contracts see a folder as one layer)."""
    assert _circles_in_folders(top) == []


def test_a_circle_inside_a_folder_is_found(tmp_path, monkeypatch):
    """The check catches a circle made by an import inside a function."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "a.py").write_text("from .b import f\n")
    (folder / "b.py").write_text("def f():\n    from . import a\n")
    (folder / "c.py").write_text("from pkg import a\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _circles_in_folders("pkg") == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize(
    ("importer", "never"),
    [
        ("tests", {"benchmarks"}),
        ("testbed", {"tests", "benchmarks"}),
        ("spark_purgatory", {"tests", "benchmarks", "testbed"}),
    ],
)
def test_each_top_folder_imports_only_what_lies_below_it(importer, never):
    """``tests/`` and ``benchmarks/`` share what they both need through ``testbed/``: a test
    never depends on a benchmark's code, the testbed on neither, and the package (the wheel)
    on none of the three."""
    found = {}
    for path in (ROOT / importer).rglob("*.py"):
        names = sorted(name for name in _imported(path) if name.split(".")[0] in never)
        if names:
            found[str(path.relative_to(ROOT))] = names
    assert found == {}
