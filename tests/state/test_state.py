"""Shard state against SPEC.md: saved and loaded, through segment files and the worker cache.

The engine is driven as in ``test_purgatory``; these tests send it through ``save_state`` /
``load_state`` between batches and check it behaves as if it had stayed in memory.
"""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spark_purgatory import Purgatory
from spark_purgatory.engine.inspection import pending_frame
from spark_purgatory.engine.pending import OPS_ARROW
from spark_purgatory.state import WORKER_CACHE, SegmentStore, WorkerCache, load_state, loaded_by, save_state
from spark_purgatory.state.codec import handles_from, pack_parts, table_from, unpack_parts
from spark_purgatory.state.increments import is_pointer, pointed
from tests.support.engine_helpers import check_split_invariance, ev, op, outcomes, purgatory, step

# -- state round trip ---------------------------------------------------------------------------


def test_state_round_trips_losslessly_and_behaves_the_same():
    def scenario(p: Purgatory, restart: bool) -> list:
        step(
            p,
            ops=[
                op("a", ["k1", "k2"], 0, condition="count", target=3),
                op("b", "k1", 0, condition="offset", target=9),
                op("c", "g", 0, condition="all", members=["x", "y"], payload="p"),
            ],
            events=[ev("k1", 3, source="s1", value=4.0), ev("q", 2)],
            wm=0,
        )
        if restart:
            p = load_state(save_state(p), p.config)
        r = step(p, events=[ev("k2", 8, source="s2", value=10.0), ev("g", 9, source="x")], wm=5)
        blob = save_state(p)
        if restart:
            p = load_state(blob, p.config)
            # serialising again gives the same state (only the random cache token differs)
            assert unpack_parts(save_state(p))[0] == unpack_parts(blob)[0]
        r2 = step(p, events=[ev("k1", 20, source="s3"), ev("g", 30, source="y")], wm=2000)
        frames = [r.outcomes, r.unmatched, r2.outcomes, r2.unmatched]

        def plain(value):
            return list(value) if isinstance(value, np.ndarray | list) else value

        return [
            [
                {k: plain(v) for k, v in row.items()}
                for row in f.astype(object).where(f.notna(), None).to_dict("records")
            ]
            for f in frames
        ]

    assert scenario(purgatory(), restart=True) == scenario(purgatory(), restart=False)


# -- batch-split invariance, through saved state -------------------------------------------------


@pytest.mark.parametrize(
    "segmented", ["rebuilt", "two-workers"], ids=["rebuilt-from-segments", "two-worker-caches"]
)
def test_outcomes_do_not_depend_on_how_input_is_split_into_batches(segmented, tmp_path):
    def trial(number: int, segment_rows: int):
        # the state goes through a SegmentStore after every batch and is rebuilt from base
        # segment + change (tiny segment sizes: bases are written and replaced often)
        store = SegmentStore(str(tmp_path / f"t{number}"), segment_rows=segment_rows, retain_versions=2)
        workers = [WorkerCache(), WorkerCache()]  # each simulated Python worker's cache
        current = [WorkerCache()]

        def after_batch(p: Purgatory, rng: np.random.Generator) -> Purgatory:
            if segmented == "rebuilt":  # every batch rebuilds the shard from its segments
                return load_state(save_state(p, store), p.config, store)
            # parked in one worker; the next batch runs in either
            blob = save_state(p, store, park=True, cache=current[0])
            current[0] = workers[int(rng.integers(0, 2))]
            return load_state(blob, p.config, store, cache=current[0])

        def after_trial(p: Purgatory) -> None:
            # every file is live or superseded within the last retain_versions saves
            live = {s.name for s in p.lineage.segments}
            assert set(store.segments()) == live | {name for name, _at in p.lineage.graveyard}
            assert all(p.lineage.saves - at < 2 for _name, at in p.lineage.graveyard)

        return after_batch, after_trial

    check_split_invariance(trial)


# -- segments and the worker cache -----------------------------------------------------------------


def test_segmented_state_keeps_only_the_change_and_restarts_from_any_retained_version(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=50, retain_versions=3)
    p = purgatory()
    step(p, ops=[op(f"o{i}", f"k{i % 100}", i, timeout_ms=10_000) for i in range(3000)], wm=0)
    first = save_state(p, store)  # 3000 ops, 3000 watches, 3000 op_ids >= 50 rows: a base is written
    assert len(store.segments()) == 1
    step(p, ops=[op("late-op", "k1", 500, timeout_ms=10_000)], events=[ev("k3", 600)], wm=100)
    second = save_state(p, store)
    assert p.pending == 3001 - 6  # k3's operations created by ts 600 completed
    # the value names a delta file; the file holds the change (one op added, six resolved),
    # not the 3000 operations
    assert len(second) < 200 and is_pointer(second)
    parts, _ = store.read(pointed(second).name)
    assert "ops" not in parts and "watch" not in parts
    assert table_from(parts["tail_ops"], OPS_ARROW)["op_id"].to_pylist() == ["late-op"]
    assert handles_from(parts["tail_dead"]).size == 6
    assert sum(len(v) for v in parts.values()) < len(save_state(p)) / 5
    # a restart from either version, without the worker cache, gives what the live object gives
    live = step(p, events=[ev("k1", 700)], wm=200)
    for blob, expected_pending in ((first, 3000), (second, 3001 - 6)):
        again = load_state(blob, p.config, store)
        assert again.pending == expected_pending
    again = load_state(second, p.config, store)

    def plain(result):
        return {k: (v["status"], v["resolved_at"], list(v["keys"])) for k, v in outcomes(result).items()}

    assert plain(step(again, events=[ev("k1", 700)], wm=200)) == plain(live)
    assert len(plain(live)) == 8  # k1's operations created by ts 700, and the late one


def test_the_worker_cache_hands_back_only_the_exact_version(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=1)
    p = purgatory()
    step(p, ops=[op("a", "k", 0, timeout_ms=100)], wm=0)
    older = save_state(p, store)
    newer = save_state(p, store, park=True)
    assert load_state(older, p.config, store) is not p  # another version: rebuilt
    assert load_state(newer, p.config, store) is not p  # the miss above evicted it
    save_state(p, store, park=True)
    blob = save_state(p, store, park=True)
    assert load_state(blob, p.config, store) is p  # the parked object itself
    assert load_state(blob, p.config, store) is not p  # taken out: a retry rebuilds


def _same_state(a: Purgatory, b: Purgatory) -> None:
    ta, tb = a.tables(), b.tables()
    for name in ("ops", "watch", "resolved", "matches", "events", "keys"):
        x, y = getattr(ta, name), getattr(tb, name)
        assert x.astype(str).values.tolist() == y.astype(str).values.tolist(), name
    assert sorted(ta.wheel.pending()[0].tolist()) == sorted(tb.wheel.pending()[0].tolist())
    assert ta.due.tolist() == tb.due.tolist()


def test_a_parked_ancestor_is_brought_forward_and_a_parked_stranger_is_not(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=40, retain_versions=50)
    p = purgatory()
    step(p, ops=[op(f"o{i}", f"k{i % 9}", i // 10, timeout_ms=5_000) for i in range(3000)], wm=0)
    v1 = save_state(p, store, park=True)  # worker A keeps v1 ...
    WORKER_CACHE.clear()
    other = load_state(v1, p.config, store)  # ... worker B rebuilds it and goes on
    for b in range(6):  # enough batches for change segments to be written in between
        new_ops = [op(f"n{b}-{i}", f"m{i % 3}", 1000 + b * 100, timeout_ms=5_000) for i in range(30)]
        r = step(other, ops=new_ops, events=[ev(f"m{b % 3}", 1050 + b * 100)], wm=300 + b * 100)
        assert len(r.rejected) == 0 and len(r.outcomes) > 0
        latest = save_state(other, store)
    assert len(other.lineage.segments) > 2  # base + change segments written after v1
    rebuilt = load_state(latest, p.config, store)  # nothing parked: a full rebuild
    WORKER_CACHE.park(p.lineage.id, p.lineage.token, p)  # worker A still holds v1
    caught_up = load_state(latest, p.config, store)
    assert caught_up is p
    _same_state(caught_up, rebuilt)
    after = [outcomes(step(x, events=[ev("k1", 2000)], wm=900)) for x in (caught_up, rebuilt)]
    assert len(after[0]) > 0
    assert {k: v["status"] for k, v in after[0].items()} == {k: v["status"] for k, v in after[1].items()}

    # a version from another branch (same parent, other input) is never brought forward
    base = load_state(latest, p.config, store)
    branch = load_state(latest, p.config, store)
    step(branch, events=[ev("k2", 2100)], wm=1_000)
    save_state(branch, store, park=True)  # parked: a sibling of what we load next, not an ancestor
    step(base, events=[ev("k3", 2100)], wm=1_000)
    wanted = save_state(base, store)
    loaded = load_state(wanted, p.config, store)
    assert loaded is not branch
    _same_state(loaded, base)


def test_the_state_remembers_its_shard_so_a_changed_layout_is_caught():
    p = purgatory()
    step(p, ops=[op("a", "k", 0, timeout_ms=100)], wm=0)
    assert load_state(save_state(p), p.config).shard is None
    p.shard = 3  # set by the Spark host, which refuses a state saved by another shard
    assert load_state(save_state(p), p.config).shard == 3


# -- the engine's side: the change log the state layer reads ----------------------------------------


def test_the_change_log_lists_what_changed_since_the_last_take():
    p = purgatory()
    step(p, ops=[op("a", "k", 0), op("b", "k2", 0)], wm=0)
    first = p.take_changes()
    assert first.added_from == 0 and first.removed.size == 0  # before any take: all of it is new
    step(p, ops=[op("c", "k3", 0)], events=[ev("k", 5)], wm=0)  # c (handle 2) added, a (0) completed
    changes = p.take_changes()
    assert changes.added_from == 2
    assert changes.removed.tolist() == [0]
    assert len(changes.resolved) == 1  # a's op_id, remembered for duplicate detection
    again = p.take_changes()  # taken: the log starts afresh
    assert again.added_from == 3 and again.removed.size == 0 and len(again.resolved) == 0


def test_a_read_of_the_big_tables_alone_leaves_the_small_ones_empty():
    p = purgatory()
    step(p, ops=[op("a", "k", 0), op("b", "k2", 0, timeout_ms=5)], events=[ev("k", 5), ev("q", 9)], wm=1)
    whole, big = p.tables(arrow=True), p.tables(arrow=True, small=False)
    for name in ("ops", "watch"):
        assert getattr(big, name).equals(getattr(whole, name))
    pd.testing.assert_frame_equal(big.resolved, whole.resolved)
    assert len(whole.events)  # something the big read leaves out
    for name in ("matches", "events", "keys", "relayed", "windows", "parked"):
        assert len(getattr(big, name)) == 0
        assert list(getattr(big, name).columns) == list(getattr(whole, name).columns)
    for scalar in ("next_handle", "next_eseq", "watermark", "retired_wm"):
        assert getattr(big, scalar) == getattr(whole, scalar)


# -- state written by earlier versions (format 2: before the columnar engine; 3: before compact
# strings; 4: spark-purgatory 0.2.0, before quorum)

_CORPUS = Path(__file__).parents[1] / "corpus"


def _go_on(p: Purgatory) -> list[list[str]]:
    """Two more batches after ``corpus/make_state.py``'s: completions, expiries, unmatched events."""
    r1 = step(
        p,
        ops=[op("late-comer", "k2", 30)],
        events=[ev("k2", 40, source="s2"), ev("k3", 41, value=10.0)],
        wm=20,
    )
    r2 = step(p, events=[ev("m1", 50), ev("m3", 60)], wm=6000)

    def rows(f):  # list columns come back from a saved state as arrays
        values = f.drop(columns="batch_id").values.tolist()
        return sorted(str([list(v) if isinstance(v, np.ndarray) else v for v in row]) for row in values)

    return [rows(f) for r in (r1, r2) for f in (r.outcomes, r.unmatched)]


@pytest.mark.parametrize("value", ["value.arrow", "segmented.arrow"])
@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_state_saved_in_an_earlier_format_loads_and_goes_on_as_it_would_have(version, value, tmp_path):
    corpus = shutil.copytree(_CORPUS / f"state_v{version}", tmp_path / "old")  # a save writes segments there
    scenario = runpy.run_path(str(_CORPUS / "make_state.py"))
    store = SegmentStore(str(corpus / "segments"), segment_rows=40, retain_versions=50)
    loaded = load_state((corpus / value).read_bytes(), purgatory().config, store)
    assert loaded_by(loaded) == "rebuilt"
    stayed = purgatory()
    scenario["_first"](stayed)
    scenario["_second"](stayed)
    assert loaded.pending == stayed.pending > 0
    again = load_state(save_state(loaded, store), loaded.config, store)  # and saves in the new format
    assert _go_on(again) == _go_on(stayed)


def test_a_count_operation_with_members_pending_from_0_2_0_keeps_counting_every_source():
    """0.2.0 accepted ``count`` with ``members`` and counted every source, the members unused
    (``corpus/state_v4/count_members.arrow``: pending, mallory's event counted).  Continued
    here it keeps the meaning it was accepted with: the next source completes it, whoever it
    is; it is not read as a quorum of its members.  The same row sent now is rejected."""
    loaded = load_state((_CORPUS / "state_v4" / "count_members.arrow").read_bytes(), purgatory().config)
    pending = pending_frame(loaded)
    assert pending[["op_id", "condition", "progress"]].values.tolist() == [["count-2", "count", 1.0]]
    assert list(pending["members"].iat[0]) == ["ann", "bo"]  # stored, as 0.2.0 stored them
    result = step(loaded, ops=[op("count-3", "k", 20, condition="count", target=2, members=["ann"])],
                  events=[ev("k", 30, source="cy")], wm=0)  # fmt: skip
    done = outcomes(result)["count-2"]
    assert (done["status"], done["resolved_at"], done["matched_events"], done["progress"]) == (
        "completed", 30, 2, 2.0)  # fmt: skip
    assert result.rejected[["op_id", "reason"]].values.tolist() == [["count-3", "unused_members"]]


def test_a_state_of_an_unknown_format_is_refused_naming_it():
    parts, meta = unpack_parts(save_state(purgatory()))
    alien = pack_parts({k: bytes(v) for k, v in parts.items()}, {**meta, "format": "1"})
    with pytest.raises(ValueError, match=r"format '1'.*reads formats 2, 3.*new checkpoint"):
        load_state(alien)


def test_a_state_value_costs_under_100_bytes_a_pending_operation():
    """Format 4 stores the engine's compact columns as Arrow, compressed: 20k pending
    operations with 12-character op_ids and keys and one key each."""
    p = purgatory()
    ids = [f"o{i:011d}" for i in range(20_000)]
    keys = [f"k{i:011d}" for i in range(20_000)]
    p.process(
        pd.DataFrame({"op_id": ids, "key": keys, "ts": 0, "timeout_ms": 3_600_000}), None, watermark_ms=0
    )
    value = save_state(p)
    assert len(value) / p.pending < 100
    again = load_state(value, p.config)
    assert again.pending_operations().equals(p.pending_operations())
