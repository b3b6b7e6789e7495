"""The per-shard purgatory engine against SPEC.md, one rule per test, without Spark.

The Kafka scenarios are ported from apache/kafka ``DelayedOperationTest``.
"""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pandas as pd
import pytest

from spark_purgatory.contract import OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from spark_purgatory.engine import arrays, dedup, delayed, pending, watchers
from tests.support.engine_helpers import check_split_invariance, ev, op, outcomes, purgatory, step

# -- Kafka's DelayedOperationTest --------------------------------------------------------------


def test_request_satisfaction():
    p = purgatory()
    assert len(step(p, events=[ev("test1", 10)]).outcomes) == 0  # nothing waiting
    assert len(step(p, ops=[op("r1", "test1", 20)]).outcomes) == 0
    assert len(step(p, ops=[op("r2", "test2", 20)], events=[ev("test2", 5)]).outcomes) == 0
    r = step(p, events=[ev("test1", 30)])
    assert list(outcomes(r)) == ["r1"]
    assert len(step(p, events=[ev("test1", 31)]).outcomes) == 0
    assert list(outcomes(step(p, events=[ev("test2", 40)]))) == ["r2"]


def test_request_expiry_never_early():
    p = purgatory()
    step(p, ops=[op("r1", "test1", 0, timeout_ms=20), op("r2", "test2", 0, timeout_ms=200_000)])
    assert len(step(p, wm=19).outcomes) == 0  # one ms before the deadline: still waiting
    r = outcomes(step(p, wm=20))
    assert list(r) == ["r1"]
    assert r["r1"]["status"] == "expired" and r["r1"]["resolved_at"] == 20
    assert p.pending == 1


def test_request_purge_with_multi_key_operations():
    p = purgatory()
    step(
        p,
        ops=[
            op("r1", ["test1"], 0),
            op("r2", ["test1", "test2"], 0),
            op("r3", ["test1", "test2", "test3"], 0, condition="count", target=2),
        ],
    )
    assert p.pending == 3
    assert p.watched == 6
    step(p, events=[ev("test2", 5, op_id="r2")])  # completes r2 only
    assert p.pending == 2 and p.watched == 4  # purged at once, not at the next check
    step(p, events=[ev("test3", 6, op_id="r3"), ev("test2", 7, op_id="r3")])
    assert p.pending == 1 and p.watched == 1


def test_cancel_for_key_withdraws_the_operations_watching_the_key():
    """Kafka's ``cancelForKey`` is an input event here: ``cancel: true`` on the key
    (``test_cancels``); each withdrawn operation has its outcome, ``cancelled``."""
    p = purgatory()
    step(p, ops=[op("a", "test1", 0), op("b", "test1", 0), op("c", "test2", 0)])
    r = step(p, events=[ev("test1", 5, cancel=True)])
    assert sorted(outcomes(r)) == ["a", "b"] and set(r.outcomes["status"]) == {"cancelled"}
    assert p.pending == 1 and p.watched == 1
    assert list(outcomes(step(p, wm=5000))) == ["c"]  # only c expires; a and b are resolved


# -- SPEC: conditions ---------------------------------------------------------------------------


def test_any_completes_on_first_matching_event_at_its_event_time():
    p = purgatory()
    r = outcomes(step(p, ops=[op("o", "k", 100)], events=[ev("k", 250), ev("k", 180)]))
    assert r["o"]["status"] == "completed"
    assert r["o"]["resolved_at"] == 180 and r["o"]["latency_ms"] == 80
    assert r["o"]["matched_events"] == 1


def test_event_before_operation_ts_does_not_match():
    p = purgatory()
    r = step(p, ops=[op("o", "k", 100)], events=[ev("k", 99)])
    assert len(r.outcomes) == 0


def test_event_at_deadline_does_not_match():
    p = purgatory()
    assert len(step(p, ops=[op("o", "k", 0, timeout_ms=100)], events=[ev("k", 100)]).outcomes) == 0


def test_count_counts_distinct_sources_once():
    p = purgatory()
    step(p, ops=[op("produce", "t-0", 0, condition="count", target=3)])
    r = step(p, events=[ev("t-0", 10, source="b1"), ev("t-0", 11, source="b1"), ev("t-0", 12, source="b2")])
    assert len(r.outcomes) == 0  # b1 twice counts once: 2 of 3
    r = outcomes(step(p, events=[ev("t-0", 20, source="b3")]))
    assert r["produce"]["resolved_at"] == 20 and r["produce"]["progress"] == 3


def test_count_without_sources_counts_events():
    p = purgatory()
    r = outcomes(step(p, ops=[op("o", "k", 0, condition="count", target=2)], events=[ev("k", 5), ev("k", 7)]))
    assert r["o"]["resolved_at"] == 7 and r["o"]["matched_events"] == 2


def test_sum_completes_when_values_reach_target():
    p = purgatory()
    step(p, ops=[op("fetch", "p-1", 0, condition="sum", target=1000)])
    assert len(step(p, events=[ev("p-1", 3, value=400.0), ev("p-1", 4, value=500.0)]).outcomes) == 0
    r = outcomes(step(p, events=[ev("p-1", 9, value=100.0)]))
    assert r["fetch"]["resolved_at"] == 9 and r["fetch"]["progress"] == 1000


def test_sum_of_decimal_fractions_is_not_defeated_by_rounding():
    p = purgatory()
    r = step(
        p,
        ops=[op("o", "k", 0, condition="sum", target=0.3)],
        events=[ev("k", 1, value=0.1), ev("k", 2, value=0.2)],
    )
    assert outcomes(r)["o"]["resolved_at"] == 2


def test_all_completes_when_every_member_reported():
    p = purgatory()
    step(p, ops=[op("join", "group-1", 0, condition="all", members=["m1", "m2", "m3"])])
    r = step(
        p,
        events=[
            ev("group-1", 5, source="m1"),
            ev("group-1", 6, source="stranger"),
            ev("group-1", 7, source="m1"),
        ],
    )
    assert len(r.outcomes) == 0
    r = step(p, events=[ev("group-1", 9, source="m3"), ev("group-1", 8, source="m2")])
    assert outcomes(r)["join"]["resolved_at"] == 9
    assert outcomes(r)["join"]["progress"] == 3


def test_quorum_completes_at_its_kth_distinct_member_and_never_on_another_source():
    """2 of m1, m2, m3 over two keys (their union): m1 twice is one, a stranger never counts,
    an event targeted at another operation is not this one's; the second member completes it."""
    p = purgatory()
    quorum = op("approve", ["exp-1", "exp-1b"], 0, condition="quorum", target=2, members=["m1", "m2", "m3"])
    step(p, ops=[quorum, op("other", "exp-1", 0)])
    r = step(
        p,
        events=[
            ev("exp-1", 5, source="m1"),
            ev("exp-1b", 6, source="m1"),
            ev("exp-1", 7, source="stranger"),
            ev("exp-1", 8, source="m3", op_id="other"),
        ],
    )
    assert "approve" not in outcomes(r)
    r = step(p, events=[ev("exp-1b", 9, source="m3")])
    done = outcomes(r)["approve"]
    assert (done["resolved_at"], done["progress"], done["matched_events"], done["condition"]) == (
        9, 2.0, 4, "quorum")  # fmt: skip


def test_offset_completes_on_arrival_when_progress_already_reached():
    p = purgatory()
    step(p, events=[ev("tp-0", 50, value=120.0)], wm=0)
    step(p, wm=60)  # the event is finalised into the key's progress
    r = outcomes(step(p, ops=[op("hw", "tp-0", 100, condition="offset", target=100)], wm=60))
    assert r["hw"]["status"] == "completed"
    assert r["hw"]["resolved_at"] == 100  # true as soon as the operation exists
    assert r["hw"]["progress"] == 120


def test_offset_uses_buffered_events_before_operation_ts():
    p = purgatory()
    step(p, events=[ev("tp-0", 50, value=80.0)])
    r = step(p, ops=[op("hw", "tp-0", 60, condition="offset", target=100)])
    assert len(r.outcomes) == 0
    r = outcomes(step(p, events=[ev("tp-0", 70, value=101.0)]))
    assert r["hw"]["resolved_at"] == 70 and r["hw"]["progress"] == 101


def test_offset_ignores_events_at_or_after_deadline():
    p = purgatory()
    step(p, ops=[op("hw", "tp-0", 0, timeout_ms=100, condition="offset", target=10)])
    assert len(step(p, events=[ev("tp-0", 100, value=50.0)]).outcomes) == 0
    r = outcomes(step(p, wm=100))
    assert r["hw"]["status"] == "expired"


def test_offset_multi_key_needs_every_key():
    p = purgatory()
    step(p, ops=[op("hw", ["tp-0", "tp-1"], 0, condition="offset", target=10)])
    assert len(step(p, events=[ev("tp-0", 5, value=12.0)]).outcomes) == 0
    r = outcomes(step(p, events=[ev("tp-1", 9, value=10.0)]))
    assert r["hw"]["resolved_at"] == 9 and r["hw"]["progress"] == 10


def test_offset_progress_is_forgotten_after_retention():
    p = purgatory(progress_retention_ms=1000)
    step(p, events=[ev("tp-0", 0, value=500.0)])
    step(p, wm=5000)  # watermark passes last event + retention
    assert p.retained_keys == 0
    r = step(p, ops=[op("hw", "tp-0", 5000, condition="offset", target=100)], wm=5000)
    assert len(r.outcomes) == 0


def test_multi_key_count_uses_union_of_keys():
    p = purgatory()
    step(p, ops=[op("o", ["a", "b"], 0, condition="count", target=2)])
    r = outcomes(step(p, events=[ev("a", 3), ev("b", 4), ev("c", 5)]))
    assert r["o"]["resolved_at"] == 4 and sorted(r["o"]["keys"]) == ["a", "b"]


def test_targeted_event_counts_only_for_its_operation():
    p = purgatory()
    step(p, ops=[op("x", "k", 0), op("y", "k", 0)])
    r = outcomes(step(p, events=[ev("k", 5, op_id="y")]))
    assert list(r) == ["y"]


def test_count_target_zero_completes_on_arrival():
    p = purgatory()
    r = outcomes(step(p, ops=[op("o", "k", 7, condition="count", target=0)]))
    assert r["o"]["status"] == "completed" and r["o"]["resolved_at"] == 7


# -- SPEC: ordering and timing -----------------------------------------------------------------


def test_events_before_their_operation_are_buffered_and_match():
    p = purgatory()
    step(p, events=[ev("k", 500)], wm=0)
    r = outcomes(step(p, ops=[op("o", "k", 400)], wm=0))
    assert r["o"]["resolved_at"] == 500


def test_out_of_order_events_within_a_batch_resolve_at_the_earliest_satisfying_time():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, condition="count", target=2)])
    r = outcomes(step(p, events=[ev("k", 90), ev("k", 30), ev("k", 60)]))
    assert r["o"]["resolved_at"] == 60 and r["o"]["matched_events"] == 2


def test_out_of_order_across_batches_uses_all_matches_seen():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, condition="count", target=2)], events=[ev("k", 100)])
    r = outcomes(step(p, events=[ev("k", 40)]))
    assert r["o"]["resolved_at"] == 100  # both events are needed: the later one sets the time


def test_completion_is_emitted_without_waiting_for_the_watermark():
    p = purgatory()
    r = step(p, ops=[op("o", "k", 1000, timeout_ms=10_000)], events=[ev("k", 1500)], wm=0)
    assert r.completed == 1


def test_expiry_no_later_than_one_tick_after_deadline():
    p = purgatory(tick_ms=1000)
    step(p, ops=[op("o", "k", 0, timeout_ms=2500)])
    assert len(step(p, wm=2499).outcomes) == 0
    assert step(p, wm=2500 + 999).expired == 1


def test_expired_outcome_reports_partial_progress():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, timeout_ms=100, condition="sum", target=10)], events=[ev("k", 5, value=4.0)])
    r = outcomes(step(p, wm=100))
    assert r["o"]["status"] == "expired" and r["o"]["progress"] == 4 and r["o"]["matched_events"] == 1


def test_operation_with_deadline_already_behind_watermark_expires_after_matching_events():
    p = purgatory()
    step(p, wm=1000)
    r = outcomes(step(p, ops=[op("o", "k", 1000, timeout_ms=0)], wm=1000))
    assert r["o"]["status"] == "expired"


# -- SPEC: exactly once, duplicates, nothing lost ----------------------------------------------


def test_duplicate_op_id_within_batch_pending_and_resolved_is_rejected():
    p = purgatory()
    r = step(p, ops=[op("o", "k", 0), op("o", "k", 1)])
    assert r.rejected["reason"].tolist() == ["duplicate_op_id"]
    assert step(p, ops=[op("o", "k", 2)]).rejected["reason"].tolist() == ["duplicate_op_id"]
    step(p, events=[ev("k", 5)])  # resolves o
    assert step(p, ops=[op("o", "k", 9)]).rejected["reason"].tolist() == ["duplicate_op_id"]


@pytest.mark.parametrize(("wm", "reasons"), [(630_999, ["duplicate_op_id"]), (631_000, [])])
def test_resend_is_judged_at_its_own_batch_watermark_at_the_retention_boundary(wm, reasons):
    """docs/contract.md: a repeated op_id is rejected for the retention after the later of its
    deadline (31 s) and the watermark at its resolution (0): until 31 s + 10 min, however
    far the micro-batch of the re-send moved the watermark at once."""
    p = purgatory(dedup_retention_ms=600_000)
    assert step(p, ops=[op("o", "k", 0, timeout_ms=31_000)], events=[ev("k", 5)]).completed == 1
    r = step(p, ops=[op("o", "k", 1_200_000)], wm=wm)
    assert r.rejected["reason"].tolist() == reasons
    assert p.pending == (0 if reasons else 1)


def test_resend_after_a_batch_one_millisecond_before_the_retention_end_is_accepted():
    p = purgatory(dedup_retention_ms=600_000)
    step(p, ops=[op("o", "k", 0, timeout_ms=31_000)], events=[ev("k", 5)])
    assert step(p, ops=[op("o", "k", 1_200_000)], wm=630_999).rejected["reason"].tolist() == [
        "duplicate_op_id"
    ]
    assert len(step(p, ops=[op("o", "k", 1_200_000)], wm=631_000).rejected) == 0


def _collision_run() -> tuple[list, list]:
    p = purgatory()
    conditions = [
        {"condition": "any"},
        {"condition": "count", "target": 2},
        {"condition": "sum", "target": 5},
    ]
    ops = [
        op(
            f"o{i}",
            f"k{i % 5}" if i % 4 else [f"k{i % 5}", f"j{i % 3}"],
            i,
            timeout_ms=400,
            **conditions[i % 3],
        )
        for i in range(40)
    ]
    rejected = step(p, ops=[*ops, op("o3", "k9", 50)], wm=0).rejected["reason"].tolist()
    # o5 is pending: a duplicate; "fresh" is not, however many pending op_ids share its hash
    rejected += step(p, ops=[op("o5", "k9", 51), op("fresh", "k9", 51)], wm=0).rejected["reason"].tolist()
    events = [
        ev(f"k{t % 5}" if t % 3 else f"j{t % 3}", 45 + t * 7, source=f"s{t % 2}", value=2.0)
        for t in range(30)
    ]
    events += [ev("k2", 60, op_id="o7"), ev("k2", 61, op_id="o12"), ev("k3", 62, op_id="o9")]
    done = []
    for wm, part in ((100, events[:15]), (200, events[15:]), (2000, [])):
        out = step(p, events=part, wm=wm).outcomes
        done += out[["op_id", "status", "resolved_at", "matched_events"]].values.tolist()
    return sorted(done), rejected


def _engine_modules() -> list:
    package = importlib.import_module("spark_purgatory.engine")
    names = [m.name for m in pkgutil.iter_modules(package.__path__)]
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


def test_a_hash_collision_never_makes_a_wrong_match(monkeypatch):
    """Keys and op_ids are found by 64-bit hash and confirmed on the strings: with a hash
    function that gives every string the same hash, the outcomes and duplicates are the same."""
    honest = _collision_run()
    assert {status for _, status, _, _ in honest[0]} == {"completed", "expired"}
    assert honest[1] == ["duplicate_op_id", "duplicate_op_id"]

    def degenerate(values):
        return np.zeros(len(values), dtype=np.uint64)

    hashing = [m for m in _engine_modules() if hasattr(m, "hash_strings")]
    assert {arrays, pending, watchers, dedup, delayed} <= set(hashing)
    for module in hashing:  # every module of the engine that hashes strings
        monkeypatch.setattr(module, "hash_strings", degenerate)
    assert _collision_run() == honest


def test_each_operation_gets_exactly_one_outcome():
    p = purgatory()
    step(p, ops=[op(f"o{i}", f"k{i % 3}", i, timeout_ms=50) for i in range(30)])
    seen: list[str] = []
    for t in range(0, 200, 7):
        r = step(p, events=[ev(f"k{t % 3}", t)], wm=t)
        seen += r.outcomes["op_id"].tolist()
    assert sorted(seen) == sorted(f"o{i}" for i in range(30))


def test_late_operations_and_events_are_rejected():
    p = purgatory()
    step(p, wm=1000)
    r = step(p, ops=[op("o", "k", 999)], events=[ev("k", 10)], wm=1000)
    assert sorted(zip(r.rejected["source"], r.rejected["reason"], strict=True)) == [
        ("events", "late"),
        ("operations", "late"),
    ]


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"keys": ["k"], "ts": 0, "timeout_ms": 10}, "missing_op_id"),
        ({"op_id": "o", "ts": 0, "timeout_ms": 10}, "missing_key"),
        ({"op_id": "o", "keys": ["k"], "timeout_ms": 10}, "missing_ts"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": -1}, "negative_timeout"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 10**12}, "timeout_above_max"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 1, "condition": "most"}, "unknown_condition"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 1, "condition": "sum"}, "missing_target"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 1, "condition": "all"}, "missing_members"),
        ({"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 1, "target": 2}, "unused_target"),
        (
            {
                "op_id": "o",
                "keys": ["k"],
                "ts": 0,
                "timeout_ms": 1,
                "condition": "count",
                "target": 2,
                "members": ["a"],
            },
            "unused_members",
        ),
        (
            {
                "op_id": "o",
                "keys": ["k"],
                "ts": 0,
                "timeout_ms": 1,
                "condition": "quorum",
                "target": 2,
                "members": ["a"],
            },
            "target_above_members",
        ),
    ],
)
def test_invalid_operations_are_rejected_with_a_reason(row, reason):
    r = step(purgatory(), ops=[row])
    assert r.rejected["reason"].tolist() == [reason]
    assert r.rejected["source"].tolist() == ["operations"]
    assert r.rejected["raw"].iloc[0]  # the record is kept, not lost


def test_a_rejected_record_without_raw_text_is_rendered_as_valid_json_of_its_fields():
    rows = [
        {"op_id": "o", "keys": ["k"], "ts": 0, "timeout_ms": 10, "condition": "sum", "target": float("nan")}
    ]
    r = purgatory().process(pd.DataFrame(rows), None, watermark_ms=0)
    assert r.rejected["reason"].tolist() == ["missing_target"]
    # a field without a value (NaN, None) is left out, as Spark's to_json leaves it out
    assert r.rejected["raw"].iloc[0] == '{"op_id":"o","keys":["k"],"ts":0,"timeout_ms":10,"condition":"sum"}'


def test_invalid_events_are_rejected_and_raw_text_is_kept():
    rows = [{"key": None, "ts": 5, "raw": '{"ts": 5}'}, {"key": "k", "ts": None, "raw": '{"key": "k"}'}]
    r = step(purgatory(), events=rows)
    assert r.rejected["reason"].tolist() == ["missing_key", "missing_ts"]
    assert r.rejected["raw"].tolist() == ['{"ts": 5}', '{"key": "k"}']


def test_unmatched_events_are_reported_once_the_watermark_passes():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, timeout_ms=100)])
    assert len(step(p, events=[ev("nobody", 10), ev("k", 20), ev("k", 30)]).unmatched) == 0  # not yet
    r = step(p, wm=50)
    assert sorted(zip(r.unmatched["key"], r.unmatched["ts"], r.unmatched["reason"], strict=True)) == [
        ("k", 30, "after_resolution"),
        ("nobody", 10, "no_operation"),
    ]
    assert p.buffered_events == 0


def test_events_matched_by_an_expired_operation_are_not_unmatched():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, timeout_ms=100, condition="count", target=5)], events=[ev("k", 10)])
    r = step(p, wm=200)
    assert r.expired == 1 and len(r.unmatched) == 0


def test_completed_operations_leave_no_residue():
    p = purgatory()
    step(
        p,
        ops=[op(f"o{i}", f"k{i}", 0, condition="count", target=2) for i in range(100)],
        events=[ev(f"k{i}", 5) for i in range(100)],
    )
    assert p.pending == 100 and len(p._t.matches) == 100
    step(p, events=[ev(f"k{i}", 6) for i in range(100)])
    assert p.pending == 0 and p.watched == 0 and len(p._t.matches) == 0 and p._t.wheel.size() == 0


def test_output_columns_follow_the_spec():
    p = purgatory()
    r = step(p, ops=[op("o", "k", 0, payload="hello"), {"op_id": "bad"}], events=[ev("x", 0)], batch_id=7)
    r2 = step(p, events=[ev("k", 1)], wm=0, batch_id=8)
    r3 = step(p, wm=5, batch_id=9)
    assert r2.outcomes.columns.tolist() == OUTCOME_COLUMNS
    assert r3.unmatched.columns.tolist() == UNMATCHED_COLUMNS
    assert r3.unmatched[["key", "reason", "batch_id"]].values.tolist() == [["x", "no_operation", 9]]
    assert r.rejected.columns.tolist() == REJECTED_COLUMNS
    row = r2.outcomes.iloc[0]
    assert (row["payload"], row["condition"], row["batch_id"]) == ("hello", "any", 8)


def test_next_expiration_covers_deadlines_and_buffered_events():
    p = purgatory()
    step(p, ops=[op("o", "k", 0, timeout_ms=300)], events=[ev("z", 120)])
    assert p.next_expiration() == 121
    step(p, wm=121)
    assert p.next_expiration() == 300


# -- batch-split invariance against a brute-force reference (engine_helpers.reference) ------------


def test_outcomes_do_not_depend_on_how_input_is_split_into_batches():
    check_split_invariance()


def test_frame_inputs_accept_single_key_column():
    p = purgatory()
    ops = pd.DataFrame({"op_id": ["o"], "key": ["k"], "ts": [0], "timeout_ms": [10]})
    r = p.process(ops, pd.DataFrame({"key": ["k"], "ts": [1]}), watermark_ms=0)
    assert r.completed == 1


# -- the Spark host's copies: stubs (primary shards) and replicas (cross-shard shard) -------------


def validated_op(op_id: str, keys: list[str], ts: int, deadline: int, stub: bool = False) -> dict:
    return {
        "op_id": op_id,
        "keys": keys,
        "ts": ts,
        "deadline": deadline,
        "cond": 0,
        "target": float("nan"),
        "members": None,
        "payload": None,
        "stub": stub,
    }


def validated_ev(key: str, ts: int, replica: bool = False, op_id: str | None = None) -> dict:
    return {"key": key, "ts": ts, "op_id": op_id, "source": None, "value": float("nan"), "replica": replica}


def test_stub_marks_events_matched_but_never_emits():
    p = purgatory()
    r = p.process(
        pd.DataFrame([validated_op("x", ["k"], 0, 100, stub=True)]),
        pd.DataFrame([validated_ev("k", 10), validated_ev("k", 200)]),
        watermark_ms=0,
        validated=True,
    )
    assert len(r.outcomes) == 0 and (p.pending, p.stubs) == (0, 1)
    r = p.process(None, None, watermark_ms=300, validated=True)
    assert len(r.outcomes) == 0  # the stub expires silently
    assert r.unmatched["ts"].tolist() == [200]  # only the event outside the stub's window
    assert p.pending == 0 and p.is_empty()


def test_pending_counts_each_operation_once_and_stubs_under_their_own_name():
    """A shard holding an operation of its own and the stubs of two cross-shard operations
    (one of them already completed in the cross-shard group: its stub stays until its
    deadline) has one operation pending; the stubs are counted as ``stubs``."""
    p = purgatory()
    p.process(
        pd.DataFrame(
            [
                validated_op("own", ["k"], 0, 100),
                validated_op("x", ["k"], 0, 500, stub=True),
                validated_op("y", ["j"], 0, 500, stub=True),
            ]
        ),
        pd.DataFrame([validated_ev("j", 10)]),
        watermark_ms=0,
        validated=True,
    )
    assert (p.pending, p.stubs, p.watched) == (1, 2, 3)
    p.process(None, None, watermark_ms=100, validated=True)  # "own" expires
    assert (p.pending, p.stubs) == (0, 2)
    p.process(None, None, watermark_ms=500, validated=True)
    assert (p.pending, p.stubs) == (0, 0)


def test_late_or_duplicate_stubs_and_replicas_are_dropped_silently():
    p = purgatory()
    p.process(None, None, watermark_ms=1000, validated=True)
    r = p.process(
        pd.DataFrame([validated_op("x", ["k"], 10, 2000, stub=True)]),
        pd.DataFrame([validated_ev("k", 10, replica=True)]),
        watermark_ms=1000,
        validated=True,
    )
    assert len(r.rejected) == 0
    p.process(
        pd.DataFrame([validated_op("y", ["k"], 1000, 2000, stub=True)]),
        None,
        watermark_ms=1000,
        validated=True,
    )
    r = p.process(
        pd.DataFrame([validated_op("y", ["k"], 1000, 2000, stub=True)]),
        None,
        watermark_ms=1000,
        validated=True,
    )
    assert len(r.rejected) == 0 and p.stubs == 1


def test_replica_events_count_but_are_never_reported_unmatched():
    p = purgatory()
    r = p.process(
        pd.DataFrame([validated_op("x", ["a", "b"], 0, 100)]),
        pd.DataFrame([validated_ev("b", 20, replica=True), validated_ev("zz", 5, replica=True)]),
        watermark_ms=0,
        validated=True,
    )
    assert outcomes(r)["x"]["resolved_at"] == 20
    assert len(p.process(None, None, watermark_ms=50, validated=True).unmatched) == 0


def _twelve(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:011d}" for i in range(n)]


def test_a_pending_operation_with_one_key_is_held_in_under_105_bytes():
    """Strings are held as UTF-8 bytes and offsets, not Python objects, hashes in their
    indexes only, and a target or a progress at watch only where there is one: 20k ``any``
    operations with 12-character op_ids and keys (Kafka's backlog shape) cost their columns,
    indexes and timer entries, 104 bytes each (600 with a Python string per value)."""
    p = purgatory()
    ops = pd.DataFrame(
        {"op_id": _twelve("o", 20_000), "key": _twelve("k", 20_000), "ts": 0, "timeout_ms": 3_600_000}
    )
    p.process(ops, None, watermark_ms=0)
    wheel = sum(r.nbytes for level in p._t.wheel._levels for r in level.runs)
    assert p.pending == 20_000
    assert (p._t.pending.nbytes + wheel) / p.pending < 105
    # and nothing of them is a Python string: what a call reads is made for it
    back = p.pending_operations().set_index("op_id").loc[["o00000000007", "o00000000019"]]
    assert back["keys"].map(list).tolist() == [["k00000000007"], ["k00000000019"]]


def test_operations_completed_in_the_call_that_registers_them_never_enter_the_columns():
    """Kafka's tryCompleteElseWatch: an operation whose events came with it completes before
    it is watched.  Its rows are read from what the call was given and never appended to the
    pending columns (nor tombstoned there); the operations left pending are, whole, and an
    older operation completed in the same call reports its keys as the new ones do."""
    p = purgatory()
    step(p, [op("old", ["k0", "k9"], 0, 500)])
    events = [ev("ka", 10), ev("k0", 11), ev("kb", 12, source="s")]
    new = [op("a", "ka", 5, 500), op("b", ["kb", "kx"], 5, 500, payload="p"), op("c", ["kc", "kd"], 5, 500)]
    done = outcomes(step(p, new, events))
    assert {k: (v["status"], list(v["keys"])) for k, v in done.items()} == {
        "old": ("completed", ["k0", "k9"]),
        "a": ("completed", ["ka"]),
        "b": ("completed", ["kb", "kx"]),
    }
    assert done["b"]["payload"] == "p" and done["a"]["resolved_at"] == 10
    columns = p._t.pending._ops  # "old" appended then resolved, "c" appended: a and b never
    assert columns.occupied == 2 and len(columns) == 1
    assert p.pending == 1 and p.watched == 2
    left = p.pending_operations()
    assert left["op_id"].tolist() == ["c"] and list(left["keys"][0]) == ["kc", "kd"]
    assert outcomes(step(p, [], [ev("kd", 20)]))["c"]["resolved_at"] == 20


def test_latest_deadline_is_that_of_the_latest_pending_operation():
    p = purgatory()
    assert p.latest_deadline() is None
    step(p, [op("a", ["k"], 0, 100), op("b", ["k2"], 0, 300), op("c", ["k3"], 10, 50)], [], 0)
    assert p.latest_deadline() == 300
    step(p, [], [ev("k2", 20)], 0)  # b completes
    assert p.latest_deadline() == 100
    step(p, [], [], 1_000)  # the rest expire
    assert p.latest_deadline() is None


def test_the_hosts_key_hints_change_no_outcome():
    """Validated operations with the Spark host's hints (``batch.KEY_HINTS``: each one's only
    key, its member count) give the same rows, call after call, as without them: late and
    duplicate rows, completions in the call and later, expiries, a member condition."""
    ops = [
        validated_op("a", ["k1"], 0, 100),
        validated_op("b", ["k2"], 5, 300),
        {**validated_op("c", ["k3"], 5, 300), "cond": 3, "members": ["m1", "m2"]},  # all
        validated_op("a", ["k1"], 6, 100),  # a duplicate op_id
        validated_op("late", ["k1"], -50, 100),
    ]
    later = [validated_op("d", ["k2"], 40, 400), validated_op("e", ["k4"], 45, 90)]
    evs = [validated_ev("k1", 20), {**validated_ev("k3", 30), "source": "m1"}]
    later_evs = [validated_ev("k2", 50), {**validated_ev("k3", 60), "source": "m2"}, validated_ev("k4", 95)]

    def hinted(rows: list[dict]) -> pd.DataFrame:
        frame = pd.DataFrame(rows)
        n_members = [0 if m is None else len(m) for m in frame["members"]]
        return frame.assign(one_key=[k[0] for k in frame["keys"]], n_members=n_members)

    def run(hints: bool) -> list:
        p, got = purgatory(), []
        frame = hinted if hints else pd.DataFrame
        for o, e, wm in ((ops, evs, 0), (later, later_evs, 10), ([], [], 500)):
            r = p.process(
                frame(o) if o else None, pd.DataFrame(e) if e else None, watermark_ms=wm, validated=True
            )
            got.append([f.astype(str).values.tolist() for f in (r.outcomes, r.unmatched, r.rejected)])
        return got

    plain, with_hints = run(False), run(True)
    assert with_hints == plain
    outcomes = [row for call in plain for row in call[0]]
    assert {(row[0], row[2]) for row in outcomes} == {
        ("a", "completed"),
        ("b", "completed"),
        ("c", "completed"),
        ("d", "completed"),
        ("e", "expired"),  # its event came after its deadline: unmatched
    }
    assert [row[0] for call in plain for row in call[1]] == ["k4"]
    assert [row[2] for call in plain for row in call[2]] == ["late", "duplicate_op_id"]
