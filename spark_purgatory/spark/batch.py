"""Batch mode: the purgatory over static DataFrames (backfills, tests): every row at once, then
the watermark moved past every deadline.

The same parsing, routing and shard step as a stream (``operator``), on one call per shard
group (``ShardStep.replay``); for input without late rows the outcomes equal the stream's at
the same final watermark.  No state is kept: a batch starts from nothing.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame

from ..config import PurgatoryConfig
from ..engine.collector import collector_paused
from ..handoff.end_of_input import end_watermark_ms
from ..shard.labels import shard_numbers
from ..shard.step import ShardStep
from .output import OUTPUT_SCHEMA, with_timestamps
from .routing import route
from .sources import SourceFormat, parse_events, parse_operations


def purgatory_batch(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig | None = None,
    *,
    source_format: SourceFormat = "auto",
    final_watermark_ms: int | None = None,
) -> DataFrame:
    """The same engine on static DataFrames: process everything, then move the watermark.

    Args:
        operations: the operations, as for ``purgatory_stream``.
        events: the completion events, likewise.
        config: the operator's settings (``PurgatoryConfig``).
        source_format: as for ``purgatory_stream``.
        final_watermark_ms: the watermark moved to at the end; by default the end of input's,
            past every deadline a valid operation can have.
    """
    config = config or PurgatoryConfig()
    limits = config.input_limits
    parsed_ops = parse_operations(
        operations, source_format, max_timeout_ms=config.max_timeout_ms, limits=limits
    )
    parsed_events = parse_events(events, source_format, limits=limits)  # a backfill: no future-time check
    routed = route(parsed_ops, parsed_events, config)
    if final_watermark_ms is None:
        final_watermark_ms = end_watermark_ms(config.max_timeout_ms, config.tick_ms)
    final = int(final_watermark_ms)
    out = routed.groupBy("shard").applyInPandas(_batch_shard(config, final), OUTPUT_SCHEMA)
    return with_timestamps(out)


def _batch_shard(config: PurgatoryConfig, final_watermark_ms: int):
    step = ShardStep(config)
    numbers = shard_numbers(config.groups)

    def shard_all(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        with collector_paused():  # as the stream's shard step
            return step.replay(numbers[int(key[0])], pdf, final_watermark_ms=final_watermark_ms)

    return shard_all
