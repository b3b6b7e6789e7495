"""spark-purgatory: Kafka's delayed-operation purgatory for Spark Structured Streaming.

The public surface, from the top down:

* ``session(require=["kafka"])``: a local Spark session with the project's JARs and the JVM
  extras on its class path (Spark's Kafka source; Delta's connector and S3A ``make jars`` fetched).
* ``jar_files()``: the project's own JARs, as paths for the sessions the library does not
  start; ``kafka_jars()``: Spark's Kafka source for them; ``__version__``: the one version.
* ``read_table(path)``: an output table as an Arrow table, read with delta-rs so that the
  process exits cleanly afterwards.
* ``start(operations, events, output=..., checkpoint=...)`` runs the whole stream into the
  three Delta tables (``outcomes``, ``unmatched_events``, ``rejected``) and returns a
  ``PurgatoryQuery``; ``backfill(operations, events, output=...)`` writes the same tables from
  static input, once per (app id, batch id).
* The pieces ``start`` wires, public for users with their own sink: ``purgatory_stream`` /
  ``purgatory_batch`` (the operator), ``read_stream`` / ``read_batch`` (the sources),
  ``outcomes_of`` / ``unmatched_of`` / ``rejected_of`` / ``metrics_of`` (a micro-batch split
  into the tables), ``RecordAccumulator``, ``PurgatorySink`` and ``choose_writer``;
  ``CatalogTables`` names the tables in the session's catalog instead of a path.
* The engine, without Spark: ``Purgatory`` (one shard: ``process`` a micro-batch, get a
  ``BatchResult``), ``TimingWheel``, ``PurgatoryConfig`` (``ConfigError`` names a bad key),
  and shard state as one binary value (``save_state`` / ``load_state``, ``SegmentStore``,
  ``loaded_by``).
* Day-2 questions (also the ``spark-purgatory`` command line): ``pending_operations`` (as a
  DataFrame; ``pending_table``: Arrow, without a JVM), ``at_risk`` (``at_risk_table``),
  ``explain`` (where an op_id is) and ``checkpoint_status``.
* ``spark_purgatory.testing``: ``PurgatoryTester``, ``assert_outcomes``, ``spark_session``
  and the ``purgatory_spark`` fixture for users' own tests.

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
from .state import SegmentStore, load_state, loaded_by, save_state
from .version import __version__

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
