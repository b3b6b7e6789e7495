"""The Databricks notebooks run here, cell by cell, with stand-ins for dbutils and display.

What the stand-ins cannot check is the platform's rules (a wheel from a volume, paths on a
volume); the notebooks follow them by construction and say so in a markdown cell.  Here the
``base_path`` widget is overridden with a temporary directory (a volume path is a local path
on the driver and a path Spark reads, as a local path is here), the ``%pip`` cell is not run
(``# MAGIC`` cells are not code) and ``dbutils.library.restartPython`` does nothing.
"""

from __future__ import annotations

import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = os.path.join(ROOT, "notebooks")

VOLUME = "/Volumes/main/default/spark_purgatory/"


def cells(path: str) -> list[str]:
    """Code cells of a notebook in Databricks source format (``# MAGIC`` cells are not code)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("# Databricks notebook source"), path
    out = []
    for cell in text.split("# COMMAND ----------"):
        lines = [line for line in cell.splitlines() if line.strip() and not line.startswith("# Databricks")]
        if lines and not all(line.startswith("# MAGIC") for line in lines):
            out.append(cell)
    return out


class Widgets:
    def __init__(self, overrides: dict[str, str]) -> None:
        self.values: dict[str, str] = {}
        self.overrides = overrides

    def _define(self, name: str, default: str) -> None:
        self.values[name] = self.overrides.get(name, default)

    def text(self, name, default, label=None):
        self._define(name, default)

    def dropdown(self, name, default, choices, label=None):
        assert default in choices
        self._define(name, default)

    def get(self, name):
        return self.values[name]


class Library:
    def restartPython(self) -> None:  # noqa: N802 - dbutils' name
        """The package under test is importable already: nothing to restart."""


class FileSystem:
    def rm(self, path: str, recurse: bool = False) -> bool:
        existed = os.path.exists(path)
        if recurse:
            shutil.rmtree(path, ignore_errors=True)
        elif existed:
            os.remove(path)
        return existed


class DBUtils:
    def __init__(self, overrides: dict[str, str]) -> None:
        self.widgets = Widgets(overrides)
        self.library = Library()
        self.fs = FileSystem()


def run_notebook(name: str, spark, overrides: dict[str, str]) -> dict:
    shown: list = []
    namespace = {
        "spark": spark,
        "dbutils": DBUtils(overrides),
        "display": shown.append,
        "displayHTML": shown.append,
        "__name__": "__notebook__",
    }
    for number, cell in enumerate(cells(os.path.join(NOTEBOOKS, name))):
        try:
            exec(compile(cell, f"{name}[cell {number}]", "exec"), namespace)
        except Exception as error:  # name the cell, keep the cause
            raise AssertionError(f"{name} cell {number} failed: {error!r}") from error
    namespace["_shown"] = shown
    return namespace


@pytest.mark.parametrize("name", ["01_quickstart.py", "02_operate_stream.py"])
def test_notebooks_follow_the_platform_rules(name):
    """What the stand-ins cannot catch: wheel from a widget, paths on a volume, no local-only I/O."""
    with open(os.path.join(NOTEBOOKS, name), encoding="utf-8") as f:
        text = f.read()
    assert "# MAGIC %pip install $wheel" in text and "dbutils.library.restartPython()" in text
    assert f'"wheel", "{VOLUME}wheels/spark_purgatory-' in text
    assert f'"base_path", "{VOLUME}' in text
    code = "\n".join(cells(os.path.join(NOTEBOOKS, name)))
    assert "shutil" not in code and "/tmp/" not in code and "dbfs:" not in code
    assert "start(" in code


@pytest.mark.spark
def test_quickstart_notebook_runs_and_shows_outcomes(spark, tmp_path):
    ns = run_notebook("01_quickstart.py", spark, {"operations": "600", "base_path": str(tmp_path / "qs")})
    counts = {(r.condition, r.status): r["count"] for r in ns["_shown"][0].collect()}
    assert sum(counts.values()) > 0 and all(status in ("completed", "expired") for _, status in counts)
    assert ns["_shown"][-1].__class__.__name__ == "Figure"
    assert ns["outcomes"].select("op_id").distinct().count() == ns["outcomes"].count()


@pytest.mark.spark
def test_operating_notebook_runs_a_processing_time_stream_and_stops_it(spark, tmp_path):
    ns = run_notebook("02_operate_stream.py", spark, {"operations": "400", "base_path": str(tmp_path / "op")})
    assert ns["history"], "no progress lines"
    assert not ns["purgatory"].is_active
    assert ns["purgatory"].accumulator.destinations() == []  # stop() flushed everything
