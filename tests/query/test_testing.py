"""The test helpers users get: the in-memory harness, assert_outcomes, the session helper."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from spark_purgatory import ConfigError, PurgatoryConfig
from spark_purgatory.contract import OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from spark_purgatory.testing import PurgatoryTester, assert_outcomes

T0 = "2026-01-01T00:00:00Z"
T0_MS = 1_767_225_600_000


def harness(**settings) -> PurgatoryTester:
    return PurgatoryTester(PurgatoryConfig(**{"tick_ms": 10, "wheel_size": 8, **settings}))


# -- the harness -------------------------------------------------------------------------------------


def test_harness_reproduces_the_readme_engine_example():
    t = PurgatoryTester(PurgatoryConfig(tick_ms=100))
    t.add_operations(
        pd.DataFrame(
            {
                "op_id": ["produce-1"],
                "keys": [["orders-0"]],
                "ts": [0],
                "timeout_ms": [30_000],
                "condition": ["count"],
                "target": [2.0],
            }
        )
    )
    t.add_events(
        pd.DataFrame(
            {
                "key": ["orders-0", "orders-0"],
                "ts": [12, 15],
                "source": ["broker-1", "broker-2"],
                "op_id": ["produce-1"] * 2,
            }
        )
    )
    t.step()
    rows = t.outcomes(times="ms")[["op_id", "status", "resolved_at", "latency_ms"]]
    assert rows.values.tolist() == [["produce-1", "completed", 15, 15]]


def test_ts_may_be_epoch_ms_iso_string_or_datetime():
    t = harness()
    t.add_operations(
        [
            {"op_id": "ms", "key": "a", "ts": T0_MS, "timeout_ms": 100},
            {"op_id": "digits", "key": "b", "ts": str(T0_MS), "timeout_ms": 100},
            {"op_id": "iso", "key": "c", "ts": T0, "timeout_ms": 100},
            {
                "op_id": "datetime",
                "key": "d",
                "ts": datetime(2026, 1, 1, tzinfo=timezone.utc),
                "timeout_ms": 100,
            },
            {"op_id": "naive", "keys": ["e"], "ts": datetime(2026, 1, 1), "timeout_ms": 100},
        ]
    )
    frame = pd.DataFrame({"op_id": ["column"], "key": ["f"], "ts": pd.to_datetime([T0]), "timeout_ms": [100]})
    t.add_operations(frame)  # a datetime64 column
    t.step()
    t.advance_watermark(T0_MS + 100)
    t.step()
    out = t.outcomes(times="ms")
    assert sorted(out["op_id"]) == ["column", "datetime", "digits", "iso", "ms", "naive"]
    assert set(out["op_ts"]) == {T0_MS}
    assert set(out["resolved_at"]) == {T0_MS + 100}


def test_an_operation_expires_when_the_watermark_reaches_its_deadline_not_before():
    t = harness()
    t.add_operations([{"op_id": "a", "key": "k", "ts": T0, "timeout_ms": 1_000}])
    t.step()
    t.advance_watermark(T0_MS + 999)
    assert t.step().expired == 0
    assert t.pending == 1 and t.outcome("a") is None
    t.advance_watermark("2026-01-01T00:00:01Z")
    assert t.step().expired == 1
    assert t.pending == 0
    assert t.outcome("a")["resolved_at"] == pd.Timestamp("2026-01-01T00:00:01Z")


def test_outcomes_accumulate_across_steps_with_the_step_number_as_batch_id():
    t = harness()
    t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 50}])
    t.add_events([{"key": "k", "ts": 10}])
    t.step()
    t.add_operations([{"op_id": "b", "key": "k", "ts": 20, "timeout_ms": 50}])
    t.step()
    t.advance_watermark(70)
    t.step()
    out = t.outcomes()
    assert list(out.columns) == OUTCOME_COLUMNS
    assert out[["op_id", "status", "batch_id"]].values.tolist() == [
        ["a", "completed", 0],
        ["b", "expired", 2],
    ]
    assert out["resolved_at"].dt.tz is not None  # Timestamps in UTC, as in the Delta table


def test_input_behind_the_watermark_is_rejected_as_late():
    t = harness()
    t.advance_watermark(1_000)
    t.add_operations([{"op_id": "a", "key": "k", "ts": 500, "timeout_ms": 100}])
    t.add_events([{"key": "k", "ts": 999}])
    t.step()
    rejected = t.rejected()
    assert list(rejected.columns) == REJECTED_COLUMNS
    assert sorted(map(tuple, rejected[["source", "reason"]].values.tolist())) == [
        ("events", "late"),
        ("operations", "late"),
    ]
    assert t.pending == 0


def test_unreadable_ts_is_rejected_as_bad_ts_and_a_missing_one_as_missing_ts():
    t = harness()
    t.add_operations(
        [
            {"op_id": "a", "key": "k", "ts": "yesterday", "timeout_ms": 100},
            {"op_id": "b", "key": "k", "ts": "2300-01-01T00:00:00Z", "timeout_ms": 100},
            {"op_id": "c", "key": "k", "ts": None, "timeout_ms": 100},
        ]
    )
    t.add_events([{"key": "k", "ts": "not a time"}])
    t.step()
    rejected = t.rejected()
    reasons = sorted(map(tuple, rejected[["source", "reason"]].values.tolist()))
    assert reasons == [
        ("events", "bad_ts"),
        ("operations", "bad_ts"),
        ("operations", "bad_ts"),
        ("operations", "missing_ts"),
    ]
    assert json.loads(rejected["raw"].iloc[0])["ts"] == "yesterday"


def test_events_matching_nothing_are_reported_once_the_watermark_passes_them():
    t = harness()
    t.add_events([{"key": "nobody", "ts": 10, "source": "s"}])
    t.step()
    assert len(t.unmatched()) == 0
    t.advance_watermark(11)
    t.step()
    unmatched = t.unmatched(times="ms")
    assert list(unmatched.columns) == UNMATCHED_COLUMNS
    assert unmatched[["key", "ts", "reason"]].values.tolist() == [["nobody", 10, "no_operation"]]


def test_the_watermark_never_goes_back():
    t = harness()
    t.advance_watermark(100)
    t.advance_watermark(100)
    with pytest.raises(ValueError, match="never goes back"):
        t.advance_watermark(99)
    with pytest.raises(ValueError, match="not an event time"):
        t.advance_watermark("soon")


def test_a_well_formed_time_out_of_the_contracts_range_is_said_to_be_out_of_range():
    t = harness()
    for time in ("2200-01-01T00:00:00Z", datetime(2300, 1, 1, tzinfo=timezone.utc), 7_258_118_400_000, -1):
        with pytest.raises(ValueError, match="out of range"):
            t.advance_watermark(time)
    t.advance_watermark("2199-12-31T23:59:59.999Z")


def test_raw_lines_are_read_as_the_job_reads_them_and_a_line_that_is_no_object_is_malformed_json():
    t = harness()
    lines = [
        '{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": 10}',
        "not json",
        b'{"op_id": "b", "key": "k", "ts": 0, "timeout_ms": 10}',
        "[1, 2]",
        "",
        '{"op_id": "c", "key": "k", "ts": 0, "timeout_ms": 10.0}',  # JSON 10.0 is no whole number
    ]
    t.add_operations(lines)
    t.add_events(['{"key": "k", "ts": 5}', b'{"key": "k", "ts": \xff}'])
    t.step()
    assert t.pending == 0 and sorted(t.outcomes()["op_id"]) == ["a", "b"]
    rejected = t.rejected()
    # in the order of the shards that report them (a rejected row goes to the shard of its text)
    assert sorted(rejected[["source", "raw", "reason", "op_id"]].values.tolist(), key=str) == sorted(
        [
            ["operations", "not json", "malformed_json", None],
            ["operations", "[1, 2]", "malformed_json", None],
            ["operations", "", "malformed_json", None],
            ["operations", lines[5], "bad_timeout_ms", "c"],
            ["events", '{"key": "k", "ts": \ufffd}', "malformed_json", None],
        ],
        key=str,
    )


def test_lines_and_records_queued_for_one_step_keep_their_own_raw():
    t = harness()
    t.add_operations(["nope"])
    t.add_operations([{"op_id": "a", "key": "k", "ts": 0, "timeout_ms": -1}])
    t.step()
    assert t.rejected()[["raw", "reason"]].values.tolist() == [
        ["nope", "malformed_json"],
        # as given, as Spark's to_json writes a typed row (docs/contract.md)
        ['{"op_id":"a","key":"k","ts":0,"timeout_ms":-1}', "negative_timeout"],
    ]
    with pytest.raises(TypeError, match="not both"):
        t.add_operations(["{}", {"op_id": "b"}])


def test_rows_rejected_after_reading_show_the_fields_the_operator_read_as_on_spark():
    """``late`` and ``duplicate_op_id`` are decided after a row was read and routed: its raw is
    the fields with a value, in the contract's order (keys as sent, ts in epoch ms), whether
    the row came as a line (an unknown field, nulls) or as a record, as on Spark
    (``tests/spark/test_streaming.py``, the late rows); a line rejected as it is read keeps
    its text."""
    t = harness()
    t.add_operations(['{"op_id": "a", "keys": ["k2", "k1"], "ts": 0, "timeout_ms": 10}'])
    t.step()
    t.advance_watermark(5)
    t.add_operations([
        '{"op_id": "a", "keys": ["k2", "k1"], "ts": 9, "timeout_ms": 10, "members": null, "extra": 1}',
        '{"op_id": "late", "key": "k", "ts": 1, "timeout_ms": 10}',
        '{"op_id": "bad", "key": "k", "ts": 9, "timeout_ms": -1, "extra": 1}',
    ])  # fmt: skip
    t.add_events([{"key": "k", "ts": 2, "source": None}])
    t.step()
    assert sorted(t.rejected()[["reason", "raw"]].values.tolist()) == [
        [
            "duplicate_op_id",
            '{"op_id": "a", "keys": ["k2", "k1"], "ts": 9, "timeout_ms": 10, "condition": "any"}',
        ],
        ["late", '{"key": "k", "ts": 2}'],
        ["late", '{"op_id": "late", "keys": ["k"], "ts": 1, "timeout_ms": 10, "condition": "any"}'],
        ["negative_timeout", '{"op_id": "bad", "key": "k", "ts": 9, "timeout_ms": -1, "extra": 1}'],
    ]


def test_of_two_copies_with_equal_ts_the_one_in_the_lower_numbered_shard_is_kept_as_on_spark():
    """With two shards "k1" lives in shard 1 and "k0" in shard 0 (``spark.key_hash``): the
    registry keeps the copy on "k0" whatever the input order, and so does the harness."""
    for first, second in (("k1", "k0"), ("k0", "k1")):
        t = harness(shards=2)
        t.add_operations(
            [
                {"op_id": "x", "key": first, "ts": 0, "timeout_ms": 10},
                {"op_id": "y", "key": "k1", "ts": 0, "timeout_ms": 10},
                {"op_id": "x", "key": second, "ts": 0, "timeout_ms": 10},
            ]
        )
        r = t.step()
        assert r.rejected["key"].tolist() == ["k1"] and r.rejected["reason"].tolist() == ["duplicate_op_id"]
        t.end_input()
        assert list(t.outcome("x")["keys"]) == ["k0"]
    t = harness(shards=1)  # one shard: the first in input order
    t.add_operations([{"op_id": "x", "key": k, "ts": 0, "timeout_ms": 10} for k in ("k1", "k0")])
    t.end_input()
    assert list(t.outcome("x")["keys"]) == ["k1"]


def test_a_resend_is_accepted_from_the_end_of_the_dedup_retention_on_not_a_millisecond_before():
    for watermark, accepted in ((630_999, False), (631_000, True)):
        t = harness(dedup_retention_ms=600_000)
        t.add_operations([{"op_id": "o", "key": "k", "ts": 0, "timeout_ms": 31_000}])
        t.add_events([{"key": "k", "ts": 5}])
        assert t.step().completed == 1
        t.advance_watermark(watermark)
        t.add_operations([{"op_id": "o", "key": "k", "ts": 1_200_000, "timeout_ms": 1000}])
        r = t.step()
        assert (t.pending, r.rejected["reason"].tolist()) == (
            (1, []) if accepted else (0, ["duplicate_op_id"])
        )


def test_config_may_be_given_as_dotted_keys():
    t = PurgatoryTester({"purgatory.tick.ms": 250})
    assert t.config.tick_ms == 250
    with pytest.raises(ConfigError, match="purgatory.tick"):
        PurgatoryTester({"purgatory.tick": 250})


# -- assert_outcomes ---------------------------------------------------------------------------------


def test_assert_outcomes_passes_whatever_the_row_order_and_time_form():
    actual = pd.DataFrame(
        {
            "op_id": ["b", "a"],
            "status": ["expired", "completed"],
            "resolved_at": pd.to_datetime([T0_MS + 30_000, T0_MS + 15_000], unit="ms", utc=True),
            "latency_ms": [30_000, 15_000],
        }
    )
    expected = [
        {"op_id": "a", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
        {"op_id": "b", "status": "expired", "resolved_at": T0_MS + 30_000},
    ]
    assert_outcomes(actual, expected)
    assert_outcomes(expected, actual)


def test_assert_outcomes_names_the_op_id_and_cells_that_differ():
    actual = [
        {"op_id": "a", "status": "completed", "resolved_at": T0_MS + 15_000},
        {"op_id": "b", "status": "expired", "resolved_at": T0_MS + 30_000},
        {"op_id": "surplus", "status": "completed", "resolved_at": T0_MS},
    ]
    expected = [
        {"op_id": "a", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
        {"op_id": "b", "status": "completed", "resolved_at": "2026-01-01T00:00:12Z"},
        {"op_id": "lost", "status": "expired", "resolved_at": T0},
    ]
    with pytest.raises(AssertionError) as failure:
        assert_outcomes(actual, expected)
    message = str(failure.value)
    assert "outcomes differ in 3 op_ids" in message
    assert "'b': status is 'expired', expected 'completed'" in message
    assert "'b': resolved_at is 2026-01-01T00:00:30Z, expected 2026-01-01T00:00:12Z" in message
    assert "'surplus': not expected (status='completed'" in message
    assert "'lost': missing (expected status='expired'" in message
    assert "'a'" not in message


def test_assert_outcomes_reports_an_op_id_given_twice():
    row = {"op_id": "a", "status": "completed", "resolved_at": 0}
    with pytest.raises(AssertionError, match="'a': 2 rows in actual"):
        assert_outcomes([row, row], [row])


def test_assert_outcomes_compares_only_the_chosen_columns_and_needs_them():
    actual = [{"op_id": "a", "status": "completed", "resolved_at": 1, "keys": ["k"]}]
    assert_outcomes(actual, [{"op_id": "a", "status": "completed"}], columns=["op_id", "status"])
    assert_outcomes(actual, [{"op_id": "a", "keys": ("k",)}], columns=["op_id", "keys"])
    with pytest.raises(ValueError, match="expected has no column 'resolved_at'"):
        assert_outcomes(actual, [{"op_id": "a", "status": "completed"}])
    with pytest.raises(ValueError, match="must include 'op_id'"):
        assert_outcomes(actual, actual, columns=["status"])


# -- on Spark ----------------------------------------------------------------------------------------


@pytest.mark.spark
def test_assert_outcomes_on_spark_agrees_with_the_harness_and_fails_as_an_assertion(spark):
    """On a Spark DataFrame as on pandas: equal outcomes pass (times as timestamps, or as the
    ISO text a user's table may hold), a difference is an AssertionError naming its cells."""
    from spark_purgatory import outcomes_of, purgatory_batch

    config = PurgatoryConfig(shards=2, tick_ms=100, wheel_size=16)
    ops = [
        {"op_id": "done", "key": "k1", "ts": T0, "timeout_ms": 30_000, "condition": "count", "target": 2},
        {"op_id": "late", "key": "k2", "ts": T0, "timeout_ms": 10_000},
    ]
    events = [{"key": "k1", "ts": "2026-01-01T00:00:12Z"}, {"key": "k1", "ts": "2026-01-01T00:00:15Z"}]
    t = PurgatoryTester(config)
    t.add_operations(ops)
    t.add_events(events)
    t.step()
    t.advance_watermark(T0_MS + 60_000)
    t.step()

    def json_lines(rows):
        return spark.createDataFrame([(json.dumps(r),) for r in rows], "value string")

    batch = purgatory_batch(json_lines(ops), json_lines(events), config, final_watermark_ms=T0_MS + 60_000)
    outcomes = outcomes_of(batch).cache()  # computed once for the five reads below, each would run it again
    columns = ("op_id", "status", "resolved_at", "latency_ms", "matched_events")
    assert_outcomes(outcomes, t.outcomes(), columns=columns)

    wrong = [
        {"op_id": "done", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
        {"op_id": "late", "status": "completed", "resolved_at": "2026-01-01T00:00:10Z"},
    ]
    with pytest.raises(AssertionError, match="'late': status is 'expired', expected 'completed'"):
        assert_outcomes(outcomes, wrong)
    # resolved_at as ISO text in the Spark frame (a table written by hand, a JSON read)
    iso = outcomes.selectExpr(
        "op_id", "status", "date_format(resolved_at, \"yyyy-MM-dd'T'HH:mm:ss.SSSXXX\") AS resolved_at"
    )
    assert_outcomes(iso, t.outcomes())
    assert_outcomes(t.outcomes(), iso)
    moved = [{"op_id": "done", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
             {"op_id": "late", "status": "expired", "resolved_at": "2026-01-01T00:00:11Z"}]  # fmt: skip
    with pytest.raises(
        AssertionError, match="'late': resolved_at is 2026-01-01T00:00:10Z, expected 2026-01-01T00:00:11Z"
    ):
        assert_outcomes(iso, moved)
    outcomes.unpersist()


def test_a_multi_key_operation_across_shards_completes_through_the_mailbox_and_saved_state(tmp_path):
    """The tester runs the production shard step: an operation whose keys live in two shards
    lives in the cross-shard group, its stubs relay each event through the mailbox, and every
    group's state is saved under the state path and loaded again in the next step."""
    from spark_purgatory.spark.key_hash import shards_of

    keys = np.array([f"k{i}" for i in range(20)], dtype=object)
    shard = shards_of(keys, 2)
    a, b = keys[shard == 0][0], keys[shard == 1][0]
    state = tmp_path / "state"
    t = PurgatoryTester({"purgatory.tick.ms": 10, "purgatory.state.path": str(state)})
    op = {"op_id": "both", "keys": [a, b], "ts": 0, "timeout_ms": 1_000, "condition": "count", "target": 2}
    t.add_operations([op])
    t.add_events([{"key": a, "ts": 10}])
    assert t.step().outcomes.empty
    assert t.pending == 1 and set(t.shard(2).pending_operations()["op_id"]) == {"both"}
    assert list(state.glob("mailbox/*")) and list(state.glob("deltas/*/*"))  # relayed, saved
    t.add_events([{"key": b, "ts": 20}])
    t.advance_watermark(5)
    out = t.step().outcomes
    assert out[["op_id", "status", "resolved_at", "matched_events", "batch_id"]].values.tolist() == [
        ["both", "completed", 20, 2, 1]
    ]
    assert t.pending == 0
