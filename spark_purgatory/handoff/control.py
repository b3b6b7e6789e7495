"""The input's control plane after a micro-batch: what the driver tells the next one.

The sink (``delta.sink``) writes a micro-batch's output: it records the staged rows and commits
what is ready.  What the *input* needs from that micro-batch is another matter, which the driver
handles in one call, ``MicroBatchControl.after``, made by the driver's half of the micro-batch
(``spark_purgatory.driver_step.DriverStep``) once the sink returned, in this order:

1. **pending** (``state.pending_counts``): the shards Spark called report their pending counts;
   the last count of every shard is kept and written to ``<checkpoint>/purgatory-pending``;
2. **the wake** (``handoff.wake``): a wake file when the micro-batch relayed, the first micro-batch
   whose relays are still owed, the micro-batch that applied the end of input;
3. **the Kafka partitions' watermarks** (``handoff.partitions``): moved, and posted for the
   next micro-batch's shards;
4. **the reaper** (``handoff.reaper``): the micro-batch's metrics rows, for the operator's clock
   (what waits in each shard, each input's proposed watermark);
5. **the totals** (``on_batch``: ``PurgatoryQuery``'s totals, then the user's hook), with the
   micro-batch's figures, ``pending`` among them.

Why then: the output of the micro-batch is recorded (exactly once) and what was ready is
committed, and Spark has not yet recorded the micro-batch as done, so it has not planned the
next: a wake file or a partitions file written here is read by the next trigger, never sooner.
A replayed micro-batch (the driver died before Spark recorded it) comes through again with the
same rows, and each step repeats to the same effect: the same wake file name (Spark's file
source has seen it), the same partitions file key, the same pending counts.

Over Spark Connect the ``foreachBatch`` function runs in the server's Python: the control
plane goes with it (pickled), so the wake and partitions files are written there; the totals
count there, and there is no reaper (``query.start`` says so).

Invariant: nothing here writes output rows, and nothing in the sink touches the input's
control files.

Example (what ``start`` wires)::

    control = MicroBatchControl(wake=wake, partitions=partitions, reaper=reaper,
                                pending=PendingRecord.under(checkpoint), on_batch=totals)
    figures = control.after(batch_id, calls, figures, watermarks=watermarks)
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

__all__ = ["MicroBatchControl"]

_WATERMARK = ms_column("watermark")


class MicroBatchControl:
    """The driver's control plane of each micro-batch (module docstring); each part optional.

    Args:
        wake: where to ask for one more micro-batch after one whose shards relayed
            (``handoff.wake``; ``start`` passes ``<checkpoint>/purgatory-wake``).
        partitions: the Kafka inputs' watermarks per partition (``handoff.partitions``);
            ``start`` passes one beside the shard state.
        reaper: the operator's clock (``handoff.reaper``), for a ``processing-time`` query
            with ``watermark.idle.timeout`` or ``deadline.clock=processing``.
        pending: where the last pending count of every shard is kept
            (``state.pending_counts``; ``start`` passes ``<checkpoint>/purgatory-pending``):
            seeds ``pending`` so that it counts all shards, not only those Spark called since
            this process started.
        on_batch: called last with the micro-batch's figures (a dict, ``start`` names its
            keys), e.g. the handle's totals.

    Attributes:
        pending: every shard's pending count as of the last micro-batch (shard -> count).
        pending_at_start: the same as the checkpoint's record held it at start.
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
        """Micro-batch ``batch_id``'s output is recorded and committed as far as ready: run
        the control plane (module docstring, in that order) and return its figures.

        Args:
            batch_id: Spark's id of the micro-batch.
            calls: its metrics rows, one per shard call (``staging.CALL_COLUMNS``).
            figures: the sink's figures of it (``batch_id``, the rows by table, ``relayed``,
                ``watermark_ms``, each input's watermark, ``staged_bytes``, ``committed``).
            watermarks: each input's watermark as the sink keeps it (also from earlier runs).

        Returns:
            ``figures`` with ``pending`` (every shard's, each operation once), as ``on_batch``
            got them.
        """
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
        """Every shard's pending count after this micro-batch: the shards called report
        theirs, the others keep their last; recorded beside the checkpoint."""
        shards, counts = calls.column("shard").to_pylist(), calls.column("pending").to_pylist()
        for shard, pending in zip(shards, counts, strict=True):
            self.pending[int(shard)] = int(pending or 0)
        if self.pending_record is not None and calls.num_rows:
            self.pending_record.write(batch_id, self.pending)
        return sum(self.pending.values())
