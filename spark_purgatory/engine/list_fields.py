"""How the pandas validator reads a list field (``keys``, ``members``), a column at a time.

Lists of ``str`` are cleaned in a few numpy passes, one step per list length; every other
value goes to the per-value reading (``fields.string_list`` and ``clean``).

Invariant: for every value, ``clean_lists`` gives what ``clean(string_list(value))`` gives.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np
import pandas as pd

from .collector import collector_paused
from .fields import blanks, clean, each, is_str, objects_of, only_text, string_list
from .text import lists_of, object_column

# numpy compares an object array with a type by value only when it is in a 0-d object array
_LIST, _NDARRAY, _OBJECT = (np.empty((), dtype=object) for _ in range(3))
_LIST[()], _NDARRAY[()], _OBJECT[()] = list, np.ndarray, np.dtype(object)


def one_item_lists(items: np.ndarray) -> np.ndarray:
    """``[item]`` for each item, as a 1-d object array of lists (no Python step per row)."""
    return _lists_of(items.reshape(-1, 1))


def _lists_of(rows: np.ndarray) -> np.ndarray:
    """The rows of a 2-d object array as a 1-d object array of lists."""
    with collector_paused():
        return object_column(rows.tolist())


class Lists(NamedTuple):
    """A list field read a column at a time: each ``clean`` list, whether the value was a list
    at all (else ``key`` may stand for it), and each list's length."""

    lists: np.ndarray
    listed: np.ndarray
    lengths: np.ndarray


def clean_lists(column: pd.Series | None, n: int, *, keep_order: bool = False) -> Lists:
    """Each value as a ``clean`` list (lists of ``str`` in a few passes, others one by one)."""
    out = np.empty(n, dtype=object)
    listed = np.zeros(n, dtype=bool)
    lengths = np.zeros(n, dtype=np.intp)
    if column is not None and n:
        values = objects_of(column)
        types = np.frompyfunc(type, 1, 1)(values)
        for rows in _lists_and_arrays(values, types):
            if len(rows):
                cleaned, sizes, text_only = _clean_text_lists(
                    values if len(rows) == n else values[rows], keep_order
                )
                rows, cleaned, sizes = (x[text_only] for x in (rows, cleaned, sizes))
                out[rows], lengths[rows], listed[rows] = cleaned, sizes, True
        odd = np.flatnonzero(~listed)
        odd = odd[~pd.isna(values[odd])]  # a missing value is no list
        if len(odd):
            read = each(string_list, values[odd])
            listed[odd] = read != None  # noqa: E711 (elementwise)
            out[odd] = each(lambda items: clean(items, keep_order=keep_order), read)
            lengths[odd] = [len(items) for items in out[odd]]
    empty = np.flatnonzero(~listed)
    empty = empty[out[empty] == None]  # noqa: E711 (elementwise: rows given no list yet)
    out[empty] = _lists_of(np.empty((len(empty), 0), dtype=object))
    return Lists(out, listed, lengths)


def _lists_and_arrays(values: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding a ``list``, and those holding a 1-d object array (Arrow's lists)."""
    lists = np.flatnonzero(types == _LIST)
    arrays = np.flatnonzero(types == _NDARRAY)
    if len(arrays):
        of = np.frompyfunc(getattr, 2, 1)
        arrays = arrays[(of(values[arrays], "dtype") == _OBJECT) & (of(values[arrays], "ndim") == 1)]
    return lists, arrays


def _clean_text_lists(
    lists: np.ndarray, keep_order: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``clean`` of each list, its length, and whether all its items are ``str`` or missing."""
    m = len(lists)
    lengths = np.fromiter(map(len, lists), dtype=np.intp, count=m)
    if isinstance(lists[0], np.ndarray):
        items = np.concatenate(list(lists))
    else:
        items = np.fromiter(chain.from_iterable(lists), dtype=object, count=int(lengths.sum()))
    text_only = np.ones(m, dtype=bool)
    if len(items) and not only_text(items):
        parent = np.repeat(np.arange(m), lengths)
        odd_item = ~pd.isna(items) & ~is_str(items)
        text_only[parent[odd_item]] = False
        items = items[text_only[parent]]
        lengths = np.where(text_only, lengths, 0)
    keep = ~blanks(items)
    if not keep.all():
        parent = np.repeat(np.arange(m), lengths)
        items = items[keep]
        lengths = np.bincount(parent[keep], minlength=m)
    if (lengths > 1).any():
        items, lengths = _unique(items, lengths, keep_order)
    with collector_paused():
        return lists_of(lengths, items), lengths, text_only


def _unique(items: np.ndarray, lengths: np.ndarray, keep_order: bool) -> tuple[np.ndarray, np.ndarray]:
    """Each list's items (runs of ``lengths``, in an array of the caller's making) without
    repeats: sorted, or with ``keep_order`` each at its first place (the lists of one length
    sorted together, stably, to find the repeats)."""
    repeat = np.zeros(len(items), dtype=bool)
    starts = np.cumsum(lengths) - lengths
    for size in np.unique(lengths[lengths > 1]):
        at = starts[lengths == size, None] + np.arange(size)
        if keep_order:
            block = items[at]
            order = np.argsort(block, axis=1, kind="stable")
            ordered = np.take_along_axis(block, order, axis=1)
            again = np.zeros(block.shape, dtype=bool)
            np.put_along_axis(again, order[:, 1:], ordered[:, 1:] == ordered[:, :-1], axis=1)
            repeat[at] = again
        else:
            rows = np.sort(items[at], axis=1)  # Python's order of str, as ``sorted``
            items[at] = rows
            repeat[at[:, 1:]] = rows[:, 1:] == rows[:, :-1]
    parent = np.repeat(np.arange(len(lengths)), lengths)
    return items[~repeat], np.bincount(parent[~repeat], minlength=len(lengths))
