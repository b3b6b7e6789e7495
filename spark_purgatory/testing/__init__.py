"""Test helpers for users' own scenarios: an in-memory harness, ``assert_outcomes``, a session.

As Kafka tests its purgatory with a mock timer and Spark 4.2's ``TwsTester`` drives a
stateful processor in memory, ``PurgatoryTester`` runs the shard step production runs, in
milliseconds per scenario, with no JVM.  ``assert_outcomes`` compares outcomes whatever their
row order and form; ``spark_session()`` and the ``purgatory_spark`` pytest fixture give a
local session.

Invariant: the harness runs exactly what a stream's shard groups run and only keeps the
results.

>>> t = PurgatoryTester({"purgatory.tick.ms": 100})
>>> t.add_operations([{"op_id": "produce-1", "key": "orders-0", "ts": "2026-01-01T00:00:00Z",
...                    "timeout_ms": 30_000, "condition": "count", "target": 2},
...                   {"op_id": "produce-2", "key": "orders-1", "ts": "2026-01-01T00:00:05Z",
...                    "timeout_ms": 30_000}])
>>> t.add_events([{"key": "orders-0", "ts": "2026-01-01T00:00:12Z", "source": "broker-1"},
...               {"key": "orders-0", "ts": "2026-01-01T00:00:15Z", "source": "broker-2"}])
>>> t.step().completed, t.pending
(1, 1)
>>> t.advance_watermark("2026-01-01T00:00:40Z")
>>> t.step().expired, t.pending
(1, 0)
>>> assert_outcomes(t.outcomes(), [
...     {"op_id": "produce-1", "status": "completed", "resolved_at": "2026-01-01T00:00:15Z"},
...     {"op_id": "produce-2", "status": "expired", "resolved_at": "2026-01-01T00:00:35Z"},
... ])

The harness and ``assert_outcomes`` need only pandas; the fixture needs pytest (the
``testing`` extra, with chispa).
"""

from __future__ import annotations

from .inputs import Rows, Time
from .outcomes import Outcomes, assert_outcomes
from .session import purgatory_spark, spark_session
from .tester import PurgatoryTester

__all__ = [
    "Rows",
    "Outcomes",
    "Time",
    "PurgatoryTester",
    "assert_outcomes",
    "spark_session",
    "purgatory_spark",
]
