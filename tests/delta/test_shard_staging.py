"""A staging shard's files (``ShardStaging`` of ``output_parts``: each kind's rows as its own
Arrow table) hold exactly the table rows the sink's staging tasks stage from the same call's
``output_rows`` as PySpark hands them over (``stage_rows``), on random engine results:
outcomes of every condition with one key, several and none, unmatched events, rows the engine
rejects, rows rejected at parse, the metrics row, and a call whose outcomes fall on two dates.
The ``STAGED`` rows agree too, but for the files' names and bytes (the engine's rejected rows
and those rejected at parse are two writes, two row groups, in the shard's file).  No Spark
session: both run in this process, the micro-batch id given as Spark's local property would."""

from __future__ import annotations

import datetime as dt
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_purgatory.contract import OPERATOR_OUTPUT, PARTITION_MAXIMA, TABLES
from spark_purgatory.delta import staging
from spark_purgatory.delta.staging import STAGED, ShardStaging, stage_rows
from spark_purgatory.shard.output import output_parts, output_rows
from spark_purgatory.storage import Storage
from tests.spark.test_output_table import _bad  # rows rejected at parse
from tests.support.engine_helpers import _random_workload, frame, purgatory

DAY_MS = 86_400_000
NOW = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc)


class _Now(dt.datetime):
    """The wall clock at ``NOW``: both routes date their rows alike (``rejected``'s partition,
    ``emitted_at``)."""

    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:
        return NOW


def _files(root, staged: pa.Table) -> dict[tuple[str, str], pa.Table]:
    """The staged rows by destination, read back as the sender reads them (Arrow)."""
    files = staged.filter(staged.column("table").is_valid()).to_pylist()
    return {(f["table"], f["partition"]): pq.read_table(root / f["name"]) for f in files}


@pytest.mark.parametrize("trial", range(4))
def test_shard_staging_stages_the_rows_the_sink_stages(trial, tmp_path, monkeypatch):
    rng = np.random.default_rng(trial)
    ops, events = _random_workload(rng)
    ops += [
        {"op_id": "no-key", "keys": [], "ts": 5, "timeout_ms": 10, "condition": "any"},
        # both expire in the last call, one on the first day, one on the next
        {"op_id": "late-night", "keys": ["k0"], "ts": DAY_MS - 50, "timeout_ms": 100, "condition": "any"},
        {"op_id": "evening", "keys": ["none"], "ts": 1_500, "timeout_ms": 100_000, "condition": "any"},
    ]
    p = purgatory()
    cut = sorted(rng.choice(np.arange(1, len(events)), 2, replace=False).tolist())
    # two last calls without rows: the first moves the watermark past every deadline, as Spark's
    # one call behind, the second runs at it
    batches = [*np.split(np.arange(len(events)), cut), np.arange(0), np.arange(0)]
    seen = {"several keys": 0, "unmatched": 0, "rejected": 0, "at parse": 0, "two dates": 0}
    wm = 0
    for i, rows in enumerate(batches):
        mine = ops[i::3] if i < 3 else []
        result = p.process(frame(mine), frame([events[j] for j in rows]), watermark_ms=wm, batch_id=i)
        wm = events[rows[-1]]["ts"] - 300 if len(rows) else 3 * DAY_MS  # as Spark's, one call behind
        bad = _bad(rng, int(rng.integers(0, 3)))
        figures = {"pending": p.pending, "batch_time_ms": 1_000 + i, PARTITION_MAXIMA: None if i else "{}"}
        call = (3, result, bad, figures, wm)

        sink_rows = pa.Table.from_pandas(output_rows(*call, state_bytes=10 * i), schema=OPERATOR_OUTPUT)
        storage = Storage()
        expected = stage_rows(
            sink_rows,
            batch_id=i,
            now=NOW,
            staging_dir=str(tmp_path / f"sink{i}"),
            storage=storage,
            write=True,
        )
        monkeypatch.setattr(staging, "micro_batch_id", lambda i=i: i)  # Spark's local property
        monkeypatch.setattr(staging, "dt", types.SimpleNamespace(datetime=_Now, timezone=dt.timezone))
        got = ShardStaging(str(tmp_path / f"shard{i}"), storage)(output_parts(*call, state_bytes=10 * i), 3)

        assert got.schema.equals(STAGED)
        same = [n for n in STAGED.names if n not in ("name", "bytes")]
        assert got.select(same).equals(expected.select(same))
        shard_files, sink_files = _files(tmp_path / f"shard{i}", got), _files(tmp_path / f"sink{i}", expected)
        assert shard_files.keys() == sink_files.keys()
        for (table, _), rows_ in shard_files.items():
            assert rows_.schema.equals(TABLES[table].schema)  # what Spark's and the sender's readers expect
            assert rows_.equals(sink_files[(table, _)])
        assert all(b > 0 for b in got.column("bytes").drop_null().to_pylist())

        seen["several keys"] += sum(len(k) > 1 for k in result.outcomes["keys"])
        seen["unmatched"] += len(result.unmatched)
        seen["rejected"] += len(result.rejected)
        seen["at parse"] += len(bad)
        seen["two dates"] += len({part for table, part in shard_files if table == "outcomes"}) > 1
    assert all(seen.values()), seen  # every kind of row was compared
