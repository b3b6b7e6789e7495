"""Small builders for engine tests: operations and events as readable dicts."""

from __future__ import annotations

import pandas as pd

from spark_purgatory.config import PurgatoryConfig
from spark_purgatory.engine.purgatory import BatchResult, Purgatory


def op(
    op_id: str, key: str | list[str], ts: int, timeout_ms: int = 1000, condition: str = "any", **extra
) -> dict:
    row = {"op_id": op_id, "ts": ts, "timeout_ms": timeout_ms, "condition": condition}
    row["keys"] = [key] if isinstance(key, str) else key
    row.update(extra)
    return row


def ev(key: str, ts: int, **extra) -> dict:
    return {"key": key, "ts": ts, **extra}


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def purgatory(**settings) -> Purgatory:
    base = {"tick_ms": 10, "wheel_size": 8}
    base.update(settings)
    return Purgatory(PurgatoryConfig(**base))


def step(
    p: Purgatory, ops: list[dict] = (), events: list[dict] = (), wm: int = 0, batch_id: int = 0
) -> BatchResult:
    return p.process(frame(list(ops)), frame(list(events)), watermark_ms=wm, batch_id=batch_id)


def outcomes(result: BatchResult) -> dict[str, dict]:
    return {row["op_id"]: row for row in result.outcomes.to_dict(orient="records")}
