"""The pending operations read from Spark's state files, without a JVM (``inspect.pending_table``).

The checkpoint is written here as a stopped query leaves it (``tests/state/test_rescale.py``'s
``_started``: offsets and commits entries, each shard group's value in the HDFS-backed store's
lz4 files, the files Spark restarts on in ``tests/query/test_rescale_spark.py``), so these run
in milliseconds; ``tests/query/test_inspect.py`` reads a checkpoint made by Spark.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from spark_purgatory.engine.inspection import pending_frame
from spark_purgatory.inspect import StateNeedsSpark, at_risk_table, pending_table
from spark_purgatory.state import load_state
from tests.state.test_rescale import _started

FIELDS = ["op_id", "shard", "condition", "progress", "goal", "time_left_ms", "batch_id"]


def offsets_meta(root) -> dict:
    return json.loads((root / "offsets" / "4").read_text().splitlines()[1])


def test_pending_table_holds_each_shards_pending_operations_as_the_engine_reports_them(tmp_path):
    cluster, _ = _started(tmp_path)
    watermark = offsets_meta(tmp_path)["batchWatermarkMs"]
    expected = pd.concat(
        [
            pending_frame(load_state(cluster.states[s], cluster.config), watermark_ms=watermark, batch_id=4)
            for s in sorted(cluster.states)
        ],
        ignore_index=True,
    )
    assert len(expected) > 0, "the workload leaves operations pending"
    got = pending_table(str(tmp_path), config=cluster.config).to_pandas()
    assert got[FIELDS].values.tolist() == expected[FIELDS].values.tolist()
    risky = at_risk_table(str(tmp_path), within=200, config=cluster.config).to_pandas()
    assert list(risky["op_id"]) == list(
        expected[expected["time_left_ms"] <= 200].sort_values(["deadline", "op_id"])["op_id"]
    )
    assert risky["progress_text"].str.len().min() > 0


def test_a_state_store_only_spark_reads_is_said_in_one_line(tmp_path):
    cluster, _ = _started(tmp_path)
    offsets = tmp_path / "offsets" / "4"
    lines = offsets.read_text().splitlines()
    meta = json.loads(lines[1])
    meta["conf"]["spark.sql.streaming.stateStore.providerClass"] = "RocksDBStateStoreProvider"
    offsets.write_text("\n".join([lines[0], json.dumps(meta), *lines[2:]]))
    with pytest.raises(
        StateNeedsSpark, match=r"providerClass=RocksDBStateStoreProvider, which only Spark reads"
    ):
        pending_table(str(tmp_path), config=cluster.config)


def test_explain_finds_an_op_id_pending_again_after_its_outcome(tmp_path):
    """An op_id sent again after ``purgatory.dedup.retention.ms`` is a new operation: pending,
    beside the earlier one's outcome (read without a JVM)."""
    from spark_purgatory.contract import OUTCOMES
    from spark_purgatory.inspect import explain
    from tests.query.test_cli import ts, write

    cluster, _ = _started(tmp_path)
    again = pending_table(str(tmp_path), config=cluster.config).column("op_id")[0].as_py()
    out = str(tmp_path / "out")
    write(out, OUTCOMES, [
        {"op_id": again, "keys": ["k0"], "status": "completed", "op_ts": ts(0), "deadline": ts(5),
         "resolved_at": ts(1), "latency_ms": 1, "matched_events": 1, "progress": 1.0, "condition": "any",
         "batch_id": 0},
    ])  # fmt: skip
    (story,) = explain([again], output=out, checkpoint=str(tmp_path), config=cluster.config)
    assert story.state == "pending" and story.outcome["status"] == "completed"
    assert any("sent again after purgatory.dedup.retention.ms" in note for note in story.notes)


def test_explain_finds_what_the_sink_has_staged_and_says_so(tmp_path):
    """In a live stream's first ``accumulator.linger.ms`` the tables hold nothing yet: an
    outcome or a rejected operation still staged in the checkpoint's accumulator is found
    there (and said to be staged), one already in the table is read from the table."""
    import pyarrow as pa

    from spark_purgatory.checkpoint_paths import Checkpoint
    from spark_purgatory.contract import OUTCOMES, REJECTED
    from spark_purgatory.delta.accumulator import RecordAccumulator
    from spark_purgatory.inspect import explain
    from tests.query.test_cli import ts, write

    chk, out = str(tmp_path / "chk"), str(tmp_path / "out")

    def outcome(op_id: str) -> dict:
        return {"op_id": op_id, "keys": ["k0"], "status": "completed", "op_ts": ts(0), "deadline": ts(5),
                "resolved_at": ts(1), "latency_ms": 1, "matched_events": 1, "progress": 1.0,
                "condition": "any", "batch_id": 0}  # fmt: skip

    write(out, OUTCOMES, [outcome("committed")])
    staging = RecordAccumulator(
        Checkpoint(chk).accumulator, app_id="q", batch_size=1 << 20, linger_ms=60_000, buffer_memory=1 << 24
    )
    staging.append(
        0, "outcomes", "2026-01-01", pa.Table.from_pylist([outcome("staged")], schema=OUTCOMES.schema)
    )
    bad = {"source": "operations", "raw": '{"op_id": "refused"}', "reason": "missing_key", "op_id": "refused",
           "batch_id": 0}  # fmt: skip
    staging.append(0, "rejected", "2026-01-01", pa.Table.from_pylist([bad], schema=REJECTED.schema))
    staging.mark_staged(0)

    stories = explain(["committed", "staged", "refused", "nowhere"], output=out, checkpoint=chk, state=False)
    assert [s.state for s in stories] == ["completed", "completed", "rejected", "unknown"]
    assert [s.staged for s in stories] == [False, True, True, False]
    assert stories[1].summary().endswith("(staged: in the table within accumulator.linger.ms)")
    assert stories[2].rejected[0]["reason"] == "missing_key"
    # explain read the staging and left it as it was
    assert [d.rows for d in staging.destinations()] == [1, 1]
