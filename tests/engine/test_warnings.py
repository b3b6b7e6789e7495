"""A warning before the breach (issue 79 item 3), through ``PurgatoryTester``: an operation
with ``warn_ms`` still pending at ``deadline - warn_ms`` gets one row in ``warnings``."""

from __future__ import annotations

import pytest

from spark_purgatory import contract as c
from spark_purgatory.testing import PurgatoryTester

_OP = {"key": "k", "ts": 0, "timeout_ms": 1000, "warn_ms": 300}


def _tester(*ops: dict) -> PurgatoryTester:
    t = PurgatoryTester({"purgatory.tick.ms": 10})
    t.add_operations([{**_OP, **op} for op in ops])
    t.step()
    return t


def _warned(t: PurgatoryTester) -> list[tuple]:
    return [(r.op_id, r.warned_at, r.batch_id) for r in t.warnings(times="ms").itertuples()]


def test_exactly_one_warning_when_the_watermark_reaches_deadline_minus_warn_ms():
    t = _tester({"op_id": "a"})
    t.advance_watermark(699)
    t.step()
    assert _warned(t) == []  # not a millisecond early
    t.advance_watermark(700)  # the boundary: pending at 700 is warned at 700
    t.step()
    t.advance_watermark(900)
    t.step()
    t.end_input()
    assert _warned(t) == [("a", 700, 2)]
    row = t.warnings(times="ms").iloc[0]
    assert (row["deadline"], list(row["keys"]), row["progress"]) == (1000, ["k"], 0.0)
    assert t.outcome("a")["status"] == c.EXPIRED


def test_a_watermark_past_both_times_warns_then_expires_in_one_micro_batch():
    t = _tester({"op_id": "a"})
    t.advance_watermark(5000)
    t.step()
    assert _warned(t) == [("a", 700, 1)]
    assert t.outcome("a")["status"] == c.EXPIRED


def test_no_warning_for_an_operation_completed_before_its_warning():
    t = _tester({"op_id": "a"})
    t.add_events([{"key": "k", "ts": 699}])
    t.step()
    t.end_input()
    assert t.outcome("a")["status"] == c.COMPLETED
    assert _warned(t) == []


def test_no_warning_for_an_operation_cancelled_before_its_warning():
    t = _tester({"op_id": "a"})
    t.add_events([{"key": "k", "ts": 100, "op_id": "a", "cancel": True}])
    t.step()
    t.end_input()
    assert t.outcome("a")["status"] == c.CANCELLED
    assert _warned(t) == []


def test_an_operation_resolved_after_its_warning_time_is_warned_with_its_outcome():
    # the event at 800 comes while the watermark is still at 0: in event time the operation
    # was pending at 700, as it would have been had the event come after the watermark
    t = _tester({"op_id": "a"})
    t.add_events([{"key": "k", "ts": 800}])
    t.step()
    assert _warned(t) == [("a", 700, 1)]
    assert t.outcome("a")["resolved_at"].value // 10**6 == 800
    t.end_input()
    assert len(t.warnings()) == 1


def test_progress_and_who_answered_count_only_the_events_before_the_warning():
    t = _tester({"op_id": "q", "condition": "quorum", "target": 2, "members": ["ana", "bo", "chen"]})
    t.add_events([{"key": "k", "ts": 100, "source": "bo"}, {"key": "k", "ts": 750, "source": "ana"}])
    t.step()
    t.advance_watermark(720)
    t.step()
    row = t.warnings(times="ms").iloc[0]
    answered = (row.op_id, row.progress, list(row.reported), list(row.missing))
    assert answered == ("q", 1.0, ["bo"], ["ana", "chen"])
    assert t.outcome("q")["status"] == c.COMPLETED


def test_operations_without_warn_ms_are_never_warned():
    t = _tester({"op_id": "a", "warn_ms": None})
    t.end_input()
    assert _warned(t) == []
    assert t.outcome("a")["status"] == c.EXPIRED


@pytest.mark.parametrize("warn_ms", [0, -1, 1001, "1.5", "soon"])
def test_warn_ms_outside_one_to_timeout_is_rejected(warn_ms):
    t = _tester({"op_id": "a", "warn_ms": warn_ms})
    assert t.rejected()["reason"].tolist() == [c.BAD_WARN_MS]
    assert t.pending == 0


def test_warn_ms_equal_to_timeout_warns_at_the_operations_own_time():
    t = _tester({"op_id": "a", "warn_ms": 1000})  # registered at watermark 0: due at once
    assert _warned(t) == [("a", 0, 0)]


def test_a_warning_survives_restarts_once():
    # every step saves the shards' state and loads it again: a warned operation is not warned twice
    t = _tester({"op_id": "a"})
    for wm in (700, 710, 800, 990):
        t.advance_watermark(wm)
        t.step()
    t.end_input()
    assert _warned(t) == [("a", 700, 1)]
