"""Shared fixtures: one real local[2] SparkSession per test process, and the parallel run's order.

The session is the one users get from ``spark_purgatory.testing.spark_session`` (the job's
settings, the UI off), with 4 shuffle partitions as these tests have always had: one per
shard group for the three-shard tests, and room for the two-shard ones.

``make test`` runs the tests in parallel with pytest-xdist (``-n``, ``--dist loadgroup``: see
the Makefile).  Each worker is its own process, so it gets its own session (the fixture is
session-scoped: once per worker, started only when a test asks for it), its own ``tmp_path``
base, and its own JVM, whose ports (driver, block manager) and scratch directories Spark picks
free; the Spark UI is off in every session the tests build, and the servers the tests start
(moto, Azurite, a standalone cluster, Spark Connect) bind free ports.  No test writes to a
fixed path.  Most Spark tests wait on a JVM (start-up, a subprocess, a micro-batch) rather
than compute, which is why more workers than cores pays.

Order: the slowest tests first (``SLOW_FIRST``, measured with ``--durations``), so that the
run does not end on one worker still busy with a long test while the others idle.  Tests that
share a module-scoped server (``SHARED_MODULE_FIXTURES``) stay on one worker, so each server
starts once.
"""

from __future__ import annotations

import pytest

from spark_purgatory.testing import spark_session

#: test files, slowest first (``make test ARGS="--durations=30"``); the others follow in file order
SLOW_FIRST = (
    "test_crash.py",
    "test_distributed.py",
    "test_azure_store.py",
    "test_object_store.py",
    "test_readme.py",
    "test_notebooks.py",
    "test_multikey_stream.py",
    "test_streaming.py",
    "test_job.py",
    "test_query.py",
    "test_demo.py",
    "test_docs_examples.py",
    "test_hostile_input.py",
    "test_watermarks.py",
    "test_typed_input.py",
    "test_backfill.py",
    "test_benchmarks.py",
    "test_docs_site.py",
)
#: files whose tests share a module-scoped fixture (a server, a site build): one worker each
SHARED_MODULE_FIXTURES = ("test_azure_store.py", "test_object_store.py", "test_docs_site.py")


@pytest.fixture(scope="session")
def spark():
    session = spark_session(conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order otherwise
    for item in items:
        if item.path.name in SHARED_MODULE_FIXTURES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
