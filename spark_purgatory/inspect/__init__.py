"""Day-2 questions about a running (or stopped) purgatory, answered from what it leaves behind.

* ``pending_operations(checkpoint)``: the pending operations as a DataFrame, with their
  progress;
* ``pending_table(checkpoint)``: the same rows as an Arrow table, without a JVM;
* ``at_risk(checkpoint, within="1h")`` (a DataFrame) and ``at_risk_table`` (Arrow, no JVM):
  the ones due within a horizon, earliest first, with how far each is from its condition;
* ``explain(op_ids, output=..., checkpoint=...)``: where each op_id is;
* ``checkpoint_status(checkpoint, output=...)``: the last committed micro-batch, watermark,
  pending by shard, table sizes;
* ``read_checkpoint``: Spark's offsets and commits logs, without Spark.

The command line prints the same answers.
"""

from .checkpoint import CheckpointInfo, InspectError, read_checkpoint
from .pending_table import StateNeedsSpark, at_risk_table, pending_table
from .pending_view import at_risk, horizon_ms, pending_operations
from .status import checkpoint_status
from .story import OperationStory, explain

__all__ = [
    "pending_operations",
    "pending_table",
    "at_risk",
    "at_risk_table",
    "StateNeedsSpark",
    "explain",
    "checkpoint_status",
    "OperationStory",
    "read_checkpoint",
    "CheckpointInfo",
    "InspectError",
    "horizon_ms",
]
