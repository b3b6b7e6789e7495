"""The frame helpers of the engine's edges against pandas' own ``concat``: the same rows, the
named columns only."""

from __future__ import annotations

import numpy as np
import pandas as pd

from spark_purgatory.engine.frames import concat
from spark_purgatory.shard.input import routed_rows
from spark_purgatory.shard.roles import ROUTED_COLUMNS


def _chunk(start: int, n: int) -> pd.DataFrame:
    """A Spark input chunk as PySpark hands it: the routed columns (all-null object columns
    among them) and the watermark's helper column after them."""
    numbers = np.arange(start, start + n)
    frame = pd.DataFrame({c: np.full(n, None, dtype=object) for c in ROUTED_COLUMNS})
    frame["op_id"] = np.array([f"op-{i}" for i in numbers], dtype=object)
    frame["ts_ms"] = numbers.astype(np.int64)
    frame["role"] = (numbers % 3).astype(np.int8)
    frame["_event_time"] = pd.to_datetime(numbers, unit="ms")
    return frame


def test_concat_stacks_the_named_columns_of_every_chunk_as_pandas_would():
    chunks = [_chunk(0, 5), _chunk(5, 0), _chunk(5, 7), _chunk(12, 3)]
    stacked = concat(chunks, ROUTED_COLUMNS)
    expected = pd.concat([c[ROUTED_COLUMNS] for c in chunks if len(c)], ignore_index=True)
    assert list(stacked.columns) == ROUTED_COLUMNS  # the helper column left behind
    pd.testing.assert_frame_equal(stacked, expected)
    assert stacked["payload"].isna().all() and stacked["op_id"].iloc[-1] == "op-14"


def test_concat_of_extension_dtypes_falls_back_to_pandas_with_the_same_rows():
    chunks = [
        pd.DataFrame({"op_id": ["a", "b"], "peer": pd.array([1, None], dtype="Int32"), "other": [0, 0]}),
        pd.DataFrame({"op_id": ["c"], "peer": pd.array([3], dtype="Int32"), "other": [0]}),
    ]
    stacked = concat(chunks, ["op_id", "peer"])  # not plain numpy columns: pandas stacks them
    assert list(stacked.columns) == ["op_id", "peer"] and str(stacked["peer"].dtype) == "Int32"
    assert stacked["op_id"].tolist() == ["a", "b", "c"] and stacked["peer"].tolist() == [1, pd.NA, 3]


def test_a_groups_chunks_become_one_frame_of_the_routed_columns_and_one_chunk_stays_as_it_is():
    one = _chunk(0, 3)
    assert routed_rows(iter([one])) is one
    rows = routed_rows(iter([_chunk(0, 3), _chunk(3, 0), _chunk(3, 4)]))
    assert list(rows.columns) == ROUTED_COLUMNS
    assert rows["ts_ms"].tolist() == list(range(7))
    assert concat([], ROUTED_COLUMNS).columns.tolist() == ROUTED_COLUMNS
