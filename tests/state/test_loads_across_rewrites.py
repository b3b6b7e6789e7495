"""A small shard taken in turns by two workers across rewrites of its full delta file (``state.shard_load``).

Below ``segment.rows`` a shard has no segments: its chain starts with one full delta file,
written afresh every few saves.  PySpark hands a shard's task to whichever worker waited
longest, so two workers take turns on a shard, each holding it parked at the version it last
saved.  That version is brought forward by what changed since, across those rewrites, and the
object brought forward holds what a rebuild from the files holds; a version it does not
descend from, or whose files were swept, is rebuilt.
"""

from __future__ import annotations

import json

import pytest

from spark_purgatory import Purgatory
from spark_purgatory.engine.pending import OPS_ARROW
from spark_purgatory.state import SegmentStore, WorkerCache, load_state, loaded_by, save_state
from spark_purgatory.state.codec import handles_from, table_from
from spark_purgatory.state.increments import pointed
from spark_purgatory.state.shard_state import MAX_CHANGE_SEGMENTS
from tests.support.engine_helpers import ev, op, outcomes, purgatory, step

_TABLES = ("ops", "watch", "resolved", "matches", "events", "keys", "windows", "due")


def _grown() -> Purgatory:
    """A shard whose operations expire and complete in the next batches, and others that
    stay pending throughout."""
    p = purgatory()
    p.shard = 2
    soon = [op(f"o{i}", f"k{i % 7}", i, timeout_ms=500 + (i % 13) * 400) for i in range(300)]
    stay = [op(f"s{i}", f"z{i}", i, timeout_ms=1_000_000) for i in range(200)]
    step(p, ops=soon + stay, wm=0)
    return p


def _batch(p: Purgatory, b: int, size: int = 20) -> dict:
    """Expiries, completions, new operations (one already past its deadline: due), buffered
    events and dedup rows: a micro-batch's worth of every kind of change."""
    late = [op(f"late{b}", "k1", 0, timeout_ms=10)]
    fresh = [op(f"n{b}-{i}", f"k{i % 5}", 100 * b + i, timeout_ms=900) for i in range(size)]
    events = [ev(f"k{b % 7}", 100 * b + 30), ev("k0", 100 * b + 5), ev("k3", 100 * b + 5_000)]
    return {"ops": late + fresh, "events": events, "wm": 100 * b}


def _resolved(result) -> dict[str, tuple]:
    return {k: (v["status"], v["resolved_at"], list(v["keys"])) for k, v in outcomes(result).items()}


def _assert_same(mine: Purgatory, store: SegmentStore, value: bytes, where) -> None:
    """``mine`` holds what the version ``value`` rebuilt from its files holds."""
    rebuilt = load_state(value, mine.config, store, cache=WorkerCache())
    assert loaded_by(rebuilt) == "rebuilt"
    ours, theirs = mine.tables(), rebuilt.tables()
    for name in _TABLES:
        a, b = getattr(ours, name), getattr(theirs, name)
        if name == "due":
            assert sorted(a.tolist()) == sorted(b.tolist()), (where, name)
        else:
            assert a.astype(str).values.tolist() == b.astype(str).values.tolist(), (where, name)
    assert (mine.pending, mine.buffered_events) == (rebuilt.pending, rebuilt.buffered_events), where


def _rewrites(store: SegmentStore, values: list[bytes]) -> int:
    """How many of these versions start their chain afresh (a full delta file)."""
    return sum(len(json.loads(store.read(pointed(v).name)[1]["chain"])) == 1 for v in values)


@pytest.mark.parametrize(
    "segment_rows", [1_500, 1_100, 120], ids=["full-files", "full-files-then-segments", "segments"]
)
def test_two_workers_taking_turns_bring_the_shard_forward_across_compactions(tmp_path, segment_rows):
    """The workers trade the shard every micro-batch, the chain is compacted every few saves
    (a full delta file written afresh; with fewer segment rows, change segments and new
    bases): every load after the first is the other worker's parked version brought
    forward, never a rebuild, and equals the version rebuilt; the live outcomes equal a
    single worker's throughout."""
    store = SegmentStore(str(tmp_path), segment_rows=segment_rows)
    workers = [WorkerCache(), WorkerCache()]
    alone = _grown()
    p = _grown()
    value = save_state(p, store, version=1, park=True, cache=workers[0])
    values, how = [value], []
    for b in range(1, 24):
        p = load_state(value, p.config, store, cache=workers[b % 2])
        how.append(loaded_by(p))
        if b > 1:
            _assert_same(p, store, value, b)
        batch = _batch(p, b)
        assert _resolved(step(p, **batch)) == _resolved(step(alone, **batch)), b
        value = save_state(p, store, version=b + 1, park=True, cache=workers[b % 2])
        values.append(value)
    assert _rewrites(store, values) >= 3  # the chain started afresh many times
    segments = [json.loads(store.read(pointed(v).name)[1].get("segments", "[]")) for v in values]
    bases = {names[0][0] for names in segments if names}
    if segment_rows == 1_500:
        assert not bases
    elif segment_rows == 1_100:  # no segments at first, then a base
        assert not segments[0] and bases
    else:
        assert len(bases) >= 3  # new bases
    assert how[0] == "rebuilt" and how[1:] == ["caught-up"] * 22
    assert p.pending == alone.pending > 20


def test_a_worker_away_for_several_rewrites_catches_up_or_rebuilds_when_that_reads_less(tmp_path):
    """Worker A parks the shard; worker B then serves it through two rewrites of its full
    file (small batches): A brings its parked version forward through both.  After batches
    that changed more rows than the shard's files hold, A's version is rebuilt instead."""
    store = SegmentStore(str(tmp_path), segment_rows=5_000)
    worker_a, worker_b = WorkerCache(), WorkerCache()
    p = _grown()
    for b in range(2, 9):  # worker A alone: the first operations expire and complete
        step(p, **_batch(p, b, size=5))
        value = save_state(p, store, version=b, park=True, cache=worker_a)
        assert load_state(value, p.config, store, cache=worker_a) is p
    a_saved = save_state(p, store, version=9, park=True, cache=worker_a)
    other = load_state(a_saved, p.config, store, cache=worker_b)
    values = []
    for b in range(10, 32):
        step(other, **_batch(other, b, size=5))
        value = save_state(other, store, version=b, park=True, cache=worker_b)
        other = load_state(value, p.config, store, cache=worker_b)
        values.append(value)
    assert _rewrites(store, values) >= 2
    back = load_state(value, p.config, store, cache=worker_a)
    assert back is p and loaded_by(back) == "caught-up"
    _assert_same(back, store, value, "away")
    batch = _batch(back, 40)
    assert _resolved(step(back, **batch)) == _resolved(step(other, **batch))
    # A parks again; B's batches then change more rows than the chain holds (segment_rows)
    value = save_state(back, store, version=40, park=True, cache=worker_a)
    other = load_state(value, p.config, store, cache=worker_b)
    assert loaded_by(other) == "rebuilt"  # B's parked version is not an ancestor of A's save
    for b in range(41, 81):
        step(other, **_batch(other, b, size=20))
        value = save_state(other, store, version=b, park=True, cache=worker_b)
        other = load_state(value, p.config, store, cache=worker_b)
    again = load_state(value, p.config, store, cache=worker_a)
    assert again is not back and loaded_by(again) == "rebuilt"
    _assert_same(again, store, value, "rebuilt")


def test_across_a_rewrite_a_crashed_attempts_version_or_a_swept_chain_is_rebuilt(tmp_path):
    """A parked object from an attempt that crashed after its save descends from no committed
    version; one whose earlier chain's files were swept cannot be brought forward: both
    loads rebuild, and the result is the committed version."""
    store = SegmentStore(str(tmp_path), segment_rows=1_500)
    worker_a, worker_b = WorkerCache(), WorkerCache()
    p = _grown()
    committed = save_state(p, store, version=1, park=True, cache=worker_a)
    attempt = load_state(committed, p.config, store, cache=worker_a)
    step(attempt, **_batch(attempt, 1))
    save_state(attempt, store, version=2, park=True, cache=worker_a)  # then kill -9
    replay = load_state(committed, p.config, store, cache=worker_b)  # the retry, on worker B
    assert loaded_by(replay) == "rebuilt"
    values = []
    for b in range(1, 12):  # more files than a chain holds (MAX_DELTAS): a rewrite
        step(replay, **_batch(replay, b))
        value = save_state(replay, store, version=b + 1, park=True, cache=worker_b)
        replay = load_state(value, p.config, store, cache=worker_b)
        values.append(value)
    assert _rewrites(store, values) >= 1
    crashed = load_state(value, p.config, store, cache=worker_a)
    assert crashed is not attempt and loaded_by(crashed) == "rebuilt"
    _assert_same(crashed, store, value, "crashed")
    # worker A parks this version; B runs on across a rewrite; the earlier chain is swept
    parked = save_state(crashed, store, version=20, park=True, cache=worker_a)
    value = parked
    other = load_state(value, p.config, store, cache=worker_b)
    for b in range(21, 33):
        step(other, **_batch(other, b))
        value = save_state(other, store, version=b, park=True, cache=worker_b)
        other = load_state(value, p.config, store, cache=worker_b)
    assert pointed(parked).name not in [name for name, _ in other.lineage.chain]  # a rewrite since
    live = {*(name for name, _ in other.lineage.chain), *other.lineage.small_chain}
    store.delete([name for name in store.delta_files() if name not in live])  # as a sweep would
    swept = load_state(value, p.config, store, cache=worker_a)
    assert swept is not crashed and loaded_by(swept) == "rebuilt"
    _assert_same(swept, store, value, "swept")


def test_one_worker_keeping_the_shard_splices_its_change_segments_and_they_load_as_the_live_shard(tmp_path):
    """A worker that keeps the shard (every load ``exact``) writes its change segments from
    the chain's delta files as they are (``codec.spliced``): such a segment holds rows its own
    dead handles drop.  Every version rebuilt from the files holds what the live shard holds,
    and goes on alike."""
    store = SegmentStore(str(tmp_path), segment_rows=400, retain_versions=50)
    worker = WorkerCache()
    alone, p = _grown(), _grown()
    value = save_state(p, store, version=1, park=True, cache=worker)
    for b in range(1, 30):
        p = load_state(value, p.config, store, cache=worker)
        assert loaded_by(p) == "exact", b
        if b > 1:
            _assert_same(p, store, value, b)
        batch = _batch(p, b, size=40)
        assert _resolved(step(p, **batch)) == _resolved(step(alone, **batch)), b
        value = save_state(p, store, version=b + 1, park=True, cache=worker)
    changes = [store.read(name)[0] for name in store.segments() if name.startswith("change-")]
    spliced = [
        parts
        for parts in changes
        if set(table_from(parts["tail_ops"], OPS_ARROW)["handle"].to_pylist())
        & set(handles_from(parts["tail_dead"]).tolist())
    ]
    assert len(changes) >= 3 and spliced  # change segments, some spliced with rows their dead drop
    rebuilt = load_state(value, p.config, store, cache=WorkerCache())
    last = {"ops": [op("x", "k3", 3_000)], "events": [ev("k4", 3_050), ev("k2", 3_060)], "wm": 3_500}
    assert _resolved(step(rebuilt, **last)) == _resolved(step(p, **last)) == _resolved(step(alone, **last))
    assert rebuilt.pending == p.pending == alone.pending > 20


def test_a_new_base_comes_for_resolved_operations_or_many_change_segments_not_for_growth(tmp_path):
    """A shard that only grows writes change segments, and a new base only once they are
    ``MAX_CHANGE_SEGMENTS``; once more operations resolved since the base than are
    pending, the next compaction writes a new base.  Every version rebuilt goes on as the
    live shard does."""
    store = SegmentStore(str(tmp_path), segment_rows=100, retain_versions=50)
    worker = WorkerCache()
    p, versions = purgatory(), []

    def save(b: int) -> list:
        value = save_state(p, store, version=b, park=True, cache=worker)
        versions.append(value)
        return json.loads(store.read(pointed(value).name)[1]["segments"])

    for b in range(1, MAX_CHANGE_SEGMENTS + 2):  # a compaction every save: 60 operations > 100 rows
        step(p, ops=[op(f"g{b}-{i}", f"k{b}-{i}", 10 * b, timeout_ms=10**7) for i in range(60)], wm=10 * b)
        segments = save(b)
    assert len(segments) == MAX_CHANGE_SEGMENTS + 1  # the base, no new one for growth
    step(p, ops=[op(f"g-last{i}", f"k-last{i}", 500, timeout_ms=10**7) for i in range(60)], wm=500)
    after = save(100)
    assert len(after) == 1 and after[0][0] != segments[0][0]  # too many change segments: a new base
    step(p, ops=[op(f"g-more{i}", f"k-more{i}", 600, timeout_ms=10**7) for i in range(60)], wm=600)
    base = save(101)[0][0]
    assert base == after[0][0]
    # resolve two thirds of the operations: the next compaction writes a new base
    step(p, events=[ev(f"k{b}-{i}", 1_000) for b in range(1, 13) for i in range(60)], wm=1_000)
    assert p.pending < 500
    assert save(102)[0][0] != base
    for value in versions[-3:]:
        rebuilt = load_state(value, p.config, store, cache=WorkerCache())
        batch = {"events": [ev(f"k{b}-0", 2_000) for b in range(13, 18)], "wm": 2_000}
        assert len(outcomes(step(rebuilt, **batch))) == 5


def test_a_change_segment_that_is_the_batch_change_is_named_not_written_twice(tmp_path):
    """Every save's change is bigger than ``segment.rows``: each compacts its chain, whose
    files after the compaction hold no rows, so the change segment one worker splices is the
    batch's change exactly.  The chain's new first file names that segment instead of
    holding the change again; another worker, holding an older version, brings it forward
    across those compactions by the segments named (never a rebuild) to what a rebuild
    holds, and the outcomes are a single worker's."""
    store = SegmentStore(str(tmp_path), segment_rows=10)
    worker, other = WorkerCache(), WorkerCache()
    alone, p = _grown(), _grown()
    value = save_state(p, store, version=1, park=True, cache=worker)
    other.park(p.lineage.id, p.lineage.token, load_state(value, p.config, store, cache=WorkerCache()))
    how, named = [], 0
    for b in range(1, 9):
        p = load_state(value, p.config, store, cache=worker)
        assert loaded_by(p) == "exact"
        batch = _batch(p, b)
        assert _resolved(step(p, **batch)) == _resolved(step(alone, **batch)), b
        value = save_state(p, store, version=b + 1, park=True, cache=worker)
        parts, meta = store.read(pointed(value).name)
        if "chain_before_in" in meta:
            named += 1
            segment = json.loads(meta["chain_before_in"])["segment"]
            assert segment in [s[0] for s in json.loads(meta["segments"])]
            assert not [name for name in parts if name.startswith("before_")]
        if b % 3 == 0:  # the other worker takes the shard up from where it last saw it
            shadow = load_state(value, p.config, store, cache=other)
            how.append(loaded_by(shadow))
            _assert_same(shadow, store, value, b)
            other.park(shadow.lineage.id, shadow.lineage.token, shadow)
    assert named >= 6  # every save after the first few
    assert how == ["caught-up", "caught-up"]
    assert p.pending == alone.pending > 20
