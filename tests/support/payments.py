"""The payments case of issue 22, as a new user built it: card payments awaiting 2 of 3
clearing confirmations, typed Parquet, 4 files per stream cut at different event times.

``reference`` is the hand-written answer: a payment completes when two distinct clearing
houses confirmed it in ``[ts, deadline)``, at the second one's time.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOUSES = ("clearing-a", "clearing-b", "clearing-c")
TIMEOUT_MS = 30_000


def payments(n: int = 360, *, seed: int = 22) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``n`` payments (ts as epoch ms) and their confirmations (about two per payment)."""
    rng = np.random.default_rng(seed)
    ts = T0 + np.arange(n, dtype=np.int64) * 500 + rng.integers(0, 400, n)
    ops = pd.DataFrame(
        {
            "op_id": [f"pay-{i:04d}" for i in range(n)],
            "key": [f"card-{i:04d}" for i in range(n)],
            "ts": ts,
            "timeout_ms": np.full(n, TIMEOUT_MS, dtype=np.int64),
            "condition": "count",
            "target": 2.0,
            "payload": [f'{{"amount": {a}}}' for a in rng.integers(1, 500, n)],
        }
    )
    rows = []
    for i in range(n):
        houses = rng.permutation(HOUSES)[: rng.choice([1, 2, 3], p=[0.25, 0.45, 0.3])]
        for house in houses:
            rows.append((f"card-{i:04d}", int(ts[i] + rng.integers(0, 40_000)), house))
    events = pd.DataFrame(rows, columns=["key", "ts", "source"]).sort_values("ts", kind="stable")
    return ops, events.reset_index(drop=True)


def reference(ops: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """op_id and resolved_at_ms of every payment two houses confirmed before its deadline."""
    joined = ops.merge(events, on="key", suffixes=("", "_ev"))
    inside = joined[
        (joined["ts_ev"] >= joined["ts"]) & (joined["ts_ev"] < joined["ts"] + joined["timeout_ms"])
    ]
    first = inside.sort_values("ts_ev").drop_duplicates(["op_id", "source"])
    second = first.groupby("op_id")["ts_ev"].nsmallest(2).groupby(level=0).agg(["size", "max"])
    done = second[second["size"] >= 2]["max"]
    return pd.DataFrame({"op_id": done.index, "resolved_at_ms": done.to_numpy()}).sort_values("op_id")


def write_parquet(
    frame: pd.DataFrame, directory: str, *, files: int = 4, cuts: tuple[float, ...], unit: str = "us"
) -> None:
    """``frame`` as ``files`` Parquet files cut at the quantiles ``cuts`` of its event times
    (files in time order, increasing mtimes); ``ts`` a UTC timestamp in ``unit``."""
    os.makedirs(directory, exist_ok=True)
    edges = np.quantile(frame["ts"], cuts)
    part_of = np.searchsorted(edges, frame["ts"], side="right") - 1
    typed = frame.assign(ts=pd.to_datetime(frame["ts"], unit="ms", utc=True))
    stamp = time.time() - 1000
    for i in range(files):
        part = typed[part_of == i]
        table = pa.Table.from_pandas(part, preserve_index=False)
        table = table.set_column(
            table.schema.get_field_index("ts"), "ts", table.column("ts").cast(pa.timestamp(unit, tz="UTC"))
        )
        path = os.path.join(directory, f"part-{i:04d}.parquet")
        pq.write_table(table, path, coerce_timestamps=None if unit == "ns" else unit)
        os.utime(path, (stamp + i, stamp + i))


def write_case(root: str, *, unit: str = "us") -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    """The payments case under ``root``: (operations, events, ops dir, events dir)."""
    ops, events = payments()
    ops_dir, events_dir = os.path.join(root, "payments"), os.path.join(root, "confirmations")
    write_parquet(ops, ops_dir, cuts=(0.0, 0.3, 0.55, 0.8), unit=unit)
    write_parquet(events, events_dir, cuts=(0.0, 0.2, 0.5, 0.75), unit=unit)
    return ops, events, ops_dir, events_dir
