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
run does not end on one worker still busy with a long test while the others idle, and no slow
test queued behind another on one worker (``pytest_xdist_make_scheduler``).  The tests of a
file with a module-scoped fixture (``shares_module_fixture``: a server, a site build, a
checkpoint) stay on one worker, so each is built once.  The JVMs run with C1 only (``TEST_JVM_OPTIONS``).
"""

from __future__ import annotations

import functools
import os
import re

import pytest
from hypothesis import settings

from spark_purgatory.runtime.jars import jar_paths
from spark_purgatory.runtime.session import C1_ONLY
from spark_purgatory.testing import spark_session

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # node ids are relative to it

#: property tests (``test_split_invariance``): a few hundred draws in CI and by default, a deep
#: search with ``make test ARGS="--hypothesis-profile=nightly -k split"``
settings.register_profile("ci", max_examples=150, derandomize=False)
settings.register_profile("nightly", max_examples=5000)
settings.load_profile("ci")

#: every JVM the tests start lives seconds to a few minutes: C1 only, no C2 compiles competing
#: for the cores (a job run over 600 operations: 22 s of CPU instead of 36, ``make demo`` 40
#: instead of 64; the same results), with tiered compilation's code cache (C1's own 48 MB
#: fills within a minute of Spark, and the JVM then stops compiling); and the serial
#: collector: G1's concurrent threads cost a small job run 31-34 s of CPU, the serial
#: collector 22-27 s, the parallel one 25-27 (the whole process tree's CPU, runs alternated
#: at load 13; the class-data archive maps as before).  spark-submit reads
#: ``SPARK_SUBMIT_OPTS`` (the workers' sessions, the job subprocesses, the README paste, the
#: demo, the Connect server), spark-class
#: ``SPARK_DAEMON_JAVA_OPTS`` (a standalone master and workers; ``tests/support/cluster.py`` gives
#: them to its executors too); a value already set is kept.  Before each of these JVMs,
#: spark-class runs Spark's launcher in a JVM of its own, which reads ``SPARK_LAUNCHER_OPTS``:
#: C1 and the serial collector take it from 0.27 to 0.11 s of CPU; mvn (the installed wheel
#: resolving its Kafka sets) reads ``MAVEN_OPTS``
TEST_JVM_OPTIONS = f"{C1_ONLY} -XX:+UseSerialGC"
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_LAUNCHER_OPTS", "MAVEN_OPTS"):
    os.environ.setdefault(_variable, TEST_JVM_OPTIONS)
#: the tests' JVMs map the class-data archive ``make class-data`` made and dump none at exit:
#: a session on another class path (a job told of no JARs, a test's own set) would otherwise
#: have its JVM dump one on first use, seconds of CPU beside the other tests
#: (``runtime.class_data``; ``tests/runtime/test_class_data.py`` sets its own)
os.environ.setdefault("SPARK_PURGATORY_CLASS_DATA", "use")

#: test files (paths from the project's root, as in node ids), slowest first (their slowest
#: test, ``make test ARGS="--durations=60"``); the others follow in file order
SLOW_FIRST = (
    "tests/delta/test_kafka_crash.py",  # three job runs (Spark's writer on Kafka), a 60 s broker outage
    "tests/delta/test_crash.py",  # four job runs (delta-rs on files, the topic on), three killed
    "benchmarks/tests/test_benchmarks.py",  # the Spark benchmarks' smoke run in one JVM
    "tests/delta/test_s3a.py",  # two job runs, the whole query through S3A and a proxy's 503s
    "tests/delta/test_catalog.py",  # two job runs into catalog tables, the first killed
    "tests/delta/test_azure_store.py",  # the ADLS job killed, then restarted on the worker's session
    "tests/docs/test_readme.py",
    "tests/docs/test_wheel_install.py",  # the wheel built, installed in a fresh venv, one JVM run
    "tests/handoff/test_end_of_input.py",
    "tests/delta/test_native_writer.py",
    "tests/spark/test_kafka.py",
    "tests/upgrades/test_corpus.py",  # a job run per checkpoint of the corpus
    "tests/spark/test_quiet_stream.py",
    # the Connect server's Python worker must connect back within 10 s (Spark's fixed limit):
    # not while the crash tests start their JVMs (it missed it twice at a load of 17-20)
    "tests/spark/test_distributed.py",
    "tests/query/test_first_hour.py",
    "tests/kafka_output/test_topic_job.py",  # a topic's faults (a fault, a start after), the secrets' runs
    "tests/spark/test_kafka_broker.py",  # a broker started twice on its data
    "tests/kafka_output/test_topic.py",  # a broker, transactions
    "tests/delta/test_reading.py",  # twenty fresh interpreters
    "tests/query/test_job.py",
    "tests/spark/test_hostile_input.py",  # the hostile corpus and the poison records, one stream
    "tests/delta/test_store_faults.py",  # two job runs in process, a store behind a proxy
    "tests/query/test_signals.py",
    "tests/query/test_one_writer.py",
    "tests/query/test_inspect.py",
    "tests/query/test_rescale_spark.py",
    "tests/spark/test_streaming.py",
    "tests/docs/test_notebooks.py",
    "tests/delta/test_metrics_table.py",
    "tests/handoff/test_multikey_stream.py",
    "tests/spark/test_split_invariance_spark.py",
    "tests/engine/test_split_invariance.py",
    "tests/state/test_rescale.py",
    "tests/spark/test_watermarks.py",
    "tests/spark/test_typed_input.py",
    "tests/contract/test_contract_table.py",  # two Spark jobs over the contract table
    "tests/query/test_testing.py",
    "tests/query/test_query.py",
    "tests/state/test_state.py",
    "tests/query/test_demo.py",
    "tests/docs/test_docs_examples.py",
    "tests/spark/test_poison.py",
    "tests/query/test_backfill.py",
    "tests/docs/test_docs_site.py",
)
_moved = [path for path in SLOW_FIRST if not os.path.exists(os.path.join(_ROOT, path))]
if _moved:  # a file renamed or moved would otherwise lose its place in the order without a word
    raise RuntimeError(f"tests/conftest.py: SLOW_FIRST names files that are not there: {_moved}")


#: a test or fixture of the file asks for this file's ``kafka_broker`` (module-scoped, below)
_USES_BROKER = re.compile(r'def \w+\([^)]*\bkafka_broker\b|getfixturevalue\("kafka_broker"\)')


@functools.cache
def shares_module_fixture(path: str) -> bool:
    """Does the file at ``path`` (a node id's, from the project's root) define a module-scoped
    fixture (a server, a site build, a checkpoint its tests read), or use this conftest's
    ``kafka_broker``?  Its tests then run together on one worker: pytest tears a module fixture
    down whenever a worker goes on to another file's test and builds it again on return
    (``test_inspect``'s checkpoint was built ten times in one run, two JVM minutes each), and
    each worker that runs a test of the file builds its own (a broker per worker).  Doctests
    of the package's modules: no."""
    try:
        with open(os.path.join(_ROOT, path), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    return 'scope="module"' in text or _USES_BROKER.search(text) is not None


@pytest.fixture(scope="session")
def spark():
    session = spark_session(conf={"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    """A real Kafka broker (KRaft, on loopback, from the ``kafka-broker`` JARs), started when a
    test file first asks for it and stopped after that file's last test on the worker; tests
    make topics of their own on it (and SCRAM users for its SASL listeners).  Not one per
    worker for the whole run: an idle broker still costs 1.6 s of CPU a minute (its
    heartbeats, metadata log and flushes; measured on these 2 cores), and the Kafka tests run
    in the run's first minutes."""
    from spark_purgatory.kafka_broker import KafkaBroker

    # SCRAM over SASL_PLAINTEXT and over TLS (its own CA); a revoked user's open connections are
    # refused at their next re-authentication (tests/kafka_output/test_topic_job.py), as on a
    # broker with connections.max.reauth.ms set
    broker = KafkaBroker(
        data_dir=tmp_path_factory.mktemp("kafka-broker"),
        sasl=True,
        tls=True,
        properties={"connections.max.reauth.ms": "5000"},
    ).start()
    yield broker
    broker.stop()


def pytest_collection_modifyitems(config, items):
    for item in items:  # a test on the session's Spark is a Spark test, marked or not
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(_file(item.nodeid), len(rank)))  # stable: file order otherwise


def pytest_runtest_setup(item):
    """``@pytest.mark.jars("delta", ...)``: the test needs these JVM sets of ``make jars``.

    A set that is not there fails the test in CI (``CI`` set: CI has mvn, so a missing set is a
    broken fetch) and skips it elsewhere with the reason in the summary (``-ra``): a machine
    without mvn runs the rest, never passing a test it did not run.
    """
    for mark in item.iter_markers("jars"):
        missing = [name for name in mark.args if not jar_paths(name)]
        if missing:
            reason = f"needs the JVM sets {missing} (.jars/, `make jars` with mvn)"
            if os.environ.get("CI"):
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)


def _file(nodeid: str) -> str:
    """The test file of a node id (or of a work unit's scope), from the project's root."""
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``, our way: ``SLOW_FIRST``'s order, a file with a module-scoped
    fixture on one worker, and no slow test queued behind another.

    An xdist worker starts a test only once the next one is sent to it, so whatever the
    scheduler gives a worker waits for the test that worker runs now: a worker busy with a
    test of ``SLOW_FIRST`` gets the quickest test left (the queue's last) to queue, never the
    next slow one.  xdist's own loadgroup scheduler hands work out by group size and queues
    the next test regardless (Spark Connect's waited 7 minutes behind the local crash test), and under
    pytest 9.2 it finds no groups (it renames node ids, which pytest no longer reads back).
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlowApart(LoadScopeScheduling):
        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # SLOW_FIRST's order, not the units' sizes
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            """A work unit: a whole file for those sharing a module-scoped server, else one test."""
            path = nodeid.split("::", 1)[0]
            return path if shares_module_fixture(path) else nodeid

        def _assign_work_unit(self, node) -> None:
            assigned = self.assigned_work.get(node, {})
            busy = [scope for scope, tests in assigned.items() if not all(tests.values())]
            quickest = next(reversed(self.workqueue))
            if any(_file(scope) in SLOW_FIRST for scope in busy) and _file(quickest) not in SLOW_FIRST:
                self.workqueue.move_to_end(quickest, last=False)
            super()._assign_work_unit(node)

    return SlowApart(config, log)
