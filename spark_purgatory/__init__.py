"""spark-purgatory: Kafka's delayed-operation purgatory for Spark Structured Streaming.

The public surface (docs/api.md lists every name):

* ``start(operations, events, output=..., checkpoint=...)`` runs the whole stream into the
  Delta tables and returns a ``PurgatoryQuery``; ``backfill`` writes the same tables from
  static input; ``read_table`` reads one back.
* The pieces ``start`` wires, for users with their own sink: ``purgatory_stream`` /
  ``purgatory_batch``, ``read_stream`` / ``read_batch``, ``outcomes_of`` ... ``metrics_of``,
  ``RecordAccumulator``, ``PurgatorySink``, ``choose_writer``, ``CatalogTables``.
* The engine, without Spark: ``Purgatory``, ``TimingWheel``, ``PurgatoryConfig`` and shard
  state as one binary value (``save_state`` / ``load_state``).
* Day-2 questions (also the ``spark-purgatory`` command line): ``pending_operations``,
  ``at_risk``, ``explain`` and ``checkpoint_status``.
* ``session``, ``jar_files``, ``kafka_jars``: a local session and the project's JARs;
  ``spark_purgatory.testing``: helpers for users' own tests.

The Spark entry points are imported on first use, so the engine stays importable (and fast
to test) without starting a JVM:

>>> import pandas as pd
>>> from spark_purgatory import Purgatory, PurgatoryConfig
>>> p = Purgatory(PurgatoryConfig(tick_ms=100))
>>> ops = pd.DataFrame({"op_id": ["produce-1"], "keys": [["orders-0"]], "ts": [0],
...                     "timeout_ms": [30_000], "condition": ["count"], "target": [2.0]})
>>> acks = pd.DataFrame({"key": ["orders-0", "orders-0"], "ts": [12, 15],
...                      "source": ["broker-1", "broker-2"], "op_id": ["produce-1"] * 2})
>>> p.process(ops, acks, watermark_ms=0).outcomes[["op_id", "status", "resolved_at"]].values.tolist()
[['produce-1', 'completed', 15]]
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .config import ConfigError, PurgatoryConfig
from .engine.purgatory import BatchResult, Purgatory
from .engine.wheel import TimingWheel
from .runtime.jars import jar_files, kafka_jars
from .runtime.worker_heap import quiet_worker
from .state import SegmentStore, load_state, loaded_by, save_state
from .version import __version__

quiet_worker()  # in a PySpark worker (any task of ours imports this): no traceback as its JVM goes

_SPARK = {
    "session": "runtime.session",
    "read_table": "delta.reading",
    "start": "query",
    "backfill": "backfills",
    "PurgatoryQuery": "query",
    "RecordAccumulator": "delta.accumulator",
    "PurgatorySink": "delta.sink",
    "choose_writer": "delta.writers",
    "CatalogTables": "delta.catalog",
    "purgatory_stream": "spark.operator",
    "purgatory_batch": "spark.batch",
    "outcomes_of": "spark.output",
    "unmatched_of": "spark.output",
    "rejected_of": "spark.output",
    "metrics_of": "spark.output",
    "read_stream": "spark.sources",
    "read_batch": "spark.sources",
    "InputSchemaError": "spark.sources",
    "InputEndedError": "handoff.end_of_input",
    "pending_operations": "inspect",
    "at_risk": "inspect",
    "pending_table": "inspect",
    "at_risk_table": "inspect",
    "explain": "inspect",
    "checkpoint_status": "inspect",
}

__all__ = [
    "__version__",
    "jar_files",
    "kafka_jars",
    "BatchResult",
    "ConfigError",
    "Purgatory",
    "PurgatoryConfig",
    "TimingWheel",
    "SegmentStore",
    "save_state",
    "load_state",
    "loaded_by",
    *_SPARK,
]


def __getattr__(name: str) -> Any:
    if name in _SPARK:
        return getattr(import_module(f".{_SPARK[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
