"""The timing wheel: Kafka's timer tests ported to the columnar API, plus properties.

Ported from apache/kafka server-common ``TimingWheelTest``, ``TimerTest`` (SystemTimer with
tick 1 ms, wheel size 3) and ``TimerTaskListTest``.  Where Kafka may fire inside the current
tick, these tests assert the stricter rule of this project: never before the deadline.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_purgatory.engine.wheel import NO_EXPIRATION, TimingWheel


def drain(wheel: TimingWheel, until: int, step: int = 1) -> list[tuple[int, int]]:
    """Advance one step at a time; return (id, time it expired) pairs."""
    fired = []
    for t in range(wheel.current_time_ms, until + 1, step):
        fired.extend((int(i), t) for i in wheel.advance(t))
    return fired


# -- TimingWheelTest (tick 10, wheel size 5, start 1000) ---------------------------------------


@pytest.fixture
def wheel() -> TimingWheel:
    return TimingWheel(tick_ms=10, wheel_size=5, start_ms=1000)


def test_add_valid_task(wheel):
    assert not wheel.add([1], [1020]).any()
    assert wheel.size() == 1


def test_add_expired_task_is_refused(wheel):
    assert wheel.add([1], [999]).tolist() == [True]
    assert wheel.size() == 0


def test_task_in_current_tick_is_held_not_expired(wheel):
    # Kafka: expired at once (fires up to a tick early).  Here: held until its deadline.
    assert wheel.add([1], [1005]).tolist() == [False]
    assert wheel.advance(1004).tolist() == []
    assert wheel.advance(1005).tolist() == [1]


def test_deadline_equal_to_now_is_already_expired(wheel):
    assert wheel.add([1], [1000]).tolist() == [True]


def test_advance_within_tick_keeps_level_time(wheel):
    wheel.advance(1005)
    assert wheel.level_times()[0] == 1000
    assert wheel.current_time_ms == 1005


def test_advance_to_next_tick(wheel):
    wheel.advance(1010)
    assert wheel.level_times()[0] == 1010


def test_overflow_wheel_created_on_demand_once(wheel):
    assert wheel.levels == 1
    interval = 10 * 5
    wheel.add([1], [1000 + interval + 10])
    assert wheel.levels == 2
    wheel.add([2], [1000 + interval + 11])
    assert wheel.levels == 2


def test_advance_moves_overflow_wheel_clock(wheel):
    wheel.add([1], [1000 + 50 + 10])
    wheel.advance(1060)
    assert wheel.level_times() == [1060, 1050]


# -- TimerTest (SystemTimer(tick 1, wheel size 3)) ---------------------------------------------


def test_already_expired_tasks_are_reported_by_add():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    expired = w.add(np.arange(-5, 0), np.arange(-5, 0))
    assert expired.all()
    assert w.size() == 0


def test_585_tasks_over_several_levels_each_expire_exactly_once_never_early():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    deadlines = np.concatenate([np.arange(0, 5), np.repeat(np.arange(10, 100), 2), np.arange(100, 500)])
    ids = np.arange(deadlines.size)
    rng = np.random.default_rng(7)
    order = rng.permutation(ids.size)  # "randomly submit requests"
    expired_now = w.add(ids[order], deadlines[order])
    fired = [(int(i), 0) for i in ids[order][expired_now]]
    assert w.levels >= 5  # 3, 9, 27, 81, 243, 729 ms spans
    fired += drain(w, 2000)
    assert sorted(i for i, _ in fired) == ids.tolist()
    for i, t in fired:
        assert t == max(deadlines[i], 0), (i, t, deadlines[i])
    assert w.size() == 0


def test_level_boundaries_tick_1_size_3():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    w.add([1, 2, 3, 4], [2, 3, 8, 9])
    # level 0 covers [0, 3), level 1 (tick 3) [0, 9), level 2 (tick 9) [0, 27)
    assert w.levels == 3
    ids, deadlines = w.pending()
    assert sorted(zip(ids.tolist(), deadlines.tolist(), strict=True)) == [(1, 2), (2, 3), (3, 8), (4, 9)]
    assert drain(w, 10) == [(1, 2), (2, 3), (3, 8), (4, 9)]


def test_cancel_before_flush_never_fires():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    w.add(np.arange(100), np.arange(1, 101))
    w.cancel(np.arange(0, 100, 2))
    assert w.size() == 50
    fired = drain(w, 200)
    assert sorted(i for i, _ in fired) == list(range(1, 100, 2))
    assert w.size() == 0


# -- TimerTaskListTest: reinsertion moves entries without double counting ---------------------


def test_cascade_moves_entries_down_without_double_counting():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    w.add(np.arange(10), np.full(10, 10))  # all in an overflow bucket
    assert w.size() == 10
    for t in range(0, 10):
        assert w.advance(t).size == 0
        assert w.size() == 10  # flushing/reinserting moves, never duplicates
        assert sorted(w.pending()[0].tolist()) == list(range(10))
    assert sorted(w.advance(10).tolist()) == list(range(10))
    assert w.size() == 0


def test_cancel_in_each_list_drops_exactly_those():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    w.add(np.arange(10), np.array([1, 1, 1, 1, 5, 5, 5, 20, 20, 20]))
    w.cancel([0, 1, 2, 3])
    assert w.size() == 6
    w.cancel([4, 5, 6])
    assert w.size() == 3
    w.cancel([7, 8, 9])
    assert w.size() == 0
    assert drain(w, 30) == []


def test_purge_compacts_tombstones():
    w = TimingWheel(tick_ms=1, wheel_size=8, start_ms=0)
    w.add(np.arange(5000), np.arange(5000) + 1000)
    w.cancel(np.arange(0, 5000, 2))  # more tombstones than live entries: compaction runs
    assert w.size() == 2500
    assert w._tombstones.size == 0
    assert sorted(w.pending()[0].tolist()) == list(range(1, 5000, 2))


def test_time_never_moves_backwards():
    w = TimingWheel(tick_ms=10, wheel_size=4, start_ms=100)
    w.add([1], [150])
    assert w.advance(50).size == 0
    assert w.current_time_ms == 100


def test_next_expiration_is_smallest_pending_deadline():
    w = TimingWheel(tick_ms=10, wheel_size=4, start_ms=0)
    assert w.next_expiration() == NO_EXPIRATION
    w.add([1, 2, 3], [1234, 77, 5000])
    assert w.next_expiration() == 77
    w.advance(100)
    assert w.next_expiration() == 1234


def test_round_trip_bytes_keeps_placement_and_behaviour():
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    w.add(np.arange(200), np.arange(200) * 3 + 1)
    w.advance(40)
    w.cancel([150, 151])
    copy = TimingWheel.from_bytes(w.to_bytes())
    assert copy.levels == w.levels and copy.level_times() == w.level_times()
    assert copy.size() == w.size()
    assert drain(copy, 700) == drain(w, 700)


def test_huge_deadlines_do_not_overflow():
    w = TimingWheel(tick_ms=1, wheel_size=2, start_ms=0)
    big = np.iinfo(np.int64).max - 1
    w.add([1, 2], [big, 5])
    assert w.advance(10).tolist() == [2]
    assert w.next_expiration() == big


# -- properties against a sorted-array reference -----------------------------------------------

ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 3000), min_size=1, max_size=30)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("advance"), st.integers(0, 400)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    tick=st.integers(1, 50),
    size=st.integers(2, 16),
    start=st.integers(0, 10_000),
    ops=ops_strategy,
)
def test_wheel_matches_sorted_reference(tick, size, start, ops):
    """Any add/cancel/advance sequence: exactly the deadlines <= time expire, each once."""
    w = TimingWheel(tick, size, start)
    ref: dict[int, int] = {}  # pending id -> deadline
    now, next_id = start, 0
    for op, arg in ops:
        if op == "add":
            deadlines = np.array(arg) + now - 200  # some already expired
            ids = np.arange(next_id, next_id + len(arg))
            next_id += len(arg)
            expired = w.add(ids, deadlines)
            assert expired.tolist() == (deadlines <= now).tolist()
            ref.update({int(i): int(d) for i, d in zip(ids[~expired], deadlines[~expired], strict=True)})
        elif op == "cancel":
            victims = sorted(ref)[:arg]
            w.cancel(victims)
            for v in victims:
                del ref[v]
        else:
            now += arg
            fired = w.advance(now).tolist()
            assert len(fired) == len(set(fired))
            expected = sorted(i for i, d in ref.items() if d <= now)
            assert sorted(fired) == expected
            for i in fired:
                del ref[i]
        assert w.size() == len(ref)
        assert w.next_expiration() <= min(ref.values(), default=NO_EXPIRATION)
    again = TimingWheel.from_bytes(w.to_bytes())
    assert sorted(again.advance(np.iinfo(np.int64).max).tolist()) == sorted(ref)


def test_cancelled_ids_stay_cancelled_through_a_round_trip_and_may_be_added_again_later():
    w = TimingWheel(tick_ms=10, wheel_size=8, start_ms=0)
    w.add(np.arange(100), np.arange(100) * 7 + 1)
    w.cancel(np.arange(0, 100, 3))
    w.cancel(np.arange(1, 100, 9))  # a second cancel: another run of tombstones
    again = TimingWheel.from_bytes(w.to_bytes())
    live = sorted(set(range(100)) - set(range(0, 100, 3)) - set(range(1, 100, 9)))
    assert again.size() == w.size() == len(live)
    first = w.advance(350)
    assert first.tolist() == again.advance(350).tolist() == [i for i in live if i * 7 + 1 <= 350]
    w.add(np.array([0, 3]), np.array([400, 410]))  # cancelled ids whose entries have left
    assert sorted(w.advance(10_000).tolist()) == sorted([0, 3, *(i for i in live if i * 7 + 1 > 350)])
    assert w.size() == 0


def test_ids_far_apart_and_negative_come_back_exactly():
    """A run keeps its ids as 32-bit offsets while they span less than 2^32, as they are
    otherwise: either way ``advance`` returns the ids that were added."""
    w = TimingWheel(tick_ms=1, wheel_size=4, start_ms=0)
    near = np.arange(2**40, 2**40 + 5, dtype=np.int64)
    far = np.array([-(2**62), 0, 2**62, 7], dtype=np.int64)
    w.add(near, np.array([3, 1, 2, 30, 100]))
    w.add(far, np.array([2, 50, 3, 100]))
    w.cancel(np.array([2**40 + 3, 7]))
    assert sorted(w.advance(3).tolist()) == sorted([2**40, 2**40 + 1, 2**40 + 2, -(2**62), 2**62])
    assert sorted(w.advance(100).tolist()) == [0, 2**40 + 4]
    assert w.size() == 0


# -- Kafka's own timer tests, ported (server-common .../util/timer/TimerTaskListTest, TimerTest) ---------
# Kafka's ids are task objects; here they are ints.  Re-adding a task moves it (TimerTaskList.add
# removes the entry from its old list first): the wheel's ``size`` is Kafka's shared counter.


def test_kafka_timer_task_list_reinserting_tasks_keeps_the_count():
    """TimerTaskListTest.testAll: ten tasks, re-added (moved) then cancelled in groups."""
    w = TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    for i in range(1, 11):
        w.add([i], [10])
        assert w.size() == i
    for i in range(1, 5):  # reinserting an existing task does not change the count
        w.add([i], [30])
        assert w.size() == 10
    for i in range(5, 11):
        w.add([i], [500])
        assert w.size() == 10
    w.cancel(list(range(1, 5)))
    assert w.size() == 6
    w.cancel(list(range(5, 11)))
    assert w.size() == 0
    assert w.advance(10_000).tolist() == []  # nothing cancelled ever fires


def test_kafka_timer_already_expired_tasks_are_the_callers_to_run():
    """TimerTest.testAlreadyExpiredTask: negative delays run at once (here: ``add`` says so)."""
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    assert w.add(np.arange(-5, 0), np.arange(-5, 0)).all()
    assert w.size() == 0 and w.advance(0).tolist() == []


def test_kafka_timer_every_task_expires_once():
    """TimerTest.testTaskExpiration: 0-4 once, 10-99 twice (two tasks each), 100-499 once,
    submitted in random order; every task expires exactly once, none early."""
    delays = [*range(5), *[d for d in range(10, 100) for _ in range(2)], *range(100, 500)]
    ids = np.arange(len(delays))
    order = np.random.default_rng(0).permutation(len(delays))
    w = TimingWheel(tick_ms=1, wheel_size=3, start_ms=0)
    expired_now = w.add(ids[order], np.asarray(delays)[order])
    fired = [int(i) for i in ids[order][expired_now]]  # delay 0: already expired
    for t in range(1, 2001):
        out = w.advance(t).tolist()
        assert all(delays[i] == t for i in out), "a task fired before (or after) its deadline"
        fired += out
    assert sorted(delays[i] for i in fired) == sorted(delays)
    assert sorted(fired) == ids.tolist() and w.size() == 0


def test_a_cancelled_id_may_be_added_again():
    """The issue's repro: the new deadline fires, the cancelled one never does."""
    w = TimingWheel(tick_ms=10, wheel_size=5, start_ms=0)
    w.add([1], [100])
    w.cancel([1])
    w.add([1], [50])
    assert w.size() == 1
    assert w.advance(50).tolist() == [1]
    assert w.advance(100).tolist() == [] and w.size() == 0


def test_an_id_added_again_while_pending_fires_once_at_its_last_deadline():
    w = TimingWheel(tick_ms=10, wheel_size=5, start_ms=0)
    w.add([1, 2], [100, 200])
    w.add([1], [300])
    assert w.advance(299).tolist() == [2]
    assert w.advance(300).tolist() == [1] and w.size() == 0
    w.add([3, 3], [400, 350])  # twice in one call: the last deadline
    assert w.advance(360).tolist() == [3] and w.advance(1000).tolist() == []


def test_cancelling_an_id_that_is_not_pending_does_nothing():
    w = TimingWheel(tick_ms=10, wheel_size=5, start_ms=0)
    w.add([1], [50])
    assert w.advance(50).tolist() == [1]
    w.cancel([1, 7])
    assert w.size() == 0
    w.add([1], [80])
    assert w.advance(80).tolist() == [1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "cancel", "advance"]), st.integers(0, 6), st.integers(0, 400)),
        max_size=60,
    )
)
def test_the_wheel_equals_a_dict_of_deadlines(steps):
    """Any sequence of add / cancel / advance on a few ids: each pending id fires once, at the
    deadline it was last given, and ``size`` counts the pending ids (a dict as the model)."""
    w = TimingWheel(tick_ms=7, wheel_size=3, start_ms=0)
    model: dict[int, int] = {}
    now = 0
    for op, i, t in steps:
        if op == "add":
            expired = w.add([i], [t])
            model.pop(i, None)
            if expired[0]:
                assert t <= now
            else:
                model[i] = t
        elif op == "cancel":
            w.cancel([i])
            model.pop(i, None)
        else:
            now = max(now, t)
            due = sorted(k for k, d in model.items() if d <= now)
            assert sorted(w.advance(t).tolist()) == due
            for k in due:
                del model[k]
        assert w.size() == len(model)
    # the state survives serialisation with its record of ids
    w2 = TimingWheel.from_bytes(w.to_bytes())
    assert sorted(w2.advance(10**6).tolist()) == sorted(model)
