"""Shared fixtures: one real local[2] SparkSession for the whole test run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from spark_purgatory.spark.session import local_session

    session = local_session("spark-purgatory-tests", master="local[2]", shuffle_partitions=4)
    yield session
    session.stop()
