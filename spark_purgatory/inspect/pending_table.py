"""The pending operations of a checkpoint read from its files, without a JVM: ``pending_table``.

The operator's state is small and its format stable, so the questions a person types read
each shard group's value from the HDFS-backed store's files, one shard at a time, without
the JVM ``pending_operations`` starts.  Another store (RocksDB) raises ``StateNeedsSpark``.

Invariant: the rows are ``pending_operations``'s rows for the same batch and watermark, in
shard order, each shard's in arrival order.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..checkpoint_paths import Checkpoint
from ..config import PurgatoryConfig
from ..contract import PENDING
from ..spark import state_files
from ..state import SegmentStore
from .checkpoint import InspectError
from .countdown import Countdown
from .pending_view import WatermarkLike, horizon_ms, shard_chunks, state_to_read


class StateNeedsSpark(InspectError):
    """The checkpoint keeps its state in a form only Spark reads (the message says which)."""


def pending_table(
    checkpoint: str,
    *,
    config: PurgatoryConfig | None = None,
    watermark: WatermarkLike | None = None,
    batch_id: int | None = None,
) -> pa.Table:
    """The pending operations of the query on ``checkpoint``, as an Arrow table, without Spark.

    The arguments are those of ``pending_operations`` (no session); so are the columns
    (``contract.PENDING``): one row per pending operation, a cross-shard one once.

    Raises:
        InspectError: no such checkpoint, not a purgatory checkpoint, or nothing committed.
        StateNeedsSpark: a state store only Spark reads (``pending_operations`` does).

    Example::

        pending = pending_table("/chk").to_pandas()
        pending[pending["condition"] == "all"][["op_id", "members_missing"]]
    """
    return pa.Table.from_batches(
        list(pending_batches(checkpoint, config=config, watermark=watermark, batch_id=batch_id)),
        schema=PENDING,
    )


def at_risk_table(
    checkpoint: str,
    *,
    within: str | int,
    config: PurgatoryConfig | None = None,
    watermark: WatermarkLike | None = None,
) -> pa.Table:
    """``at_risk`` without Spark: its rows, in its order.  ``within`` as ``at_risk``'s; the
    other arguments and the errors as ``pending_table``'s.

    Example::

        at_risk_table("/chk", within="1h").select(["op_id", "deadline", "progress_text"])
    """
    horizon = horizon_ms(within)
    due = [
        b.filter(pc.less_equal(b.column("time_left_ms"), horizon))
        for b in pending_batches(checkpoint, config=config, watermark=watermark)
    ]
    table = pa.Table.from_batches(due, schema=PENDING)
    return with_progress(table.sort_by([("deadline", "ascending"), ("op_id", "ascending")]))


def with_progress(table: pa.Table) -> pa.Table:
    """``table`` (``contract.PENDING`` columns) with ``still_needed`` and ``progress_text``
    (``engine.inspection.with_progress_text``)."""
    from ..engine.inspection import with_progress_text

    asked = [
        "condition",
        "progress",
        "goal",
        "matched_events",
        "distinct_sources",
        "members_missing",
        "offsets",
    ]
    frame = with_progress_text(table.select(asked).to_pandas())
    return table.append_column("still_needed", pa.array(frame["still_needed"], pa.float64())).append_column(
        "progress_text", pa.array(frame["progress_text"], pa.string())
    )


def pending_batches(
    checkpoint: str,
    *,
    config: PurgatoryConfig | None = None,
    watermark: WatermarkLike | None = None,
    batch_id: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """``pending_table``'s rows one shard at a time (memory bounded by the largest shard).

    The checkpoint is checked before the first batch is asked for: a wrong path or a state
    only Spark reads raises here, not part-way through."""
    cfg, storage, info, batch, countdown = state_to_read(checkpoint, config, batch_id, watermark)
    unknown = state_files.unknown_format(info.conf)
    if unknown:
        raise StateNeedsSpark(f"its state store is {', '.join(unknown)}, which only Spark reads")
    if info.groups is None:
        raise StateNeedsSpark("its offsets log records no shuffle partitions")
    fs, files = Checkpoint(checkpoint).opened(storage)
    try:
        groups = state_files.read_groups(fs, files.operator_state, info.groups, batch + 1)
    except state_files.StateFormatError as error:
        raise StateNeedsSpark(str(error)) from None

    return _shards(groups, cfg, SegmentStore.of(cfg), countdown, batch)


def _shards(
    groups: dict[int, state_files.GroupValue],
    config: PurgatoryConfig,
    store: SegmentStore | None,
    countdown: Countdown,
    batch: int,
) -> Iterator[pa.RecordBatch]:
    for shard in sorted(groups):
        if groups[shard].state is not None:
            yield from shard_chunks(groups[shard].state, config, store, countdown, batch, shard)
