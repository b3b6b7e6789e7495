"""The read-ahead (``state.read_ahead``): a worker brings the other shards parked in it
forward to the micro-batch another worker just saved, so that its next load of them is
exact; what it gives is what a rebuild from the files gives, and a file of an attempt that
failed never becomes a shard's state."""

from __future__ import annotations

import threading

import pyarrow.fs as pafs

from spark_purgatory import Purgatory
from spark_purgatory.state import SegmentStore, WorkerCache, load_state, loaded_by, save_state
from spark_purgatory.state.increments import directory_of, parsed, pointed, pointer
from spark_purgatory.state.read_ahead import ReadAhead
from tests.support.engine_helpers import ev, op, outcomes, purgatory, step


def _shard(number: int) -> Purgatory:
    p = purgatory()
    p.shard = number
    ops = [op(f"{number}-o{i}", f"k{i % 7}", i, timeout_ms=500 + (i % 13) * 400) for i in range(200)]
    stay = [op(f"{number}-s{i}", f"z{i}", i, timeout_ms=1_000_000) for i in range(100)]
    step(p, ops=ops + stay, wm=0)
    return p


def _batch(number: int, b: int) -> dict:
    fresh = [op(f"{number}-n{b}-{i}", f"k{i % 5}", 100 * b + i, timeout_ms=900) for i in range(15)]
    events = [ev(f"k{b % 7}", 100 * b + 30), ev("k3", 100 * b + 5_000)]
    return {"ops": fresh, "events": events, "wm": 100 * b}


def _resolved(result) -> dict[str, tuple]:
    return {k: (v["status"], v["resolved_at"]) for k, v in outcomes(result).items()}


def _same_as_rebuilt(p: Purgatory, store: SegmentStore, value: bytes) -> bool:
    rebuilt = load_state(value, p.config, store, cache=WorkerCache())
    ours, theirs = p.tables(), rebuilt.tables()
    frames = ("ops", "watch", "resolved", "events", "keys", "windows")
    same = all(
        getattr(ours, n).astype(str).values.tolist() == getattr(theirs, n).astype(str).values.tolist()
        for n in frames
    )
    return same and (p.pending, p.buffered_events) == (rebuilt.pending, rebuilt.buffered_events)


def _call(p: Purgatory, b: int, store: SegmentStore, cache: WorkerCache, ahead: ReadAhead) -> bytes:
    """A shard call's end as the shard step does it: save, park, then the read-ahead."""
    value = save_state(p, store, version=b + 1, park=True, cache=cache)
    at = pointed(value)
    ahead.after_call(store, p.config, at.lineage, at.version)
    return value


def test_two_workers_trading_two_shards_load_them_exact(tmp_path):
    """Each micro-batch the two workers swap the two shards (what PySpark's longest-idle
    worker first does half the time): with the read-ahead every load after the first two is
    exact, holds what a rebuild holds, and the outcomes are a single worker's."""
    store = SegmentStore(str(tmp_path), segment_rows=400)
    caches = [WorkerCache(), WorkerCache()]
    aheads = [ReadAhead(cache, poll=0.001) for cache in caches]
    alone = {n: _shard(n) for n in (0, 1)}
    values = {}
    for n in (0, 1):
        values[n] = _call(_shard(n), 0, store, caches[n], aheads[n])
    how = []
    for b in range(1, 12):
        for n in (0, 1):
            worker = (n + b) % 2  # shard 0 on worker 1 in odd batches, on worker 0 in even ones
            p = load_state(values[n], alone[n].config, store, cache=caches[worker])
            how.append(loaded_by(p))
            assert _same_as_rebuilt(p, store, values[n]), (b, n)
            batch = _batch(n, b)
            assert _resolved(step(p, **batch)) == _resolved(step(alone[n], **batch)), (b, n)
            values[n] = _call(p, b, store, caches[worker], aheads[worker])
        assert all(ahead.wait(10) for ahead in aheads)
    assert how[:2] == ["rebuilt", "rebuilt"]  # each worker's first look at the other's shard
    assert how[2:] == ["exact"] * 20
    assert sum(ahead.forwarded for ahead in aheads) == 20 + 2  # the last batch's too
    assert p.pending == alone[1].pending > 50


def test_a_failed_attempts_file_never_becomes_the_shards_state(tmp_path):
    """Worker B's first attempt at shard 1 writes its delta file and fails; worker A reads
    ahead to that file; B's second attempt writes the version Spark commits.  A's next load
    of that version rebuilds it (the parked token is not the committed one): the outcomes are
    those of one clean run."""
    store = SegmentStore(str(tmp_path), segment_rows=400)
    a, b = WorkerCache(), WorkerCache()
    ahead = ReadAhead(a, poll=0.001)
    alone = _shard(1)
    one = _call(_shard(1), 0, store, a, ahead)  # A served shard 1 first
    _call(_shard(0), 0, store, b, ReadAhead(b))  # B served shard 0
    # batch 1: A serves shard 0 (and then reads ahead shard 1), B serves shard 1
    p0 = load_state(_newest(store, 0), None, store, cache=a)
    step(p0, **_batch(0, 1))
    _call(p0, 1, store, a, ahead)
    failed = load_state(one, alone.config, store, cache=WorkerCache())
    step(failed, **(_batch(1, 1) | {"wm": 999}))  # another attempt's changes (a later watermark)
    save_state(failed, store, version=2)
    assert ahead.wait(10) and ahead.forwarded == 1  # A brought its shard 1 to the failed file
    retried = load_state(one, alone.config, store, cache=b)
    batch = _batch(1, 1)
    expected = _resolved(step(alone, **batch))
    assert _resolved(step(retried, **batch)) == expected
    committed = save_state(retried, store, version=2)
    # batch 2: A serves shard 1 again
    p1 = load_state(committed, alone.config, store, cache=a)
    assert loaded_by(p1) == "rebuilt"
    batch = _batch(1, 2)
    assert _resolved(step(p1, **batch)) == _resolved(step(alone, **batch))
    assert p1.pending == alone.pending


def _newest(store: SegmentStore, shard: int) -> bytes:
    """The pointer to a shard's newest delta file (what Spark's group state holds)."""
    names = [n for n in store.delta_files() if n.startswith(directory_of(shard) + "/")]
    return pointer(max(names, key=lambda n: parsed(n).version))


def test_a_shard_not_called_is_waited_for_a_while_then_left_parked(tmp_path):
    """Spark calls a shard only when it has rows or a timeout: the read-ahead waits
    ``patience`` for its file, then gives up; the shard stays parked as it was."""
    store = SegmentStore(str(tmp_path), segment_rows=400)
    cache = WorkerCache()
    ahead = ReadAhead(cache, patience=0.05, poll=0.001)
    _call(_shard(1), 0, store, cache, ahead)
    _call(_shard(0), 1, store, cache, ahead)  # shard 1 wanted at version 2: never written
    assert ahead.wait(5) and ahead.forwarded == 0
    assert [lineage for lineage, _token, _obj in cache.parked()] == [
        pointed(_newest(store, 1)).lineage,
        pointed(_newest(store, 0)).lineage,
    ]


def test_a_store_off_this_machine_is_not_read_ahead(tmp_path):
    store = SegmentStore(str(tmp_path), segment_rows=400)
    store._fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())  # as an object store's
    cache = WorkerCache()
    ahead = ReadAhead(cache)
    _call(_shard(1), 0, SegmentStore(str(tmp_path), segment_rows=400), cache, ReadAhead(cache))
    ahead.after_call(store, None, "another", 5)
    assert store.local_directory("deltas") is None
    assert ahead.wait(0) and ahead.forwarded == 0


def test_a_load_waits_for_the_shard_the_read_ahead_holds():
    cache = WorkerCache()
    cache.park("L", "t1", "old")
    assert cache.take("L", "t0") is None  # not the version parked
    assert cache.take("L", "t1") == "old"
    claimed = []
    loader = threading.Thread(target=lambda: claimed.append(cache.claim("L")))
    loader.start()
    loader.join(0.1)
    assert loader.is_alive() and not claimed  # waiting for the read-ahead
    cache.give_back("L", "t2", "new")
    loader.join(5)
    assert claimed == ["new"]
    cache.park("M", "t1", "m")
    assert cache.take("M", "t1") == "m"
    cache.give_back("M")  # could not be brought forward: nothing parked
    assert cache.claim("M") is None
