"""The pending count of every shard, as of the last micro-batch: ``<checkpoint>/purgatory-pending``.

Spark calls a shard only when it has input or a timeout due, so the driver keeps the last
count of every shard and writes it here after each micro-batch; a restarted query starts
from it.

Invariant: a missing or unreadable record means "no shard has reported yet", never an error.
"""

from __future__ import annotations

import json

from ..checkpoint_paths import Checkpoint
from ..storage import Storage, read_bytes, write_whole


class PendingRecord:
    """``{shard: pending}`` as of micro-batch ``batch_id``, in one small JSON file."""

    def __init__(self, path: str, storage: Storage | None = None) -> None:
        self.path = path
        self.storage = storage or Storage()

    @classmethod
    def under(cls, checkpoint: str, storage: Storage | None = None) -> PendingRecord:
        return cls(Checkpoint(checkpoint).pending_record, storage)

    def read(self) -> dict[int, int]:
        """The last recorded count per shard (empty for a new checkpoint)."""
        fs, path = self.storage.filesystem(self.path)
        try:
            body = json.loads(read_bytes(fs, path))
        except (FileNotFoundError, OSError, ValueError):
            return {}
        return {int(shard): int(n) for shard, n in body.get("pending", {}).items()}

    def write(self, batch_id: int, pending: dict[int, int]) -> None:
        fs, path = self.storage.filesystem(self.path)
        body = json.dumps({"batch_id": batch_id, "pending": {str(s): n for s, n in sorted(pending.items())}})
        write_whole(fs, path, lambda out: out.write(body.encode()))
