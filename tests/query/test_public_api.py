"""The public surface: every name in ``__all__`` resolves, and the typed marker ships."""

from __future__ import annotations

import importlib
import os

import pytest

import spark_purgatory

PUBLIC_MODULES = [
    "spark_purgatory",
    "spark_purgatory.backfills",
    "spark_purgatory.query",
    "spark_purgatory.testing",
    "spark_purgatory.config",
    "spark_purgatory.workload",
    "spark_purgatory.inspect",
]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_name_in_all_resolves(module):
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if getattr(mod, name, None) is None]
    assert missing == [], f"{module}.__all__ names what it does not define: {missing}"


def test_the_package_exports_the_one_calls_and_is_typed():
    assert {"start", "backfill", "PurgatoryQuery", "purgatory_batch"} <= set(spark_purgatory.__all__)
    assert callable(spark_purgatory.backfill) and callable(spark_purgatory.start)
    assert os.path.exists(os.path.join(os.path.dirname(spark_purgatory.__file__), "py.typed"))
