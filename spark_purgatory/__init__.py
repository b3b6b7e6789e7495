"""spark-purgatory: Kafka's delayed-operation purgatory for Spark Structured Streaming.

The engine (``Purgatory``, ``TimingWheel``) runs without Spark; ``save_state`` /
``load_state`` (with an optional ``SegmentStore``) turn a shard into one binary value and
back.  ``start`` runs the whole stream into Delta tables in one call and returns a
``PurgatoryQuery``; the pieces it wires (``RecordAccumulator``, ``PurgatorySink``,
``choose_writer``) stay public for users with their own sink.  The Spark entry points
(``start``, ``purgatory_stream``, ``purgatory_batch``, ``outcomes_of``, ``unmatched_of``,
``rejected_of``, ``read_stream``) are imported on first use, so the engine stays importable
(and fast to test) without starting a JVM.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .config import ConfigError, PurgatoryConfig
from .engine.purgatory import BatchResult, Purgatory
from .engine.wheel import TimingWheel
from .state import SegmentStore, load_state, loaded_by, save_state

_SPARK = {
    "start": "query",
    "backfill": "backfills",
    "PurgatoryQuery": "query",
    "RecordAccumulator": "delta.accumulator",
    "PurgatorySink": "delta.sink",
    "choose_writer": "delta.writers",
    "purgatory_stream": "spark.operator",
    "purgatory_batch": "spark.operator",
    "outcomes_of": "spark.output",
    "unmatched_of": "spark.output",
    "rejected_of": "spark.output",
    "metrics_of": "spark.output",
    "read_stream": "spark.sources",
    "read_batch": "spark.sources",
}

__all__ = [
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
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _SPARK:
        return getattr(import_module(f".{_SPARK[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
