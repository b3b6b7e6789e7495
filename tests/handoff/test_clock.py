"""The operator's clock (``watermark.idle.timeout``): idle inputs stop holding the watermark.

Spark-free: the idle bookkeeping (``handoff.clock``), the reaper's posts into the wake directory
(``handoff.reaper``) and what a shard does with a clock row, on the engine alone.  The streams are
in ``test_quiet_stream.py``.
"""

from __future__ import annotations

import os
import pathlib

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_purgatory import Purgatory, PurgatoryConfig
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.config import ConfigError
from spark_purgatory.contract import PROPOSED_WATERMARKS, ms_column
from spark_purgatory.handoff.clock import ClockWatermark
from spark_purgatory.handoff.reaper import LISTING_MARGIN_MS, ExpirationReaper, reaper_for
from spark_purgatory.handoff.wake import wake_first

DELAYS = {"operations": 5_000, "events": 5_000}


def _clock(started_ms: int = 0, idle_ms: int = 30_000, delays=DELAYS) -> ClockWatermark:
    return ClockWatermark(idle_ms, delays, started_ms=started_ms)


def test_the_clock_says_nothing_while_no_input_is_idle():
    clock = _clock()
    clock.observe(10_000, {"operations": 100_000, "events": 90_000})
    assert clock.watermark(29_999) is None and clock.idle(29_999) == set()
    assert clock.advance(29_999) is None


def test_an_idle_input_stops_holding_the_watermark_and_the_active_one_drives_it():
    clock = _clock()
    clock.observe(10_000, {"operations": 100_000, "events": 50_000})
    clock.observe(20_000, {"operations": 120_000, "events": None})  # events silent from 10 s
    assert clock.idle(40_000) == {"events"}
    assert clock.watermark(40_000) == 120_000  # the operations' watermark, not min(120, 50)


def test_with_every_input_idle_the_watermark_follows_the_clock_minus_the_largest_delay():
    clock = _clock(delays={"operations": 5_000, "events": 8_000})
    clock.observe(10_000, {"operations": 100_000, "events": 100_000})
    assert clock.watermark(39_999) is None
    assert clock.watermark(40_000) == 40_000 - 8_000  # never past what the clock allows
    assert clock.watermark(100_000) == 92_000
    assert clock.watermark(100_000, read_ms=99_000) == 91_000  # never past what has been read


def test_after_a_restart_a_silent_input_is_idle_once_the_timeout_passed_since_the_run_started():
    clock = _clock(started_ms=1_000_000)
    clock.observe(1_000_500, {}, known={"operations": 900_000, "events": 800_000})  # the last run's
    assert clock.watermark(1_029_999) is None
    assert clock.watermark(1_030_000) == 1_030_000 - 5_000


@given(
    st.lists(
        st.tuples(st.integers(1, 29_999), st.booleans(), st.booleans(), st.integers(0, 10**9)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 29_999),
)
def test_inputs_that_never_go_idle_leave_the_watermark_to_spark(batches, after_ms):
    """The split-invariance property holds with the idle timeout set for inputs that never go
    idle: each sends a row at least every idle timeout, so the clock never says anything and
    the shards run at Spark's watermark alone (no clock row, no ``expire_to_ms``)."""
    clock = _clock(started_ms=0)
    now, last = 0, {"operations": 0, "events": 0}
    for gap, ops, evs, ts in batches:
        now += gap
        sent = {"operations": ts if ops else None, "events": ts if evs else None}
        # an input that has been silent for nearly the timeout sends in this micro-batch
        for source in sent:
            if now - last[source] >= 29_999 - gap or sent[source] is not None:
                sent[source], last[source] = ts, now
        clock.observe(now, sent)
        assert clock.watermark(now) is None and clock.advance(now) is None
    assert clock.watermark(min(now + after_ms, min(last.values()) + 29_999)) is None


def test_an_active_input_without_a_watermark_holds_the_clock():
    clock = _clock()
    clock.observe(40_000, {"operations": 70_000})
    assert clock.idle(45_000) == {"events"}
    clock = _clock()
    assert clock.watermark(20_000) is None


def test_the_clock_never_moves_back():
    clock = _clock()
    clock.observe(0, {"operations": 0, "events": 0})
    assert clock.advance(40_000) == 35_000
    assert clock.advance(40_000) is None  # nothing new to post
    clock.observe(41_000, {"operations": 20_000})  # a row far behind: the active input's own is lower
    assert clock.watermark(42_000) == 20_000 and clock.advance(42_000) is None
    assert clock.advance(80_000) == 75_000


def test_rows_rejected_at_parse_do_not_make_an_input_active():
    clock = _clock()
    clock.observe(25_000, {"operations": None, "events": 1_000})
    assert clock.idle(31_000) == {"operations"}


def test_the_idle_timeout_is_an_interval_and_off_by_default():
    assert PurgatoryConfig().watermark_idle_timeout_ms is None
    config = PurgatoryConfig.from_mapping({"watermark.idle.timeout": "2 seconds"})
    assert config.watermark_idle_timeout_ms == 2000
    with pytest.raises(ConfigError, match="watermark.idle.timeout"):
        PurgatoryConfig.from_mapping({"watermark.idle.timeout": "soon"})


# -- the reaper ------------------------------------------------------------------------------


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def _calls(batch_time: int, pending: list[int], proposed: dict[str, int | None], buffered=None) -> pa.Table:
    n = len(pending)
    columns = {
        "shard": list(range(n)),
        "pending": pending,
        "buffered": buffered or [0] * n,
        ms_column("batch_time"): [batch_time] * n,
    }
    for source, column in PROPOSED_WATERMARKS.items():
        columns[column] = [proposed.get(source)] * n
    return pa.table({k: pa.array(v, pa.int64()) for k, v in columns.items()})


def _lines(root: str) -> list[str]:
    return [pathlib.Path(root, n).read_text().strip() for n in sorted(os.listdir(root))]


def test_the_reaper_needs_a_processing_time_trigger_and_a_reason(tmp_path):
    root = str(tmp_path / "wake")
    idle = PurgatoryConfig(watermark_idle_timeout="1 second")
    assert reaper_for(PurgatoryConfig(), 1_000, root) is None  # off: no thread, no file
    assert reaper_for(idle, None, root) is None
    assert reaper_for(idle, 1_000, root).clock is not None


def test_the_reaper_posts_the_clock_only_while_something_waits(tmp_path):
    root = str(tmp_path / "wake")
    now = Clock(1_000_000)
    config = PurgatoryConfig(watermark_idle_timeout="2 seconds", watermark_delay="1 second")
    reaper = reaper_for(config, 1_000, root, pending={0: 0, 1: 0}, now=now)
    reaper.observe(_calls(1_000_100, [2, 0], {"operations": 990_000, "events": None}), 0, {})
    now.ms = 1_001_500
    assert reaper.tick() is None  # the operations are not idle yet
    now.ms = 1_002_200
    # the post's time less the listing margin, minus the delay
    value = 1_002_200 - LISTING_MARGIN_MS - 1_000
    assert reaper.tick() == value and _lines(root) == [f"clock {value}"]
    assert reaper.tick() is None  # the same value: nothing new
    reaper.observe(_calls(1_002_300, [0, 0], {}, buffered=[0, 1]), 1, {})  # a buffered event waits
    now.ms = 1_003_000
    assert reaper.tick() == 1_003_000 - LISTING_MARGIN_MS - 1_000
    reaper.observe(_calls(1_003_100, [0, 0], {}), 2, {})  # nothing waits: an idle query writes nothing
    now.ms = 1_010_000
    assert reaper.tick() is None and len(os.listdir(root)) == 2
    with reaper.paused():
        reaper.observe(_calls(1_010_100, [1, 0], {}), 3, {})
        now.ms = 1_011_000
        assert reaper.tick() is None
    reaper.observe(_calls(1_011_500, [1, 0], {}), 4, {})
    # files read by micro-batches committed by now go (written before batch 4 - 1 began, less a margin)
    now.ms = 1_012_000
    value = 1_012_000 - LISTING_MARGIN_MS - 1_000
    assert reaper.tick() == value
    assert _lines(root) == [f"clock {value}"]


def test_an_idle_timeout_a_multiple_of_the_interval_releases_the_clock_at_its_trigger(tmp_path):
    """The input's last rows came in the micro-batch of the trigger at 1_000_000 (its batch time
    40 ms after it); with a 2 s idle timeout and a 1 s interval the input is idle at the trigger
    at 1_002_000, and the tick just before it (25 ms early) posts the clock for that trigger's
    micro-batch, not for the next one."""
    now = Clock(1_000_000)
    config = PurgatoryConfig(watermark_idle_timeout="2 seconds", watermark_delay="1 second")
    reaper = reaper_for(config, 1_000, str(tmp_path / "wake"), pending={0: 1}, now=now)
    reaper.listed_first = lambda: True
    reaper.observe(_calls(1_000_040, [1], {"operations": 999_000, "events": 999_000}), 0, {})
    now.ms = 1_000_975
    assert reaper.tick() is None  # before the trigger at 1_001_000: a second to go
    now.ms = 1_001_975
    assert reaper.tick() == 1_001_975 - 1_000  # for the trigger at 1_002_000: idle by then


def test_the_listing_margin_goes_once_spark_says_it_lists_the_wake_first(tmp_path):
    now = Clock(1_000_000)
    config = PurgatoryConfig(watermark_idle_timeout="1 second", watermark_delay="1 second")
    answers = {"first": None}
    reaper = reaper_for(config, 1_000, str(tmp_path / "wake"), pending={0: 1}, now=now)
    reaper.listed_first = lambda: answers["first"]
    reaper.quiet = lambda: True  # the run has begun
    reaper.observe(_calls(1_000_000, [1], {}), 0, {})
    now.ms = 1_002_000
    assert reaper.tick() == 1_002_000 - LISTING_MARGIN_MS - 1_000  # Spark has not said yet
    answers["first"] = True
    now.ms = 1_003_000
    assert reaper.tick() == 1_003_000 - 1_000  # the post is read with every row written before it
    answers["first"] = False  # asked once: Spark's order of sources is fixed for the run
    now.ms = 1_004_000
    assert reaper.tick() == 1_004_000 - 1_000
    last = reaper_for(config, 1_000, str(tmp_path / "other"), pending={0: 1}, now=now)
    last.listed_first = lambda: False  # the inputs are listed before the wake: the margin stays
    assert last.margin_ms() == LISTING_MARGIN_MS


def test_a_checkpoint_keeps_the_source_order_it_began_with(tmp_path):
    new, old = str(tmp_path / "new"), str(tmp_path / "old")
    os.makedirs(new)
    assert wake_first(new) and os.path.isfile(Checkpoint(new).wake_first)  # its first start records it
    os.makedirs(os.path.join(new, "offsets"))
    open(os.path.join(new, "offsets", "0"), "w").close()
    assert wake_first(new)  # recorded: its offsets were logged in this order
    os.makedirs(os.path.join(old, "offsets"))
    open(os.path.join(old, "offsets", "0"), "w").close()
    assert not wake_first(old) and not os.path.exists(Checkpoint(old).wake_first)  # begun with the wake last


def test_the_reaper_posts_before_each_trigger(tmp_path):
    now = Clock(1_000_050)
    reaper = ExpirationReaper(str(tmp_path), 1_000, clock=None, now=now)
    assert reaper._until_next_s() == pytest.approx(0.175)  # steps of 250 ms, each 25 ms early
    now.ms = 1_000_960
    assert reaper._until_next_s() == pytest.approx(0.015)  # 25 ms before the trigger at 1_001_000
    fast = ExpirationReaper(str(tmp_path), 100, clock=None, now=now)
    assert fast._until_next_s() == pytest.approx(0.03)  # one step: 10 ms before the trigger


def test_the_reaper_thread_stops_cleanly(tmp_path):
    reaper = ExpirationReaper(str(tmp_path / "wake"), 50, clock=None, pending={0: 1}).start()
    reaper.stop()
    reaper.stop()
    count = len(os.listdir(tmp_path / "wake")) if (tmp_path / "wake").exists() else 0
    assert not reaper._thread.is_alive()
    assert (len(os.listdir(tmp_path / "wake")) if (tmp_path / "wake").exists() else 0) == count


# -- a shard at the clock --------------------------------------------------------------------


def test_a_shard_at_the_clock_expires_what_is_due_and_rejects_rows_behind_it_as_late():
    """A watermark moved by the clock stays: later rows behind it are late."""
    config = PurgatoryConfig(tick_ms=100)
    p = Purgatory(config)
    ops = pd.DataFrame(
        {"op_id": ["a", "b"], "key": ["k", "k"], "ts": [1_000, 2_000], "timeout_ms": [1_000, 60_000]}
    )
    p.process(ops, None, watermark_ms=0)
    spark_wm, clock = 0, 5_000
    out = p.process(None, None, watermark_ms=max(spark_wm, clock))
    assert out.outcomes["op_id"].tolist() == ["a"] and out.outcomes["resolved_at"].tolist() == [2_000]
    late = p.process(
        pd.DataFrame({"op_id": ["c"], "key": ["k"], "ts": [4_000], "timeout_ms": [1_000]}),
        pd.DataFrame({"key": ["k"], "ts": [3_000]}),
        watermark_ms=spark_wm,
    )
    assert late.rejected["reason"].tolist() == ["late", "late"] and p.pending == 1


def test_the_rows_of_the_micro_batch_that_brings_the_clock_are_admitted_before_it_moves():
    """``expire_to_ms``: a row within its delay that waited for the clock's micro-batch is not
    late; what the clock makes due expires after it; later rows behind the clock are late."""
    config = PurgatoryConfig(tick_ms=100)
    p = Purgatory(config)
    ops = pd.DataFrame(
        {"op_id": ["a", "b"], "key": ["ka", "kb"], "ts": [1_000, 1_500], "timeout_ms": [2_000] * 2}
    )
    p.process(ops, None, watermark_ms=0)
    # an event for b at 3_000 read with the clock at 9_000: admitted, b completes, a expires
    out = p.process(None, pd.DataFrame({"key": ["kb"], "ts": [3_000]}), watermark_ms=0, expire_to_ms=9_000)
    assert out.rejected.empty
    assert sorted(out.outcomes[["op_id", "status"]].values.tolist()) == [["a", "expired"], ["b", "completed"]]
    assert p.watermark == 9_000
    late = p.process(None, pd.DataFrame({"key": ["kb"], "ts": [8_000]}), watermark_ms=0)
    assert late.rejected["reason"].tolist() == ["late"]


def test_the_cross_shard_group_takes_the_clock_one_call_later():
    """Its relays of the batch that brought the clock come in its next call: an operation they
    could complete must not expire before them."""
    p = Purgatory(PurgatoryConfig(tick_ms=100))
    p.shard = 2
    ops = pd.DataFrame({"op_id": ["x"], "keys": [["k1", "k2"]], "ts": [1_000], "timeout_ms": [2_000]})
    p.process(ops, None, watermark_ms=0, relayed=pd.DataFrame())
    held = p.process(None, None, watermark_ms=0, relayed=pd.DataFrame(), expire_to_ms=9_000)
    assert held.outcomes.empty and p.watermark == 9_000, "admits at the clock from now on"
    later = p.process(None, None, watermark_ms=0, relayed=pd.DataFrame())
    assert later.outcomes[["op_id", "status"]].values.tolist() == [["x", "expired"]]


def test_the_run_begins_with_its_first_micro_batch_or_when_spark_finds_nothing_to_read(tmp_path):
    clock = ClockWatermark(1_000, DELAYS)
    assert clock.watermark(10**9) is None  # a backlog waiting at the start is read first
    now = Clock(1_000_000)
    reaper = ExpirationReaper(str(tmp_path / "wake"), 1_000, clock=clock, pending={0: 1}, now=now)
    assert reaper.tick() is None and clock.started_ms is None
    reaper.quiet = lambda: True  # Spark: waiting for data to arrive
    assert reaper.tick() is None and clock.started_ms == 1_000_000
    now.ms = 1_001_100
    assert reaper.tick() == 1_001_100 - LISTING_MARGIN_MS - 5_000


# -- deadline.clock=processing ---------------------------------------------------------------


def test_deadlines_on_the_processing_clock_count_from_arrival_and_nothing_is_late():
    """What a shard does with ``deadline.clock=processing``, on the engine alone: rows at
    their arrival (the micro-batch's start), the watermark the micro-batch's start."""
    from spark_purgatory.engine.validation import validate_events, validate_operations
    from spark_purgatory.handoff.clock import on_arrival

    config = PurgatoryConfig(tick_ms=100, deadline_clock="processing")
    p = Purgatory(config)
    ops, _ = validate_operations(
        pd.DataFrame(
            {"op_id": ["a", "b"], "key": ["ka", "kb"], "ts": [5_000, 1_000], "timeout_ms": [3_000, 3_000]}
        ),
        max_timeout_ms=config.max_timeout_ms,
    )
    events, _ = validate_events(pd.DataFrame({"key": ["ka"], "ts": [0]}))
    arrived = 1_000_000
    ops1, none, _ = on_arrival(ops, events.iloc[:0], None, arrived)
    assert ops1["ts"].tolist() == [arrived] * 2 and ops1["deadline"].tolist() == [arrived + 3_000] * 2
    assert p.process(ops1, none, watermark_ms=arrived, validated=True).rejected.empty
    # an event stamped long before arrives a second later: it counts (arrival order), not late
    _, ev2, _ = on_arrival(ops.iloc[:0], events, None, arrived + 1_000)
    out = p.process(ops.iloc[:0], ev2, watermark_ms=arrived + 1_000, validated=True)
    assert out.rejected.empty and out.outcomes["op_id"].tolist() == ["a"]
    assert out.outcomes["resolved_at"].tolist() == [arrived + 1_000]
    # b expires in the first micro-batch that starts at or after its arrival plus its timeout
    assert p.process(None, None, watermark_ms=arrived + 2_900, validated=True).outcomes.empty
    late = p.process(None, None, watermark_ms=arrived + 3_100, validated=True).outcomes
    assert late[["op_id", "status", "resolved_at"]].values.tolist() == [["b", "expired", arrived + 3_000]]


def test_deadline_clock_is_event_or_processing_and_processing_has_a_reaper(tmp_path):
    assert PurgatoryConfig().deadline_clock == "event"
    with pytest.raises(ConfigError, match="deadline.clock must be event or processing"):
        PurgatoryConfig.from_mapping({"deadline.clock": "wall"})
    config = PurgatoryConfig(deadline_clock="processing")
    reaper = reaper_for(config, 500, str(tmp_path / "wake"))
    assert reaper.clock is None and reaper.interval_ms == 500
    now = Clock(1_000_000)
    reaper = reaper_for(config, 1_000, str(tmp_path / "wake"), pending={0: 1}, now=now)
    assert reaper.tick() == 1_000_000 and reaper.tick() is None  # a micro-batch per tick at most
    now.ms += 250
    assert reaper.tick() == 1_000_250
