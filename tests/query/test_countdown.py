"""Time left on the operator's clock (``inspect.countdown``, ``handoff.clock_record``), Spark-free.

The reaper tells the checkpoint how its clock goes; the readers count an operation's time left
from it while a query runs (a silence moves the clock where Spark's watermark stands still), from
the watermark read when none runs.  The live query is in ``tests/spark/test_quiet_stream.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spark_purgatory import PurgatoryConfig
from spark_purgatory.checkpoint_paths import Checkpoint
from spark_purgatory.handoff.clock_record import ClockRecord, ClockRecorder, read_clock_record
from spark_purgatory.handoff.reaper import reaper_for
from spark_purgatory.inspect.countdown import Countdown, countdown_of
from spark_purgatory.state.layout import RunLease
from spark_purgatory.storage import Storage
from tests.handoff.test_clock import Clock, _calls


def _reaper(chk: str, now: Clock, token: str = "run-1", **config):
    config = PurgatoryConfig(watermark_idle_timeout="3 seconds", watermark_delay="2 seconds", **config)
    recorder = ClockRecorder.under(chk, Storage(), run=token, trigger_ms=1_000)
    reaper = reaper_for(config, 1_000, f"{chk}/wake", pending={0: 1}, now=now, recorder=recorder)
    reaper.listed_first = lambda: True  # no listing margin: the lag is the delay
    return reaper


def test_the_reaper_records_when_its_clock_takes_over_and_writes_only_changes(tmp_path):
    chk, now = str(tmp_path), Clock(1_000_000)
    reaper = _reaper(chk, now)
    reaper._run_ms = now.ms
    reaper._record(reaper._on_clock_ms(), now.ms)  # what ``start`` writes: the run has not begun
    first = read_clock_record(chk)
    assert first == ClockRecord("run-1", 2_000, 3_000, None, 1_000, 1_000_000)
    reaper.observe(_calls(1_000_500, [1], {"operations": 998_000, "events": 997_000}), 0, {})
    now.ms = 1_000_700
    assert reaper.tick() is None  # nobody idle: nothing posted, but the record now knows
    # from the trigger that started the micro-batch (1_000_000), plus the idle timeout
    assert read_clock_record(chk).on_clock_ms == 1_000_000 + 3_000
    written = os.stat(Checkpoint(chk).clock_record).st_mtime_ns
    reaper.observe(_calls(1_000_900, [1], {"operations": 998_500, "events": None}), 1, {})
    now.ms = 1_000_950
    reaper.tick()  # a micro-batch of the same trigger: nothing new, not written again
    assert os.stat(Checkpoint(chk).clock_record).st_mtime_ns == written
    reaper.observe(_calls(1_002_040, [1], {"operations": 999_000, "events": None}), 2, {})
    now.ms = 1_002_100
    reaper.tick()
    assert read_clock_record(chk).on_clock_ms == 1_002_000 + 3_000  # a trigger on: written
    now.ms = 1_004_980  # the tick before the trigger at 1_005_000: every input idle by then
    assert reaper.tick() == 1_004_980 - 2_000  # the clock follows the wall clock
    assert read_clock_record(chk).on_clock_ms == 1_005_000


def test_the_processing_clock_is_recorded_without_lag(tmp_path):
    chk, now = str(tmp_path), Clock(2_000_000)
    reaper = _reaper(chk, now, deadline_clock="processing")
    reaper._run_ms = now.ms
    now.ms += 300
    assert reaper.tick() == 2_000_300
    record = read_clock_record(chk)
    assert (record.lag_ms, record.idle_timeout_ms, record.on_clock_ms) == (0, 0, 2_000_000)


def test_a_record_is_read_only_while_its_own_run_holds_the_lease(tmp_path):
    chk, storage = str(tmp_path), Storage()
    lease = RunLease(chk, storage)
    recorder = ClockRecorder.under(chk, storage, run="old-run", trigger_ms=1_000)
    recorder.note(lag_ms=2_000, idle_timeout_ms=3_000, on_clock_ms=50_000, now_ms=40_000)
    assert countdown_of(chk, storage, floor_ms=10_000, latest=True, now_ms=60_000) == Countdown(
        floor_ms=10_000
    )
    lease.take()
    try:  # a live run, but the record is an earlier run's: time left counts from the watermark
        assert not countdown_of(chk, storage, floor_ms=10_000, latest=True, now_ms=60_000).running()
        ClockRecorder.under(chk, storage, run=lease.token, trigger_ms=1_000).note(
            lag_ms=2_000, idle_timeout_ms=3_000, on_clock_ms=50_000, now_ms=55_000
        )
        countdown = countdown_of(chk, storage, floor_ms=10_000, latest=True, now_ms=60_000)
        assert countdown == Countdown(floor_ms=10_000, now_ms=60_000, lag_ms=2_000, on_clock_ms=50_000)
        assert countdown.watermark(12_000) == 58_000 and "operator's clock" in countdown.summary()
        # an earlier micro-batch asked for: time stands still at its watermark
        assert countdown_of(chk, storage, floor_ms=10_000, latest=False) == Countdown(floor_ms=10_000)
        # a run that has not begun: the clock may take over once the idle timeout has passed
        ClockRecorder.under(chk, storage, run=lease.token, trigger_ms=1_000).note(
            lag_ms=2_000, idle_timeout_ms=3_000, on_clock_ms=None, now_ms=59_000
        )
        assert countdown_of(chk, storage, floor_ms=10_000, latest=True, now_ms=60_000).on_clock_ms == 63_000
    finally:
        lease.release()
    assert not countdown_of(chk, storage, floor_ms=10_000, latest=True, now_ms=60_000).running()  # stopped


def test_a_record_cut_short_or_of_another_shape_reads_as_no_clock(tmp_path):
    path = Path(Checkpoint(str(tmp_path)).clock_record)
    for text in ('{"run": "r", "lag_ms": 1', '{"run": "r"}', "[]"):
        path.write_text(text)
        assert read_clock_record(str(tmp_path)) is None
    path.write_text(
        json.dumps({"run": "r", "lag_ms": 1, "idle_timeout_ms": 2, "trigger_ms": 3, "written_ms": 4})
    )
    assert read_clock_record(str(tmp_path)).on_clock_ms is None


def _due_in_a_silence(deadline: int, last: int, now: int, lag: int, on_clock: int) -> int:
    """The reference for a silence: the first wall-clock ms from ``now`` at which the operator's
    watermark (the last micro-batch's, then, once the clock has taken over, the wall clock less
    its lag), with nothing arriving, reaches ``deadline`` (a binary search: it never goes back)."""

    def watermark(t: int) -> int:
        return last if t < on_clock else max(last, t - lag)

    low, high = now, max(now, deadline + lag, on_clock)
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if watermark(middle) < deadline else (low, middle)
    return low


@given(
    deadlines=st.lists(st.integers(0, 200_000), min_size=1, max_size=20),
    shard=st.integers(0, 100_000),
    floor=st.integers(0, 100_000),
    now=st.integers(50_000, 150_000),
    lag=st.integers(0, 10_000),
    on_clock=st.integers(0, 200_000),
)
def test_time_left_is_the_sooner_of_a_silence_and_rows_that_keep_pace(
    deadlines, shard, floor, now, lag, on_clock
):
    """Time left is the sooner of two futures: the inputs fall silent (``_due_in_a_silence``),
    or their rows keep the watermark moving at the wall clock's pace from where it is now."""
    countdown = Countdown(floor_ms=floor, now_ms=now, lag_ms=lag, on_clock_ms=on_clock)
    left = countdown.time_left(np.array(deadlines), shard).tolist()
    last = max(shard, floor)
    for deadline, got in zip(deadlines, left, strict=True):
        wm_now = countdown.watermark(shard)
        if deadline <= wm_now:  # overdue: how far the watermark is past it, it goes next micro-batch
            assert got == deadline - wm_now <= 0
        else:
            silence = _due_in_a_silence(deadline, last, now, lag, on_clock)
            rows = now + (deadline - wm_now)
            assert got == min(silence, rows) - now > 0
    stopped = Countdown(floor_ms=floor).time_left(np.array(deadlines), shard)
    assert stopped.tolist() == [d - last for d in deadlines]  # a stopped query: time stands still
    given_wm = Countdown(fixed_ms=now).time_left(np.array(deadlines), shard)
    assert given_wm.tolist() == [d - now for d in deadlines]
