"""Spark's own Delta writer (``job.writer=spark``: ``format("delta")`` with ``txnAppId`` /
``txnVersion``), the writer ``auto`` picks on Databricks and clusters with Delta's connector,
run for real beside the embedded delta-rs writer.

* the same input through both writers gives the same four tables (chispa); each output is
  then continued by the other writer, exactly once (the crash tests' ``check`` against the
  Spark-free engine), each commit recording the package's version;
* Delta itself, not the project, skips a replayed (app id, version);
* ``job.writer=spark`` without Delta's classes stops at start with one line naming the
  coordinates to add.

Delta's connector comes from ``make jars`` (``jvm/delta/pom.xml``); the shared session has it
on its class path.  ``test_crash.py`` kills the native path at its fault points.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable, write_deltalake

from spark_purgatory import PurgatoryConfig, start
from spark_purgatory.contract import TABLES
from spark_purgatory.delta.writers import DeltaRsWriter, SparkDeltaWriter
from spark_purgatory.version import USER_METADATA
from spark_purgatory.workload import generate, write_json_lines
from tests.support.crash_harness import check, input_rows, read_table, reference

pytestmark = [pytest.mark.spark, pytest.mark.jars("delta")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = PurgatoryConfig(
    shards=2,
    watermark_delay="2 seconds",
    source_max_files_per_trigger=1,
    accumulator_batch_size=32 * 1024,  # several drains, so several app-transaction versions
    state_segment_rows=100,
)
#: columns that differ between two runs of the same input: when the rows were written, and
#: the bytes a state save wrote (a compaction splices the chain's parts when the worker that
#: wrote them kept the shard, and encodes the rows again after a load from the files: which
#: Python worker runs a shard is PySpark's choice, so a run's figure is not the next one's)
WHEN = {
    "outcomes": ["emitted_at"],
    "unmatched_events": [],
    "rejected": ["rejected_date"],
    "metrics": ["batch_time", "emitted_at", "metrics_date", "state_bytes"],
    "warnings": ["emitted_at"],
}


MALFORMED = 4


def _input(tmp_path, files: int, seed: int):
    work = generate(500, seed=seed, ops_per_second=50, multi_key=0.05)
    all_in = tmp_path / "all"
    write_json_lines(work, str(all_in / "ops"), str(all_in / "events"), files=files, malformed=MALFORMED)
    return work


def _deliver(tmp_path, names: list[str]) -> tuple[str, str]:
    ops, events = tmp_path / "ops", tmp_path / "events"
    for kind, folder in (("ops", ops), ("events", events)):
        folder.mkdir(exist_ok=True)
        for name in names:
            os.replace(tmp_path / "all" / kind / name, folder / name)
    return str(ops), str(events)


def _run(spark, ops: str, events: str, out: str, chk: str, writer: str) -> type:
    with start(ops, events, output=out, checkpoint=chk, config=CONFIG, writer=writer, spark=spark) as q:
        q.await_termination()
    return type(q.writer)


def _engines(path: str) -> set[str]:
    """Who wrote the table's commits of rows: Spark's Delta (``Apache-Spark/4.2.0 Delta-Lake/4.4.0``)
    or delta-rs (``delta-rs:py-1.6.6``); the owner's record (``delta.ownership``, a properties-only
    commit delta-rs makes) is not one."""
    history = [c for c in DeltaTable(path).history() if c.get("operation") != "SET TBLPROPERTIES"]
    info = [str(c.get("engineInfo") or c.get("clientVersion")) for c in history]
    return {
        "Apache-Spark" if i.startswith("Apache-Spark") else "delta-rs" if "delta-rs" in i else i for i in info
    }


def test_native_writer_writes_what_delta_rs_writes_and_each_continues_the_others_tables(spark, tmp_path):
    """The same input through each writer gives the same four tables; then each output's
    checkpoint is continued by the other writer over one more file, exactly once."""
    work = _input(tmp_path, files=4, seed=7)
    names = sorted(os.listdir(tmp_path / "all" / "ops"))
    ops, events = _deliver(tmp_path, names[:3])
    outputs, checkpoints = {}, {}
    for writer in ("delta-rs", "spark"):
        outputs[writer], checkpoints[writer] = str(tmp_path / writer / "out"), str(tmp_path / writer / "chk")
        used = _run(spark, ops, events, outputs[writer], checkpoints[writer], writer)
        assert used is {"delta-rs": DeltaRsWriter, "spark": SparkDeltaWriter}[writer]
    assert _engines(f"{outputs['spark']}/outcomes") == {"Apache-Spark"}  # Delta's own writer ran
    assert "Apache-Spark" not in _engines(f"{outputs['delta-rs']}/outcomes")
    for name in TABLES:
        rs, native = (
            spark.read.format("delta").load(f"{outputs[w]}/{name}").drop(*WHEN[name]) for w in outputs
        )
        assert rs.count() > 0 or name in ("unmatched_events", "warnings"), name  # no warn_ms: same schema
        assert_df_equality(rs, native, ignore_row_order=True, ignore_nullable=True)
    # a table begun by one writer is continued by the other: one checkpoint, the writer switched
    ops, events = _deliver(tmp_path, names[3:])  # the last file: the run drains and commits
    expected_outcomes, expected_unmatched = reference(work, CONFIG)
    for begun, other in (("delta-rs", "spark"), ("spark", "delta-rs")):
        _run(spark, ops, events, outputs[begun], checkpoints[begun], other)
        out = outputs[begun]
        assert _engines(f"{out}/outcomes") == {"Apache-Spark", "delta-rs"}, begun
        # each commit says which version of the package wrote it
        recorded = {c.get("userMetadata") for name in TABLES for c in DeltaTable(f"{out}/{name}").history()}
        assert recorded == {USER_METADATA}, out
        result = {
            "tables": {name: read_table(f"{out}/{name}", None, name) for name in TABLES},
            "expected_outcomes": expected_outcomes,
            "expected_unmatched": expected_unmatched,
            "malformed": MALFORMED,
            "input_rows": input_rows(work, MALFORMED),
        }
        check(result)


def test_delta_itself_skips_a_replayed_batch_by_txn_app_id_and_version(spark, tmp_path):
    """Delta, not the writer, skips an (app id, version) the table's log already holds.  The
    first commit makes the table (making the tables is the runs' and the merge-schema test's)."""
    writer = SparkDeltaWriter(spark, str(tmp_path / "out"))
    rows = pa.table(
        {
            "source": ["operations"] * 3,
            "raw": ["{", "[", "x"],
            "reason": ["malformed_json"] * 3,
            "batch_id": [5, 5, 5],
        }
    )
    rows = pa.table(
        {
            f.name: rows.column(f.name) if f.name in rows.column_names else pa.nulls(3, f.type)
            for f in TABLES["rejected"].schema
        }
    ).cast(TABLES["rejected"].schema)
    path = writer.path("rejected")
    for version in (15, 15, 14):  # the batch, its replay, an older one: the writer itself never checks
        writer.commit("rejected", rows, app_id="query-1", version=version, target_file_size=1 << 20)
    assert spark.read.format("delta").load(path).count() == 3
    assert [c["operation"] for c in DeltaTable(path).history()].count("WRITE") == 1  # version 15
    writer.commit("rejected", rows, app_id="query-1", version=16, target_file_size=1 << 20)
    writer.commit("rejected", rows, app_id="query-2", version=15, target_file_size=1 << 20)  # another app
    assert spark.read.format("delta").load(path).count() == 9
    assert writer.committed_version("rejected", "query-1") == 16  # read back with delta-rs


#: columns added to a table since it was first written: the table's old row, the new values
_ADDED = {
    "outcomes": ({"op_id": "o", "keys": ["k"], "status": "expired", "condition": "quorum"},
                 {"reported": ["bo"], "missing": ["ana", "chen"]}),  # who answered
    "metrics": ({"shard": 0, "completed": 3}, {"cancelled": 2, "warned": 1}),  # issue 79's counts
}  # fmt: skip


def test_tables_of_the_older_contract_gain_their_new_columns_by_merge_schema(spark, tmp_path):
    """Spark's writer adds the columns to a table made without them (its ``mergeSchema``
    append); the old row reads null there, the new one has them."""
    for name, (row, added) in _ADDED.items():
        contract = TABLES[name]
        older = pa.schema([f for f in contract.schema if f.name not in added])
        old = pa.Table.from_pylist([{**row, "batch_id": 0}], schema=older)
        write_deltalake(str(tmp_path / "out" / name), old, partition_by=[contract.partition_by])
    writer = SparkDeltaWriter(spark, str(tmp_path / "out"))
    writer.create_tables()
    for name, (row, added) in _ADDED.items():
        new = pa.Table.from_pylist([{**row, **added, "batch_id": 1}], schema=TABLES[name].schema)
        writer.commit(name, new, app_id="q", version=1, target_file_size=1)
        read = {r["batch_id"]: r for r in DeltaTable(writer.path(name)).to_pyarrow_table().to_pylist()}
        assert {c: read[0][c] for c in added} == dict.fromkeys(added), name
        assert {c: read[1][c] for c in added} == added, name


def test_spark_writer_without_delta_classes_stops_at_start_with_one_line(tmp_path):
    args = ["--ops-path", str(tmp_path / "o"), "--events-path", str(tmp_path / "e")]
    args += ["--output-path", str(tmp_path / "out"), "--checkpoint-path", str(tmp_path / "chk")]
    for folder in ("o", "e"):
        (tmp_path / folder).mkdir()
    job = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "jobs", "purgatory_job.py"),
            *args,
            "--set",
            "job.writer=spark",
            "--set",
            "job.master=local[1]",
        ],
        env={**os.environ, "SPARK_PURGATORY_JARS": str(tmp_path / "no-jars")},  # no Delta JARs
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert job.returncode == 2, job.stderr[-2000:]
    said = [line for line in job.stderr.splitlines() if "delta" in line.lower()]
    assert said == [
        "ConfigError: job.writer=spark: Spark's Delta data source is not on this session's classpath; "
        "add io.delta:delta-spark_2.13:4.4.0 (spark-submit --packages io.delta:delta-spark_2.13:4.4.0, "
        "a cluster library, or `make jars` and spark_purgatory.session(require=['delta']) for local "
        "sessions) or use job.writer=delta-rs"
    ]
    assert "Traceback" not in job.stderr and not (tmp_path / "out").exists()
