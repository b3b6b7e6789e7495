"""One shard's micro-batch, without Spark: what the operator runs in each shard group.

A call's routed rows (``roles``) are split for the engine (``input``), run by ``ShardStep``
(``step``) and returned as output rows (``output``); ``labels`` gives each shard its group key.

Invariant: nothing here imports Spark; the engine sees only validated pandas frames.
"""

from __future__ import annotations

from .step import ShardInput, ShardResult, ShardStep

__all__ = ["ShardStep", "ShardInput", "ShardResult"]
