"""Withdrawn operations (issue 79): an event with ``cancel: true`` ends the operation it names,
or every operation pending on its key (Kafka's ``cancelForKey``), as ``cancelled`` at the
event's time; one outcome per operation still, and a cancel that withdraws nothing is an
unmatched event with a reason of its own.  The engine alone, then ``PurgatoryTester``."""

from __future__ import annotations

import pandas as pd

from spark_purgatory.testing import PurgatoryTester
from tests.support.engine_helpers import ev, op, outcomes, purgatory, step


def status(result, op_id: str) -> tuple:
    row = outcomes(result)[op_id]
    return row["status"], row["resolved_at"]


def reasons(result) -> list[tuple]:
    return sorted(zip(result.unmatched["ts"], result.unmatched["reason"], strict=True))


def test_a_cancel_with_an_op_id_withdraws_that_operation_at_its_time():
    p = purgatory()
    step(p, ops=[op("a", "k", 0), op("b", "k", 0)])
    r = step(p, events=[ev("k", 40, op_id="a", cancel=True)])
    assert list(outcomes(r)) == ["a"] and status(r, "a") == ("cancelled", 40)
    assert outcomes(r)["a"]["latency_ms"] == 40 and p.pending == 1


def test_a_cancel_without_an_op_id_withdraws_every_operation_pending_on_its_key():
    p = purgatory()
    step(p, ops=[op("a", "k", 0), op("b", "k", 10, condition="count", target=2), op("c", "other", 0)])
    r = step(p, events=[ev("k", 50, cancel=True)])
    assert {i: status(r, i) for i in outcomes(r)} == {"a": ("cancelled", 50), "b": ("cancelled", 50)}
    assert p.pending == 1  # c watches another key
    assert status(step(p, wm=5_000), "c") == ("expired", 1000)


def test_a_cancel_is_no_completion_event():
    """Before withdrawal, a ``cancel`` field was ignored and the event completed an ``any``."""
    p = purgatory()
    r = step(p, ops=[op("a", "k", 0)], events=[ev("k", 30, cancel=True)])
    assert status(r, "a") == ("cancelled", 30) and outcomes(r)["a"]["matched_events"] == 0


def test_a_multi_key_operation_is_cancelled_once_at_its_first_cancel():
    p = purgatory()
    step(p, ops=[op("m", ["k1", "k2"], 0)])
    r = step(p, events=[ev("k2", 70, cancel=True), ev("k1", 60, cancel=True)])
    assert len(r.outcomes) == 1 and status(r, "m") == ("cancelled", 60)
    r = step(p, wm=5_000)
    assert r.outcomes.empty and reasons(r) == [(70, "cancel_after_resolution")]


def test_a_condition_that_held_before_the_cancel_completes_and_the_cancel_is_unmatched():
    p = purgatory()
    step(p, ops=[op("a", "k", 0, condition="count", target=2)])
    r = step(p, events=[ev("k", 90, cancel=True), ev("k", 20), ev("k", 30), ev("k", 95)])
    assert status(r, "a") == ("completed", 30)
    assert reasons(step(p, wm=5_000)) == [(90, "cancel_after_resolution"), (95, "after_resolution")]


def test_a_cancelled_operation_reports_the_events_before_its_cancel():
    p = purgatory()
    quorum = {"condition": "quorum", "target": 2, "members": ["ana", "bo", "chen"]}
    step(p, ops=[op("q", "k", 0, **quorum)])
    r = step(p, events=[ev("k", 10, source="bo"), ev("k", 20, cancel=True), ev("k", 30, source="ana")])
    row = outcomes(r)["q"]
    assert (row["status"], row["resolved_at"], row["matched_events"], row["progress"]) == (
        "cancelled",
        20,
        1,
        1.0,
    )
    assert (list(row["reported"]), list(row["missing"])) == (["bo"], ["ana", "chen"])
    assert reasons(step(p, wm=5_000)) == [(30, "after_resolution")]


def test_a_cancel_after_the_deadline_withdraws_nothing_and_the_operation_expires():
    p = purgatory()
    step(p, ops=[op("a", "k", 0, timeout_ms=100)])
    r = step(p, events=[ev("k", 100, op_id="a", cancel=True)], wm=0)
    assert r.outcomes.empty
    r = step(p, wm=5_000)
    assert status(r, "a") == ("expired", 100)
    assert reasons(r) == [(100, "cancel_no_operation")]


def test_a_cancel_of_an_unknown_or_resolved_operation_is_unmatched_with_its_reason():
    p = purgatory()
    step(p, ops=[op("a", "k", 0)], events=[ev("k", 10)])  # a completes at 10
    r = step(p, events=[ev("k", 50, op_id="a", cancel=True), ev("k", 60, op_id="nope", cancel=True)])
    assert r.outcomes.empty
    assert reasons(step(p, wm=5_000)) == [(50, "cancel_after_resolution"), (60, "cancel_no_operation")]


def test_an_operation_arriving_after_its_cancel_is_withdrawn_by_it():
    """The cancel waits in the buffer as any event does: the split does not matter."""
    p = purgatory()
    step(p, events=[ev("k", 40, cancel=True)])
    r = step(p, ops=[op("a", "k", 0), op("b", "k", 45)])
    assert list(outcomes(r)) == ["a"] and status(r, "a") == ("cancelled", 40)


def test_a_cancel_that_is_no_boolean_is_rejected():
    p = purgatory()
    r = step(p, events=[ev("k", 10, cancel="true"), ev("k", 20, cancel=1)])
    assert r.rejected["reason"].tolist() == ["bad_cancel", "bad_cancel"]


# -- through PurgatoryTester (the "Done when") ----------------------------------------------


def test_the_tester_cancels_by_op_id_and_by_key_and_a_late_cancel_is_unmatched():
    t = PurgatoryTester({"purgatory.tick.ms": 10})
    t.add_operations(
        [
            {"op_id": "order-1", "key": "shop", "ts": 0, "timeout_ms": 1_000},
            {"op_id": "order-2", "key": "shop", "ts": 0, "timeout_ms": 1_000},
            {"op_id": "req-9", "keys": ["k0", "k1"], "ts": 0, "timeout_ms": 1_000},  # across shards
            {"op_id": "late", "key": "desk", "ts": 0, "timeout_ms": 100},
        ]
    )
    t.add_events(
        [
            {"key": "shop", "ts": 200, "op_id": "order-1", "cancel": True},
            {"key": "k1", "ts": 300, "cancel": True},
            {"key": "desk", "ts": 150, "op_id": "late", "cancel": True},
        ]
    )
    t.step()
    t.add_events([{"key": "shop", "ts": 400, "cancel": True}])
    t.end_input()
    at = {r["op_id"]: (r["status"], r["resolved_at"]) for r in t.outcomes(times="ms").to_dict("records")}
    assert at == {
        "order-1": ("cancelled", 200),
        "order-2": ("cancelled", 400),
        "req-9": ("cancelled", 300),
        "late": ("expired", 100),
    }
    unmatched = t.unmatched(times="ms")[["ts", "op_id", "reason"]].values.tolist()
    assert unmatched == [[150, "late", "cancel_no_operation"]]
    assert t.outcome("order-1")["resolved_at"] == pd.Timestamp(200, unit="ms", tz="UTC")
