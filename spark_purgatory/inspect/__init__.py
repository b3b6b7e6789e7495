"""Day-2 questions about a running (or stopped) purgatory, answered from what it leaves behind:
the pending operations with their progress (``pending_operations``; ``pending_table`` without
a JVM), the ones due within a horizon (``at_risk``, ``at_risk_table``), where an op_id is
(``explain``), how the query stands (``checkpoint_status``), and Spark's offsets and commits
logs read without Spark (``read_checkpoint``).  The command line prints the same answers.
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
