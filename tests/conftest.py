"""Shared fixtures: one real local[2] SparkSession for the whole test run.

The session is the one users get from ``spark_purgatory.testing.spark_session`` (the job's
settings), with 4 shuffle partitions as these tests have always had: one per shard group for
the three-shard tests, and room for the two-shard ones.
"""

from __future__ import annotations

import pytest

from spark_purgatory.testing import spark_session


@pytest.fixture(scope="session")
def spark():
    session = spark_session(conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()
