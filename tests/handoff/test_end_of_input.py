"""The end of input: a bounded input ends with every operation resolved, exactly once.

Under Spark's ``min`` policy an ``available-now`` run never moves the watermark past the
slower input's last event time (minus its delay), so operations whose deadline lies beyond
stay pending (``make demo`` left 4,202 of 30,000).  Ending the input moves every shard past
every deadline in one more micro-batch; the tables must then hold what the Spark-free engine
gives for the same input at that watermark, and the checkpoint takes no more runs.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from spark_purgatory import Purgatory, PurgatoryConfig
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.config import ConfigError, read_properties
from spark_purgatory.contract import TABLES
from spark_purgatory.handoff.end_of_input import (
    EndOfInput,
    InputEndedError,
    end_watermark_ms,
)
from spark_purgatory.handoff.wake import Wake, is_end_watermark
from spark_purgatory.shard.roles import ROLE_END, ROLE_WAKE
from spark_purgatory.workload import generate, write_json_lines
from tests.support.crash_harness import _job, _job_here, check, input_rows, read_table

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: where the end's runs are killed (delta-rs, on files): in the end's micro-batch, then in the
#: flush before the record.  The crash tests count them among delta-rs's fault points
#: (``test_crash.test_the_plans_kill_at_every_fault_point``), so no plan kills there again
END_KILLS = ("staged:1", "written:1")

MALFORMED = 4
CONFIG = dict(
    shards=2,
    tick_ms=100,
    watermark_delay="5 seconds",
    max_timeout_ms=600_000,
    source_max_files_per_trigger=2,
    accumulator_linger_ms=3_600_000,
)


def _input(root: str, n_ops: int = 500, seed: int = 3):
    """Operations over ~5 s of event time with 30 s timeouts (``workload``), 5% on two keys
    (across both shards: the mailbox), cut into 4 files per stream."""
    work = generate(n_ops, seed=seed, ops_per_second=100, multi_key=0.05)
    write_json_lines(work, f"{root}/ops", f"{root}/events", files=4, malformed=MALFORMED)
    return work


def _reference(work, config: PurgatoryConfig, final: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    result = Purgatory(config).replay(work.operations, work.events, final_watermark_ms=final)
    return result.outcomes, result.unmatched


def _check_ended(out: str, work, config: PurgatoryConfig) -> dict[str, pd.DataFrame]:
    """The tables hold what the engine gives at the end watermark: every operation resolved
    once, the same unmatched events, every malformed line once in ``rejected``; the ``metrics``
    table one row per (micro-batch, shard) that ran, none twice, adding up to the tables and
    to the input (``crash_harness.check_metrics``)."""
    final = end_watermark_ms(config.max_timeout_ms, config.tick_ms)
    outcomes, unmatched = _reference(work, config, final)
    assert len(outcomes) == len(work.operations)  # the reference resolves everything too
    tables = _tables(out)
    expected = {"expected_outcomes": outcomes, "expected_unmatched": unmatched, "malformed": MALFORMED}
    check({"tables": tables, **expected, "input_rows": input_rows(work, MALFORMED)})
    return tables


def _tables(out: str) -> dict[str, pd.DataFrame]:
    return {name: read_table(f"{out}/{name}", None, name) for name in TABLES}


def _started(spark, root: str, **options):
    from spark_purgatory import start

    return start(
        f"{root}/ops",
        f"{root}/events",
        output=f"{root}/out",
        checkpoint=f"{root}/chk",
        config=PurgatoryConfig(**CONFIG),
        spark=spark,
        **options,
    )


# -- without Spark -----------------------------------------------------------------------------------


def test_the_end_watermark_passes_every_deadline_and_stays_a_timestamp():
    config = PurgatoryConfig(**CONFIG)
    end = end_watermark_ms(config.max_timeout_ms, config.tick_ms)
    assert is_end_watermark(end) and not is_end_watermark(1_767_225_600_000)
    assert end_watermark_ms(config.max_timeout_ms, config.tick_ms, latest_deadline=end + 5) == end + 5 + 100
    assert pd.Timestamp(end, unit="ms").year == 2200  # a valid timestamp in the metrics row


def test_an_ended_shard_expires_everything_at_its_deadline_and_rejects_later_rows_as_late():
    """What the shard step does with the end mark, on the engine alone."""
    config = PurgatoryConfig(**CONFIG)
    work = generate(400, seed=2, ops_per_second=100)
    p = Purgatory(config)
    first = p.process(work.operations, work.events, watermark_ms=0)
    pending, buffered = p.pending, p.buffered_events
    assert pending and buffered
    end = p.process(None, None, watermark_ms=end_watermark_ms(config.max_timeout_ms, config.tick_ms))
    assert p.pending == 0 and p.buffered_events == 0 and p.retained_keys == 0
    assert len(end.outcomes) == pending and (end.outcomes["status"] == "expired").all()
    assert (end.outcomes["resolved_at"] == end.outcomes["deadline"]).all()
    assert len(first.outcomes) + pending == len(work.operations)
    # the engine keeps the end watermark: later rows, even with a small one, are late
    later = p.process(work.operations.head(3), work.events.head(2), watermark_ms=0)
    assert later.rejected["reason"].tolist() == ["late"] * 5 and later.outcomes.empty


def test_the_end_record_is_written_whole_and_refuses_a_start_saying_what_to_do(tmp_path):
    end = EndOfInput(str(tmp_path / "chk"))
    assert not end.declared() and end.recorded() is None
    end.check_open()
    end.declare()
    end.declare()  # once: the mark stays the file Spark may have read
    assert end.declared() and Wake.under(str(tmp_path / "chk")).batches() == []
    assert end.recorded() is None
    # the sink names the micro-batch whose shards first report the end watermark, also on a replay
    wake = Wake.under(str(tmp_path / "chk"), cross_shard=2)
    wake.after(6, relayed=False, shards={0, 1}, watermark=1_767_225_600_000)
    assert wake.end_batch() is None
    final = end_watermark_ms(60_000, 100)
    wake.after(7, relayed=True, shards={0, 1, 2}, watermark=final)
    wake.after(7, relayed=True, shards={0, 1, 2}, watermark=final)  # the replay
    wake.after(8, relayed=False, shards={2}, watermark=final)  # the follow-up: an ended shard
    assert wake.end_batch() == 7 and wake.batches() == [7] and wake.owed is None
    record = end.record()
    assert end.recorded() == record and record["batch_id"] == 7
    assert sorted(os.listdir(tmp_path / "chk")) == ["purgatory-ended", "purgatory-wake"]
    with pytest.raises(InputEndedError) as error:
        end.check_open()
    message = str(error.value)
    assert "\n" not in message and "new checkpoint" in message and "after micro-batch 7" in message


def test_the_job_ends_only_an_available_now_run_and_refuses_an_ended_checkpoint_at_once(tmp_path, capsys):
    from spark_purgatory import job

    paths = ["--ops-path", "o", "--events-path", "e", "--output-path", "out"]
    paths += ["--checkpoint-path", str(tmp_path / "chk")]
    assert job.parse_args([*paths, "--end-input"]).end_input
    with pytest.raises(ConfigError, match="--end-input needs --trigger available-now"):
        job.parse_args([*paths, "--end-input", "--trigger", "processing-time=5s"])
    EndOfInput(str(tmp_path / "chk")).record()
    assert job.main([*paths, "--end-input"]) == 2  # before any Spark session
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith("error: the input of checkpoint") and "new checkpoint" in line


# -- with Spark ----------------------------------------------------------------------------------------


@pytest.mark.spark
def test_the_end_mark_reaches_every_shard_group_and_a_wake_only_the_cross_shard_one(spark):
    from spark_purgatory.shard.labels import shard_labels
    from spark_purgatory.shard.roles import ROLES
    from spark_purgatory.spark.routing import route_wake

    lines = spark.createDataFrame([("end",), ("12",)], "value string")
    routed = route_wake(lines, PurgatoryConfig(shards=3)).select("shard", "role").collect()
    labels = shard_labels(4)
    assert sorted((ROLES[r.role], labels.index(r.shard)) for r in routed) == [  # roles travel as numbers
        (ROLE_END, 0),
        (ROLE_END, 1),
        (ROLE_END, 2),
        (ROLE_END, 3),
        (ROLE_WAKE, 3),
    ]


@pytest.mark.spark
def test_ending_the_input_resolves_every_operation_exactly_once(spark, tmp_path):
    root = str(tmp_path)
    work = _input(root)
    config = PurgatoryConfig(**CONFIG)
    # what the min policy leaves: the slower input's last event time minus the delay
    stalled = int(min(work.operations["ts"].max(), work.events["ts"].max())) - config.watermark_delay_ms
    before, _ = _reference(work, config, stalled)
    assert len(before) < len(work.operations)  # without the end, operations stay pending
    with _started(spark, root, end_of_input=True) as purgatory:
        purgatory.await_termination()
        assert purgatory.pending == 0
    record = EndOfInput(f"{root}/chk").recorded()
    assert record is not None and record["batch_id"] is not None
    tables = _check_ended(f"{root}/out", work, config)
    # the end micro-batch only expires, each at its deadline
    ended = tables["outcomes"][tables["outcomes"]["batch_id"] >= record["batch_id"]]
    assert len(ended) >= len(work.operations) - len(before) > 0
    assert (ended["status"] == "expired").all() and (ended["resolved_at"] == ended["deadline"]).all()
    # expired because the input ended, not late: no expiry lag in the metrics (status shows none)
    metrics = read_table(f"{root}/out/metrics", None, "metrics")
    ending = metrics[metrics["batch_id"] >= record["batch_id"]]
    assert len(ending) and ending["expiry_lag_ms"].isna().all(), ending


@pytest.mark.spark
def test_a_start_on_an_ended_checkpoint_is_refused_and_rows_reaching_it_anyway_are_late(spark, tmp_path):
    root = str(tmp_path)
    work = _input(root, n_ops=200, seed=4)
    # a processing-time query, then the end called on the handle: caught up, stopped, ended
    with _started(spark, root, trigger="processing-time=1s") as purgatory:
        purgatory.process_all_available()
        pending = purgatory.pending
        record = purgatory.end_input()
        assert pending > 0 and purgatory.pending == 0 and record["batch_id"] is not None
        assert purgatory.end_input() == record  # ending twice changes nothing
    with pytest.raises(InputEndedError, match="new checkpoint"):
        _started(spark, root)
    # rows that reach the ended shards anyway (the record gone, e.g. a hand-run stream)
    before = _tables(f"{root}/out")
    os.remove(Checkpoint(f"{root}/chk").end_record)
    late = generate(20, seed=9, ops_per_second=100)
    write_json_lines(late, f"{root}/more-ops", f"{root}/more-events", files=1)
    os.replace(f"{root}/more-ops/part-00000.json", f"{root}/ops/part-late.json")
    os.replace(f"{root}/more-events/part-00000.json", f"{root}/events/part-late.json")
    with _started(spark, root) as purgatory:  # declared, not recorded: this run ends it again
        purgatory.await_termination()
    after = _tables(f"{root}/out")
    assert len(after["outcomes"]) == len(before["outcomes"]) == len(work.operations)
    assert after["outcomes"]["op_id"].is_unique
    new = after["rejected"][after["rejected"]["batch_id"] > record["batch_id"]]
    assert len(new) == len(late.operations) + len(late.events)
    assert len(after["rejected"]) == len(before["rejected"]) + len(new)
    assert set(new["reason"]) == {"late"}
    assert EndOfInput(f"{root}/chk").recorded() is not None


@pytest.mark.spark
def test_end_of_input_needs_an_available_now_run(spark, tmp_path):
    with pytest.raises(ConfigError, match="end_of_input needs trigger available-now"):
        _started(spark, str(tmp_path), end_of_input=True, trigger="processing-time=1s")


@pytest.mark.spark
def test_a_kill_during_the_end_resumes_to_the_same_result(tmp_path):
    """kill -9 in the end's micro-batch, then in the flush before the record: the next run on
    the checkpoint (without --end-input: the end was declared) finishes it exactly once."""
    root = str(tmp_path)
    work = _input(root, n_ops=400, seed=5)
    chk = f"{root}/chk"
    args = ["--ops-path", f"{root}/ops", "--events-path", f"{root}/events", "--output-path", f"{root}/out"]
    args += ["--checkpoint-path", chk]
    settings = {"source.max.files.per.trigger": "2", "purgatory.state.segment.rows": "100"}

    def job(*extra: str, fault: str | None = None) -> tuple[int, str]:
        process = _job([*args, *extra], settings, {}, fault=fault)
        _, err = process.communicate(timeout=600)
        return process.returncode, err

    # the runs not killed: job.run on this worker's session
    assert _job_here(args, settings)["pending"] > 0  # the input, not ended: operations stay pending
    end = EndOfInput(chk)
    in_the_end, in_the_flush = END_KILLS
    # after the end's micro-batch staged its rows, before the driver recorded them
    assert job("--end-input", fault=in_the_end)[0] == -9
    assert end.declared() and end.recorded() is None
    # the end replayed, then killed in the flush that precedes the record: its data files
    # written, not yet committed
    assert job("--end-input", fault=in_the_flush)[0] == -9
    assert end.recorded() is None
    _job_here(args, settings)  # declared, not recorded: this run finishes the end
    assert end.recorded() is not None
    local = read_properties(f"{ROOT}/conf/local.conf")
    config = PurgatoryConfig.from_mapping({k: v for k, v in local.items() if not k.startswith("job.")})
    outcomes = _check_ended(f"{root}/out", work, config)["outcomes"]
    # the record names the micro-batch that applied the end, though two processes died in it
    batch = end.recorded()["batch_id"]
    ended = outcomes[outcomes["batch_id"] >= batch]
    assert len(ended) and (outcomes[outcomes["batch_id"] == batch]["status"] == "expired").all()
    assert (ended["status"] == "expired").all() and (ended["resolved_at"] == ended["deadline"]).all()
    # the ended checkpoint refuses the job in one line that says what to do
    code, err = job("--end-input")
    line = err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("error: the input of checkpoint") and "new checkpoint" in line
