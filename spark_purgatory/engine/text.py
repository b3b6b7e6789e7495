"""Compact text columns: strings as one UTF-8 buffer and offsets (Arrow's layout).

Python strings are made only for the rows a call compares or hands out (``objects``).

Invariants: ``offsets[0] == 0`` and the offsets never decrease; row ``i`` is
``data[offsets[i]:offsets[i + 1]]``; a column holds no nulls.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import memory

_MIN_ROWS = 64
_MIN_BYTES = 1024
_I32_MAX = np.iinfo(np.int32).max
_GROWTH = 1.5  # as ``columns.GROWTH``


def as_text(values: np.ndarray | pa.Array | pa.ChunkedArray) -> pa.Array:
    """Strings (``str`` objects or an Arrow string array) as one Arrow string array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        values = np.asarray(values, dtype=object)
        try:  # the plain conversion, cheaper than pandas' NaN check
            values = pa.array(values, type=pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a float NaN: null, as pandas reads it
            values = pa.array(values, type=pa.string(), from_pandas=True)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = values.cast(pa.string())
    return values


def _buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow string array's offsets (from 0) and the bytes they index."""
    width = np.int64 if pa.types.is_large_string(values.type) else np.int32
    _, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[values.offset : values.offset + len(values) + 1]
    data = np.empty(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, dtype=np.uint8)
    return offsets - offsets[0], data[int(offsets[0]) : int(offsets[-1])]


class TextColumn:
    """Strings in Arrow's layout with spare capacity.

    >>> t = TextColumn()
    >>> t.append(np.array(["ab", "", "çd"], dtype=object))
    >>> t.objects(np.array([2, 0])).tolist(), len(t), t.nbytes_used
    (['çd', 'ab'], 3, 21)
    """

    __slots__ = ("_data", "_offsets", "_n")

    def __init__(self) -> None:
        self._data = np.empty(_MIN_BYTES, np.uint8)
        self._offsets = np.zeros(_MIN_ROWS + 1, np.int32)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes_used(self) -> int:
        """Bytes the rows occupy (no spare capacity)."""
        return int(self._offsets[self._n]) + (self._n + 1) * self._offsets.itemsize

    def append(self, values: np.ndarray | pa.Array | pa.ChunkedArray) -> None:
        """Add rows at the end (``str`` objects or an Arrow string array; no nulls)."""
        values = as_text(values)
        if values.null_count:
            raise ValueError("a text column holds no nulls")
        m = len(values)
        if m == 0:
            return
        offsets, data = _buffers(values)
        end = int(self._offsets[self._n])
        self._reserve(self._n + m, end + data.size)
        self._data[end : end + data.size] = data
        self._offsets[self._n + 1 : self._n + m + 1] = offsets[1:] + end
        self._n += m

    def arrow(self, positions: np.ndarray | None = None) -> pa.Array:
        """The rows at ``positions`` (default: every row) as a new Arrow string array."""
        n = self._n
        width = pa.large_string() if self._offsets.dtype == np.int64 else pa.string()
        end = int(self._offsets[n])
        view = pa.Array.from_buffers(
            width, n, [None, pa.py_buffer(self._offsets[: n + 1]), pa.py_buffer(self._data[:end])]
        )
        positions = np.arange(n) if positions is None else positions  # all of them: still a copy
        return view.take(pa.array(np.asarray(positions, dtype=np.int64)))

    def objects(self, positions: np.ndarray) -> np.ndarray:
        if len(positions) == 0:
            return np.empty(0, dtype=object)
        return self.arrow(positions).to_numpy(zero_copy_only=False)

    def compact(self, keep: np.ndarray) -> None:
        """Keep only the rows at ``keep`` (increasing positions), moved down in order."""
        taken = self.arrow(keep)
        offsets, data = _buffers(taken)
        self._n = 0
        self._offsets[0] = 0
        self._reserve(keep.size, data.size)
        self._data[: data.size] = data
        self._offsets[: keep.size + 1] = offsets
        self._n = keep.size
        if self._offsets.size > 4 * max(keep.size, _MIN_ROWS):  # give memory back after a drain
            self._offsets = memory.copy_of(self._offsets[: max(2 * keep.size, _MIN_ROWS) + 1])
        if self._data.size > 4 * max(data.size, _MIN_BYTES):
            self._data = memory.copy_of(self._data[: max(2 * data.size, _MIN_BYTES)])

    def _reserve(self, rows: int, nbytes: int) -> None:
        if nbytes > _I32_MAX and self._offsets.dtype == np.int32:
            self._offsets = self._offsets.astype(np.int64)  # past 2 GiB of text: Arrow's large_string
        if rows + 1 > self._offsets.size:
            offsets = memory.empty(max(rows + 1, int(_GROWTH * self._offsets.size)), self._offsets.dtype)
            offsets[: self._n + 1] = self._offsets[: self._n + 1]
            self._offsets = offsets
        if nbytes > self._data.size:
            data = memory.empty(max(nbytes, int(_GROWTH * self._data.size)), np.uint8)
            end = int(self._offsets[self._n])
            data[:end] = self._data[:end]
            self._data = data


def lists_of(lengths: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """An object array of Python lists: row ``i`` the next ``lengths[i]`` items of ``flat``
    (one ``tolist`` per distinct length).

    >>> lists_of(np.array([1, 0, 2]), np.array(["a", "b", "c"], dtype=object)).tolist()
    [['a'], [], ['b', 'c']]
    """
    n = lengths.size
    if n and (lengths == lengths[0]).all():  # every row as long: the usual case, one key each
        length = int(lengths[0])
        return object_column(flat[: n * length].reshape(n, length).tolist() if length else _empties(n))
    out = np.empty(n, dtype=object)
    starts = np.cumsum(lengths) - lengths
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        block = flat[starts[rows][:, None] + np.arange(length)].tolist() if length else _empties(rows.size)
        out[rows] = object_column(block)
    return out


def _empties(n: int) -> list[list]:
    """``n`` distinct empty lists, made in C."""
    return np.empty((n, 0), dtype=object).tolist()


def object_column(values: list) -> np.ndarray:
    """Python objects (lists among them) as a one-dimensional object array."""
    return np.fromiter(values, dtype=object, count=len(values))
