"""The ``metrics`` table: one row per micro-batch and shard call, exactly once, adding up.

Read back from real Delta tables written by real streams (``start``'s staged path and the
sink's own staging over ``purgatory_stream``), across two available-now runs and a restart;
the crash harness checks it after kill -9 too (``test_crash``).
"""

from __future__ import annotations

import datetime as dt
import inspect
import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_purgatory import PurgatoryConfig, checkpoint_status, pending_operations, start
from spark_purgatory.contract import COUNTS, METRICS, OPERATOR_OUTPUT, PARTITION_MAXIMA, TABLES
from spark_purgatory.delta.accumulator import RecordAccumulator
from spark_purgatory.delta.sink import PurgatorySink
from spark_purgatory.delta.writers import DeltaRsWriter
from spark_purgatory.query import app_id_of
from spark_purgatory.shard.output import output_rows as shard_rows
from spark_purgatory.spark.operator import purgatory_stream
from spark_purgatory.spark.sources import read_stream
from spark_purgatory.workload import generate, write_json_lines
from tests.delta.test_accumulator import Clock, make_sink, output_rows
from tests.spark.test_output_table import _bad  # rows rejected at parse
from tests.support.crash_harness import check_metrics
from tests.support.engine_helpers import purgatory, step
from tests.support.stream_helpers import T0

DELAY_MS = 2_000


def table(root, name: str) -> pd.DataFrame:
    return DeltaTable(os.path.join(str(root), name)).to_pandas()


def ms(values: pd.Series) -> pd.Series:
    return values.astype("datetime64[ms, UTC]").astype("int64")


def call_rows(batch_time_ms: int, **proposed: int | None) -> pa.Table:
    """A micro-batch's operator rows with one metrics row per shard: ``proposed`` gives shard
    0's proposed watermark per input (shard 1 proposes none, as a shard without such rows)."""
    rows = []
    for shard, group_rows in ((0, 30), (1, 10)):
        rows.append(
            {
                "kind": "metrics",
                "shard": shard,
                "batch_time_ms": batch_time_ms,
                "group_rows": group_rows,
                "pending": 5,
                "completed": 1,
                "cancelled": 2,
                "warned": 1,
                "watermark_ms": T0,
                **{f"proposed_{k}_watermark_ms": v for k, v in proposed.items() if shard == 0},
            }
        )
    return pa.Table.from_pylist(rows, schema=OPERATOR_OUTPUT)


def test_the_sink_writes_a_row_per_shard_call_with_the_running_watermark_of_each_input(tmp_path):
    sink = make_sink(tmp_path, Clock(), linger_ms=0)
    sink.process(call_rows(T0, operations=T0 + 500, events=None), 0)
    sink.process(call_rows(T0 + 1000, operations=T0 + 300, events=T0 + 100), 1)
    sink.process(call_rows(T0 + 2000, operations=None, events=T0 + 900), 2)
    rows = table(tmp_path / "out", "metrics").sort_values(["batch_id", "shard"])
    assert list(zip(rows.batch_id, rows.shard, strict=True)) == [(b, s) for b in range(3) for s in (0, 1)]
    after = rows.drop_duplicates("batch_id")
    # an input's watermark never goes back, and stays unknown until the input sends a row
    assert list(ms(after.operations_watermark) - T0) == [500, 500, 500]
    assert after.events_watermark.isna().tolist() == [True, False, False]
    assert list(ms(after.events_watermark.dropna()) - T0) == [100, 900]
    assert after.busiest_share.tolist() == [0.75] * 3  # 30 of the batch's 40 rows
    assert ms(rows.batch_time).tolist() == [T0 + 1000 * b for b in range(3) for _ in range(2)]
    assert rows.metrics_date.astype(str).unique().tolist() == ["2026-01-01"]


def test_a_restarted_sink_continues_each_inputs_watermark_from_the_rows_recorded(tmp_path):
    clock = Clock()
    first = make_sink(tmp_path, clock)  # long linger: batch 0's row is still staged at the restart
    first.process(call_rows(T0, operations=T0 + 700, events=T0 + 50), 0)
    first.accumulator.flush(0, first.writer)  # committed ...
    first.process(call_rows(T0 + 1000, operations=None, events=T0 + 60), 1)  # ... and staged
    restarted = make_sink(tmp_path, clock)
    restarted.process(call_rows(T0 + 1000, operations=None, events=T0 + 60), 1)  # Spark replays 1
    restarted.process(call_rows(T0 + 2000, operations=T0 + 10, events=None), 2)
    restarted.close()
    rows = table(tmp_path / "out", "metrics").sort_values(["batch_id", "shard"])
    assert list(rows.batch_id) == [0, 0, 1, 1, 2, 2]  # the replay added nothing
    last = rows.iloc[-1]
    assert (ms(rows.operations_watermark).iloc[-1] - T0, ms(rows.events_watermark).iloc[-1] - T0) == (700, 60)
    assert last.pending == 5


def test_a_restart_reads_the_watermarks_before_the_replayed_batch_from_a_file_holding_both(tmp_path):
    clock = Clock()
    first = make_sink(tmp_path, clock)
    first.process(call_rows(T0, operations=T0 + 500, events=T0 + 20), 0)
    first.process(call_rows(T0 + 1000, operations=T0 + 900, events=None), 1)
    first.close()  # batches 0 and 1 in one data file: its statistics say 0..1
    restarted = make_sink(tmp_path, clock)
    restarted.process(call_rows(T0 + 1000, operations=None, events=None), 1)
    assert restarted.watermarks == {"operations": T0 + 500, "events": T0 + 20}  # batch 0's, not 1's
    again = make_sink(tmp_path, clock)
    again.process(call_rows(T0 + 2000, operations=None, events=None), 2)
    assert again.watermarks == {"operations": T0 + 900, "events": T0 + 20}  # from the statistics


def test_watermarks_read_back_from_spark_written_files_and_staged_files_compare_as_utc(tmp_path):
    """Spark's Delta writer stores times as INT96, which pyarrow reads without a time zone; the
    staged files say UTC.  A restart reading both (CI once failed on it: naive against aware)."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    from spark_purgatory.delta.sink import _highest_ms

    utc = pa.timestamp("us", tz="UTC")
    committed = pa.table({"batch_id": [0, 1], "w": pa.array([(T0 + 500) * 1000, (T0 + 900) * 1000], utc)})
    pq.write_table(committed, tmp_path / "spark.parquet", use_deprecated_int96_timestamps=True)
    as_spark_wrote = pads.dataset([str(tmp_path / "spark.parquet")], format="parquet").to_table()
    assert as_spark_wrote.schema.field("w").type == pa.timestamp("ns")  # no time zone
    staged = pa.table({"batch_id": [2], "w": pa.array([(T0 + 700) * 1000], utc)})
    assert _highest_ms([as_spark_wrote, staged], 3, "w") == T0 + 900
    assert _highest_ms([staged, as_spark_wrote], 1, "w") == T0 + 500  # only batch 0's row counts
    assert _highest_ms([as_spark_wrote, staged], 0, "w") is None


def test_a_replayed_micro_batch_adds_no_metrics_row(tmp_path):
    sink = make_sink(tmp_path, Clock(), linger_ms=0)
    sink.process(output_rows(4, n_rejected=1), 0)
    sink.process(output_rows(4, n_rejected=1), 0)  # the same micro-batch again
    make_sink(tmp_path, Clock(), linger_ms=0).process(output_rows(4, n_rejected=1), 0)  # after a restart
    rows = table(tmp_path / "out", "metrics")
    assert list(zip(rows.batch_id, rows.shard, strict=True)) == [(0, 0)]
    assert len(table(tmp_path / "out", "outcomes")) == 4


def test_an_output_path_from_before_the_metrics_table_gets_it_on_start(tmp_path):
    writer = DeltaRsWriter(str(tmp_path / "out"))
    writer.create_tables()
    shutil.rmtree(tmp_path / "out" / "metrics")  # as written before this table existed
    versions = {n: DeltaTable(str(tmp_path / "out" / n)).version() for n in TABLES if n != "metrics"}
    writer.create_tables()
    metrics = DeltaTable(str(tmp_path / "out" / "metrics"))
    assert metrics.metadata().partition_columns == ["metrics_date"]
    assert metrics.schema().to_arrow().names == METRICS.schema.names
    assert {n: DeltaTable(str(tmp_path / "out" / n)).version() for n in versions} == versions


def test_the_counts_of_every_outcome_status_warnings_and_rejects_add_up_to_the_tables(tmp_path):
    """The engine's calls through the shard's output and the sink: each count of the metrics
    table, and of the figures ``on_batch`` gets, is its table's rows (the crash harness's
    check), cancellations and warnings too."""
    p, sink = purgatory(), make_sink(tmp_path, Clock(), linger_ms=0)
    ops = [{"op_id": op_id, "key": op_id, "ts": 0, "timeout_ms": 1000} for op_id in "abcd"]
    ops[1]["warn_ms"] = 300
    calls = [  # a completes, c is withdrawn, then b is warned, then b and d expire
        (ops, [{"key": "a", "ts": 10}, {"key": "c", "ts": 20, "cancel": True}, {"key": "x", "ts": 30}], 0),
        ([], [], 800),
        ([], [], 2_000),
    ]
    figures = []
    for batch, (new, events, wm) in enumerate(calls):
        result = step(p, new, events, wm, batch)
        call = {"pending": p.pending, "batch_time_ms": T0 + batch, PARTITION_MAXIMA: None}
        bad = _bad(np.random.default_rng(batch), 1)
        rows = pa.Table.from_pandas(shard_rows(0, result, bad, call, wm), schema=OPERATOR_OUTPUT)
        figures.append(sink.process(rows, batch))
    tables = {name: table(tmp_path / "out", name) for name in TABLES}
    check_metrics({"tables": tables})
    metrics = tables["metrics"].sort_values("batch_id")
    assert metrics[list(COUNTS)].values.tolist() == [
        [1, 0, 1, 0, 1, 0],
        [0, 0, 0, 1, 1, 1],
        [0, 2, 0, 0, 1, 0],
    ]
    assert [[f[name] for name in COUNTS] for f in figures] == metrics[list(COUNTS)].values.tolist()


def test_a_metrics_table_of_the_older_contract_gains_cancelled_and_warned_with_its_old_rows_null(tmp_path):
    """A table made before ``cancelled`` and ``warned``: the start adds them (nullable, at the
    end), its rows read null there, the next rows fill them (docs/upgrading.md)."""
    older = pa.schema([f for f in METRICS.schema if f.name not in ("cancelled", "warned")])
    old = {"shard": 0, "batch_id": 0, "completed": 3, "metrics_date": dt.date(2026, 1, 1)}
    write_deltalake(
        str(tmp_path / "out" / "metrics"), pa.Table.from_pylist([old], older), partition_by=["metrics_date"]
    )
    sink = make_sink(tmp_path, Clock(), linger_ms=0)
    sink.writer.create_tables()  # as ``start`` does
    sink.process(call_rows(T0, operations=T0), 1)
    assert DeltaTable(str(tmp_path / "out" / "metrics")).schema().to_arrow().names == [
        *older.names,
        "cancelled",
        "warned",
    ]
    read = (
        DeltaTable(str(tmp_path / "out" / "metrics")).to_pyarrow_table().sort_by([("batch_id", "ascending")])
    )
    assert read.select(["batch_id", "completed", "cancelled", "warned"]).to_pylist() == [
        {"batch_id": 0, "completed": 3, "cancelled": None, "warned": None},
        *[{"batch_id": 1, "completed": 1, "cancelled": 2, "warned": 1}] * 2,  # a row per shard
    ]


# -- real streams ------------------------------------------------------------------------------------


def _config(**extra) -> PurgatoryConfig:
    return PurgatoryConfig(
        shards=2,
        watermark_delay=f"{DELAY_MS} milliseconds",
        state_segment_rows=50,
        source_max_files_per_trigger=1,
        **extra,
    )


def _deliver(work, root, first: int, count: int, files: int) -> None:
    """Files ``first`` .. ``first + count - 1`` of the workload's ``files`` into the inputs."""
    staged = os.path.join(root, "all")
    for kind in ("ops", "events"):
        os.makedirs(os.path.join(root, kind), exist_ok=True)
        for i in range(first, first + count):
            name = f"part-{i:05d}.json"
            os.replace(os.path.join(staged, kind, name), os.path.join(root, kind, name))
            stamp = 1_700_000_000 + i  # file sources order by modification time
            os.utime(os.path.join(root, kind, name), (stamp, stamp))


def _lines(root, kind: str) -> list[str]:
    out = []
    for name in sorted(os.listdir(os.path.join(root, kind))):
        with open(os.path.join(root, kind, name), encoding="utf-8") as f:
            out.extend(line for line in f.read().splitlines() if line.strip())
    return out


@pytest.mark.spark
def test_start_writes_one_row_per_batch_and_shard_that_add_up_to_the_other_tables(spark, tmp_path):
    files = 4
    work = generate(600, seed=11, ops_per_second=50, multi_key=0.05)
    write_json_lines(
        work, str(tmp_path / "all" / "ops"), str(tmp_path / "all" / "events"), files=files, malformed=3
    )
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    config = _config()
    runs, figures = [], []
    for first, count in ((0, 3), (3, 1)):  # two available-now runs on one checkpoint: a restart
        _deliver(work, tmp_path, first, count, files)
        with start(
            str(tmp_path / "ops"),
            str(tmp_path / "events"),
            output=out,
            checkpoint=chk,
            config=config,
            on_batch=figures.append,
        ) as q:
            q.await_termination()
        runs.append(q.totals["batches"])
    metrics = table(out, "metrics")
    outcomes, unmatched, rejected = (table(out, n) for n in ("outcomes", "unmatched_events", "rejected"))

    # one row per (micro-batch, shard call), no duplicates, every batch that wrote a row has its rows
    assert not metrics.duplicated(["batch_id", "shard"]).any()
    written = set(outcomes.batch_id) | set(unmatched.batch_id) | set(rejected.batch_id)
    assert written <= set(metrics.batch_id) and len(set(metrics.batch_id)) >= sum(runs) - 2
    assert set(metrics.shard) <= {0, 1, 2}  # two shards and the cross-shard group

    # the counts add up to the other tables and to the input
    assert metrics.completed.sum() == (outcomes.status == "completed").sum() > 0
    assert metrics.expired.sum() == (outcomes.status == "expired").sum()
    assert (metrics.unmatched.sum(), metrics.rejected.sum()) == (len(unmatched), len(rejected))
    assert (metrics.cancelled.sum(), metrics.warned.sum()) == (0, len(table(out, "warnings"))) == (0, 0)
    ops_lines, event_lines = _lines(tmp_path, "ops"), _lines(tmp_path, "events")
    assert (metrics.input_operations.sum(), metrics.input_events.sum()) == (len(ops_lines), len(event_lines))
    per_batch = metrics.groupby("batch_id").completed.sum()
    assert per_batch.to_dict() == {
        b: int(((outcomes.batch_id == b) & (outcomes.status == "completed")).sum()) for b in per_batch.index
    }

    # latency percentiles are latencies that occurred, in order
    done = metrics.dropna(subset=["latency_p50_ms"])
    assert (done.latency_p50_ms <= done.latency_p95_ms).all() and (
        done.latency_p99_ms <= done.latency_max_ms
    ).all()
    assert done.latency_max_ms.max() == outcomes[outcomes.status == "completed"].latency_ms.max()

    # each input's watermark: the largest event time seen on it, minus the delay, never going back
    ordered = metrics.sort_values("batch_id").drop_duplicates("batch_id")
    for source, rows in (("operations", work.operations), ("events", work.events)):
        column = ms(ordered[f"{source}_watermark"].dropna())
        assert column.is_monotonic_increasing
        assert column.iloc[-1] == int(rows.ts.max()) - DELAY_MS
    # ... and a shard's watermark in a micro-batch is at least Spark's global one (the slower
    # input's after the micro-batch before) and at most the slower input's after this one: where
    # its own rows brought it (docs/contract.md, "Expiry"); within the first run (a restarted
    # Spark forgets an input's watermark until it sends again)
    first_run = ordered[ordered.batch_id < runs[0]].reset_index(drop=True)
    checked = moved = 0
    for before, row in zip(first_run.iloc[:-1].itertuples(), first_run.iloc[1:].itertuples(), strict=True):
        if pd.notna(before.operations_watermark) and pd.notna(before.events_watermark):
            spark_wm = min(before.operations_watermark, before.events_watermark)
            shards = metrics[metrics.batch_id == row.batch_id].watermark
            assert (shards >= spark_wm).all()
            assert (shards <= min(row.operations_watermark, row.events_watermark)).all()
            moved += int((shards > spark_wm).any())
            checked += 1
    assert checked >= 1 and moved >= 1

    # the gauges: pending is the shards' last report; state bytes for the shards that keep state
    last = metrics.sort_values("batch_id").groupby("shard").tail(1)
    assert (
        last.pending.sum() == q.pending and (metrics.state_bytes >= 0).all() and metrics.state_bytes.max() > 0
    )
    assert metrics.busiest_share.between(0, 1).all()
    assert DeltaTable(os.path.join(out, "metrics")).transaction_version(app_id_of(chk)) is not None

    # one meaning of pending: each unresolved operation once, a cross-shard one's stubs not
    # counted, in the handle, on_batch's figures, the metrics table and status alike
    in_state = pending_operations(chk, spark=spark, config=config).toPandas()
    assert (in_state.shard == 2).any()  # cross-shard operations pending: their stubs are held
    assert q.pending == q.totals["pending"] == q.history[-1]["pending"] == len(in_state)
    assert checkpoint_status(chk, output=out, config=config, state=False)["pending"] == len(in_state)
    # start()'s docstring names every figure on_batch gets
    documented = inspect.getdoc(start).split("on_batch:")[1].split("on_linger:")[0]
    assert figures and [key for key in figures[-1] if f"``{key}``" not in documented] == []


@pytest.mark.spark
def test_the_sinks_own_staging_writes_the_same_metrics_rows_as_the_shards_staging(spark, tmp_path):
    """``purgatory_stream`` + ``PurgatorySink(staged=False)`` (Spark Connect's path) and
    ``start`` (the shards stage) give the same rows for the same input."""
    files = 2
    work = generate(200, seed=12, ops_per_second=50)
    write_json_lines(
        work, str(tmp_path / "all" / "ops"), str(tmp_path / "all" / "events"), files=files, malformed=1
    )
    _deliver(work, tmp_path, 0, files, files)
    ops, evs = str(tmp_path / "ops"), str(tmp_path / "events")
    # the op_id registry off: start() reads the wake files (a micro-batch for the verdicts on
    # the last one's parked operations), a bare purgatory_stream does not
    config = _config(state_path=str(tmp_path / "state-a"), dedup_scope="shard")
    with start(
        ops, evs, output=str(tmp_path / "staged"), checkpoint=str(tmp_path / "chk-a"), config=config
    ) as q:
        q.await_termination()
    config = _config(state_path=str(tmp_path / "state-b"), dedup_scope="shard")
    stream = purgatory_stream(
        read_stream(spark, ops, "json", kind="operations", max_files_per_trigger=1),
        read_stream(spark, evs, "json", kind="events", max_files_per_trigger=1),
        config,
    )
    accumulator = RecordAccumulator(
        str(tmp_path / "acc-b"), app_id="b", batch_size=1 << 20, linger_ms=3_600_000, buffer_memory=1 << 30
    )
    sink = PurgatorySink(accumulator, DeltaRsWriter(str(tmp_path / "unstaged")))
    query = (
        stream.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk-b"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    sink.close()
    same = [
        "batch_id",
        "shard",
        "input_operations",
        "input_events",
        "pending",
        "watched",
        "buffered",
        "completed",
        "expired",
        "cancelled",
        "unmatched",
        "rejected",
        "warned",
        "latency_p50_ms",
        "latency_max_ms",
        "watermark",
        "operations_watermark",
        "events_watermark",
        "busiest_share",
    ]
    a, b = (
        table(tmp_path / root, "metrics")[same].sort_values(["batch_id", "shard"]).reset_index(drop=True)
        for root in ("staged", "unstaged")
    )
    assert len(a) >= 3
    pd.testing.assert_frame_equal(a, b)
