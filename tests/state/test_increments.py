"""A shard's state in versioned delta files, the group state a pointer to them (``state.increments``).

What Spark's group state carries must not grow with the pending operations; a batch replayed
after a crash must load the version Spark committed, never a later one a crashed attempt
wrote; old files go, retained versions stay loadable.
"""

from __future__ import annotations

import pytest

from spark_purgatory import Purgatory
from spark_purgatory.state import SegmentStore, WorkerCache, load_state, loaded_by, save_state
from spark_purgatory.state.increments import MAX_DELTAS, SWEEP_EVERY, is_pointer, parsed, pointed
from tests.support.engine_helpers import ev, op, outcomes, purgatory, step


def _resolved(result) -> dict[str, tuple]:
    return {k: (v["status"], v["resolved_at"], list(v["keys"])) for k, v in outcomes(result).items()}


def _grown(n: int) -> Purgatory:
    p = purgatory()
    step(p, ops=[op(f"o{i}", f"k{i % 50}", i, timeout_ms=100_000) for i in range(n)], wm=0)
    return p


def _file_bytes(store: SegmentStore, value: bytes) -> int:
    parts, _ = store.read(pointed(value).name)
    return sum(len(v) for v in parts.values())


def test_the_group_state_holds_a_pointer_whose_size_does_not_follow_the_pending_count(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=100_000)
    small, big = _grown(10), _grown(20_000)
    small.shard = big.shard = 3
    values = {n: save_state(p, store, version=1) for n, p in ((10, small), (20_000, big))}
    assert all(is_pointer(v) for v in values.values())
    assert len(values[10]) == len(values[20_000]) < 120
    # a save's delta file follows what the batch changed, not the shard
    whole = len(save_state(big))
    step(big, ops=[op("one-more", "k1", 5, timeout_ms=100_000)], events=[ev("k2", 30_000)], wm=0)
    after = save_state(big, store, version=2)
    assert _file_bytes(store, after) < whole / 20
    again = load_state(after, big.config, store, cache=WorkerCache())
    assert loaded_by(again) == "rebuilt" and again.pending == big.pending == 20_000 + 1 - 400


def test_a_batch_replayed_after_a_crash_loads_the_committed_version_not_the_crashed_attempts(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=30)
    cache = WorkerCache()
    p = _grown(100)
    committed = save_state(p, store, version=1000, park=True, cache=cache)  # Spark committed this
    batch = {"ops": [op("x", "k1", 50, timeout_ms=100_000)], "events": [ev("k1", 60)], "wm": 10}
    attempt = load_state(committed, p.config, store, cache=cache)
    assert attempt is p and loaded_by(attempt) == "exact"
    live = _resolved(step(attempt, **batch))
    crashed = save_state(attempt, store, version=2000, park=True, cache=cache)  # then kill -9
    # the replay gets the committed pointer; the crashed attempt's object is parked, its files written
    replay = load_state(committed, p.config, store, cache=cache)
    assert replay is not attempt and loaded_by(replay) == "rebuilt" and replay.pending == 100
    assert _resolved(step(replay, **batch)) == live
    replayed = save_state(replay, store, version=2000)
    assert pointed(replayed).version == pointed(crashed).version and replayed != crashed  # never overwritten
    final = load_state(replayed, p.config, store, cache=WorkerCache())
    assert final.pending == attempt.pending == 100 + 1 - 3  # o1, o51 and x completed by k1 at 60


def test_old_delta_files_are_swept_and_every_retained_version_still_loads(tmp_path):
    retain = 3
    store = SegmentStore(str(tmp_path), segment_rows=1_000, retain_versions=retain)
    p = purgatory()
    p.shard = 0
    pointers, pending = [], []
    for b in range(60):
        step(p, ops=[op(f"b{b}-{i}", f"k{i}", b * 10, timeout_ms=100_000) for i in range(5)], wm=b * 10)
        pointers.append(save_state(p, store, version=10 * b + 1))
        pending.append(p.pending)
        if b % 7 == 3:  # an attempt that crashed after writing its file: named by no pointer
            crashed = load_state(pointers[-2], p.config, store, cache=WorkerCache())
            save_state(crashed, store, version=10 * b + 1)
    versions = {parsed(name).version for name in store.delta_files()}
    assert len(versions) <= retain + MAX_DELTAS + SWEEP_EVERY - 1  # swept every SWEEP_EVERY saves
    assert min(versions) > 10 * 30  # the first half's files, and the crashed attempts', are gone
    for value, n in list(zip(pointers, pending, strict=True))[-retain:]:
        assert load_state(value, p.config, store, cache=WorkerCache()).pending == n


def test_a_parked_ancestor_reads_only_the_delta_files_written_since(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=10_000)
    worker_a, worker_b = WorkerCache(), WorkerCache()
    p = _grown(500)
    value = save_state(p, store, version=1, park=True, cache=worker_a)
    other = load_state(value, p.config, store, cache=worker_b)  # worker B runs the next batches
    assert loaded_by(other) == "rebuilt"
    for b in range(2, 5):
        step(other, ops=[op(f"n{b}", "m", b, timeout_ms=100_000)], events=[ev(f"k{b}", 900)], wm=b)
        value = save_state(other, store, version=b)
    back = load_state(value, p.config, store, cache=worker_a)  # worker A again
    assert back is p and loaded_by(back) == "caught-up"
    assert back.pending == other.pending
    after = [_resolved(step(x, events=[ev("k7", 950), ev("m", 951)], wm=5)) for x in (back, other)]
    assert after[0] == after[1] and len(after[0]) > 0


def test_a_whole_value_from_before_the_pointers_loads_and_its_next_save_writes_files(tmp_path):
    store = SegmentStore(str(tmp_path))
    p = _grown(40)
    old = save_state(p)  # what the group state held before the pointers (no segments below segment.rows)
    loaded = load_state(old, p.config, store)
    value = save_state(loaded, store, version=7)
    assert is_pointer(value) and store.delta_files() == [pointed(value).name]
    assert load_state(value, p.config, store, cache=WorkerCache()).pending == 40


def test_a_parked_ancestor_brought_forward_live_equals_the_version_rebuilt(tmp_path):
    """Expiries, completions, new operations (some already past their deadline) and dedup rows
    between the parked version and the loaded one: the live object brought forward holds what
    a rebuild from the files holds, and both go on alike."""
    store = SegmentStore(str(tmp_path), segment_rows=10_000)
    worker_a, worker_b = WorkerCache(), WorkerCache()
    p = purgatory()
    step(p, ops=[op(f"o{i}", f"k{i % 7}", i, timeout_ms=50 + (i % 13) * 40) for i in range(300)], wm=0)
    value = save_state(p, store, version=1, park=True, cache=worker_a)
    other = load_state(value, p.config, store, cache=worker_b)
    for b in range(1, 4):
        late = [op(f"late{b}", "k1", 0, timeout_ms=10)]  # past its deadline on arrival: due
        fresh = [op(f"n{b}-{i}", f"k{i % 5}", 100 * b + i, timeout_ms=400) for i in range(20)]
        step(other, ops=late + fresh, events=[ev(f"k{b}", 100 * b + 30), ev("k0", 100 * b + 5)], wm=100 * b)
        value = save_state(other, store, version=b + 1)
    back = load_state(value, p.config, store, cache=worker_a)
    rebuilt = load_state(value, p.config, store, cache=WorkerCache())
    assert back is p and loaded_by(back) == "caught-up" and loaded_by(rebuilt) == "rebuilt"
    for name in ("ops", "watch", "resolved", "matches", "events", "keys", "windows"):
        mine, theirs = getattr(back.tables(), name), getattr(rebuilt.tables(), name)
        assert mine.astype(str).values.tolist() == theirs.astype(str).values.tolist(), name
    batch = {"ops": [op("n1-3", "k3", 900)], "events": [ev("k4", 950), ev("k2", 960)], "wm": 1_500}
    assert _resolved(step(back, **batch)) == _resolved(step(rebuilt, **batch))
    assert back.pending == rebuilt.pending


@pytest.mark.parametrize("segment_rows", [100_000, 50], ids=["few-compactions", "a-compaction-every-save"])
def test_buffered_events_and_completed_windows_cost_a_save_what_the_batch_changed(tmp_path, segment_rows):
    """Thousands of events the watermark has not passed, windows of completed operations:
    a delta file holds them whole once every MAX_DELTAS saves, whatever the big tables'
    compactions, and otherwise what the batch changed of them; every version loads (rebuilt
    from its files, or brought forward from a parked ancestor) with the events, windows and
    other small tables the live shard has."""
    store = SegmentStore(str(tmp_path), segment_rows=segment_rows)
    caches = [WorkerCache(), WorkerCache()]
    p = purgatory()
    p.shard = 1
    ops = [op(f"o{i}", f"k{i}", i, timeout_ms=1_000 + (i % 10) * 5_000) for i in range(2_000)]
    step(p, ops=ops, events=[ev(f"k{i % 3_000}", 2_000 + 10 * i) for i in range(5_000)], wm=0)
    value = save_state(p, store, version=1, park=True, cache=caches[0])
    sizes: dict[bool, list[int]] = {True: [], False: []}  # by "holds the events whole"
    for b in range(2, 25):
        p = load_state(value, p.config, store, cache=caches[b % 2])  # two versions back: forward
        fresh = [op(f"n{b}-{i}", f"k{i}", 1_000 * b, timeout_ms=3_000) for i in range(0, 3_000, 97)]
        news = [ev(f"k{i}", 1_000 * b + 500) for i in range(0, 3_000, 89)]
        step(p, ops=fresh, events=news, wm=1_000 * b)  # events finalised, windows retired and added
        value = save_state(p, store, version=b, park=True, cache=caches[b % 2])
        parts, _meta = store.read(pointed(value).name)
        sizes["events" in parts].append(sum(len(v) for v in parts.values()))
        rebuilt = load_state(value, p.config, store, cache=WorkerCache())
        mine, theirs = p.tables(), rebuilt.tables()
        for name in ("events", "windows", "matches", "keys", "ops"):
            rows = [getattr(t, name).astype(str).values.tolist() for t in (mine, theirs)]
            assert rows[0] == rows[1], (b, name)
    assert p.buffered_events > 1_000 and len(p.tables().windows) > 1_000
    assert 2 <= len(sizes[True]) <= 3 and len(sizes[False]) >= 20  # whole once every MAX_DELTAS saves
    assert max(sizes[False]) < min(sizes[True]) / 4


def test_a_parked_ancestor_brought_forward_does_not_warn_again_what_a_later_version_warned(tmp_path):
    """Operations registered and warned after the parked version (on another worker) are
    warned once: brought forward, the parked engine knows them as warned, as a rebuild does."""
    store = SegmentStore(str(tmp_path), segment_rows=10_000)
    worker_a, worker_b = WorkerCache(), WorkerCache()
    p = purgatory()
    step(p, ops=[op("first", "k", 0, timeout_ms=1000, warn_ms=100)], wm=0)
    value = save_state(p, store, version=1, park=True, cache=worker_a)
    other = load_state(value, p.config, store, cache=worker_b)  # worker B runs the next batch
    later = [op("later", "k", 100, timeout_ms=500, warn_ms=400)]  # warn_at 200
    warned = [step(other, ops=later, wm=100).warnings, step(other, wm=300).warnings]
    assert [list(w["op_id"]) for w in warned] == [[], ["later"]]
    value = save_state(other, store, version=2)
    back = load_state(value, p.config, store, cache=worker_a)  # worker A again
    assert back is p and loaded_by(back) == "caught-up"
    assert step(back, wm=300).warnings.empty
