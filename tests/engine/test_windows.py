"""The completed operations' windows (``engine.windows``): what a save reads of them."""

from __future__ import annotations

import numpy as np

from spark_purgatory.engine.windows import ResolvedWindows


def _add(w: ResolvedWindows, khash: list[int], end: list[int]) -> None:
    n = len(khash)
    w.add(np.array(khash, np.uint64), np.arange(n, dtype=np.uint64), np.zeros(n, np.int64), np.array(end))


def test_the_windows_added_since_a_mark_are_those_kept_in_the_order_they_came():
    w = ResolvedWindows()
    _add(w, [5, 1, 3], [10, 40, 11])
    mark = w.mark
    _add(w, [9, 2], [12, 50])
    w.retire(12)
    _add(w, [4, 7, 6], [60, 13, 70])
    w.retire(14)  # a window added after the mark passes too
    added = w.added(mark)
    assert added["khash"].tolist() == [2, 4, 6]
    assert added["end"].tolist() == [50, 60, 70]
    assert w.added(0)["khash"].tolist() == [1, 2, 4, 6]
    assert len(w.added(w.mark)) == 0


def test_the_windows_added_since_a_mark_survive_a_compaction_of_their_rows():
    w = ResolvedWindows()
    _add(w, list(range(3000)), [10] * 2000 + [100] * 1000)
    mark = w.mark
    _add(w, [7, 8, 9], [5_000, 20, 6_000])
    w.retire(50)  # 2,001 of 3,003 rows die: the table compacts, its rows moved down in order
    assert w.added(mark)["khash"].tolist() == [7, 9]
    assert w.added(0)["khash"].tolist() == [*range(2000, 3000), 7, 9]
