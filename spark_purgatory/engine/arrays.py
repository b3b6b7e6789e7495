"""The array steps the engine's calls are made of: sorted searches and joins by hash,
membership, distinct values, list columns flattened, string hashes (cheaper than numpy's own
``isin``, ``unique`` and ``searchsorted`` on a call's arrays).

Invariant: no helper loops over rows in Python.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa

_SORT_ABOVE = 256  # more probes than this are searched in sorted order (``search``)
_HASH_TABLE_ABOVE = 256  # below this many values, pandas' hash table costs more than a sort


def search(ordered: np.ndarray, values: np.ndarray, side: str = "left") -> np.ndarray:
    """``np.searchsorted(ordered, values, side)``, many unsorted values searched in sorted
    order (numpy starts each search where the last one ended).

    >>> search(np.array([1, 3, 5]), np.array([4, 0])).tolist()
    [2, 0]
    """
    if values.size <= _SORT_ABOVE or bool((values[1:] >= values[:-1]).all()):
        return np.searchsorted(ordered, values, side=side)
    order = np.argsort(values)
    at = np.empty(values.size, dtype=np.intp)
    at[order] = np.searchsorted(ordered, values[order], side=side)
    return at


def equal_ranges(sorted_hashes: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (probe index, sorted index) pairs with equal hash, vectorised (a sort-merge join).

    >>> equal_ranges(np.array([1, 3, 3, 7], np.uint64), np.array([3, 5, 7], np.uint64))
    (array([0, 0, 2]), array([1, 2, 3]))
    """
    if probes.size <= _SORT_ABOVE or bool((probes[1:] >= probes[:-1]).all()):
        lo = np.searchsorted(sorted_hashes, probes, side="left")
        hi = np.searchsorted(sorted_hashes, probes, side="right")
    else:  # many unsorted probes: sorted once for both searches
        order = np.argsort(probes)
        ordered = probes[order]
        lo, hi = np.empty(probes.size, np.intp), np.empty(probes.size, np.intp)
        lo[order] = np.searchsorted(sorted_hashes, ordered, side="left")
        hi[order] = np.searchsorted(sorted_hashes, ordered, side="right")
    return expand_ranges(lo, hi - lo)


def equal_pairs(build: np.ndarray, probes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (probe index, ``build`` index) pairs with equal hash, by probe, then by ``build``
    index: a hash join where ``build``'s hashes are many and distinct, else a sort-merge join.

    >>> equal_pairs(np.array([7, 3, 5], np.uint64), np.array([5, 1, 7, 5], np.uint64))
    (array([0, 2, 3]), array([2, 0, 2]))
    >>> equal_pairs(np.array([7, 5, 5], np.uint64), np.array([5, 7], np.uint64))
    (array([0, 0, 1]), array([1, 2, 0]))
    """
    if build.size > _HASH_TABLE_ABOVE:
        index = pd.Index(build, copy=False)
        if index.is_unique:
            at = index.get_indexer(probes)
            probe = np.flatnonzero(at >= 0)
            return probe, at[probe]
    order = np.argsort(build, kind="stable")  # the rows of a hash stay in order
    probe, at = equal_ranges(build[order], probes)
    return probe, order[at]


def all_distinct(values: np.ndarray) -> bool:
    """Are these values all different?

    >>> all_distinct(np.array([3, 1, 2], np.uint64)), all_distinct(np.array([3, 1, 3], np.uint64))
    (True, False)
    """
    if values.size > _HASH_TABLE_ABOVE:
        return bool(pd.Index(values, copy=False).is_unique)
    ordered = np.sort(values)
    return not bool((ordered[1:] == ordered[:-1]).any())


def expand_ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) for every j in ``starts[i] .. starts[i] + counts[i] - 1``, in that order.

    >>> expand_ranges(np.array([1, 5]), np.array([2, 1]))
    (array([0, 0, 1]), array([1, 2, 5]))
    """
    total = int(counts.sum())
    probe_idx = np.repeat(np.arange(counts.size), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return probe_idx, np.repeat(starts, counts) + offsets


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` for integers, by a stable (radix) sort.

    >>> distinct(np.array([5, 1, 5, 3])).tolist()
    [1, 3, 5]
    """
    ordered = np.sort(values, kind="stable")
    return ordered[run_starts(ordered)]


def distinct_at(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``distinct(values)`` and where each value is in it (``np.unique``'s inverse), by one
    stable sort.

    >>> [a.tolist() for a in distinct_at(np.array([5, 1, 5, 3]))]
    [[1, 3, 5], [2, 0, 2, 1]]
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = run_starts(ordered)
    at = np.empty(values.size, dtype=np.intp)
    at[order] = np.cumsum(first) - 1
    return ordered[first], at


def run_starts(ordered: np.ndarray) -> np.ndarray:
    """Which elements of ``ordered`` (equal values together) start a run of equal values.

    >>> run_starts(np.array([1, 1, 3, 5, 5])).tolist()
    [True, False, True, True, False]
    """
    first = np.empty(ordered.size, dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def group_starts(ordered: np.ndarray) -> np.ndarray:
    """Per element of ``ordered`` (equal values together), the index of its run's first.

    >>> group_starts(np.array([1, 1, 3, 5, 5])).tolist()
    [0, 0, 2, 3, 3]
    """
    return np.maximum.accumulate(np.where(run_starts(ordered), np.arange(ordered.size), 0))


def flatten(lists: np.ndarray, *, nonempty: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(length of each list, their elements one after another as an object array).
    ``nonempty``: every list holds an item, so as many items as lists means one each.

    >>> flatten(np.array([["a"], ["b", "c"], []], dtype=object))[0].tolist()
    [1, 2, 0]
    """
    n = len(lists)
    if n and isinstance(lists[0], np.ndarray):
        lengths = np.fromiter(map(len, lists), np.int64, count=n)
        if int(lengths.sum()) == 0:
            return lengths, np.empty(0, dtype=object)
        return lengths, np.concatenate(lists, dtype=object)
    items = lists.tolist()
    flat = np.fromiter(itertools.chain.from_iterable(items), dtype=object)
    if nonempty and flat.size == n:
        return np.ones(n, np.int64), flat
    return np.fromiter(map(len, items), np.int64, count=n), flat


def among(values: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """``np.isin(values, ordered)`` for a sorted ``ordered``: a binary search per value.

    >>> among(np.array([4, 1, 9]), np.array([1, 4, 7])).tolist()
    [True, True, False]
    """
    if ordered.size == 0 or values.size == 0:
        return np.zeros(values.size, dtype=bool)
    dense = _in_range(values, ordered, int(ordered[0]), int(ordered[-1]))
    if dense is not None:
        return dense
    at = search(ordered, values)
    at[at == ordered.size] = 0
    return ordered[at] == values


def isin(values: np.ndarray, test: np.ndarray) -> np.ndarray:
    """``np.isin`` for integers: ``among`` after sorting ``test``, or a mask over its range."""
    if test.size and values.size:
        dense = _in_range(values, test, int(test.min()), int(test.max()))
        if dense is not None:
            return dense
    return among(values, np.sort(test))


def _in_range(values: np.ndarray, test: np.ndarray, lo: int, hi: int) -> np.ndarray | None:
    """``np.isin(values, test)`` by a mask over ``lo .. hi`` (``test``'s range) where that range
    is small against the arrays; None where it is not (or the values are not signed integers).

    >>> _in_range(np.array([3, 9, 5, -1]), np.array([5, 3, 6]), 3, 6).tolist()
    [True, False, True, False]
    """
    if values.dtype.kind != "i" or test.dtype.kind != "i":
        return None
    span = hi - lo + 1
    if span > 4 * (values.size + test.size):
        return None
    mask = np.zeros(span, dtype=bool)
    mask[test - lo] = True
    at = values - lo
    inside = (at >= 0) & (at < span)
    found = np.zeros(values.size, dtype=bool)
    found[inside] = mask[at[inside]]
    return found


def pairs_in(a1: np.ndarray, a2: np.ndarray, b1: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """Per pair ``(a1[i], a2[i])`` of integers: is it among the pairs ``(b1[j], b2[j])``?

    >>> pairs_in(np.array([1, 1, 2]), np.array([5, 6, 5]), np.array([1, 2]), np.array([6, 6])).tolist()
    [False, True, False]
    """
    n = a1.size
    if n == 0 or b1.size == 0:
        return np.zeros(n, dtype=bool)
    first, second = np.concatenate([a1, b1]), np.concatenate([a2, b2])
    in_b = np.concatenate([np.zeros(n, bool), np.ones(b1.size, bool)])
    order = np.lexsort((second, first))
    f, s = first[order], second[order]
    start = np.empty(order.size, dtype=bool)
    start[0] = True
    start[1:] = (f[1:] != f[:-1]) | (s[1:] != s[:-1])
    run = np.cumsum(start) - 1
    has_b = np.zeros(int(run[-1]) + 1, dtype=bool)
    has_b[run[in_b[order]]] = True
    found = np.empty(order.size, dtype=bool)
    found[order] = has_b[run]
    return found[:n]


def pair_order(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``np.lexsort((second, first))``, one ``argsort`` where ``first`` has no repeated value.

    >>> pair_order(np.array([3, 1, 2]), np.array([0, 0, 0])).tolist()
    [1, 2, 0]
    >>> pair_order(np.array([2, 1, 2]), np.array([9, 0, 5])).tolist()  # a repeated first: lexsort
    [1, 2, 0]
    """
    order = np.argsort(first)
    ranked = first[order]
    if ranked.size > 1 and bool((ranked[1:] == ranked[:-1]).any()):
        return np.lexsort((second, first))
    return order


def hash_strings(values: np.ndarray | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Stable 64-bit hash of strings: pandas' SipHash of each string's UTF-8 bytes, whether
    they come as ``str`` or as an Arrow string array (a null hashes as None).  The value is
    part of what a shard saves: it must never change.

    >>> h = hash_strings(np.array(["ab", "ç"], dtype=object))
    >>> bool((h == hash_strings(pa.array(["ab", "ç"]))).all())
    True
    """
    if len(values) == 0:
        return np.empty(0, dtype=np.uint64)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            binary = pa.large_binary() if pa.types.is_large_string(values.type) else pa.binary()
            values = values.cast(binary)  # the same buffers, read as bytes
        values = values.to_numpy(zero_copy_only=False)
    return pd.util.hash_array(np.asarray(values, dtype=object), categorize=False)


def list_lengths(lists: np.ndarray) -> np.ndarray:
    """The length of each list (or array) in an object column, 0 for a missing one (None or
    NaN).

    >>> list_lengths(np.array([["a", "b"], None, []], dtype=object)).tolist()
    [2, 0, 0]
    """
    try:
        return np.fromiter(map(len, lists), np.int64, count=len(lists))
    except TypeError:  # some missing
        lengths = np.zeros(len(lists), np.int64)
        given = np.flatnonzero(~pd.isna(lists))
        lengths[given] = np.fromiter(map(len, lists[given]), np.int64, count=given.size)
        return lengths


def present(values: np.ndarray) -> np.ndarray:
    """``pd.notna`` of an object column, its usual cases (all None, all text) told at once.

    >>> present(np.array([None, None], dtype=object)).tolist()
    [False, False]
    >>> present(np.array(["a", float("nan"), None], dtype=object)).tolist()
    [True, False, False]
    """
    n = len(values)
    if n and values.dtype == object:
        if values[0] is None and values[-1] is None and values.tolist().count(None) == n:
            return np.zeros(n, bool)
        if isinstance(values[0], str) and pd.api.types.infer_dtype(values, skipna=False) == "string":
            return np.ones(n, bool)
    return pd.notna(values)


def tie_order(first: np.ndarray, *then: np.ndarray) -> np.ndarray:
    """``np.lexsort((*reversed(then), first))``, the later keys sorted only where ``first``
    repeats.

    >>> tie_order(np.array([3, 1, 3, 2]), np.array([9, 0, 5, 0])).tolist()
    [1, 3, 2, 0]
    """
    order = np.argsort(first, kind="stable")
    ranked = first[order]
    same = ranked[1:] == ranked[:-1]
    if not then or not same.any():
        return order
    tied = np.zeros(ranked.size, dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    at = np.flatnonzero(tied)
    rows = order[at]
    order[at] = rows[np.lexsort((*(k[rows] for k in reversed(then)), first[rows]))]
    return order
