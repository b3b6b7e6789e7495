"""One shard's micro-batch, without Spark: what the operator runs in each shard group.

Modules, in the order a call meets them:

* ``labels``: the group key of each shard, chosen so that Spark's hash partitioner gives every
  shard its own partition (and the shard number back from it).
* ``roles``: the routed row (the operator's input): its roles, the columns roles share, its
  one schema.
* ``input``: the routed rows split for the engine (operations, events, rows rejected at parse,
  claims, the operator's clock).
* ``step``: ``ShardStep``, one shard's call in named phases (load, read, receive, process,
  post, decide, save, emit), owning what the shard keeps, the watermark it reports and when
  it is called next.
* ``output``: the call's output rows in the operator's one output schema.

``spark.operator`` adapts Spark's ``GroupState`` to ``ShardStep``; ``testing.PurgatoryTester``
runs the same step over its shards.

Invariant: nothing here imports Spark; the engine sees only validated pandas frames.
"""

from __future__ import annotations

from .step import ShardInput, ShardResult, ShardStep

__all__ = ["ShardStep", "ShardInput", "ShardResult"]
