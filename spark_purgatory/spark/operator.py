"""The operator: the purgatory as one ``applyInPandasWithState`` over the routed streams.

The routed input is grouped by shard; each group's call is one ``shard.step.ShardStep`` call,
which owns every decision; ``group_state`` only moves Spark's ``GroupState`` in and out.  Each
group's state is that shard's ``Purgatory`` and its event-time timeout the shard's next
wake-up.  Grouping by shard, not by key, is what makes this fast: Spark calls Python once per
*shard* per micro-batch.

``staged_stream`` is the same operator whose shard step stages its output rows itself and
yields only their ``STAGED`` rows, so the rows never cross into the JVM.

Invariant: the shard step is the only place Spark hands rows to the engine, once per shard per
micro-batch (or timeout).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..config import PurgatoryConfig
from ..delta.sent import SENT
from ..delta.staging import ShardStaging
from ..engine.collector import collector_paused
from ..runtime.worker_heap import freeze_heap
from ..shard.input import routed_rows
from ..shard.labels import shard_numbers
from ..shard.step import ShardStep
from .formats import from_kafka
from .group_state import StateEncoding, call_group, keep_group, state_schema
from .input_stream import input_stream
from .output import OUTPUT_SCHEMA, with_timestamps
from .sources import SourceFormat

#: PURGATORY_STATE_LOG=1: each shard call logs how its state was loaded and what it cost, and
#: the task's time around it (``_log_task``)
_STATE_LOG = bool(os.environ.get("PURGATORY_STATE_LOG"))
#: the spans ``_log_task`` reports, between the clock's readings
_TASK_SPANS = ("input", "step", "output", "after")

#: what the operator returns when its shards stage their own output (``staged_stream``):
#: their ``STAGED`` rows, as ``delta.sent`` narrows them
STAGED_SCHEMA: T.StructType = from_arrow_schema(SENT)


def purgatory_stream(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig | None = None,
    *,
    source_format: SourceFormat = "auto",
    wake_path: str | None = None,
    wake_first: bool = True,
    state_encoding: StateEncoding = "text",
) -> DataFrame:
    """The purgatory over two streaming DataFrames; returns one stream of output rows.

    Args:
        operations: the operations source: text lines (``read_stream`` of JSON files), Kafka
            records, or any DataFrame with the input contract's columns (typed input).
        events: the completion-events source, likewise.
        config: shards, wheel, retention, watermark delays (``PurgatoryConfig``).
        source_format: ``auto`` (told by each input's schema: ``sources.source_format_of``),
            ``json``, ``kafka``, or ``typed`` (``parquet`` and ``delta`` are typed too).
            Typed input with a missing or wrongly typed column raises ``InputSchemaError``
            here, naming the column.
        wake_path: a directory where the driver posts wake files after a micro-batch whose
            shards relayed (``handoff.wake``).  Without it, relayed completions wait for the
            next micro-batch that has input or moves the watermark.
        wake_first: read the wake files as the first source (the order a checkpoint began with).
        state_encoding: how the shard state is kept in Spark's group state: ``text`` (the
            default) or ``binary``, which a checkpoint started by 0.1.0 keeps (``group_state``).

    Returns:
        A streaming DataFrame with ``OUTPUT_SCHEMA`` plus timestamps; split each micro-batch
        with ``outcomes_of``, ``unmatched_of`` and ``rejected_of``.

    Example::

        from .sources import read_stream
        ops = read_stream(spark, "/data/ops", "json", kind="operations")
        evs = read_stream(spark, "/data/events", "json", kind="events")
        out = purgatory_stream(ops, evs, PurgatoryConfig(shards=8))

        def sink(batch, batch_id):
            outcomes_of(batch, batch_id).write.mode("append").parquet("/out/outcomes")

        out.writeStream.foreachBatch(sink).option("checkpointLocation", "/chk").start()
    """
    config = config or PurgatoryConfig()
    routed = input_stream(
        operations, events, config, source_format=source_format, wake_path=wake_path, wake_first=wake_first
    )
    step = _stateful_shard(
        config, encoding=state_encoding, partitioned=from_kafka(operations, events, source_format)
    )
    return with_timestamps(_grouped(routed, step, OUTPUT_SCHEMA, state_encoding))


def staged_stream(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig,
    staging: ShardStaging,
    *,
    source_format: SourceFormat = "auto",
    wake_path: str | None = None,
    wake_first: bool = True,
    state_encoding: StateEncoding = "text",
) -> DataFrame:
    """``purgatory_stream`` whose shards stage their own output and return only ``STAGED``
    rows (``delta.sent.SENT``), for a ``PurgatorySink(..., staged=True)``.  Needs the
    micro-batch id in the tasks: a classic session, not Spark Connect.
    """
    routed = input_stream(
        operations, events, config, source_format=source_format, wake_path=wake_path, wake_first=wake_first
    )
    partitioned = from_kafka(operations, events, source_format)
    step = _stateful_shard(config, staging, encoding=state_encoding, partitioned=partitioned)
    return _grouped(routed, step, STAGED_SCHEMA, state_encoding)


def _grouped(routed: DataFrame, step: Any, schema: T.StructType, encoding: StateEncoding) -> DataFrame:
    """The routed rows grouped by shard into the stateful ``step``."""
    return routed.groupBy("shard").applyInPandasWithState(
        step, schema, state_schema(encoding), "append", "EventTimeTimeout"
    )


# -- what runs in the Python workers -----------------------------------------------------------------


def _stateful_shard(
    config: PurgatoryConfig,
    staging: ShardStaging | None = None,
    *,
    encoding: StateEncoding = "text",
    partitioned: bool = False,
):
    """The function Spark calls once per shard group per micro-batch (and on its timeout):
    ``GroupState`` in, one ``ShardStep`` call, ``GroupState`` out."""
    step = ShardStep(config, staging, partitioned=partitioned)
    numbers = shard_numbers(config.groups)

    def shard_step(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        clock, cpu, began = [time.perf_counter()], time.process_time(), time.time()
        freeze_heap()  # the worker's modules out of the collections PySpark runs after each task
        with collector_paused():  # a container per operation: no collector walks during the call
            rows = routed_rows(pdfs)
            clock.append(time.perf_counter())
            done = call_group(step, numbers[int(key[0])], rows, state)
            clock.append(time.perf_counter())
            yield done.output
            clock.append(time.perf_counter())
            if not keep_group(state, done, encoding):
                return
            if _STATE_LOG:
                step.log(done)
            step.read_ahead(done)
            if _STATE_LOG:
                _log_task(len(rows), began, [*clock, time.perf_counter()], time.process_time() - cpu)

    return shard_step


def _log_task(rows: int, began_s: float, clock: list[float], cpu_s: float) -> None:
    """One JSON line on the worker's stderr per shard call (``PURGATORY_STATE_LOG=1``): the
    ``_TASK_SPANS`` of the group function, its CPU, and when it was called (epoch ms, to set
    beside the event log's task launch times)."""
    spans = {
        f"{name}_ms": round((b - a) * 1000)
        for name, a, b in zip(_TASK_SPANS, clock[:-1], clock[1:], strict=True)
    }
    figures = {"rows": rows, "began_ms": round(began_s * 1000), **spans, "cpu_ms": round(cpu_s * 1000)}
    print("purgatory-task " + json.dumps(figures), file=sys.stderr, flush=True)
