"""The engine's columnar tables, hash index, key table and resolved table, against plain models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from spark_purgatory.engine import memory, text
from spark_purgatory.engine.arrays import all_distinct, equal_pairs, hash_strings, pair_order, tie_order
from spark_purgatory.engine.columns import SPARSE, TEXT, Columns, HashIndex
from spark_purgatory.engine.dedup import ResolvedTable, resolved_rows
from spark_purgatory.engine.frames import empty
from spark_purgatory.engine.pending import Pending
from spark_purgatory.engine.progress import KeyTable
from spark_purgatory.engine.rows import Rows
from spark_purgatory.engine.tables import I64_MIN, KEYS, OPS, RESOLVED, WATCH

_DTYPES = {"handle": "int64", "hash": "uint64", "name": "object"}


def _table() -> Columns:
    return Columns(_DTYPES, indexed=("hash",))


def _rows(handles: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "handle": handles,
        "hash": (handles % 7).astype(np.uint64),  # many rows share a hash
        "name": np.array([f"n{h}" for h in handles], dtype=object),
    }


def test_lookups_ranges_and_sizes_follow_appends_and_removals_through_compactions():
    table, model = _table(), {}  # model: handle -> hash of the live rows
    rng = np.random.default_rng(5)
    next_handle = 0
    for _ in range(60):
        n = int(rng.integers(0, 300))
        handles = np.arange(next_handle, next_handle + n, dtype=np.int64)
        next_handle += n
        table.append(_rows(handles))
        model.update({int(h): int(h % 7) for h in handles})
        if model:  # remove a random part of the live rows (compactions follow)
            live = np.array(sorted(model), dtype=np.int64)
            gone = live[rng.random(live.size) < 0.4]
            table.kill(table.positions(gone))
            for h in gone:
                del model[int(h)]
        assert len(table) == len(model)
        assert table.column("handle")[table.live_positions()].tolist() == sorted(model)
        probes = np.array([3, 5, 11], dtype=np.uint64)
        probe, pos = table.lookup("hash", probes)
        found = sorted(zip(probes[probe].tolist(), table.column("handle")[pos].tolist(), strict=True))
        assert found == sorted((v, h) for h, v in model.items() if v in (3, 5))
        asked = np.array([0, next_handle - 1, next_handle + 5], dtype=np.int64)
        assert table.contains(asked).tolist() == [int(h) in model for h in asked]
    assert table.occupied < 2 * max(len(table), 1024)  # tombstones were compacted away


def test_ranges_find_every_row_of_a_handle_and_since_the_newest():
    table = _table()
    table.append(_rows(np.array([1, 1, 2, 4, 4, 4], dtype=np.int64)))
    table.kill(np.array([3]))  # the first row of handle 4
    probe, pos = table.ranges(np.array([4, 1, 3], dtype=np.int64))
    assert sorted(zip(probe.tolist(), pos.tolist(), strict=True)) == [(0, 4), (0, 5), (1, 0), (1, 1)]
    assert table.since(2).tolist() == [2, 4, 5]
    assert table.frame(columns=["handle"])["handle"].tolist() == [1, 1, 2, 4, 4]


def test_the_hash_index_keeps_few_runs_and_finds_every_equal_hash():
    index, sizes = HashIndex(), [8, 8, 16, 1, 1, 2, 100, 3, 3, 3, *[10] * 70]
    rows = 0
    for size in sizes:
        index.add(np.arange(size, dtype=np.uint64) % 5, np.arange(rows, rows + size, dtype=np.int64))
        rows += size
        assert index.runs <= int(np.log2(rows)) + 2
    probe, found = index.lookup(np.array([2, 9], dtype=np.uint64))
    assert probe.tolist() == [0] * found.size
    assert len(index) == rows
    assert found.size == sum(int((np.arange(s) % 5 == 2).sum()) for s in sizes)


def test_a_runs_filter_passes_every_hash_it_holds_and_few_others():
    """A lookup searches a run only for the probes its filter passes: none it holds may be
    stopped (or a pending op_id would be missed), and most it does not hold are."""
    rng = np.random.default_rng(7)
    held = rng.integers(0, 2**63, 50_000, dtype=np.int64).view(np.uint64) * np.uint64(2)
    index = HashIndex()
    index.add(held, np.arange(held.size, dtype=np.int64))
    bloom = index._runs[0][2]
    assert np.array_equal(bloom.passing(held), np.arange(held.size))
    others = rng.integers(0, 2**63, 50_000, dtype=np.int64).view(np.uint64)
    assert bloom.passing(others).size < 0.1 * others.size
    probes = np.concatenate([others[:1000], held[::50]])  # found through the filter, whatever order
    probe, row = index.lookup(rng.permutation(probes))
    assert sorted(held[row].tolist()) == sorted(held[::50].tolist())


def test_equal_pairs_is_the_sort_merge_join_with_and_without_repeated_hashes():
    rng = np.random.default_rng(3)
    for build_range in (10_000_000, 50):  # distinct hashes (the hash join), then repeated ones
        build = rng.integers(0, build_range, 2_000).astype(np.uint64)
        if build_range > 2_000:
            build = np.unique(build)[rng.permutation(np.unique(build).size)]
        probes = np.concatenate([build[rng.integers(0, build.size, 1_500)], rng.integers(0, 99, 500)]).astype(
            np.uint64
        )
        expected = sorted(
            (i, j) for i, p in enumerate(probes.tolist()) for j in np.flatnonzero(build == p).tolist()
        )
        probe, at = equal_pairs(build, probes)
        assert list(zip(probe.tolist(), at.tolist(), strict=True)) == expected


def test_all_distinct_tells_repeats_few_or_many():
    rng = np.random.default_rng(4)
    for n in (0, 1, 2, 200, 256, 257, 5_000):  # a sort, then pandas' hash table
        values = rng.permutation(n).astype(np.uint64)
        assert all_distinct(values)
        if n > 1:
            values[-1] = values[int(rng.integers(0, n - 1))]
            assert not all_distinct(values)


def _touch_keys(keys: pd.DataFrame, khash: np.ndarray, **columns: np.ndarray) -> pd.DataFrame:
    """The key frame with these keys' columns raised to the given values (running maxima)."""
    update = pd.DataFrame({"khash": khash, **columns})
    both = pd.concat([keys, update], ignore_index=True) if len(keys) else update
    return both.groupby("khash", sort=False, as_index=False).max()[list(KEYS)]


def _retire_keys(keys: pd.DataFrame, watermark: int, retention: int) -> pd.DataFrame:
    """The keys whose progress retention or resolution time the watermark has not passed."""
    keep = (keys["last_event_ts"] > watermark - retention) | (keys["resolved_until"] > watermark)
    return keys.loc[keep].reset_index(drop=True)


def _keys_wakeup(keys: pd.DataFrame, retention: int) -> int:
    """The earliest watermark at which ``_retire_keys`` forgets a key."""
    last = keys["last_event_ts"].to_numpy(np.int64)
    progress_until = np.where(last > I64_MIN, last + retention, I64_MIN)
    return int(np.maximum(progress_until, keys["resolved_until"].to_numpy(np.int64)).min()) + 1


def test_the_key_table_answers_as_the_frame_it_replaces():
    """``KeyTable`` (in place, retirement deferred) against a plain key frame, through random
    touches and retirements."""
    retention = 50
    table, model = KeyTable(retention), empty(KEYS)
    rng = np.random.default_rng(3)
    wm = -100
    for _ in range(300):
        n = int(rng.integers(1, 12))
        khash = rng.integers(0, 40, n).astype(np.uint64)
        columns = {
            "progress": np.where(rng.random(n) < 0.5, rng.random(n), np.nan),
            # some rows touched already forgettable: they count until the next retirement
            "last_event_ts": np.where(rng.random(n) < 0.7, wm + rng.integers(-120, 30, n), I64_MIN),
            "resolved_until": np.where(rng.random(n) < 0.5, wm + rng.integers(-10, 80, n), I64_MIN),
        }
        table.touch(khash, **columns)
        model = _touch_keys(model, khash, **columns)
        if rng.random() < 0.5:
            wm += int(rng.integers(0, 40))
            table.retire(wm)
            model = _retire_keys(model, wm, retention)
        by_hash = ["khash"]
        mine = table.frame().sort_values(by_hash).reset_index(drop=True)
        assert mine.astype(str).values.tolist() == model.sort_values(by_hash).astype(str).values.tolist()
        assert len(table) == len(model)
        probe = rng.integers(0, 40, 5).astype(np.uint64)
        assert sorted(table.frame(probe)["khash"].tolist()) == sorted(
            set(probe.tolist()) & set(model["khash"].tolist())
        )
        if len(model):
            assert table.wakeup() == _keys_wakeup(model, retention)


def _resolved_steps(seed: int, steps: int, ids: int, retire: float):
    """A ``ResolvedTable`` and the ``RESOLVED`` frame it replaces (gaining rows, dropping those
    whose ``expire_at`` each retirement reached), after each of ``steps`` random steps."""
    table, model = ResolvedTable(), empty(RESOLVED)
    rng = np.random.default_rng(seed)
    wm = 0
    for _ in range(steps):
        named = np.array([f"o{i}" for i in rng.integers(0, ids, int(rng.integers(0, 9)))], dtype=object)
        rows = resolved_rows(named, wm + rng.integers(-5, 40, named.size), wm, int(rng.integers(0, 20)))
        table.add(rows)
        model = pd.concat([model, rows.to_frame()], ignore_index=True) if len(rows) else model
        if rng.random() < retire:
            wm += int(rng.integers(0, 15))
            table.retire(wm)
            model = model.loc[model["expire_at"] > wm]
        yield table, model, rng


def test_the_resolved_table_answers_as_the_frame_it_replaces():
    """``ResolvedTable`` (forgetting deferred) against the frame it replaces."""
    for table, model, _ in _resolved_steps(8, 300, 60, 0.5):
        asked = np.array([f"o{i}" for i in range(60)], dtype=object)
        hashes = hash_strings(asked)
        assert table.contains(hashes).tolist() == np.isin(hashes, model["hash"].to_numpy(np.uint64)).tolist()
        assert len(table) == len(model)
        expected = model.sort_values(["hash", "expire_at"]).astype(str).values.tolist()
        assert table.frame().astype(str).values.tolist() == expected
        assert table.wakeup() == (int(model["expire_at"].min()) + 1 if len(model) else None)


def test_the_resolved_tables_earliest_expiry_asked_now_and_then_is_the_models():
    """``wakeup`` keeps its answer between calls (lowered by adds, dropped by a retirement that
    forgets it): asked at random moments, it is still the earliest remembered ``expire_at``."""
    for table, model, rng in _resolved_steps(21, 400, 40, 0.4):
        if rng.random() < 0.3:
            assert table.wakeup() == (int(model["expire_at"].min()) + 1 if len(model) else None)


def test_a_tables_kept_positions_and_ranges_follow_its_changes():
    """The last ``positions`` / ``ranges`` answer is kept until an append, a removal or a
    compaction, and handed out read-only."""
    table = _table()
    table.append(_rows(np.array([1, 1, 2, 4, 4, 4], dtype=np.int64)))
    asked = np.array([4, 1], dtype=np.int64)
    first = table.ranges(asked)
    assert table.ranges(asked.copy())[1] is first[1]  # the same handles: the kept answer
    assert not first[1].flags.writeable
    table.kill(np.array([3]))  # the first row of handle 4
    assert sorted(table.ranges(asked)[1].tolist()) == [0, 1, 4, 5]
    assert table.positions(np.array([2], dtype=np.int64)).tolist() == [2]
    table.append(_rows(np.array([5, 6], dtype=np.int64)))
    assert table.positions(np.array([2, 6], dtype=np.int64)).tolist() == [2, 7]
    for _ in range(3):  # compactions move the rows: the kept answers go with them
        table.append(_rows(np.arange(10, 1500, dtype=np.int64)))
        table.kill(table.positions(np.arange(10, 1500, dtype=np.int64)))
    assert table.positions(np.array([2, 6], dtype=np.int64)).tolist() == [2, 6]
    assert sorted(table.ranges(np.array([1], dtype=np.int64))[1].tolist()) == [0, 1]


# -- compact text ---------------------------------------------------------------------------------


def test_text_columns_keep_any_string_through_appends_removals_and_compactions():
    table = Columns({"handle": "int64", "hash": "uint64", "name": TEXT}, indexed=("hash",))
    model: dict[int, str] = {}
    rng = np.random.default_rng(9)
    words = ["", "a", "naïve", "日本語のキー", "x" * 300, "tab\tand\nnewline", "emoji 🙂"]
    next_handle = 0
    for _ in range(40):
        n = int(rng.integers(0, 200))
        handles = np.arange(next_handle, next_handle + n, dtype=np.int64)
        next_handle += n
        names = np.array([f"{words[h % len(words)]}{h}" for h in handles], dtype=object)
        table.append({"handle": handles, "hash": hash_strings(names), "name": names})
        model.update(zip(handles.tolist(), names.tolist(), strict=True))
        live = np.array(sorted(model), dtype=np.int64)
        gone = live[rng.random(live.size) < 0.45]
        table.kill(table.positions(gone))
        for h in gone.tolist():
            del model[h]
        rows = table.rows()
        assert rows["name"].tolist() == [model[h] for h in sorted(model)]
        assert table.arrow("name", table.live_positions()).to_pylist() == rows["name"].tolist()
    assert table.occupied < 2 * max(len(table), 1024)  # compactions happened


def test_strings_hash_alike_as_python_strings_and_as_arrow_text():
    """What a shard saves holds hashes (key progress, remembered op_ids): the text the engine
    keeps as Arrow must hash as the same strings do as ``str``, pandas' SipHash of their UTF-8."""
    rng = np.random.default_rng(5)
    alphabet = ["a", "Z", "0", "-", " ", "\x00", "ç", "é", "中", "😀", "\u200b"]
    strings = [""] + ["".join(rng.choice(alphabet, int(rng.integers(0, 40)))) for _ in range(2_000)]
    objects = np.array(strings, dtype=object)
    expected = pd.util.hash_array(objects, categorize=False)
    assert hash_strings(objects).tolist() == expected.tolist()
    for arrow in (
        pa.array(strings, pa.string()),
        pa.array(strings, pa.large_string()),
        pa.chunked_array([strings[:700], strings[700:]], pa.string()),
        pa.array(strings, pa.string()).slice(3),  # an offset into the buffers
    ):
        assert (
            hash_strings(arrow).tolist()
            == pd.util.hash_array(np.array(arrow.to_pylist(), dtype=object), categorize=False).tolist()
        )
    with_null = pa.array(["x", None], pa.string())
    assert hash_strings(with_null).tolist() == hash_strings(np.array(["x", None], dtype=object)).tolist()
    table = Columns({"handle": "int64", "key": TEXT}, hashed={"kh": "key"})
    table.append({"handle": np.arange(len(strings), dtype=np.int64), "key": objects, "kh": expected})
    few = np.array([0, 5, 17, 1_999])  # few rows: hashed again from the stored text
    assert table.hashes("kh", few).tolist() == expected[few].tolist()


def test_text_offsets_widen_to_64_bits_past_their_32_bit_range(monkeypatch):
    monkeypatch.setattr(text, "_I32_MAX", 100)  # as if 100 bytes were 2 GiB
    column = text.TextColumn()
    column.append(np.array(["a" * 60, "b" * 30], dtype=object))
    assert column.arrow().type == pa.string()
    column.append(np.array(["c" * 40, "dd"], dtype=object))  # past 100 bytes
    assert column.arrow().type == pa.large_string()
    assert column.objects(np.array([3, 2, 0])).tolist() == ["dd", "c" * 40, "a" * 60]


def test_sparse_and_index_only_columns_read_back_what_was_appended_through_compactions():
    """``target``-like columns keep only their non-NaN rows, an op_id's hash lives in its
    index only; both read back as stored columns would, by few rows or by many."""
    table = Columns({"handle": "int64", "name": TEXT, "v": SPARSE}, hashed={"h": "name"})
    model: dict[int, tuple[str, float]] = {}
    rng = np.random.default_rng(11)
    next_handle = 0
    for _ in range(40):
        n = int(rng.integers(0, 400))
        handles = np.arange(next_handle, next_handle + n, dtype=np.int64)
        next_handle += n
        names = np.array([f"op-{h}" for h in handles], dtype=object)
        values = np.where(rng.random(n) < 0.2, rng.random(n), np.nan)
        table.append({"handle": handles, "name": names, "v": values, "h": hash_strings(names)})
        model.update({int(h): (nm, v) for h, nm, v in zip(handles, names, values, strict=True)})
        live = np.array(sorted(model), dtype=np.int64)
        gone = live[rng.random(live.size) < 0.3]
        table.kill(table.positions(gone))
        for h in gone:
            del model[int(h)]
        live = np.array(sorted(model), dtype=np.int64)
        for share in (0.01, 0.1, 0.5, 1.0):  # strings hashed again, a range inverted, all inverted
            size = min(live.size, max(1, int(share * live.size)))
            asked = np.sort(rng.choice(live, size=size, replace=False))
            rows = table.rows(table.positions(asked), ["handle", "name", "v", "h"])
            names = [model[int(h)][0] for h in asked]
            assert rows["name"].tolist() == names
            assert rows["h"].tolist() == hash_strings(np.array(names, dtype=object)).tolist()
            expected = np.array([model[int(h)][1] for h in asked])
            assert np.array_equal(rows["v"], expected, equal_nan=True)
        if live.size:
            probe, pos = table.lookup("h", hash_strings(np.array([model[int(live[-1])][0]], dtype=object)))
            assert table.column("handle")[pos].tolist() == [int(live[-1])]
    assert table.occupied < 2 * max(len(table), 1024)  # compactions happened


def test_big_arrays_live_in_their_own_mappings_which_go_with_them():
    before = memory.mapped_bytes()
    small, big = memory.empty(10, np.int64), memory.empty(memory.MAPPED_BYTES, np.uint8)
    assert not isinstance(small.base, type(big.base))
    big[:] = 7
    assert big.flags.writeable and int(big.sum()) == 7 * memory.MAPPED_BYTES
    assert memory.mapped_bytes() == before + memory.MAPPED_BYTES
    del big
    assert memory.mapped_bytes() == before
    memory.release()  # the allocators' free memory back to the system: nothing to see, no error


def test_the_pair_order_is_lexsorts_with_and_without_repeated_first_values():
    """``pair_order`` (a state's op_id hashes and key hashes, sorted on every save) against
    ``np.lexsort``: unique 64-bit hashes take the argsort path, repeated ones lexsort's."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 400))
        span = int(rng.choice([3, 50, 2**63]))  # many repeats, some, almost surely none
        first = rng.integers(0, span, n, dtype=np.int64).view(np.uint64)
        second = rng.integers(-(2**40), 2**40, n, dtype=np.int64)
        assert pair_order(first, second).tolist() == np.lexsort((second, first)).tolist()


def _pending_batch(first: int, n: int) -> tuple[Rows, Rows]:
    """``n`` operations from handle ``first`` on (two keys each, members on every other), and
    their watchers, as ``Pending.add`` takes them."""
    handles = np.arange(first, first + n, dtype=np.int64)
    op_id = np.array([f"op-{h}" for h in handles], dtype=object)
    keys = np.empty(n, dtype=object)
    keys[:] = [[f"k{h % 3}", f"j{h}"] for h in handles]
    members = np.empty(n, dtype=object)
    members[:] = [[f"m{h}"] if h % 2 else [] for h in handles]
    ops = Rows(
        {
            "handle": handles,
            "op_id": op_id,
            "keys": keys,
            "ts": handles * 10,
            "deadline": handles * 10 + 1000,
            "cond": np.zeros(n, np.int8),
            "target": np.full(n, np.nan),
            "members": members,
            "payload": np.full(n, None, dtype=object),
            "n_members": (handles % 2).astype(np.int64),
            "stub": np.zeros(n, bool),
            "ohash": hash_strings(op_id),
        },
        n,
    )
    key = np.array([k for ks in keys for k in ks], dtype=object)
    watch = Rows(
        {
            "hash": hash_strings(key),
            "key": key,
            "handle": np.repeat(handles, 2),
            "progress_at_watch": np.full(key.size, np.nan),
        },
        key.size,
    )
    return ops, watch


def test_pending_reads_alike_whether_operations_were_kept_registered_or_both():
    """A batch kept (``add(recent=True)``) then one that is not: every read across the three
    batches answers as from the columns alone (the second batch forgets the kept one)."""
    no_ops, no_watch = Rows.empty(OPS).to_frame(), Rows.empty(WATCH).to_frame()
    kept, plain = Pending(no_ops, no_watch), Pending(no_ops, no_watch)
    for first, recent in ((0, False), (5, True), (9, False)):
        ops, watch = _pending_batch(first, 4 if first else 5)
        kept.add(ops, watch, recent=recent)
        plain.add(ops, watch)
    kept.remove(np.array([6], np.int64))
    plain.remove(np.array([6], np.int64))
    for asked in ([1, 4], [5, 7], [7, 10], [2, 8, 12], [9, 11]):
        handles = np.array(asked, np.int64)
        want = plain.rows(handles, keys=True)
        got = kept.rows(handles, keys=True)
        for name in ("handle", "op_id", "keys", "members", "n_members", "ts"):
            assert [_plain(v) for v in got[name]] == [_plain(v) for v in want[name]], (asked, name)
        bare = kept.rows(handles).select(["handle"])
        assert kept.with_keys(bare)["keys"].tolist() == [list(k) for k in want["keys"]]
        columns = ["handle", "key", "hash"]
        watch = kept.watch_rows(handles, columns).to_frame()
        assert watch.equals(plain.watch_rows(handles, columns).to_frame())
    assert kept.contains(np.arange(14)).tolist() == plain.contains(np.arange(14)).tolist()
    assert len(kept) == len(plain) == 12


def _plain(value: object) -> object:
    """A cell as a comparable value (lists and arrays as lists)."""
    return list(value) if isinstance(value, (list, np.ndarray)) else value


def test_the_tie_order_is_lexsorts_with_and_without_ties():
    rng = np.random.default_rng(3)
    for n, span in ((0, 1), (1, 1), (50, 1_000), (400, 60), (400, 5)):
        first = rng.integers(0, span, n)
        ts, seq = rng.integers(0, 4, n), rng.permutation(n)
        assert tie_order(first, ts, seq).tolist() == np.lexsort((seq, ts, first)).tolist()
        assert tie_order(first).tolist() == np.argsort(first, kind="stable").tolist()
