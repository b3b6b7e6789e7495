"""Pending operations and their progress, read from engine state (no Spark).

``engine.inspection.pending_frame`` must report what the engine itself would report if the
operation expired now (``progress``, ``matched_events``), plus the figures an operator asks
for: distinct sources, sum, each key's offset, the members still missing, time left.
"""

from __future__ import annotations

from spark_purgatory.contract import PENDING_COLUMNS
from spark_purgatory.engine.inspection import pending_count, pending_frame, with_progress_text
from spark_purgatory.state import load_state, save_state
from tests.handoff.test_multikey import Sharded
from tests.support.engine_helpers import ev, op, purgatory, step


def by_op(frame):
    return {row.op_id: row for row in frame.itertuples(index=False)}


def test_each_condition_reports_its_progress_toward_its_goal():
    p = purgatory()
    step(
        p,
        [
            op("any-1", "k", 0, 500),
            op("count-1", "k", 0, 500, "count", target=3.0),
            op("sum-1", "s", 0, 500, "sum", target=100.0),
            op("all-1", "g", 0, 500, "all", members=["a", "b", "c"]),
        ],
        [
            ev("k", 10, op_id="count-1", source="r1"),
            ev("k", 11, op_id="count-1", source="r1"),  # the same source twice counts once
            ev("k", 12, op_id="count-1", source="r2"),
            ev("s", 10, value=30.0),
            ev("s", 11, value=12.5),
            ev("g", 10, source="b"),
            ev("g", 11, source="stranger"),
        ],
        wm=0,
    )
    rows = by_op(pending_frame(p, watermark_ms=100))
    assert set(rows) == {"any-1", "count-1", "sum-1", "all-1"}
    count = rows["count-1"]
    assert (count.matched_events, count.distinct_sources, count.progress, count.goal) == (3, 2, 2.0, 3.0)
    assert (rows["sum-1"].value_sum, rows["sum-1"].progress, rows["sum-1"].goal) == (42.5, 42.5, 100.0)
    assert list(rows["all-1"].members_missing) == ["a", "c"]
    assert (rows["all-1"].progress, rows["all-1"].goal) == (1.0, 3.0)
    assert (rows["any-1"].matched_events, rows["any-1"].goal) == (0, 1.0)
    assert rows["any-1"].time_left_ms == 400
    assert rows["any-1"].members_missing is None and rows["any-1"].offsets is None


def test_a_pending_quorum_counts_its_members_and_names_those_yet_to_report():
    """``quorum`` (2 of a, b, c): the members that reported, each once, a stranger's event
    matched and not counted; ``members_missing`` the members that have not reported, any one
    of whom completes it; its progress is what its outcome reports when it expires."""
    p = purgatory()
    quorum = op("q-1", ["g", "h"], 0, 500, "quorum", target=2.0, members=["a", "b", "c"])
    events = [ev("g", 10, source="b"), ev("h", 11, source="b"), ev("g", 12, source="stranger")]
    step(p, [quorum], events, wm=0)
    row = with_progress_text(pending_frame(p, watermark_ms=100)).iloc[0]
    assert (row.condition, row.matched_events, row.progress, row.goal) == ("quorum", 3, 1.0, 2.0)
    assert list(row.members_missing) == ["a", "c"]
    assert (row.still_needed, row.progress_text) == (1.0, "1 of 2 members, yet to report a, c")
    expired = step(p, wm=1_000).outcomes.set_index("op_id").loc["q-1"]
    assert (expired["status"], expired["progress"], expired["matched_events"]) == ("expired", 1.0, 3)


def test_the_progress_is_what_the_operation_reports_when_it_expires():
    p = purgatory()
    ops = [op("c", "k", 0, 200, "count", target=5.0), op("o", ["x", "y"], 0, 200, "offset", target=10.0)]
    events = [ev("k", 5, source="a"), ev("k", 6, source="b"), ev("x", 7, value=4.0), ev("y", 8, value=9.0)]
    step(p, ops, events, wm=0)
    before = by_op(pending_frame(p))
    outcomes = step(p, wm=1_000).outcomes.set_index("op_id")
    for op_id in ("c", "o"):
        assert before[op_id].progress == outcomes.loc[op_id, "progress"]
        assert before[op_id].matched_events == outcomes.loc[op_id, "matched_events"]


def test_offsets_per_key_include_progress_from_before_the_operation():
    p = purgatory()
    step(p, [], [ev("x", 5, value=7.0)], wm=0)
    step(p, [], [], wm=10)  # the event is final: the key's progress is 7
    step(p, [op("o", ["x", "y"], 20, 500, "offset", target=10.0)], [ev("y", 30, value=3.0)], wm=10)
    row = by_op(pending_frame(p))["o"]
    assert dict(row.offsets) == {"x": 7.0, "y": 3.0}
    assert row.progress == 3.0  # the lowest key's


def test_resolved_operations_are_gone_and_the_frame_survives_save_and_load():
    p = purgatory()
    step(
        p,
        [op("done", "k", 0, 500), op("waiting", "w", 0, 500), op("expired", "e", 0, 20)],
        [ev("k", 5)],
        wm=0,
    )
    step(p, wm=100)
    again = load_state(save_state(p), p.config)
    frame = pending_frame(again, batch_id=7)
    assert frame["op_id"].tolist() == ["waiting"]
    assert frame.columns.tolist() == PENDING_COLUMNS
    assert frame["batch_id"].tolist() == [7] and frame["watermark"].tolist() == [100]
    assert frame["time_left_ms"].tolist() == [400]


def test_an_empty_purgatory_has_an_empty_frame_with_every_column():
    frame = pending_frame(purgatory())
    assert len(frame) == 0 and frame.columns.tolist() == PENDING_COLUMNS


def test_a_cross_shard_operation_appears_once_with_its_groups_progress(tmp_path):
    cluster = Sharded({"a": 0, "b": 1}, 2, str(tmp_path / "mailbox"))
    cluster.step([op("x", ["a", "b"], 0, 1_000, "count", target=3.0)], [ev("a", 10), ev("b", 11)], wm=0)
    cluster.step([], [], wm=1)  # the cross-shard group receives the relays of the batch before
    frames = []
    for shard, value in cluster.states.items():
        p = load_state(value, cluster.config)
        p.shard = shard
        frames.append(pending_frame(p))
    assert all(len(f) == 0 for f in frames[:2])  # stubs are no rows
    assert sum(pending_count(load_state(v, cluster.config)) for v in cluster.states.values()) == 1
    (row,) = frames[2].itertuples(index=False)
    assert (row.op_id, row.shard, row.matched_events, row.progress) == ("x", 2, 2, 2.0)
