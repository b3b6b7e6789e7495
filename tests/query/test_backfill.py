"""``backfill``: batch mode into the stream's three Delta tables, once per (app id, batch id)."""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from spark_purgatory import PurgatoryConfig, backfill
from spark_purgatory.backfills import BACKFILL_APP_ID
from spark_purgatory.contract import TABLES
from spark_purgatory.testing import PurgatoryTester, assert_outcomes
from spark_purgatory.workload import generate, write_json_lines

pytestmark = pytest.mark.spark

CONFIG = PurgatoryConfig(shards=2, tick_ms=100)


def engine_run(work) -> PurgatoryTester:
    """The Spark-free engine over the same input, then a watermark past every deadline."""
    tester = PurgatoryTester(CONFIG)
    tester.add_operations(work.operations)
    tester.add_events(work.events)
    tester.step()
    ops = work.operations
    tester.advance_watermark(int((ops["ts"] + ops["timeout_ms"]).max()) + CONFIG.tick_ms)
    tester.step()
    return tester


def test_backfill_writes_the_engines_outcomes_and_a_rerun_adds_nothing(spark, tmp_path):
    work = generate(300, seed=11, ops_per_second=100)
    ops, events = str(tmp_path / "ops"), str(tmp_path / "events")
    write_json_lines(work, ops, events, files=3, malformed=4)
    out = str(tmp_path / "tables")

    counts = backfill(ops, events, output=out, config=CONFIG, writer="delta-rs", spark=spark)

    engine = engine_run(work)
    outcomes = DeltaTable(os.path.join(out, "outcomes")).to_pandas()
    assert_outcomes(outcomes, engine.outcomes(), columns=("op_id", "status", "resolved_at", "matched_events"))
    assert counts == {
        "outcomes": len(work.operations),
        "unmatched_events": len(engine.unmatched()),
        "rejected": 4,  # the malformed lines
        "metrics": 0,  # a backfill is no micro-batch: no metrics rows
        "warnings": 0,  # none asked
    }
    versions = {name: DeltaTable(os.path.join(out, name)).version() for name in TABLES}
    assert {DeltaTable(os.path.join(out, n)).transaction_version(BACKFILL_APP_ID) for n in TABLES} == {0}

    again = backfill(ops, events, output=out, config=CONFIG, writer="delta-rs", spark=spark)
    assert again == dict.fromkeys(TABLES, 0)
    assert {name: DeltaTable(os.path.join(out, name)).version() for name in TABLES} == versions
