"""A local SparkSession for tests of the Spark path, and the ``purgatory_spark`` pytest fixture."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from ..config import PurgatoryConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(
    app_name: str = "spark-purgatory-tests",
    *,
    config: PurgatoryConfig | None = None,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local session for tests, with the job's settings: the workers on this interpreter,
    UTC, quiet logs, and a shuffle partition per shard group.

    Example::

        spark = spark_session(config=PurgatoryConfig(shards=2))
        outcomes = outcomes_of(purgatory_batch(ops_df, events_df, PurgatoryConfig(shards=2)))
    """
    from ..runtime.session import local_session

    groups = (config or PurgatoryConfig()).groups
    return local_session(app_name, master=master, shuffle_partitions=groups, conf=dict(conf or {}))


def _purgatory_spark() -> Iterator[SparkSession]:
    """A session-scoped local session (``spark_session()``), stopped at the end of the run.

    Enable it in a ``conftest.py`` with ``pytest_plugins = ["spark_purgatory.testing"]``::

        def test_batch(purgatory_spark):
            ops = purgatory_spark.createDataFrame([...])
    """
    session = spark_session()
    yield session
    session.stop()


try:  # with pytest installed this module is also a pytest plugin offering the fixture
    import pytest
except ImportError:  # pragma: no cover - the harness and assert_outcomes work without pytest
    purgatory_spark = _purgatory_spark
else:
    purgatory_spark = pytest.fixture(scope="session", name="purgatory_spark")(_purgatory_spark)
