"""The pending operations of a checkpoint as a Spark DataFrame, and the ones at risk.

``pending_operations`` reads the operator's group state with Spark's state data source at
the last *committed* micro-batch and decodes each shard on the executors, so memory is
bounded by the largest shard.  It works on a stopped query and beside a running one.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..config import ConfigError, PurgatoryConfig, parse_interval_ms
from ..contract import PENDING, PENDING_TIME_COLUMNS
from ..startup import with_checkpoint_defaults
from ..state import SegmentStore
from ..storage import Storage
from .checkpoint import CheckpointInfo, InspectError, batch_watermark_ms, read_checkpoint
from .countdown import Countdown, countdown_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: a watermark: epoch ms, a datetime, or an ISO-8601 string
WatermarkLike = int | dt.datetime | str
#: rows per Arrow batch a shard's task yields (bounds a task's memory beyond its shard)
_CHUNK_ROWS = 50_000
_STATE_COLUMN = "value.groupState.shard_state"
_SHORT = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_SHORT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def inspect_config(checkpoint: str, config: PurgatoryConfig | None) -> PurgatoryConfig:
    """The config a query ``start`` ran on ``checkpoint`` used for its files: the shard state
    and the staged rows beside the checkpoint unless set, as ``start`` sets them."""
    return with_checkpoint_defaults(config or PurgatoryConfig(), checkpoint)


def pending_operations(
    checkpoint: str,
    *,
    spark: SparkSession | None = None,
    config: PurgatoryConfig | None = None,
    watermark: WatermarkLike | None = None,
    batch_id: int | None = None,
) -> DataFrame:
    """The pending operations of the purgatory query on ``checkpoint``, with their progress.

    Args:
        checkpoint: the query's checkpoint (a path or URI).
        spark: the session to read with; the active one when None.
        config: the query's ``PurgatoryConfig`` (for ``purgatory.state.path`` and the
            ``storage.*`` settings); the defaults when None.
        watermark: what ``time_left_ms`` counts from: epoch ms, a datetime or an ISO
            string; by default the operator's clock while a query runs with one, else the
            watermark of the batch read.
        batch_id: the committed micro-batch to read; the last one when None.

    Returns:
        A DataFrame with the ``contract.PENDING`` columns, one row per pending operation
        (a cross-shard operation once, from the cross-shard group).

    Raises:
        InspectError: no such checkpoint, not a purgatory checkpoint, or nothing committed.

    Example::

        pending = pending_operations("/chk", spark=spark)
        pending.groupBy("shard").count().show()
        pending.filter("condition = 'all'").select("op_id", "members_missing").show()
    """
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise InspectError("no active Spark session: pass spark=...")
    cfg, _, _, batch, countdown = state_to_read(checkpoint, config, batch_id, watermark)
    # a fresh session has no StateStoreCoordinator until its StreamingQueryManager exists, and
    # the state store's load fails without one (SPARK-58973)
    _ = spark.streams
    try:
        state = spark.read.format("statestore").option("batchId", batch).load(checkpoint)
    except Exception as error:  # the reader checks the checkpoint's metadata when planning
        raise InspectError(
            f"cannot read the state of {checkpoint} at batch {batch}: {_first_line(error)}"
        ) from None
    if "groupState" not in _fields(state.schema, "value") or "shard_state" not in _fields(
        state.schema["value"].dataType, "groupState"
    ):
        raise InspectError(f"not a purgatory checkpoint (its state holds no shard_state): {checkpoint}")
    values = state.select(F.col(_STATE_COLUMN).alias("state"))
    return values.mapInArrow(_decoder(cfg, countdown, batch), from_arrow_schema(PENDING))


def state_to_read(
    checkpoint: str, config: PurgatoryConfig | None, batch_id: int | None, watermark: WatermarkLike | None
) -> tuple[PurgatoryConfig, Storage, CheckpointInfo, int, Countdown]:
    """The config and storage ``checkpoint``'s state is read with, its logs, the committed
    micro-batch to read (the last when ``batch_id`` is None) and how time left counts on it."""
    cfg = inspect_config(checkpoint, config)
    storage = Storage.of(cfg)
    info = read_checkpoint(checkpoint, storage=storage)
    batch = info.last_batch if batch_id is None else int(batch_id)
    if batch is None:
        raise InspectError(f"no committed micro-batch yet: {checkpoint}")
    if watermark is not None:
        return cfg, storage, info, batch, Countdown(fixed_ms=watermark_ms(watermark))
    latest = batch == info.last_batch
    wm = info.watermark_ms if latest else batch_watermark_ms(checkpoint, batch, storage=storage)
    return cfg, storage, info, batch, countdown_of(checkpoint, storage, floor_ms=wm, latest=latest)


def at_risk(
    checkpoint: str,
    *,
    within: str | int,
    spark: SparkSession | None = None,
    config: PurgatoryConfig | None = None,
    watermark: WatermarkLike | None = None,
    pending: DataFrame | None = None,
) -> DataFrame:
    """The pending operations whose time left (``time_left_ms``) is within ``within`` (overdue
    ones included), earliest deadline first, with ``still_needed`` (how much of the goal is
    missing, in the condition's measure) and ``progress_text`` ("2 of 3 sources", "1 of 3
    members, missing a, c" ...).

    Args:
        within: the horizon: ms, ``"10s"``, ``"15m"``, ``"1h"``, ``"2d"`` or a Spark
            interval (``"1 hour"``).
        pending: a ``pending_operations`` frame to filter (else read from ``checkpoint``).

    The other arguments are those of ``pending_operations``.

    Example::

        at_risk("/chk", within="1h", spark=spark).select("op_id", "deadline", "progress_text").show()
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    horizon = horizon_ms(within)
    frame = (
        pending
        if pending is not None
        else pending_operations(checkpoint, spark=spark, config=config, watermark=watermark)
    )
    soon = frame.filter(F.col("time_left_ms") <= F.lit(horizon))
    schema = T.StructType(
        [
            *soon.schema.fields,
            T.StructField("still_needed", T.DoubleType()),
            T.StructField("progress_text", T.StringType()),
        ]
    )
    return soon.mapInPandas(_with_progress_text, schema).orderBy("deadline", "op_id")


def _with_progress_text(frames: Iterator[Any]) -> Iterator[Any]:
    from ..engine.inspection import with_progress_text

    for frame in frames:
        yield with_progress_text(frame)


def horizon_ms(within: str | int) -> int:
    """A horizon in ms from ``10s``, ``15m``, ``1h``, ``2d``, ``500ms`` or a Spark interval.

    >>> horizon_ms("10s"), horizon_ms("15m"), horizon_ms("1 hour"), horizon_ms(250)
    (10000, 900000, 3600000, 250)
    """
    if isinstance(within, int):
        return within
    short = _SHORT.match(str(within).lower())
    if short:
        return int(short.group(1)) * _SHORT_MS[short.group(2)]
    try:
        return parse_interval_ms(within)
    except ConfigError:
        raise ConfigError(f"not a horizon: {within!r} (e.g. 10s, 15m, 1h, 2d, '1 hour')") from None


def watermark_ms(value: WatermarkLike) -> int:
    """Epoch ms from ms, a datetime (naive: UTC) or an ISO-8601 string.

    >>> watermark_ms("2026-01-01T00:00:10Z"), watermark_ms(5)
    (1767225610000, 5)
    """
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)


def _decoder(config: PurgatoryConfig, countdown: Countdown, batch: int) -> Any:
    """The function each state partition's task runs: every shard value in it as pending
    operations."""
    store = SegmentStore.of(config)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for record_batch in batches:
            for value in record_batch.column(0).to_pylist():
                if value is not None:
                    yield from shard_chunks(value, config, store, countdown, batch)

    return decode


def shard_chunks(
    value: Any,
    config: PurgatoryConfig,
    store: Any,
    countdown: Countdown,
    batch: int,
    shard: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """One shard group's value loaded through the engine's own loading: its pending operations
    as ``contract.PENDING`` batches, time left counted by ``countdown`` from the shard's own
    watermark; ``shard`` where the state names none."""
    from ..engine.inspection import pending_frame
    from ..spark.group_state import shard_bytes
    from ..state import WorkerCache, load_state

    try:
        p = load_state(shard_bytes(value), config, store, cache=WorkerCache(entries=0))
    except ValueError as error:  # a state version this release cannot read
        raise InspectError(f"unreadable state version at batch {batch}: {error}") from None
    if p.shard is None and shard is not None:
        p.shard = shard
    frame = pending_frame(p, batch_id=batch)  # time left from the shard's own watermark
    del p
    if len(frame):
        shard_wm = int(frame["watermark"].iloc[0])
        frame["time_left_ms"] = countdown.time_left(frame["deadline"].to_numpy(np.int64), shard_wm)
        frame["watermark"] = np.int64(countdown.watermark(shard_wm))
    times = set(PENDING_TIME_COLUMNS)
    for start in range(0, len(frame), _CHUNK_ROWS):
        yield arrow_chunk(frame.iloc[start : start + _CHUNK_ROWS], times)


def arrow_chunk(frame: Any, times: set[str]) -> pa.RecordBatch:
    """A ``pending_frame`` chunk as an Arrow batch of ``contract.PENDING`` (ms -> timestamps)."""
    arrays = []
    for field in PENDING:
        column = frame[field.name].to_numpy()
        if field.name in times:
            arrays.append(pa.array(column.astype("int64") * 1000, pa.int64()).view(field.type))
        else:
            arrays.append(pa.array(column, field.type, from_pandas=True))
    return pa.RecordBatch.from_arrays(arrays, schema=PENDING)


def _fields(schema: Any, name: str) -> list[str]:
    try:
        return [f.name for f in schema[name].dataType.fields]
    except (KeyError, AttributeError):
        return []


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
