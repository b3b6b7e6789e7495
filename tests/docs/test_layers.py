"""The package's layers, as declared in pyproject.toml, hold: no circle, no import back up.

import-linter checks the contracts on the package's real import graph (grimp); a reversed copy of
the layers must break, so the check is known to catch an arrow that runs back up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
