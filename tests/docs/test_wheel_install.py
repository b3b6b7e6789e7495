"""The wheel is the product: built from this checkout, installed into a fresh venv outside it with
its ``kafka`` extra and nothing else, it runs the README's example, the job with the project's
JARs in use, and Kafka.

The venv resolves the wheel's requirements as ``pip install`` does: the newest pyspark it allows
(today 4.2.1), not the tests' pin (4.2.0, the Spark the JARs are built for), so this is also the
test of the newest 4.2.x (``testbed.wheel``). One Python process, one JVM, in a directory outside
the checkout, run by the venv's python with the venv not activated (the PATH's ``python3`` lacks
pyarrow: the workers must get the driver's interpreter): the README's marked blocks as they stand
(a plain ``SparkSession.builder`` session: the JARs come from the package by ``ADD JAR``), its
stream started again on its checkpoint (a restart), then the job's entry point ``python -m
spark_purgatory.job`` on more input, on the same session, a Kafka run before it. Checked: from
the first ``start`` on, no WARN line and no traceback; the README's tables equal the engine's (the
stream's at its final watermark, with some operations still waiting; the backfill's once every
deadline has passed: the README's examples run here, as a user pastes them after ``pip install``;
``test_readme.py`` checks the README's text), the job resolves every operation as the engine
does, no "not in use" line, the one line about the Spark version exactly when the venv's Spark is
not the JARs', and the commands ``spark-purgatory --version`` and ``spark-purgatory jars`` name the
installed package.

Kafka from the wheel alone (its ``kafka`` extra, no checkout, no ``SPARK_PURGATORY_JARS``): the
library resolves the JARs into the user cache on first use (mvn here, from ``~/.m2``, which ``make
jars`` filled; Central has no Spark 4.2.1 connector, so the 4.2.0 pin serves pip's 4.2.1).
``python -m spark_purgatory.kafka_broker start`` starts the library's broker, ``spark-purgatory jars
--kafka`` names Spark's Kafka source for the plain session (``spark.jars``), and ``start(...,
source_format="kafka")`` with ``output.kafka.topic`` reads two topics of it: every outcome is on the
topic once, read ``read_committed``, equal to the Delta table and the engine's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

import spark_purgatory
from spark_purgatory import PurgatoryConfig
from spark_purgatory.kafka_broker import KafkaBroker
from spark_purgatory.runtime.jars import built_for, fits
from spark_purgatory.testing import assert_outcomes
from spark_purgatory.version import USER_METADATA
from spark_purgatory.workload import generate, write_json_lines
from testbed.wheel import ROOT, build_wheel, install_wheel, unactivated_env, venv_env
from tests.docs.test_readme import (
    COMPARED,
    PREFIX,
    README,
    _ms,
    engine,
    final_watermark,
    json_lines,
    readme_blocks,
)
from tests.support.topic_reader import outcomes_of, read_topic

# the wheel's build needs the project's JARs built; mvn resolves the Kafka sets from ~/.m2
pytestmark = [pytest.mark.spark, pytest.mark.jars("checks", "kafka", "kafka-broker")]

#: the job's settings in the script (and the engine's for its reference)
JOB_CONFIG = {"purgatory.shards": "2", "watermark.delay": "5 seconds"}

#: before the README's blocks: ``start`` says on standard error when it begins (the lines
#: before it are the session's own start-up), and the JARs the session holds are printed at the end
_MARK = """
import sys, spark_purgatory

_start = spark_purgatory.start


def start(*args, **kwargs):
    print("START", file=sys.stderr, flush=True)
    return _start(*args, **kwargs)


spark_purgatory.start = start
"""

#: before the README's blocks: a plain session, with Spark's Kafka source as ``spark-purgatory
#: jars --kafka`` printed it (the README's ``getOrCreate`` then gets this session)
_SESSION = """
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").config("spark.jars", {jars!r}).getOrCreate()
"""

#: after the README's blocks: its stream started again on its checkpoint, as a restart
_RESTART = """
# --- a restart of the README's stream on its checkpoint: nothing completes again
with start(f"{base}/input/ops", f"{base}/input/events", output=f"{base}/tables",
           checkpoint=f"{base}/checkpoint", config=config, trigger="available-now") as again:
    again.await_termination()
print("RESTART COMPLETED", again.totals["completed"])
"""

_JOB = """
# --- the job, as `python -m spark_purgatory.job` runs it, on the session above
import pyspark
from spark_purgatory.job import console

print("PYSPARK", pyspark.__version__)
code = console({argv!r})
print("JOB EXIT", code)
print("JARS", spark.sparkContext._jsc.sc().listJars().mkString(","))
"""

#: before the job (its console ends the session's Python workers): the two topics of the
#: wheel's broker, every outcome on a third too
_KAFKA = """
# --- Kafka: operations and events on two topics, the outcomes on a third (exactly once)
kafka = {{"kafka.bootstrap.servers": {servers!r}, "startingOffsets": "earliest"}}
topic = {{"output.kafka.topic": "outcomes", "output.kafka.statuses": "expired,completed",
         "output.kafka.bootstrap.servers": {servers!r}, **{config!r}}}
with start("operations", "events", output={out!r}, checkpoint={out!r} + "-checkpoint", config=topic,
           source_format="kafka", kafka_options=kafka, end_of_input=True, spark=spark) as on_kafka:
    on_kafka.await_termination()
print("KAFKA", on_kafka.totals)
"""


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory):
    """The wheel's venv: built and installed once for this module, without bytecode: its
    processes write the bytecode of what they import (``_writing_bytecode``)."""
    where = tmp_path_factory.mktemp("wheel")
    return install_wheel(build_wheel(where / "dist"), where / "venv", extras=("kafka",), bytecode=False)


def _writing_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` for the venv's processes: Python's default, bytecode written as modules are first
    imported, where this machine sets ``PYTHONDONTWRITEBYTECODE`` (each process, Spark's Python
    workers too, would compile pandas, pyarrow and pyspark again); compiled at the install
    instead, as ``pip`` does, it is every module, pandas' and numpy's own tests too, which these
    processes never import.  (mvn, resolving the Kafka sets, gets the tests' JVM options from
    ``MAVEN_OPTS``: ``tests/conftest.py``.)"""
    return {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}


def test_the_installed_wheel_runs_the_readme_and_the_job_with_its_jars(wheel_python, tmp_path):
    work = tmp_path / "user"  # outside the checkout: nothing of it on the path
    work.mkdir()
    assert not str(work).startswith(str(ROOT))
    job = work / "job"
    write_json_lines(
        generate(400, seed=3, ops_per_second=50), f"{job}/input/ops", f"{job}/input/events", files=3
    )
    argv = ["--ops-path", f"{job}/input/ops", "--events-path", f"{job}/input/events"]
    argv += ["--output-path", f"{job}/tables", "--checkpoint-path", f"{job}/checkpoint", "--end-input"]
    argv += [arg for key, value in JOB_CONFIG.items() for arg in ("--set", f"{key}={value}")]
    with open(README, encoding="utf-8") as f:
        blocks = readme_blocks(f.read())
    readme = work / "readme"
    script = "\n\n".join(f"# --- readme-test: {name}\n{code}" for name, code in blocks).replace(
        PREFIX, str(readme)
    )
    # the venv's python run by its path, the venv not activated: the PATH's python3 cannot
    # import pyarrow, so start() must give Spark's Python workers the driver's interpreter
    env = _writing_bytecode(
        unactivated_env(
            XDG_CACHE_HOME=str(tmp_path / "cache"),
            PYSPARK_SUBMIT_ARGS="--conf spark.ui.enabled=false pyspark-shell",  # tests share no UI port
        )
    )
    assert "SPARK_PURGATORY_JARS" not in env
    assert subprocess.run(["python3", "-c", "import pyarrow"], env=env, capture_output=True).returncode != 0
    kafka_jars = _wheel_command(wheel_python, env, "spark-purgatory", "jars", "--kafka")
    cache = str(tmp_path / "cache" / "spark-purgatory" / "jars")  # resolved there by the command
    assert "/spark-sql-kafka-0-10_2.13-" in kafka_jars and kafka_jars.startswith(cache), kafka_jars
    with _wheels_broker(wheel_python, env, work / "broker") as servers:
        kafka = _on_topics(wheel_python, env, work / "broker", servers, work / "kafka")
        kafka_config = {"purgatory.shards": "2", "watermark.delay": "5 seconds"}
        (work / "user_script.py").write_text(
            _SESSION.format(jars=kafka_jars) + _MARK + script + _RESTART
            + _KAFKA.format(servers=servers, config=kafka_config, out=str(kafka / "tables"))
            + _JOB.format(argv=argv),
            encoding="utf-8",
        )  # fmt: skip
        script_run = [str(wheel_python), "user_script.py"]
        done = subprocess.run(script_run, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        records = outcomes_of(read_topic(servers, "outcomes"))
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "JOB EXIT 0" in done.stdout, said[-4000:]
    assert "RESTART COMPLETED 0" in done.stdout
    # from start() on, the README's runs (a start, a restart) and the job's print no WARN line a
    # user cannot act on (runtime.spark_logs), and no Python traceback
    after = done.stderr[done.stderr.index("START") :]
    assert [line for line in after.splitlines() if " WARN " in line or "Traceback" in line] == []
    # the session was built without the project's JAR: start() added the wheel's (spark.checks)
    assert "spark-purgatory-checks.jar" in done.stdout.split("\nJARS ", 1)[1]

    assert "not in use" not in said, [line for line in said.splitlines() if "not in use" in line]
    pyspark_version = done.stdout.split("PYSPARK ", 1)[1].split()[0]
    # pip's newest 4.2.x against the pin the JARs are built for: used, and said at INFO only,
    # which a user's plain session does not print (the job's own log is INFO: said once per
    # process, by the README's start before it)
    assert fits(pyspark_version), pyspark_version
    notices = [line for line in said.splitlines() if "spark-purgatory's JARs were built for Spark" in line]
    assert notices == [], notices

    # the README's tables: the stream's (start) equal the engine's at its final watermark, read
    # from the checkpoint's offset log; the batch's (backfill) once every deadline has passed
    config = PurgatoryConfig(shards=2, watermark_delay="5 seconds")  # the README's
    streamed = DeltaTable(str(readme / "tables" / "outcomes")).to_pandas()
    at_the_end = engine(str(readme), config, final_watermark(str(readme / "checkpoint")))
    assert len(streamed) > 0 and at_the_end.pending > 0, "the stream should end with some still waiting"
    assert_outcomes(streamed, at_the_end.outcomes(), columns=COMPARED)
    backfilled = DeltaTable(str(readme / "backfill" / "outcomes")).to_pandas()
    resolved = engine(str(readme), config, _past_every_deadline(json_lines(str(readme / "input" / "ops"))))
    assert resolved.pending == 0
    assert_outcomes(backfilled, resolved.outcomes(), columns=COMPARED)
    unmatched = DeltaTable(str(readme / "backfill" / "unmatched_events")).to_pandas()
    assert len(unmatched) == len(resolved.unmatched())

    # Kafka: every operation's outcome once on the topic (read_committed), as in the Delta table,
    # as the engine resolves them
    ops = json_lines(str(kafka / "input" / "ops"))
    resolved = engine(str(kafka), PurgatoryConfig.from_mapping(kafka_config), _past_every_deadline(ops))
    on_kafka = DeltaTable(str(kafka / "tables" / "outcomes")).to_pandas()
    assert resolved.pending == 0 and len(on_kafka) == len(ops) == len(records), done.stdout[-2000:]
    assert_outcomes(on_kafka, resolved.outcomes(), columns=COMPARED)
    tabled = {(r.op_id, r.status, r.resolved_at.value // 10**6) for r in on_kafka.itertuples()}
    assert {(op_id, status, _ms(at)) for op_id, status, at in records} == tabled

    outcomes = DeltaTable(str(job / "tables" / "outcomes"))
    ops = json_lines(str(job / "input" / "ops"))
    resolved = engine(str(job), PurgatoryConfig.from_mapping(JOB_CONFIG), _past_every_deadline(ops))
    assert resolved.pending == 0 and len(outcomes.to_pandas()) == len(ops)
    assert_outcomes(outcomes.to_pandas(), resolved.outcomes(), columns=COMPARED)
    assert {c.get("userMetadata") for c in outcomes.history()} == {USER_METADATA}


def test_the_installed_commands_name_the_installed_package_and_its_jars(wheel_python, tmp_path):
    env = _writing_bytecode(venv_env(wheel_python))
    command = str(wheel_python.parent / "spark-purgatory")
    version = subprocess.run([command, "--version"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert version.stdout == f"spark-purgatory {spark_purgatory.__version__}\n"
    printed = subprocess.run(
        [command, "jars", "--format", "json"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    jars = json.loads(printed.stdout)
    site = str(wheel_python.parent.parent)
    names = sorted(os.path.basename(p) for p in jars["jars"])
    assert names == [
        "spark-purgatory-checkpoint.jar",
        "spark-purgatory-checks.jar",
        "spark-purgatory-sink.jar",
    ]
    assert all(p.startswith(site) and os.path.isfile(p) for p in jars["jars"])  # the wheel's package data
    assert jars["spark"] == built_for()
    # the application file spark-submit is given where there is no checkout (spark_purgatory.submit)
    python = str(wheel_python)
    application = subprocess.run(
        [python, "-m", "spark_purgatory.submit"], capture_output=True, text=True, env=env, cwd=tmp_path
    ).stdout.strip()
    assert application.startswith(site) and application.endswith("submit.py")
    usage = subprocess.run([python, application, "--help"], capture_output=True, text=True, env=env)
    assert usage.returncode == 0 and "--checkpoint-path" in usage.stdout, usage.stderr[-2000:]


def _wheel_command(python: Path, env: dict[str, str], command: str, *args: str) -> str:
    """What a command of the wheel's venv prints (``python``: the venv's own)."""
    program = str(python) if command == "python" else str(python.parent / command)
    done = subprocess.run([program, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


@contextlib.contextmanager
def _wheels_broker(python: Path, env: dict[str, str], data: Path):
    """The library's broker from the wheel's venv, as its docs start it; stopped after."""
    broker = ("python", "-m", "spark_purgatory.kafka_broker")
    try:
        yield _wheel_command(python, env, *broker, "start", "--data", str(data))
    finally:  # detached: it would outlive the test
        _wheel_command(python, env, *broker, "stop", "--data", str(data))


def _on_topics(python: Path, env: dict[str, str], broker: Path, servers: str, base: Path) -> Path:
    """A workload written as JSON lines under ``base/input`` (for the engine) and produced to
    the topics ``operations`` and ``events`` (two partitions each) of the wheel's broker."""
    topic = ("python", "-m", "spark_purgatory.kafka_broker", "topic", "--data", str(broker))
    _wheel_command(python, env, *topic, "operations", "events", "--partitions", "2")
    _wheel_command(python, env, *topic, "outcomes")
    write_json_lines(generate(200, seed=5, ops_per_second=40), f"{base}/input/ops", f"{base}/input/events")
    client = KafkaBroker(data_dir=broker)
    client.port = int(servers.rsplit(":", 1)[1])
    for name, kind in (("operations", "ops"), ("events", "events")):
        lines = [json.dumps(row) for row in json_lines(f"{base}/input/{kind}")]
        client.produce(name, lines, partitions=[i % 2 for i in range(len(lines))])
    return base


def _past_every_deadline(ops: list[dict]) -> int:
    return max(_ms(o["ts"]) + int(o["timeout_ms"]) for o in ops) + PurgatoryConfig().tick_ms
