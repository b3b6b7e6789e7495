"""A new user's first hour (issue 22), written as the user hit it.

The payments case (``payments.py``): typed Parquet, 4 files per stream cut at different
event times, ``start()`` with the default ``source_format``.  Each trap of the issue is a
test here: Parquet read as JSON, errors that do not say what to do, a ``pending`` count that
forgets shards, ``rejected`` rows without their ``op_id``.
"""

from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.spark.formats import SourceFormatError, format_of_path, formats_of
from spark_purgatory.spark.schema import InputSchemaError
from tests.support.payments import reference, write_case

TESTS = os.path.dirname(os.path.dirname(__file__))  # its corpus/


# -- a path's format is told by its files ------------------------------------------------------------


def test_parquet_files_are_told_parquet(tmp_path):
    _ops, _events, ops_dir, events_dir = write_case(str(tmp_path))
    assert format_of_path(ops_dir).format == "parquet"
    assert formats_of([ops_dir, events_dir], "auto") == ["parquet", "parquet"]


def test_json_lines_are_told_json_even_with_hostile_lines(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in os.listdir(os.path.join(TESTS, "corpus")):  # the JSON lines only
        if name.endswith(".jsonl"):
            shutil.copy(os.path.join(TESTS, "corpus", name), corpus / name)
    assert format_of_path(str(corpus)).format == "json"


def test_a_delta_table_is_told_by_its_log(tmp_path):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "t"), pa.table({"key": ["a"]}))
    assert format_of_path(str(tmp_path / "t")).format == "delta"


def test_a_uri_is_listed_through_storage(tmp_path):
    _ops, _events, ops_dir, _ = write_case(str(tmp_path))
    assert format_of_path(f"file://{ops_dir}").format == "parquet"


def test_an_empty_input_takes_the_other_inputs_format(tmp_path):
    _ops, _events, ops_dir, _ = write_case(str(tmp_path))
    assert formats_of([ops_dir, str(tmp_path / "not-yet")], "auto") == ["parquet", "parquet"]
    assert formats_of([str(tmp_path / "a"), str(tmp_path / "b")], "auto") == ["json", "json"]


def test_parquet_asked_to_be_read_as_json_is_refused_naming_the_option(tmp_path):
    _ops, _events, ops_dir, _ = write_case(str(tmp_path))
    with pytest.raises(SourceFormatError, match="holds parquet .* not json: pass source_format") as error:
        formats_of([ops_dir], "json")
    assert "\n" not in str(error.value)


def test_binary_files_are_never_parsed_as_json(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.avro").write_bytes(b"Obj\x01" + bytes(range(256)) * 8)
    with pytest.raises(SourceFormatError, match="binary files that are neither Parquet nor JSON"):
        formats_of([str(tmp_path / "in")], "auto")


def test_a_directory_of_several_formats_is_refused(tmp_path):
    _ops, _events, ops_dir, _ = write_case(str(tmp_path))
    with open(os.path.join(ops_dir, "late.json"), "w") as f:
        f.write('{"op_id": "x"}\n')
    with pytest.raises(SourceFormatError, match="several formats"):
        formats_of([ops_dir], "auto")


# -- the payments case through start(), default source_format ------------------------------------------

CONFIG = PurgatoryConfig(shards=2, watermark_delay="5 seconds")


def _table(root, name):
    return DeltaTable(os.path.join(root, name)).to_pandas()


@pytest.mark.spark
def test_payments_as_parquet_complete_what_the_reference_says(spark, tmp_path):
    ops, events, ops_dir, events_dir = write_case(str(tmp_path))
    out, chk = str(tmp_path / "tables"), str(tmp_path / "chk")
    with start(ops_dir, events_dir, output=out, checkpoint=chk, config=CONFIG, spark=spark) as purgatory:
        purgatory.await_termination()
    outcomes, rejected = _table(out, "outcomes"), _table(out, "rejected")
    assert len(rejected) == 0, rejected["raw"].str[:20].tolist()[:3]
    completed = outcomes[outcomes["status"] == "completed"].sort_values("op_id")
    expected = reference(ops, events)
    assert completed["op_id"].tolist() == expected["op_id"].tolist()
    resolved_ms = completed["resolved_at"].astype("int64") // 1000
    assert resolved_ms.tolist() == expected["resolved_at_ms"].tolist()
    assert outcomes["op_id"].is_unique
    assert purgatory.totals["pending"] == purgatory.pending == 360 - len(outcomes) > 0  # every shard's


@pytest.mark.spark
def test_nanosecond_parquet_timestamps_are_refused_when_the_query_is_built(spark, tmp_path):
    _ops, _events, ops_dir, events_dir = write_case(str(tmp_path), unit="ns")
    assert pq.read_schema(os.path.join(ops_dir, "part-0000.parquet")).field("ts").type.unit == "ns"
    with pytest.raises(
        InputSchemaError, match="column 'ts' is a nanosecond timestamp.*coerce_timestamps='us'"
    ):
        start(ops_dir, events_dir, output=str(tmp_path / "t"), checkpoint=str(tmp_path / "c"), spark=spark)
    assert not os.path.exists(tmp_path / "c" / "offsets")  # refused before the query started


# -- Spark's Python workers run an interpreter that has the project ---------------------------------------
# (a venv's python run without the venv activated, where it works: tests/docs/test_wheel_install.py)

_EXAMPLE = """
import sys
from pyspark.sql import SparkSession
from spark_purgatory import PurgatoryConfig, start

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
root, ops, events = sys.argv[1:4]
config = PurgatoryConfig(shards=2, watermark_delay="5 seconds")
with start(ops, events, output=root + "/tables", checkpoint=root + "/chk", config=config) as purgatory:
    purgatory.await_termination()
"""


_JVM_VARIABLES = ("JAVA_HOME", "SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS")


def _run_example(tmp_path, **env_extra):
    """``example.py`` run by this interpreter (the venv's) with a PATH that lacks the venv."""
    import subprocess
    import sys

    env = {
        "PATH": "/usr/bin:/bin",  # no venv: python3 here cannot import pyarrow
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": os.path.dirname(TESTS),  # this tree's spark_purgatory (an editable venv needs none)
        # Java's home, and the tests' JVM options (C1 only, the serial collector: conftest.py)
        **{k: v for k, v in os.environ.items() if k in _JVM_VARIABLES},
        **env_extra,
    }
    assert subprocess.run(["python3", "-c", "import pyarrow"], env=env, capture_output=True).returncode != 0
    (tmp_path / "example.py").write_text(_EXAMPLE)
    case = write_case(str(tmp_path))
    args = [sys.executable, str(tmp_path / "example.py"), str(tmp_path), case[2], case[3]]
    return case, subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.spark
def test_workers_without_the_project_stop_the_start_with_one_line_saying_what_to_set(tmp_path):
    import sys

    _case, done = _run_example(tmp_path, PYSPARK_PYTHON="/usr/bin/python3")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "spark_purgatory.config.ConfigError: Spark's Python workers would run /usr/bin/python3"
    )
    assert "cannot import pyarrow: set spark.pyspark.python (or PYSPARK_PYTHON) to " + sys.executable in last
    assert not os.path.exists(tmp_path / "chk" / "offsets")


@pytest.mark.spark
def test_a_start_that_fails_leaves_no_checkpoint_behind(spark, tmp_path):
    """Kafka that does not answer (or a session without Spark's Kafka source) stops the start
    in one line, after the checkpoint's lease and wake directory were made: they go too."""
    from spark_purgatory.config import ConfigError

    kafka = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.default.api.timeout.ms": "2000"}
    with pytest.raises(ConfigError, match="Kafka"):
        start("ops", "events", output=str(tmp_path / "out"), checkpoint=str(tmp_path / "chk"),
              source_format="kafka", kafka_options=kafka, spark=spark)  # fmt: skip
    assert not (tmp_path / "chk").exists()
    (tmp_path / "kept").mkdir()  # a checkpoint that was there stays
    with pytest.raises(ConfigError, match="Kafka"):
        start("ops", "events", output=str(tmp_path / "out"), checkpoint=str(tmp_path / "kept"),
              source_format="kafka", kafka_options=kafka, spark=spark)  # fmt: skip
    assert (tmp_path / "kept").is_dir()


# -- configuration errors name the key, the value and what is allowed -------------------------------------


def test_a_config_field_of_the_wrong_type_names_the_key_the_value_and_what_to_pass():
    from spark_purgatory.config import ConfigError

    with pytest.raises(ConfigError) as error:
        PurgatoryConfig(shards="2")
    assert str(error.value).startswith("purgatory.shards (shards) must be an integer, got '2' (str)")
    with pytest.raises(ConfigError, match="purgatory.cross.shard.operations .* must be true or false"):
        PurgatoryConfig(cross_shard_operations="false")  # a non-empty string would be truthy


def test_a_bad_number_from_the_command_line_says_what_is_allowed():
    from spark_purgatory.job import parse_args

    base = ["--ops-path", "o", "--events-path", "e", "--output-path", "t", "--checkpoint-path", "c"]
    with pytest.raises(Exception, match=r"purgatory.shards must be an integer >= 1, got 'two'"):
        parse_args([*base, "--set", "purgatory.shards=two"])
    with pytest.raises(Exception, match=r"purgatory.shards must be >= 1, got 0"):
        parse_args([*base, "--set", "purgatory.shards=0"])


def test_an_unknown_key_lists_every_key_the_job_accepts(tmp_path):
    from spark_purgatory.config import ConfigError
    from spark_purgatory.job import parse_args

    conf = tmp_path / "job.conf"
    conf.write_text("purgatory.shard = 4\n")
    base = ["--ops-path", "o", "--events-path", "e", "--output-path", "t", "--checkpoint-path", "c"]
    with pytest.raises(ConfigError) as error:
        parse_args([*base, "--conf", str(conf)])
    message = str(error.value)
    assert message.startswith("unknown configuration key 'purgatory.shard' (did you mean purgatory.shards?)")
    for key in ("job.trigger", "job.source.format", "job.writer", "job.master", "job.log.format"):
        assert key in message
    assert "kafka.<consumer config>" in message and "source.kafka.<source option>" in message
    assert all(key in message for key in PurgatoryConfig.keys())


# -- an error inside a micro-batch: its first cause in the first line ----------------------------------


@pytest.mark.spark
def test_a_failed_micro_batch_is_re_raised_with_its_first_cause_first(spark, tmp_path):
    """Streams the user read themselves (no check of the files at start) over nanosecond
    Parquet: Spark fails the micro-batch; the user reads the cause in the first line."""
    from pyspark.errors import StreamingQueryException

    from spark_purgatory.spark.errors import MicroBatchError
    from spark_purgatory.spark.formats import EVENTS_PARQUET_SCHEMA, OPERATIONS_PARQUET_SCHEMA

    _ops, _events, ops_dir, events_dir = write_case(str(tmp_path), unit="ns")
    ops = spark.readStream.schema(OPERATIONS_PARQUET_SCHEMA).parquet(ops_dir)
    events = spark.readStream.schema(EVENTS_PARQUET_SCHEMA).parquet(events_dir)
    out, chk = str(tmp_path / "tables"), str(tmp_path / "chk")
    with start(ops, events, output=out, checkpoint=chk, config=CONFIG) as purgatory:
        with pytest.raises(MicroBatchError) as error:
            purgatory.await_termination()
    first = str(error.value).splitlines()[0]
    assert first.startswith("[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH]") and "[ts]" in first
    assert isinstance(error.value.__cause__, StreamingQueryException)
    assert len(str(error.value.__cause__)) > 10 * len(first)  # the full story is kept


def test_the_first_cause_of_a_python_worker_error_is_its_exception_line():
    from spark_purgatory.spark.errors import micro_batch_error

    spark_error = (
        "[STREAM_FAILED] Query [id = x] terminated with exception: Job aborted due to stage failure: "
        "Task 0 in stage 3.0 failed 1 times: org.apache.spark.api.python.PythonException: Traceback "
        '(most recent call last):\n  File "worker.py", line 1, in main\n    import pyarrow\n'
        "ModuleNotFoundError: No module named 'pyarrow'\n\n\tat org.apache.spark.api.python.X(X.scala:1)\n"
    )
    first = str(micro_batch_error(RuntimeError(spark_error))).splitlines()[0]
    assert first.startswith("ModuleNotFoundError: No module named 'pyarrow' (in Spark's Python workers: set")
    assert "spark.pyspark.python or PYSPARK_PYTHON" in first


def test_the_first_cause_of_a_java_calls_error_is_the_error_it_threw():
    """A Java call from the sink (py4j) that throws: py4j writes the thrown error on a line
    of its own after ``: ``, not as a ``Caused by:``."""
    from spark_purgatory.spark.errors import first_cause

    spark_error = (
        "[STREAM_FAILED] Query [id = x] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] "
        "An error occurred in the user provided function in foreachBatch.\nTraceback (most recent call "
        'last):\n  File "sink.py", line 1, in __call__\npy4j.protocol.Py4JJavaError: An error occurred '
        "while calling z:io.sparkpurgatory.sink.SmallRows.columns.\n: org.apache.spark.SparkException: "
        "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Data type mismatches when reading Parquet "
        "column [ts].\n\tat org.apache.spark.X(X.scala:1)\nCaused by: org.apache.spark.sql.execution."
        "datasources.SchemaColumnConvertNotSupportedException: column: [ts], physicalType: INT64\n"
    )
    assert first_cause(spark_error).startswith(
        "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Data type"
    )


def test_the_first_cause_of_a_task_error_told_only_in_the_first_line_is_that_error():
    """A task's error reaching the sink JAR's sink (``runtime.staged_sink``): Spark's message
    says it after ``terminated with exception:`` and lists no trace; a wrapper there is not
    taken for the cause."""
    from spark_purgatory.spark.errors import first_cause

    spark_error = (
        "[STREAM_FAILED] Query [id = x] terminated with exception: [FAILED_READ_FILE.PARQUET_COLUMN_"
        "DATA_TYPE_MISMATCH] Encountered error while reading file part-0.parquet. Data type mismatches "
        "when reading Parquet column [ts].\n=== Streaming Query ===\nIdentifier: [id = x]\n"
    )
    told = first_cause(spark_error)
    assert told.startswith("[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Encountered")
    wrapped = (
        "[STREAM_FAILED] Query [id = x] terminated with exception: [TASK_WRITE_FAILED] x\n"
        "Caused by: java.io.IOException: c"
    )
    assert first_cause(wrapped) == "c"


def test_a_local_session_starts_its_jvm_without_c2(spark):
    """local_session asks for C1 only (a first micro-batch 6.2-6.6 s -> 4.1-4.8 s here): the JVM
    the tests share was started by it, and runs with the option."""
    from spark_purgatory.runtime.session import C1_ONLY

    options = C1_ONLY.split()
    assert set(options) <= set(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions").split())
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert set(options) <= set(arguments)
    # and the code cache is tiered compilation's, not C1's 48 MB (full within a minute of Spark)
    flags = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert flags.getVMOption("ReservedCodeCacheSize").getValue() == str(240 * 1024 * 1024)


# -- pending counts every shard, also on a run that reads nothing new ----------------------------------


@pytest.mark.spark
def test_the_jobs_pending_counts_every_shard_also_on_a_run_that_reads_nothing_new(spark, tmp_path, capsys):
    import re

    from spark_purgatory.job import configure_logging, parse_args, run

    _ops, _events, ops_dir, events_dir = write_case(str(tmp_path))
    out, chk = str(tmp_path / "tables"), str(tmp_path / "chk")
    args = [
        "--ops-path",
        ops_dir,
        "--events-path",
        events_dir,
        "--output-path",
        out,
        "--checkpoint-path",
        chk,
    ]
    args += ["--set", "purgatory.shards=3", "--set", "watermark.delay=5 seconds"]
    configure_logging("text")
    first = run(parse_args(args))
    waiting = 360 - len(_table(out, "outcomes"))
    assert waiting > 0 and first["pending"] == waiting
    lines = [int(n.replace(",", "")) for n in re.findall(r"pending +([\d,]+)", capsys.readouterr().out)]
    assert lines and lines[-1] == waiting  # the last micro-batch's line

    again = run(parse_args(args))  # no new files
    assert again["pending"] == waiting
    lines = [int(n.replace(",", "")) for n in re.findall(r"pending +([\d,]+)", capsys.readouterr().out)]
    assert all(n == waiting for n in lines)


# -- rejected rows carry op_id and key ------------------------------------------------------------------


def test_the_pandas_validator_gives_a_rejected_rows_op_id_and_key():
    import pandas as pd

    from spark_purgatory.engine.validation import validate_events, validate_operations

    ops = pd.DataFrame(
        [
            {"op_id": "pay-1", "key": "card-1", "ts": 1000, "timeout_ms": -5},
            {"op_id": ["not", "text"], "keys": ["card-2", "card-0"], "ts": 1000, "timeout_ms": 5},
            {"op_id": " ", "key": "card-3", "ts": None, "timeout_ms": 5},
        ]
    )
    _, rejected = validate_operations(ops, max_timeout_ms=10_000)
    assert rejected[["reason", "op_id", "key"]].values.tolist() == [
        ["negative_timeout", "pay-1", "card-1"],
        ["bad_op_id", None, "card-2"],  # an operation's first key, as sent
        ["missing_op_id", None, "card-3"],
    ]
    _, rejected = validate_events(pd.DataFrame([{"key": "card-1", "op_id": 7, "ts": None}]))
    assert rejected[["reason", "op_id", "key"]].values.tolist() == [["missing_ts", "7", "card-1"]]


@pytest.mark.spark
@pytest.mark.parametrize("name", ["ops-1", "events-1"])
def test_both_validators_give_a_rejected_row_the_same_op_id_and_key(spark, name):
    """The Spark path reads op_id and key in the shard step from the parsed columns
    (``shard_input.split_input``); the pandas validator from the record."""
    import json

    import numpy as np
    import pandas as pd

    from spark_purgatory.engine.validation import first_keys, readable, validate_events, validate_operations
    from spark_purgatory.spark.sources import parse_events, parse_operations

    with open(os.path.join(TESTS, "corpus", f"{name}.jsonl"), "rb") as f:
        lines = [line.decode("utf-8", errors="replace") for line in f.read().split(b"\n")[:-1]]
    ops = name.startswith("ops")
    limits = {"max_timeout_ms": CONFIG.max_timeout_ms} if ops else {}
    parse = parse_operations if ops else parse_events
    parsed = parse(spark.createDataFrame([(line,) for line in lines], "value string"), **limits).toPandas()
    bad = parsed[parsed["reason"].notna()]
    if ops:
        keys = np.array([list(k) if k is not None else [] for k in bad["keys"]], dtype=object)
        spark_ids = list(zip(readable(bad["op_id"].to_numpy(object)), first_keys(keys), strict=True))
    else:
        spark_ids = list(
            zip(readable(bad["op_id"].to_numpy(object)), readable(bad["key"].to_numpy(object)), strict=True)
        )
    by_raw = dict(zip(bad["raw"], spark_ids, strict=True))
    validate = validate_operations if ops else validate_events
    checked = 0
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or line not in by_raw:
            continue
        _, rejected = validate(pd.DataFrame([record]), **limits)
        if len(rejected):
            assert (rejected["op_id"].iloc[0], rejected["key"].iloc[0]) == by_raw[line], line
            checked += 1
    assert checked >= 5


def _old_rejected_table(path: str) -> None:
    """A ``rejected`` table as the contract made it before op_id and key, with one row."""
    import datetime as dt

    from deltalake import write_deltalake

    old = pa.schema(
        [
            ("source", pa.string()),
            ("raw", pa.string()),
            ("reason", pa.string()),
            ("batch_id", pa.int64()),
            ("rejected_date", pa.date32()),
        ]
    )
    row = {"source": ["operations"], "raw": ["{}"], "reason": ["missing_op_id"], "batch_id": [0]}
    table = pa.table({**row, "rejected_date": [dt.date(2026, 1, 1)]}, schema=old)
    write_deltalake(path, table, partition_by=["rejected_date"])


@pytest.mark.spark
def test_rejected_payments_carry_their_op_id_and_key_also_in_a_table_made_before(spark, tmp_path):
    import numpy as np
    import pandas as pd

    from tests.support.payments import T0, write_parquet

    ops, events, ops_dir, events_dir = write_case(str(tmp_path))
    late = pd.DataFrame(
        {
            "op_id": ["pay-bad", "pay-0003"],  # a negative timeout; an op_id already taken
            "key": ["card-bad", "card-0003"],
            "ts": [T0 + 400_000, T0 + 400_000],
            "timeout_ms": np.array([-5, 1000], dtype=np.int64),
            "condition": "count",
            "target": 2.0,
            "payload": "{}",
        }
    )
    write_parquet(late, str(tmp_path / "more-ops"), files=1, cuts=(0.0,))
    os.rename(tmp_path / "more-ops" / "part-0000.parquet", os.path.join(ops_dir, "part-0004.parquet"))
    out, chk = str(tmp_path / "tables"), str(tmp_path / "chk")
    _old_rejected_table(os.path.join(out, "rejected"))
    with start(ops_dir, events_dir, output=out, checkpoint=chk, config=CONFIG, spark=spark) as purgatory:
        purgatory.await_termination()
    rejected = _table(out, "rejected")
    old = rejected["raw"] == "{}"
    assert rejected.loc[old, ["reason", "op_id", "key"]].values.tolist() == [["missing_op_id", None, None]]
    found = {r: (o, k) for r, o, k in rejected.loc[~old, ["reason", "op_id", "key"]].values.tolist()}
    assert found == {
        "negative_timeout": ("pay-bad", "card-bad"),
        "duplicate_op_id": ("pay-0003", "card-0003"),
    }


def test_a_local_session_talks_to_its_python_workers_over_unix_sockets(spark):
    """local_session sets ``spark.python.unix.domain.socket.enabled``: over TCP on loopback
    each Python task waited on 40 ms delayed acknowledgements (an idle shard's task 140 ->
    45 ms here).  The setting reaches the workers: PySpark's daemon forks them with it."""
    import pandas as pd

    from spark_purgatory.runtime.session import UNIX_SOCKETS

    assert spark.sparkContext.getConf().get(UNIX_SOCKETS) == "true"

    def environment(frames):
        for _ in frames:
            yield pd.DataFrame({"unix": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")]})

    rows = spark.range(1).mapInPandas(environment, "unix string").collect()
    assert [row.unix.lower() for row in rows] == ["true"]


def test_start_names_the_socket_setting_where_the_workers_use_tcp(spark, caplog):
    """A session built without the setting (a plain ``SparkSession.builder``, spark-submit
    without ``--conf``) gets one INFO line naming it; the test session, on Unix sockets, none."""
    import logging

    from spark_purgatory.runtime import workers

    assert workers.advise_unix_sockets(spark) is False

    class Conf:
        @staticmethod
        def get(key, default=None):
            return "false" if key == "spark.python.unix.domain.socket.enabled" else default

    class Session:  # the one thing the advice reads: the context's settings
        class sparkContext:  # noqa: N801 - PySpark's attribute name
            _conf = Conf

    workers._ADVISED.clear()
    with caplog.at_level(logging.INFO, logger="spark_purgatory.runtime.workers"):
        assert workers.advise_unix_sockets(Session()) is True
        assert workers.advise_unix_sockets(Session()) is True  # said once per process
    assert caplog.text.count("spark.python.unix.domain.socket.enabled=true") == 1


def test_a_local_session_reads_a_micro_batchs_one_big_file_on_both_cores(spark, tmp_path):
    """local_session sets ``spark.sql.files.openCostInBytes`` (``FILE_OPEN_COST``): a JSON
    file bigger than it is cut into one split per core (Spark's 4 MB default left a 3 MB file
    of operations to one task while the other core waited), a small one stays whole."""
    import json as json_module

    from spark_purgatory.runtime.session import FILE_OPEN_COST

    assert spark.conf.get(FILE_OPEN_COST[0]) == FILE_OPEN_COST[1]
    line = json_module.dumps({"op_id": "o" * 40, "key": "k" * 40, "payload": "p" * 100})
    for name, lines in (("big", 12_000), ("small", 100)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-0.json").write_text("\n".join([line] * lines) + "\n")
    big = spark.read.json(str(tmp_path / "big"))
    small = spark.read.json(str(tmp_path / "small"))
    assert (tmp_path / "big" / "part-0.json").stat().st_size > 2 * int(FILE_OPEN_COST[1])
    assert big.rdd.getNumPartitions() == spark.sparkContext.defaultParallelism == 2
    assert small.rdd.getNumPartitions() == 1
    assert big.count() == 12_000 and small.count() == 100  # every line read once
