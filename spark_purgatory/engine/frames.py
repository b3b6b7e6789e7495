"""The pandas helpers of the engine's edges: frames built, stacked, filtered, concatenated
column by column (``pd.concat`` and ``.loc`` inspect object columns value by value).

Invariant: no helper loops over rows in Python.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({name: np.empty(0, dtype=dtype) for name, dtype in columns.items()}, copy=False)


def stack(top: pd.DataFrame, bottom: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``top`` then ``bottom`` (same columns), column by column."""
    if len(bottom) == 0:
        return top
    if len(top) == 0:
        return bottom.reset_index(drop=True)
    return pd.DataFrame(
        {c: np.concatenate([top[c].to_numpy(), bottom[c].to_numpy()]) for c in top.columns}, copy=False
    )


def rows_where(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """``frame.loc[keep]`` with a fresh index, column by column (cheaper on big tables)."""
    if keep.all():
        return frame
    rows = np.flatnonzero(keep)
    return pd.DataFrame({c: frame[c].to_numpy()[rows] for c in frame.columns}, copy=False)


def concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """The non-empty ``frames``' ``columns`` (others left behind), one after another."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    if len(frames) == 1:
        only = frames[0]
        return (only if list(only.columns) == list(columns) else only[columns]).reset_index(drop=True)
    if all(_plain(f, columns) for f in frames):
        stacked = {c: np.concatenate([f[c].to_numpy() for f in frames]) for c in columns}
        return pd.DataFrame(stacked, copy=False)
    return pd.concat([f[columns] for f in frames], ignore_index=True)


def _plain(frame: pd.DataFrame, columns: list[str]) -> bool:
    dtypes = frame.dtypes
    plain = (c in dtypes.index and isinstance(dtypes[c], np.dtype) for c in columns)
    return frame.columns.is_unique and all(plain)
