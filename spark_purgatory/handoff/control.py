"""The input's control plane after a micro-batch: what the driver tells the next one.

``MicroBatchControl.after`` runs once the sink has written a micro-batch: the pending counts,
the wake, the Kafka partitions' watermarks, the reaper, then the totals (``on_batch``).  The
output is recorded and Spark has not yet planned the next micro-batch, so a file written here
is read by the next trigger, never sooner; a replay repeats each step to the same effect.

Invariant: nothing here writes output rows, and nothing in the sink touches the input's
control files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..contract import PARTITION_MAXIMA, RELAYED, ms_column
from ..state.pending_counts import PendingRecord
from .partitions import PartitionWatermarks
from .reaper import ExpirationReaper
from .wake import Wake

_WATERMARK = ms_column("watermark")


class MicroBatchControl:
    """The driver's control plane of each micro-batch (module docstring); each part optional.

    ``pending`` (the record) seeds ``self.pending``, every shard's pending count, so that it
    counts all shards, not only those Spark called since this process started; ``on_batch``
    is called last with the micro-batch's figures.
    """

    def __init__(
        self,
        *,
        wake: Wake | None = None,
        partitions: PartitionWatermarks | None = None,
        reaper: ExpirationReaper | None = None,
        pending: PendingRecord | None = None,
        on_batch: Callable[[dict], None] | None = None,
    ) -> None:
        self.wake = wake
        self.partitions = partitions
        self.reaper = reaper
        self.pending_record = pending
        self.pending: dict[int, int] = pending.read() if pending else {}
        self.pending_at_start = dict(self.pending)
        self.on_batch = on_batch

    def after(
        self,
        batch_id: int,
        calls: pa.Table,
        figures: Mapping[str, Any],
        *,
        watermarks: Mapping[str, int | None],
    ) -> dict:
        """Run the control plane after micro-batch ``batch_id``'s output is recorded;
        ``calls``: its metrics rows (``staging.CALL_COLUMNS``); ``figures``: the sink's;
        ``watermarks``: each input's as the sink keeps it.  Returns ``figures`` with
        ``pending``, as ``on_batch`` got them."""
        figures = {"batch_id": batch_id, "pending": self._count_pending(batch_id, calls), **figures}
        if self.wake is not None:
            called = {int(s) for s in calls.column("shard").to_pylist()}
            relayed, wm = figures[RELAYED] > 0, figures[_WATERMARK]  # wm: the end of input's too
            self.wake.after(batch_id, relayed=relayed, shards=called, watermark=wm)
        batch_time = pc.max(calls.column(ms_column("batch_time"))).as_py() if calls.num_rows else None
        held = None
        if self.partitions is not None and batch_time is not None:
            held = self.partitions.observe(int(batch_time), calls.column(PARTITION_MAXIMA).to_pylist())
        if self.reaper is not None:
            self.reaper.observe(calls, batch_id, dict(watermarks), held=held)
        if self.on_batch is not None:
            self.on_batch(figures)
        return figures

    def _count_pending(self, batch_id: int, calls: pa.Table) -> int:
        """Every shard's pending count: the shards called report theirs, the others keep theirs."""
        shards, counts = calls.column("shard").to_pylist(), calls.column("pending").to_pylist()
        for shard, pending in zip(shards, counts, strict=True):
            self.pending[int(shard)] = int(pending or 0)
        if self.pending_record is not None and calls.num_rows:
            self.pending_record.write(batch_id, self.pending)
        return sum(self.pending.values())
