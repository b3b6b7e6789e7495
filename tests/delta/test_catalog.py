"""Output tables named in the session's catalog (``spark_purgatory.delta.catalog``).

The job's ``--output-tables`` (``start()`` into ``CatalogTables``: three-part names through
Spark's session catalog, with a prefix) across two runs of a local catalog kept in
``job.warehouse``: the first is killed after its first commit (Spark's Delta writer's kill at
``committed`` in the crash tests' plans), the second finds the tables by name, recovers the
killed run's drain and continues, and its session
reads them back with two-part names by ``spark.table``; what is refused, in one line:
delta-rs with catalog names, a local run without a warehouse, a second checkpoint into the
same tables.  The tables are read in the job's own session, not the test worker's: a local
catalog that outlives its session is Spark's Hive metastore, set when a session starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig
from spark_purgatory.config import ConfigError
from spark_purgatory.contract import TABLES
from spark_purgatory.delta.catalog import CatalogTables, writer_for
from spark_purgatory.job import parse_args
from spark_purgatory.query import app_id_of
from spark_purgatory.workload import generate, write_json_lines
from tests.support.crash_harness import reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")
#: the job with the crash tests' fault hook (``tests/support/faulty_job.py``)
FAULTY_JOB = os.path.join(ROOT, "tests", "support", "faulty_job.py")
#: where the first run is killed: Spark's Delta writer's kill at this point of the crash tests'
#: plans (``test_crash.test_the_plans_kill_at_every_fault_point``), here through ``saveAsTable``
KILL = "committed:1"


def _resolved(outcomes: pd.DataFrame) -> set[tuple[str, str, int]]:
    return {(r.op_id, r.status, pd.Timestamp(r.resolved_at).value // 10**6) for r in outcomes.itertuples()}


def _expected(work, config: PurgatoryConfig) -> set[tuple[str, str, int]]:
    outcomes, _ = reference(work, config)
    return {(r.op_id, r.status, int(r.resolved_at)) for r in outcomes.itertuples()}


def _move(src: str, dst: str, names: list[str]) -> None:
    os.makedirs(dst, exist_ok=True)
    for name in names:
        os.replace(os.path.join(src, name), os.path.join(dst, name))


def test_names_of_the_four_tables():
    tables = CatalogTables.parse("main.ops.payments_{table}")
    assert [tables.name(t) for t in ("outcomes", "metrics")] == [
        "main.ops.payments_outcomes",
        "main.ops.payments_metrics",
    ]
    assert CatalogTables.parse("purgatory").name("rejected") == "purgatory.rejected"
    assert tables.quoted("outcomes") == "`main`.`ops`.`payments_outcomes`"
    for bad in ("a.b.c", "", "my schema", "main.{table}_x"):
        with pytest.raises(ConfigError, match="output tables"):
            CatalogTables.parse(bad)


def test_delta_rs_with_catalog_names_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="delta-rs cannot write catalog tables") as refused:
        writer_for(None, CatalogTables("purgatory"), prefer="delta-rs")
    assert "\n" not in str(refused.value)
    args = ["--ops-path", "o", "--events-path", "e", "--checkpoint-path", str(tmp_path / "chk")]
    with pytest.raises(ConfigError, match="delta-rs cannot write catalog tables"):
        parse_args([*args, "--output-tables", "purgatory", "--set", "job.writer=delta-rs"])
    with pytest.raises(SystemExit):  # a path or tables, not both
        parse_args([*args, "--output-tables", "purgatory", "--output-path", str(tmp_path / "out")])


def test_a_local_job_with_catalog_names_needs_a_warehouse_and_says_so(tmp_path):
    job = subprocess.run(
        [sys.executable, JOB, "--ops-path", str(tmp_path), "--events-path", str(tmp_path),
         "--checkpoint-path", str(tmp_path / "chk"), "--output-tables", "purgatory"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert job.returncode == 2
    assert (
        job.stderr.strip()
        .splitlines()[-1]
        .endswith("set job.warehouse to the directory where the local catalog keeps its tables and metastore")
    )


@pytest.mark.jars("delta")
@pytest.mark.spark
def test_the_job_writes_catalog_tables_kept_by_a_local_warehouse_across_runs(tmp_path):
    """Two runs of the job into the tables ``pay_*`` of schema ``purgatory``, each a session of
    its own over the local catalog in ``job.warehouse``: the first names them with two parts
    and is killed (kill -9) after its first commit of rows (``KILL``); the second names them
    with three (Spark's session catalog named), finds the same tables by name, recovers the
    killed run's drain (Delta skips the table already committed by its ``txnAppId`` and
    ``txnVersion``) and continues, exactly once.  Then, in the second run's session
    (``_SECOND_RUN``), the tables read back by ``spark.table`` with two-part names; they are
    managed tables in their schema's location, partitioned as the contract says, and name
    their checkpoint: ``start()`` with another one is refused."""
    work = generate(300, seed=12, ops_per_second=50)
    staged, ops, events = str(tmp_path / "in"), str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, f"{staged}/ops", f"{staged}/events", files=4, malformed=2)
    warehouse, cwd, chk = tmp_path / "warehouse", tmp_path / "cwd", str(tmp_path / "chk")
    cwd.mkdir()
    second = tmp_path / "second_run.py"  # not in cwd: nothing of the job's may land there
    second.write_text(_SECOND_RUN, encoding="utf-8")
    settings = {"purgatory.shards": "2", "watermark.delay": "2 seconds", "job.master": "local[1]",
                "job.warehouse": str(warehouse)}  # fmt: skip
    args = ["--ops-path", ops, "--events-path", events, "--checkpoint-path", chk,
            *[x for k, v in settings.items() for x in ("--set", f"{k}={v}")]]  # fmt: skip
    names = sorted(os.listdir(f"{staged}/ops"))
    runs = (  # the script, its tables, its input files, its end (-9: killed at KILL)
        (FAULTY_JOB, "purgatory.pay_{table}", names[:2], -9),
        (str(second), "spark_catalog.purgatory.pay_{table}", names[2:], 0),
    )
    for script, tables, run, end in runs:
        _move(f"{staged}/ops", ops, run)
        _move(f"{staged}/events", events, run)
        job = subprocess.run(
            [sys.executable, script, *args, "--output-tables", tables],
            capture_output=True, text=True, cwd=cwd, timeout=600,
            # stdout unbuffered: the killed run's lines are there too
            env={**os.environ, "PURGATORY_FAULT": KILL, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert job.returncode == end, job.stderr[-3000:]
        assert f"CatalogDeltaWriter, output {tables}" in job.stdout
    assert os.listdir(cwd) == []  # nor Derby's database and log, nor a spark-warehouse
    assert {"metastore_db", "derby.log", "purgatory.db"} <= set(os.listdir(warehouse))
    (seen,) = [json.loads(line) for line in job.stdout.splitlines() if line.startswith('{"outcomes"')]
    table = {n: DeltaTable(str(warehouse / "purgatory.db" / f"pay_{n}")).to_pandas() for n in TABLES}
    outcomes, metrics = table["outcomes"], table["metrics"]
    # every operation once, as the engine resolves it; the same read by name in the job's session
    expected = _expected(work, PurgatoryConfig(shards=2, watermark_delay="2 seconds"))
    assert outcomes["op_id"].is_unique and _resolved(outcomes) == expected
    assert {tuple(r) for r in seen["outcomes"]} == expected
    assert len(table["rejected"]) == 2  # every malformed line once
    assert int(metrics["completed"].sum() + metrics["expired"].sum()) == len(outcomes)
    assert int(metrics["unmatched"].sum()) == len(table["unmatched_events"])
    # managed tables, in the schema's location; their partitioning is the contract's
    assert seen["location"].startswith(f"file:{warehouse / 'purgatory.db'}")
    assert seen["partitionColumns"] == ["resolved_date"]
    # one writer per output: the catalog tables name their checkpoint; another one is refused
    assert seen["owner"] == app_id_of(chk)
    assert "output table spark_catalog.purgatory.pay_outcomes belongs" in seen["refused"], seen


#: the second run: the job (``spark_purgatory.job.main``, what ``jobs/purgatory_job.py`` runs),
#: then what its session reads of the tables, as one line of JSON.  argv: the job's arguments
_SECOND_RUN = f"""
import json, sys
sys.path.insert(0, {ROOT!r})
from pyspark.sql import SparkSession
from spark_purgatory import start
from spark_purgatory.delta.ownership import OWNER, OutputOwnedError
from spark_purgatory.job import main, parse_args

if main(sys.argv[1:]):
    sys.exit(1)
spark = SparkSession.builder.getOrCreate()
settings = parse_args(sys.argv[1:])
outcomes = spark.table("purgatory.pay_outcomes").selectExpr(
    "op_id", "status", "CAST(unix_millis(resolved_at) AS BIGINT)"
).collect()
detail = spark.sql("DESCRIBE DETAIL purgatory.pay_outcomes").first()
try:
    start(settings.ops_path, settings.events_path, output=settings.output_tables,
          checkpoint=settings.checkpoint_path + "-2", config=settings.config, spark=spark)
    refused = "not refused"
except OutputOwnedError as error:
    refused = str(error)
print(json.dumps({{
    "outcomes": [list(r) for r in outcomes],
    "location": detail["location"],
    "partitionColumns": list(detail["partitionColumns"]),
    "owner": detail["properties"][OWNER],
    "refused": refused,
}}))
"""
