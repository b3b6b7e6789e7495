"""Who answered, through ``PurgatoryTester``: an ``all`` or ``quorum`` outcome names the members
who reported and those who did not, a ``count`` the distinct sources it counted (issue 79)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa

from spark_purgatory import Purgatory, PurgatoryConfig
from spark_purgatory.contract import OPERATOR_OUTPUT
from spark_purgatory.delta.staging import split_tables
from spark_purgatory.shard.output import output_parts, output_rows
from spark_purgatory.spark.key_hash import shards_of
from spark_purgatory.testing import PurgatoryTester, assert_outcomes

QUORUM = {"condition": "quorum", "target": 2, "members": ["ana", "bo", "chen"]}


def harness(**config: object) -> PurgatoryTester:
    return PurgatoryTester({"purgatory.tick.ms": 10, **config})


def answered(t: PurgatoryTester, op_id: str) -> tuple:
    outcome = t.outcome(op_id)
    return outcome["status"], outcome["reported"], outcome["missing"]


def test_an_expired_quorum_names_who_reported_and_who_did_not():
    t = harness()
    t.add_operations([{"op_id": "req-1", "key": "req-1", "ts": 0, "timeout_ms": 1_000, **QUORUM}])
    t.add_events([{"key": "req-1", "ts": 100, "source": "bo"}, {"key": "req-1", "ts": 200, "source": "zed"}])
    t.end_input()
    assert answered(t, "req-1") == ("expired", ["bo"], ["ana", "chen"])


def test_a_completed_quorum_names_who_completed_it_not_who_reported_after():
    t = harness()
    t.add_operations([{"op_id": "req-1", "key": "req-1", "ts": 0, "timeout_ms": 1_000, **QUORUM}])
    t.add_events(
        [
            {"key": "req-1", "ts": 100, "source": "chen"},
            {"key": "req-1", "ts": 150, "source": "zed"},
            {"key": "req-1", "ts": 200, "source": "ana"},
            {"key": "req-1", "ts": 300, "source": "bo"},  # after the crossing: not counted
        ]
    )
    t.step()
    t.end_input()
    assert answered(t, "req-1") == ("completed", ["ana", "chen"], ["bo"])
    assert t.outcome("req-1")["matched_events"] == 3


def test_an_expired_all_names_the_member_missing():
    t = harness()
    t.add_operations(
        [
            {
                "op_id": "join-1",
                "key": "g",
                "ts": 0,
                "timeout_ms": 500,
                "condition": "all",
                "members": ["x", "y"],
            }
        ]
    )
    t.add_events([{"key": "g", "ts": 10, "source": "x"}, {"key": "g", "ts": 20, "source": "x"}])
    t.end_input()
    assert answered(t, "join-1") == ("expired", ["x"], ["y"])


def test_members_are_named_in_the_order_the_operation_keeps_them():
    """Validation keeps an operation's members distinct and sorted: the lists follow that order,
    not the order of the reports."""
    t = harness()
    members = ["chen", "ana", "bo", "ana"]
    t.add_operations([{"op_id": "q", "key": "k", "ts": 0, "timeout_ms": 500, **QUORUM, "members": members}])
    t.add_events([{"key": "k", "ts": 10, "source": "chen"}, {"key": "k", "ts": 20, "source": "ana"}])
    t.end_input()
    assert answered(t, "q") == ("completed", ["ana", "chen"], ["bo"])


def test_a_count_names_its_distinct_sources_first_seen_first_and_no_one_missing():
    t = harness()
    t.add_operations(
        [{"op_id": "c", "key": "k", "ts": 0, "timeout_ms": 500, "condition": "count", "target": 10}]
    )
    t.add_events(
        [
            {"key": "k", "ts": 30, "source": "b1"},
            {"key": "k", "ts": 10, "source": "b2"},  # earlier in event time: first
            {"key": "k", "ts": 20},  # no source: counts, names nobody
            {"key": "k", "ts": 40, "source": "b2"},
        ]
    )
    t.end_input()
    assert answered(t, "c") == ("expired", ["b2", "b1"], None)


def test_a_count_names_at_most_input_max_members_sources():
    t = harness(**{"input.max.members": 2})
    t.add_operations(
        [{"op_id": "c", "key": "k", "ts": 0, "timeout_ms": 500, "condition": "count", "target": 3}]
    )
    t.add_events([{"key": "k", "ts": 10 * i, "source": f"b{i}"} for i in range(1, 5)])
    t.end_input()
    assert answered(t, "c") == ("completed", ["b1", "b2"], None)
    assert t.outcome("c")["progress"] == 3.0  # the count itself is not bounded


def test_any_sum_and_offset_name_nobody():
    t = harness()
    t.add_operations(
        [
            {"op_id": "any", "key": "k", "ts": 0, "timeout_ms": 500},
            {"op_id": "sum", "key": "k", "ts": 0, "timeout_ms": 500, "condition": "sum", "target": 100},
            {"op_id": "offset", "key": "k", "ts": 0, "timeout_ms": 500, "condition": "offset", "target": 9},
        ]
    )
    t.add_events([{"key": "k", "ts": 10, "source": "s", "value": 5}])
    t.end_input()
    assert_outcomes(
        t.outcomes(),
        [{"op_id": op_id, "reported": None, "missing": None} for op_id in ("any", "sum", "offset")],
        columns=["op_id", "reported", "missing"],
    )


def test_a_cross_shard_operation_names_who_answered_once():
    """Keys in both shards: the cross-shard group's outcome names them (the stubs report nothing)."""
    keys = ["k0", "k1"]
    assert len(set(shards_of(np.array(keys, dtype=object), 2).tolist())) == 2
    t = harness()
    t.add_operations([{"op_id": "q", "keys": keys, "ts": 0, "timeout_ms": 500, **QUORUM}])
    t.add_events([{"key": "k0", "ts": 10, "source": "ana"}, {"key": "k1", "ts": 20, "source": "zed"}])
    t.step()
    t.add_events([{"key": "k1", "ts": 30, "source": "chen"}])
    t.step()
    t.end_input()
    assert len(t.outcomes()) == 1
    assert answered(t, "q") == ("completed", ["ana", "chen"], ["bo"])


def test_the_operators_output_and_the_tables_rows_carry_who_answered():
    """A shard call's rows for Spark, its staged parts and the ``outcomes`` rows made of them
    name who answered (an ``any`` beside it: null)."""
    p = Purgatory(PurgatoryConfig(tick_ms=10))
    ops = pd.DataFrame(
        [
            {"op_id": "q", "keys": ["k"], "ts": 0, "timeout_ms": 100, **QUORUM},
            {"op_id": "a", "keys": ["j"], "ts": 0, "timeout_ms": 100},
        ]
    )
    p.process(ops, pd.DataFrame([{"key": "k", "ts": 10, "source": "bo"}]), watermark_ms=0)
    result = p.process(None, None, watermark_ms=200)
    call = (0, result, pd.DataFrame(), {"pending": 0, "batch_time_ms": 1_000}, 200)
    rows = output_rows(*call)
    assert list(rows.columns) == OPERATOR_OUTPUT.names
    outcome = rows[rows["kind"] == "outcome"].set_index("op_id")
    assert outcome.loc["q", ["reported", "missing"]].tolist() == [["bo"], ["ana", "chen"]]
    assert outcome.loc["a", ["reported", "missing"]].tolist() == [None, None]
    parts = output_parts(*call)
    assert all(part.schema.equals(OPERATOR_OUTPUT) for part in parts)
    table = split_tables(pa.concat_tables(parts), 7, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    by_op = {r["op_id"]: r for r in table["outcomes"].to_pylist()}
    assert (by_op["q"]["reported"], by_op["q"]["missing"]) == (["bo"], ["ana", "chen"])
    assert (by_op["a"]["reported"], by_op["a"]["missing"]) == (None, None)
