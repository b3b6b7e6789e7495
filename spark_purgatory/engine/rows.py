"""``Rows``: a table as named numpy columns of one length, the engine's working unit.

A call's steps pass ``Rows`` (a dict of arrays and a row count) rather than pandas frames,
which cost far more to build and read; pandas stays at the engine's edges.

Invariants: every column has ``len(rows)`` elements; a ``Rows`` is never modified in place
once built, so sharing columns between them, or with a frame, is safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd


class Rows:
    """Named numpy columns of equal length.

    >>> r = Rows({"a": np.array([1, 2, 3]), "b": np.array(["x", "y", "z"], dtype=object)})
    >>> len(r), r.columns
    (3, ['a', 'b'])
    >>> r.where(r["a"] > 1)["b"].tolist()
    ['y', 'z']
    """

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: Mapping[str, Any], n: int | None = None) -> None:
        """``columns``: arrays, or scalars broadcast to ``n`` rows."""
        if n is None:
            n = next((len(v) for v in columns.values() if isinstance(v, np.ndarray)), 0)
        self._cols = {c: v if isinstance(v, np.ndarray) else _full(n, v) for c, v in columns.items()}
        self._n = int(n)

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def _made(cls, cols: dict[str, np.ndarray], n: int) -> Rows:
        """Rows of arrays already ``n`` long."""
        rows = object.__new__(cls)
        rows._cols = cols
        rows._n = n
        return rows

    @classmethod
    def empty(cls, dtypes: Mapping[str, Any]) -> Rows:
        return cls._made({name: np.empty(0, dtype=dtype) for name, dtype in dtypes.items()}, 0)

    @classmethod
    def of(cls, frame: pd.DataFrame | Rows, dtypes: Mapping[str, Any] | None = None) -> Rows:
        """A frame's columns (those of ``dtypes``, cast to them), shared where not cast."""
        if isinstance(frame, Rows):
            return frame.cast(dtypes) if dtypes is not None else frame
        arrays = _arrays(frame)
        if dtypes is not None:
            arrays = {name: arrays[name].astype(dtype, copy=False) for name, dtype in dtypes.items()}
        return cls._made(arrays, len(frame))

    def cast(self, dtypes: Mapping[str, Any], *, copy: bool = False) -> Rows:
        """The columns of ``dtypes``, in its order, cast to them (``copy``: always copied)."""
        return Rows._made({c: self._cols[c].astype(t, copy=copy) for c, t in dtypes.items()}, self._n)

    # -- reads ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def get(self, name: str, default: Any = None) -> Any:
        return self._cols.get(name, default)

    def to_frame(self, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """A pandas frame of these columns (or ``columns``, in that order)."""
        names = list(self._cols if columns is None else columns)
        if self._n == 0:  # a copy of a template
            schema = tuple((c, self._cols[c].dtype) for c in names)
            template = _EMPTY_FRAMES.get(schema)
            if template is None:
                template = _EMPTY_FRAMES[schema] = pd.DataFrame({c: np.empty(0, t) for c, t in schema})
            return template.copy()
        return pd.DataFrame({c: self._cols[c] for c in names}, index=pd.RangeIndex(self._n), copy=False)

    def __repr__(self) -> str:
        return f"Rows({self._n} rows: {', '.join(self._cols)})"

    # -- new rows from these -------------------------------------------------------------------

    def take(self, rows: np.ndarray) -> Rows:
        """The rows at these positions (or where a boolean mask is True), in that order."""
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        return Rows._made({c: v[rows] for c, v in self._cols.items()}, rows.size)

    def where(self, keep: np.ndarray) -> Rows:
        """The rows where ``keep`` is True (the same object when it is True everywhere)."""
        if keep.all():
            return self
        return self.take(np.flatnonzero(keep))

    def select(self, names: Iterable[str]) -> Rows:
        return Rows._made({c: self._cols[c] for c in names}, self._n)

    def assign(self, **columns: Any) -> Rows:
        return Rows({**self._cols, **columns}, self._n)

    def stack(self, other: Rows) -> Rows:
        """These rows then ``other``'s (the columns of these)."""
        if other._n == 0:
            return self
        if self._n == 0:
            return other.select(self._cols) if list(other._cols) != list(self._cols) else other
        cols = {c: np.concatenate([v, other._cols[c]]) for c, v in self._cols.items()}
        return Rows._made(cols, self._n + other._n)

    @staticmethod
    def concat(parts: list[Rows], dtypes: Mapping[str, Any]) -> Rows:
        """The non-empty ``parts`` one after another (``dtypes``' columns), or empty."""
        parts = [p for p in parts if p._n]
        if not parts:
            return Rows.empty(dtypes)
        if len(parts) == 1:
            return parts[0]
        cols = {c: np.concatenate([p._cols[c] for p in parts]) for c in dtypes}
        return Rows._made(cols, sum(p._n for p in parts))


#: empty frames by their columns and dtypes (a copy is cheaper than building one)
_EMPTY_FRAMES: dict[tuple, pd.DataFrame] = {}


def _arrays(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """A frame's columns as numpy arrays, without building a Series per column."""
    get = getattr(frame, "_get_column_array", None)
    if get is None or not frame.columns.is_unique:
        return {name: frame[name].to_numpy() for name in frame.columns}
    return {name: np.asarray(get(i)) for i, name in enumerate(frame.columns)}


def _full(n: int, value: Any) -> np.ndarray:
    """``n`` copies of a scalar (None: an object column; a numpy scalar keeps its dtype)."""
    if value is None or isinstance(value, str):
        out = np.empty(n, dtype=object)
        out[:] = value
        return out
    return np.full(n, value)
