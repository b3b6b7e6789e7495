"""Output tables named in the session's catalog (``spark_purgatory.delta.catalog``).

``start()`` into ``CatalogTables`` (three-part names through Spark's session catalog, read
back with two-part names by ``spark.table``); the job's ``--output-tables`` across two runs
of a local catalog kept in ``job.warehouse`` (the second run finds the tables by name and
continues); what is refused, in one line: delta-rs with catalog names, a local run without
a warehouse.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.config import ConfigError
from spark_purgatory.delta.catalog import CatalogDeltaWriter, CatalogTables, writer_for
from spark_purgatory.delta.ownership import OWNER, OutputOwnedError
from spark_purgatory.job import parse_args
from spark_purgatory.query import app_id_of
from spark_purgatory.workload import generate, write_json_lines
from tests.support.crash_harness import reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "jobs", "purgatory_job.py")


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
def test_start_writes_catalog_tables_read_back_with_spark_table(spark, tmp_path):
    schema = "purgatory_catalog"
    # the schema's managed tables under tmp_path, not the session's spark-warehouse
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema} LOCATION '{tmp_path / 'warehouse'}'")
    work = generate(300, seed=11, ops_per_second=50)
    ops, events = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops, events, files=3, malformed=2)
    config = PurgatoryConfig(shards=2, watermark_delay="2 seconds")
    # three-part names (Spark's session catalog named), a prefix; read with two-part names
    tables = CatalogTables(f"spark_catalog.{schema}", prefix="pay_")
    with start(ops, events, output=tables, checkpoint=str(tmp_path / "chk"), config=config, spark=spark) as q:
        assert isinstance(q.writer, CatalogDeltaWriter)
        q.await_termination()
    outcomes = spark.table(f"{schema}.pay_outcomes").toPandas()
    assert outcomes["op_id"].is_unique
    assert _resolved(outcomes) == _expected(work, config)
    assert spark.table(f"{schema}.pay_rejected").count() == 2  # every malformed line once
    metrics = spark.table(f"{schema}.pay_metrics").toPandas()
    assert int(metrics["completed"].sum() + metrics["expired"].sum()) == len(outcomes)
    assert int(metrics["unmatched"].sum()) == spark.table(f"{schema}.pay_unmatched_events").count()
    # managed tables, in the schema's location; their partitioning is the contract's
    detail = spark.sql(f"DESCRIBE DETAIL {schema}.pay_outcomes").first()
    assert detail["location"].startswith(f"file:{tmp_path / 'warehouse'}")
    assert detail["partitionColumns"] == ["resolved_date"]
    # one writer per output: the catalog tables name their checkpoint; another one is refused
    assert detail["properties"][OWNER] == app_id_of(str(tmp_path / "chk"))
    with pytest.raises(OutputOwnedError, match=f"output table spark_catalog.{schema}.pay_outcomes belongs"):
        start(ops, events, output=tables, checkpoint=str(tmp_path / "chk-2"), config=config, spark=spark)


@pytest.mark.jars("delta")
@pytest.mark.spark
def test_the_job_writes_catalog_tables_kept_by_a_local_warehouse_across_runs(tmp_path):
    work = generate(300, seed=12, ops_per_second=50)
    staged, ops, events = str(tmp_path / "in"), str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, f"{staged}/ops", f"{staged}/events", files=4)
    warehouse, cwd = tmp_path / "warehouse", tmp_path / "cwd"
    cwd.mkdir()
    settings = {"purgatory.shards": "2", "watermark.delay": "2 seconds", "job.master": "local[1]",
                "job.warehouse": str(warehouse)}  # fmt: skip
    names = sorted(os.listdir(f"{staged}/ops"))
    for run in (names[:2], names[2:]):
        _move(f"{staged}/ops", ops, run)
        _move(f"{staged}/events", events, run)
        job = subprocess.run(
            [sys.executable, JOB, "--ops-path", ops, "--events-path", events,
             "--checkpoint-path", str(tmp_path / "chk"), "--output-tables", "purgatory",
             *[x for k, v in settings.items() for x in ("--set", f"{k}={v}")]],
            capture_output=True, text=True, cwd=cwd, timeout=600,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr[-3000:]
        assert "CatalogDeltaWriter, output purgatory.{table}" in job.stdout
    assert os.listdir(cwd) == []  # nor Derby's database and log, nor a spark-warehouse
    assert {"metastore_db", "derby.log", "purgatory.db"} <= set(os.listdir(warehouse))
    outcomes = DeltaTable(str(warehouse / "purgatory.db" / "outcomes")).to_pandas()
    assert outcomes["op_id"].is_unique
    assert _resolved(outcomes) == _expected(work, PurgatoryConfig(shards=2, watermark_delay="2 seconds"))
