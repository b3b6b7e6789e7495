"""Errors that cannot pass end the job at once: one line, an exit code, no restart.

A state the checkpoint holds that Spark refuses for the query, an analysis error, a class
missing from the class path: the restart policy would meet the same error each time (issue
63: three restarts spent on ``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``).  ``faults.cannot_pass``
tells them from the error and its causes; the job ends with exit code 2 (the checkpoint) or 3
(the deployment).  The errors here are Spark's own, from this worker's session.
"""

from __future__ import annotations

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F

from spark_purgatory.faults import EXIT_BROKEN, EXIT_REFUSED, cannot_pass
from spark_purgatory.job import main as job_main
from spark_purgatory.spark import routed_rows
from spark_purgatory.spark.errors import MicroBatchError
from spark_purgatory.spark.sql_text import literal_column
from tests.upgrades import entries as corpus

pytestmark = pytest.mark.spark


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err[-3000:]
    return err


def test_a_state_schema_spark_refuses_ends_the_job_at_once_exit_2(spark, tmp_path, monkeypatch, capsys):
    """Issue 63's break, made again: a nullable state key on a checkpoint that recorded it
    non-nullable.  With three restarts and a minute's pause before the first, the job ends
    at the first failure."""

    def nullable_label(spark_, labels, shard):
        return F.try_element_at(literal_column(spark_, labels, "array<int>"), F.expr(f"{shard} + 1"))

    monkeypatch.setattr(routed_rows, "_label_of", nullable_label)
    entry = corpus.entry_named("files-two-runs")
    corpus.restore(corpus.CORPUS / entry.name, tmp_path)
    corpus.add_continuation(corpus.CORPUS / entry.name, tmp_path)
    restarts = ["--set", "job.restart.attempts=3", "--set", "job.restart.backoff.ms=60000"]
    code = job_main([*entry.job_args(str(tmp_path)), *restarts])
    line = _error_line(capsys)
    assert code == EXIT_REFUSED, line
    assert line.startswith(
        "error: the checkpoint's state does not fit this query: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]"
    )
    assert f"`spark-purgatory upgrade --checkpoint {tmp_path / 'chk'}`" in line
    assert "restart 1 of 3" not in capsys.readouterr().out


def test_an_analysis_error_at_start_is_one_line_exit_3(spark, tmp_path, capsys):
    args = ["--ops-path", str(tmp_path / "none"), "--events-path", str(tmp_path / "none-either")]
    args += ["--output-path", str(tmp_path / "out"), "--checkpoint-path", str(tmp_path / "chk")]
    assert job_main([*args, "--source-format", "json", "--set", "purgatory.shards=2"]) == EXIT_BROKEN
    line = _error_line(capsys)
    assert line.startswith("error: Spark cannot analyse the query: [PATH_NOT_FOUND] Path does not exist")


def test_spark_errors_are_told_apart(spark):
    with pytest.raises(AnalysisException) as analysis:
        spark.sql("SELECT no_such_column FROM range(1)").collect()
    with pytest.raises(Py4JJavaError) as missing:
        spark._jvm.java.lang.Class.forName("io.example.NotOnTheClassPath")
    with pytest.raises(Exception) as no_source:
        spark.read.format("io.example.NoSuchSource").load()

    told = cannot_pass(analysis.value)
    assert told.exit_code == EXIT_BROKEN and "[UNRESOLVED_COLUMN" in str(told)
    for error in (missing.value, no_source.value):
        told = cannot_pass(error)
        assert told.exit_code == EXIT_BROKEN, error
        assert str(told).startswith("a class is missing from Spark's class path: ")
    # a micro-batch's error keeps Spark's as its cause: told by it
    failed = MicroBatchError("a task failed\nthe micro-batch failed")
    failed.__cause__ = missing.value
    assert cannot_pass(failed).exit_code == EXIT_BROKEN
    linkage = RuntimeError("java.lang.NoClassDefFoundError: io/delta/tables/DeltaTable")
    assert cannot_pass(linkage).exit_code == EXIT_BROKEN


@pytest.mark.parametrize(
    "error",
    [
        MicroBatchError("Connection to node -1 (localhost/127.0.0.1:9092) could not be established"),
        MicroBatchError("503 SlowDown: please reduce your request rate"),
        OSError("[Errno 28] No space left on device"),
    ],
)
def test_faults_that_may_pass_are_left_to_the_restart_policy(error):
    assert cannot_pass(error) is None
