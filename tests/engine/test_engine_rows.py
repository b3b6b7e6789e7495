"""The engine's working unit (``rows.Rows``) and the array helpers a call runs on, against
pandas and numpy doing the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spark_purgatory.contract import OUTCOME_COLUMNS, REJECTED_COLUMNS, UNMATCHED_COLUMNS
from spark_purgatory.engine.arrays import among, expand_ranges, isin, pairs_in
from spark_purgatory.engine.conditions import COUNT, evaluate
from spark_purgatory.engine.rows import Rows
from tests.support.engine_helpers import ev, op, purgatory, step


def _sample() -> Rows:
    return Rows(
        {
            "n": np.array([3, 1, 2], dtype=np.int64),
            "s": np.array(["a", None, "c"], dtype=object),
            "f": np.array([0.5, np.nan, 2.0]),
        }
    )


def test_rows_select_filter_extend_and_stack_as_a_frame_would():
    r = _sample()
    frame = r.to_frame()
    assert len(r) == 3 and r.columns == ["n", "s", "f"]
    keep = np.array([True, False, True])
    pd.testing.assert_frame_equal(r.where(keep).to_frame(), frame.loc[keep].reset_index(drop=True))
    taken = frame.iloc[[2, 0]].reset_index(drop=True)
    pd.testing.assert_frame_equal(r.take(np.array([2, 0])).to_frame(), taken)
    grown = r.assign(flag=False, label="x")
    assert grown["flag"].dtype == bool and grown["label"].tolist() == ["x"] * 3
    both = r.stack(r.where(keep))
    pd.testing.assert_frame_equal(
        both.to_frame(), pd.concat([frame, frame.loc[keep]], ignore_index=True), check_dtype=True
    )
    assert r.where(np.ones(3, bool)) is r  # nothing dropped: no copy


def test_rows_never_change_the_arrays_they_came_from():
    r = _sample()
    before = r["n"].copy()
    r.assign(n=np.zeros(3, np.int64))
    r.where(np.array([True, False, True]))
    assert r["n"].tolist() == before.tolist()


def test_an_empty_output_frame_is_a_fresh_copy_each_time():
    first = Rows.empty({"a": np.int64, "b": object}).to_frame()
    first["c"] = []  # a caller may add columns to what it got
    second = Rows.empty({"a": np.int64, "b": object}).to_frame()
    assert second.columns.tolist() == ["a", "b"]
    assert second.dtypes.tolist() == [np.dtype(np.int64), np.dtype(object)]
    assert isinstance(second.index, pd.RangeIndex)


def test_reading_a_frame_without_pandas_private_accessor_gives_the_same_columns(monkeypatch):
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", None], "c": pd.array([1, None], dtype="Int64")})
    fast = Rows.of(frame)
    monkeypatch.setattr(pd.DataFrame, "_get_column_array", None, raising=False)
    public = Rows.of(frame)
    for name in frame.columns:
        assert fast[name].dtype == public[name].dtype
        np.testing.assert_array_equal(fast[name], public[name])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_membership_helpers_agree_with_numpy(seed):
    rng = np.random.default_rng(seed)
    values, test = rng.integers(0, 30, 50), rng.integers(0, 30, 20)
    assert isin(values, test).tolist() == np.isin(values, test).tolist()
    assert among(values, np.unique(test)).tolist() == np.isin(values, test).tolist()
    assert isin(values, test[:0]).tolist() == [False] * 50
    a1, a2, b1, b2 = (rng.integers(0, 4, n) for n in (40, 40, 15, 15))
    present = set(zip(b1.tolist(), b2.tolist(), strict=True))
    expected = [(x, y) in present for x, y in zip(a1.tolist(), a2.tolist(), strict=True)]
    assert pairs_in(a1, a2, b1, b2).tolist() == expected
    starts, counts = rng.integers(0, 100, 10), rng.integers(0, 4, 10)
    probe, at = expand_ranges(starts, counts)
    spans = enumerate(zip(starts.tolist(), counts.tolist(), strict=True))
    expected = [(i, s + k) for i, (s, c) in spans for k in range(c)]
    assert list(zip(probe.tolist(), at.tolist(), strict=True)) == expected


def test_a_call_returns_frames_with_the_contract_columns_whether_or_not_it_reports():
    p = purgatory()
    quiet = step(p, ops=[op("o", "k", 0, timeout_ms=100)])
    busy = step(p, ops=[op("o", "k", 5), {"op_id": "bad"}], events=[ev("k", 5), ev("x", 3)], wm=2)
    later = step(p, wm=50)
    for result in (quiet, busy, later):
        assert result.outcomes.columns.tolist() == OUTCOME_COLUMNS
        assert result.unmatched.columns.tolist() == UNMATCHED_COLUMNS
        assert result.rejected.columns.tolist() == REJECTED_COLUMNS
        for frame in (result.outcomes, result.unmatched, result.rejected, result.relay):
            assert isinstance(frame.index, pd.RangeIndex)
    assert busy.outcomes["op_id"].tolist() == ["o"]
    assert sorted(busy.rejected["reason"]) == ["duplicate_op_id", "missing_key"]
    assert later.unmatched[["key", "reason"]].values.tolist() == [["x", "no_operation"]]
    assert later.unmatched.dtypes["ts"] == np.int64 and later.rejected.dtypes["batch_id"] == np.int64


def test_buffered_events_do_not_share_the_callers_arrays():
    p = purgatory()
    events = pd.DataFrame({"key": ["k"], "ts": [5]})
    step(p, ops=[op("o", "k", 0, timeout_ms=100, condition="count", target=2)])
    p.process(None, events, watermark_ms=0)
    events.loc[0, "ts"] = 500  # the caller reuses its frame
    r = step(p, events=[ev("k", 6)], wm=0)
    assert r.outcomes[["op_id", "resolved_at"]].values.tolist() == [["o", 6]]


def test_replay_ends_as_the_stream_would_at_that_watermark():
    ops = [op("a", "k", 0, timeout_ms=100), op("b", "k", 0, timeout_ms=100, condition="count", target=2)]
    events = [ev("k", 40), ev("x", 5)]
    replayed = purgatory().replay(pd.DataFrame(ops), pd.DataFrame(events), final_watermark_ms=200)
    p = purgatory()
    first, last = step(p, ops=ops, events=events), step(p, wm=200)
    streamed = pd.concat([first.outcomes, last.outcomes], ignore_index=True)
    assert replayed.outcomes[["op_id", "status", "resolved_at"]].values.tolist() == [
        ["a", "completed", 40],
        ["b", "expired", 100],
    ]
    pd.testing.assert_frame_equal(replayed.outcomes, streamed)
    assert replayed.unmatched[["key", "reason"]].values.tolist() == [["x", "no_operation"]]


def test_an_all_any_batch_is_evaluated_as_the_general_measures_evaluate_it():
    """``conditions.evaluate`` takes a short way when every operation is ``any``; with one
    ``count`` operation more (no matches: it changes nothing for the others) it takes the
    general one: both decide the ``any`` operations alike, matches in any order."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, k = int(rng.integers(1, 12)), int(rng.integers(1, 30))
        ops = {
            "handle": np.sort(rng.choice(100, n, replace=False)).astype(np.int64),
            "cond": np.zeros(n, np.int8),
            "target": np.full(n, np.nan),
            "ts": rng.integers(0, 50, n).astype(np.int64),
            "n_members": np.zeros(n, np.int64),
        }
        matches = Rows(
            {
                "handle": rng.choice(ops["handle"], k).astype(np.int64),
                "khash": rng.integers(0, 5, k).astype(np.uint64),
                "ts": rng.integers(0, 60, k).astype(np.int64),
                "eseq": rng.permutation(k).astype(np.int64),
                "value": np.full(k, np.nan),
                "source": np.full(k, None, dtype=object),
                "is_member": np.zeros(k, bool),
            },
            k,
        )
        short = evaluate(Rows(ops, n), matches)
        with_count = {c: np.append(v, v[-1:]) for c, v in ops.items()}
        with_count["handle"][-1] = 1_000
        with_count["cond"][-1], with_count["target"][-1] = COUNT, 5.0
        general = evaluate(Rows(with_count, n + 1), matches)
        for name in ("satisfied", "resolved_at", "progress", "matched"):
            assert getattr(short, name).tolist() == getattr(general, name)[:n].tolist(), name
        for name in ("handle", "eseq", "used"):
            assert getattr(short, name).tolist() == getattr(general, name).tolist(), name
