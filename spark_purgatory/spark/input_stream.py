"""The operator's input stream: both inputs parsed and routed to shards, each with its own
watermark, unioned, with the wake files as a third input.

**A watermark per input**, declared before the union: Spark's global watermark (``min``) never
makes a slower stream's rows late.

**Nothing dropped by the watermark.**  Spark drops rows behind the watermark before an
``EventTimeTimeout`` operator sees them, so each watermark is declared on ``ts + L`` with
delay ``delay + L`` (``LATE_ALLOWANCE_MS``, a century): the same watermark, and the shard
step rejects late rows itself.  Rows rejected at parse carry the epoch and move no watermark.

**Marks.**  Spark applies a proposed watermark only in the next micro-batch.  With the
project's JAR each Spark partition ends with a ``mark`` row per input and primary shard,
the input's largest event time there, so each shard learns what Spark's next watermark is
computed from.  Not with Kafka input nor on the processing clock.

Invariant: every parsed row reaches the operator (none dropped by Spark's watermark but rows
a century late); the wake rows move no watermark; a mark's time is at most its input's largest
event time in the micro-batch.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..config import PurgatoryConfig
from ..contract import SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column
from ..shard.labels import shard_labels
from ..shard.roles import ROLE_BAD, ROLE_MARK, ROLES, SIDES
from .checks import batch_marks
from .formats import from_kafka
from .routing import (
    route_events,
    route_operations,
    route_typed_events,
    route_typed_operations,
    route_wake,
)
from .sources import SourceFormat, parse_events, parse_operations, source_format_of
from .sql_text import literal_column

#: how far behind the watermark a row may be before Spark itself drops it (module docstring)
LATE_ALLOWANCE_MS = 36_500 * 86_400_000

_TS_MS = ms_column("ts")
_EVENT_TIME = "_event_time"  # the watermark's helper column (module docstring)


def input_stream(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig,
    *,
    source_format: SourceFormat = "auto",
    wake_path: str | None = None,
    wake_first: bool = True,
) -> DataFrame:
    """The operator's input: both streams parsed and routed, each with its own watermark,
    then unioned; with ``wake_path`` the wake files as another input, the first unless
    ``wake_first`` is false."""
    limits = config.input_limits  # poison records (input.max.*)
    reading = dict(max_timeout_ms=config.max_timeout_ms, max_future_ms=config.max_future_ms, limits=limits)
    routed_ops = None
    if source_format_of(operations, source_format) == "typed":  # checked and routed in one call
        routed_ops = route_typed_operations(operations, config, **reading)
    if routed_ops is None:
        routed_ops = route_operations(parse_operations(operations, source_format, **reading), config)
    routed_evs = None
    if source_format_of(events, source_format) == "typed":
        routed_evs = route_typed_events(events, config, max_future_ms=config.max_future_ms)
    if routed_evs is None:
        parsed = parse_events(events, source_format, max_future_ms=config.max_future_ms, limits=limits)
        routed_evs = route_events(parsed, config)
    ops = _with_watermark(routed_ops, config.input_delay_ms(SOURCE_OPERATIONS))
    evs = _with_watermark(routed_evs, config.input_delay_ms(SOURCE_EVENTS))
    marking = not from_kafka(operations, events, source_format) and config.deadline_clock != "processing"
    rows = ops.unionByName(evs)
    if wake_path:
        # no watermark: wake rows move none; first, Spark asks the wake for its offsets before
        # the inputs' (``handoff.reaper``: the clock then needs no listing margin).  A union's
        # columns are its first child's: the helper column says it holds a watermarked time
        lines = operations.sparkSession.readStream.format("text").load(wake_path)
        no_time = literal_column(lines.sparkSession, None, "timestamp")  # a typed null, as optimized
        wake = route_wake(lines, config).withColumn(_EVENT_TIME, no_time)
        wake = wake.withMetadata(_EVENT_TIME, evs.schema[_EVENT_TIME].metadata)
        rows = wake.unionByName(ops).unionByName(evs) if wake_first else rows.unionByName(wake)
    return _marked(rows, config) if marking else rows


def _marked(rows: DataFrame, config: PurgatoryConfig) -> DataFrame:
    """``rows`` and, at the end of each Spark partition, its marks (module docstring); ``rows``
    as they are without the JAR's generator."""
    function = batch_marks(rows.sparkSession)
    if not function:
        return rows
    # the primary shards': the cross-shard group moves a call after its relays (``Purgatory.process``)
    labels = ", ".join(str(int(label)) for label in shard_labels(config.groups)[: config.shards])
    mark, bad = ROLES.index(ROLE_MARK), ROLES.index(ROLE_BAD)
    inputs = SIDES.index(SOURCE_EVENTS) + 1  # sides 0 and 1 are the inputs, the wake's after them
    columns = ", ".join(f"`{name}`" for name in rows.columns)
    call = f"{function}(array({labels}), {mark}Y, {bad}Y, {inputs}, {columns})"
    return rows.selectExpr(f"{call} AS ({columns})")


def _with_watermark(routed: DataFrame, delay_ms: int) -> DataFrame:
    """One input's watermark, on the helper column ``ts + L`` with delay ``delay + L``;
    rows rejected at parse count at the epoch (they move no watermark)."""
    # L added to the epoch ms: an interval added to a timestamp costs a ZonedDateTime per row;
    # typed literals in each branch, as the optimizer leaves them
    bad = ROLES.index(ROLE_BAD)
    event_time = F.expr(
        f"timestamp_millis(CASE WHEN role = {bad}Y THEN {LATE_ALLOWANCE_MS}L "
        f"ELSE {_TS_MS} + {LATE_ALLOWANCE_MS}L END)"
    )
    routed = routed.withColumn(_EVENT_TIME, event_time)
    return routed.withWatermark(_EVENT_TIME, f"{delay_ms + LATE_ALLOWANCE_MS} milliseconds")
