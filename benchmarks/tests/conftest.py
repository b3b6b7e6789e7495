"""The suite's settings for the benchmarks' tests, which live outside ``tests/``: a conftest
applies to the tests below its folder, so the JVM options (set when ``tests/conftest.py`` is
imported) and the ``jars`` marker's check come from there."""

from tests.conftest import pytest_runtest_setup  # noqa: F401
