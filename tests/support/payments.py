"""The payments case of issue 22 (``workload.payments``: card payments awaiting 2 of 3 clearing
confirmations, typed Parquet, 4 files per stream cut at different event times), and its answer.

``reference`` is the hand-written answer: a payment completes when two distinct clearing
houses confirmed it in ``[ts, deadline)``, at the second one's time.
"""

from __future__ import annotations

import pandas as pd

from spark_purgatory.workload import HOUSES, PAYMENT_TIMEOUT_MS, payments
from spark_purgatory.workload import START_MS as T0
from spark_purgatory.workload import write_parquet_files as write_parquet
from spark_purgatory.workload import write_payments as write_case

__all__ = ["HOUSES", "T0", "TIMEOUT_MS", "payments", "reference", "write_case", "write_parquet"]

TIMEOUT_MS = PAYMENT_TIMEOUT_MS


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
