"""The project as a user gets it: its wheel, built from this checkout, installed with uv into a
fresh virtual environment outside the checkout, with nothing else (``benchmarks.bench_deploy``'s
``build_wheel``, ``install_wheel``, ``venv_env``: the ``install`` benchmark builds it the same way).
"""

from __future__ import annotations

from benchmarks.bench_deploy import ROOT, build_wheel, install_wheel, uninstall, venv_env

__all__ = ["ROOT", "build_wheel", "install_wheel", "uninstall", "venv_env"]
