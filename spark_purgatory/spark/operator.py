"""The operator: the purgatory as one ``applyInPandasWithState`` over the routed streams.

``purgatory_stream`` parses both inputs (``sources``), routes them to shards (``routing``),
declares a watermark on each, unions them and groups by shard into the stateful shard step;
the output is one stream of rows with a ``kind`` column (``output``).  ``purgatory_batch`` runs the same
parsing, routing and engine on static DataFrames.

**One group per shard.**  Each group's state is one binary value: that shard's ``Purgatory``
(watchers, timing wheel, key progress, buffered events).  The group's event-time timeout is
the shard's next wake-up (earliest deadline, buffered event, or retention expiry), so Spark
calls the shard exactly when the watermark makes something due.  Grouping by shard instead of
by key is what makes this fast: Spark scans state rows and calls Python once per *shard* per
micro-batch, not once per key, and the shard advances its wheel and joins its events
vectorised.

**Multi-key operations across shards** (``routing``).  The cross-shard group gets only its
operations; what the primaries' stubs match reaches it through the mailbox beside the shard
state (``handoff.mailbox``; a micro-batch is named there by its timestamp, Spark's
``batchTimestampMs``, which every group of the micro-batch sees): each primary posts its relay after its step,
the cross-shard group receives every earlier batch's relay before its own.  While it holds
pending operations, or awaits the notices of relayed events (``engine.relay``), its timeout
is the current watermark, so Spark calls it in the next micro-batch that moves the
watermark; it keeps its state (the last batch it received) even when it has nothing pending.
After a micro-batch that relayed, the sink writes a wake file that the stream reads as a
third input (``handoff.wake``), so a next micro-batch comes even when nothing else would start
one: relayed completions are emitted one micro-batch later.  The end of input comes the same
way: the end mark's row reaches every shard group, which then processes its micro-batch past
every deadline and keeps that watermark (``handoff.wake``, ``docs/end-of-input.md``).

**One outcome per op_id across shards** (``engine.registry``, ``routing``).  Each
operation carries its op_id's registry shard (``peer``); a claim row goes there when it is not
the operation's home.  The registry posts its verdicts under ``<state path>/verdicts/<home>/``
(one file per (micro-batch, registry), the mailbox's naming); a shard that parked operations
sets its timeout to the current watermark and, in its next call, reads the files of the
micro-batch that parked them (``Purgatory.parked_in``, kept with its state) and deletes older
ones.  A replay rewrites the same files and reads the same ones.

**A watermark per input.**  Each input declares its own watermark (the largest event time
seen on it minus ``watermark.delay``, or its ``watermark.delay.operations`` /
``watermark.delay.events``) before the two are unioned, so the operator works on Spark's
global watermark (``state.getCurrentWatermarkMs()``), chosen by
``spark.sql.streaming.multipleWatermarkPolicy``: ``min`` by default, so a stream that runs
behind the other never has its rows made late by the faster one; ``max`` if the session says
so.  A row is ``late`` when its event time is behind that global watermark when it arrives.

**A silent stream holds expiries back** under ``min``: the global watermark cannot pass the
last event time of a stream that stops sending (minus its delay), so operations wait past
their deadlines until it sends again; completions are not held (they are emitted in the
micro-batch that makes them true).  An input that has brought only rows rejected at parse
counts as silent.  Remedies: ``spark.sql.streaming.multipleWatermarkPolicy=max`` (the
faster stream drives expiry; the slower stream's rows behind it become ``late``), or a
heartbeat row on the quiet stream (an event on a key no operation watches, which reaches
``unmatched_events`` as ``no_operation``; or an operation with a key of its own, which
expires).  A bounded input is finished by ending it (the end mark, ``handoff.wake``), not by
heartbeats: ``docs/end-of-input.md``.

**Silent since the query (re)started.**  Spark (pyspark 4.2.0, ``WatermarkTracker``) keeps
only the global watermark in the checkpoint; each input's own watermark starts unknown in every
run of the query and counts as 0 under ``min`` until that input brings a row.  So an input that
has not sent a row *in this run* holds the global watermark where it is: one that never sent
holds it at the start, and after a restart one that sends nothing new holds it at the value
restored from the checkpoint, even if it was ahead of the other input when the last run
stopped.  Expiries then wait for its next row (or the end of input).  For input in event-time
order the outcomes are the same once it sends (an expiry's ``resolved_at`` is its deadline),
but a run can end with operations pending that one uninterrupted run would have expired; a
row behind the watermark one run would have reached is accepted instead of rejected ``late``.

**Nothing dropped by the watermark.**  Spark drops rows behind the watermark before an
``EventTimeTimeout`` operator sees them.  Each input's watermark is therefore declared on a
helper column ``ts + L`` with delay ``delay + L`` (L = 100 years, ``LATE_ALLOWANCE_MS``):
the operator gets the same watermark, but only rows more than 100 years late are dropped by
Spark; the operator itself rejects rows behind the watermark as ``late``.  Rejected-at-parse
rows carry the epoch as their time, so they never move a watermark and are never dropped.

**Batch mode.**  ``purgatory_batch`` processes everything at once and then moves the
watermark to ``final_watermark_ms``; for input without late rows it gives the outcomes the
stream gives at the same final watermark.

**Staged output.**  ``staged_stream`` (``start``'s path on a classic session) is the same
operator whose shard step stages its output rows itself (``delta.staging.ShardStaging``)
and yields only their ``STAGED`` rows, so the rows never cross into the JVM.

Invariant: the shard step is the only place Spark hands rows to the engine; it calls the
engine once per shard per micro-batch (or timeout) and yields that shard's output rows (or,
staged, one row per staged file and its metrics row).
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
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from ..checkpoint_paths import StatePath
from ..config import PurgatoryConfig
from ..contract import MAX_TS_MS, SOURCE_EVENTS, SOURCE_OPERATIONS, ms_column
from ..delta.staging import STAGED, ShardStaging
from ..engine.memory import collector_paused
from ..engine.purgatory import Purgatory
from ..engine.wheel import NO_EXPIRATION
from ..handoff.clock import on_arrival
from ..handoff.door import ShardHandOff
from ..handoff.end_of_input import end_watermark_ms, is_end_watermark
from ..handoff.partitions import cap_before
from ..runtime.worker_heap import freeze_heap
from ..state import SegmentStore, load_state, loaded_by, save_state, saved_bytes
from ..state.deltas import is_pointer, pointed
from ..state.read_ahead import read_ahead
from ..storage import Storage
from .group_state import StateEncoding, shard_bytes, state_schema, to_group_state
from .labels import shard_numbers
from .output import OUTPUT_SCHEMA, output_rows, output_table, shard_figures, with_timestamps
from .routed_rows import ROLE_BAD, ROLE_END, ROLES
from .routing import (
    hands_off,
    registers,
    route,
    route_events,
    route_operations,
    route_typed_events,
    route_typed_operations,
    route_wake,
)
from .shard_input import claims_of, clock_of, roles_of, routed_rows, split_input
from .sources import SourceFormat, parse_events, parse_operations, source_format_of
from .sql_text import literal_column

__all__ = [
    "OUTPUT_SCHEMA",
    "LATE_ALLOWANCE_MS",
    "routed_stream",
    "purgatory_stream",
    "staged_stream",
    "purgatory_batch",
    "segment_store",
]

#: PURGATORY_STATE_LOG=1: each shard call logs how its state was loaded and what it cost
_STATE_LOG = bool(os.environ.get("PURGATORY_STATE_LOG"))

#: how far behind the watermark a row may be before Spark itself drops it (see module doc)
LATE_ALLOWANCE_MS = 36_500 * 86_400_000

#: what the operator returns when its shards stage their own output (``staged_stream``)
STAGED_SCHEMA: T.StructType = from_arrow_schema(STAGED)
_TS_MS = ms_column("ts")
_EVENT_TIME = "_event_time"  # the watermark's helper column (module docstring)


def routed_stream(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig,
    *,
    source_format: SourceFormat = "auto",
    wake_path: str | None = None,
    wake_first: bool = True,
) -> DataFrame:
    """The operator's input: both streams parsed and routed to shards, each with its own
    watermark declared on ``ts + L`` (module docstring), then unioned; with ``wake_path`` the
    wake files there (relays owed, the end of input) as another input, the first unless
    ``wake_first`` is false (a checkpoint's order: ``handoff.wake.wake_first``)."""
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
    if not wake_path:
        return ops.unionByName(evs)
    # no watermark: wake rows move none; first, Spark asks the wake for its offsets before
    # the inputs' (``handoff.reaper``: the clock then needs no listing margin).  A union's
    # columns are its first child's: the helper column says it holds a watermarked time
    lines = operations.sparkSession.readStream.format("text").load(wake_path)
    no_time = literal_column(lines.sparkSession, None, "timestamp")  # a typed null, as optimized
    wake = route_wake(lines, config).withColumn(_EVENT_TIME, no_time)
    wake = wake.withMetadata(_EVENT_TIME, evs.schema[_EVENT_TIME].metadata)
    if not wake_first:
        return ops.unionByName(evs).unionByName(wake)
    return wake.unionByName(ops).unionByName(evs)


def _with_watermark(routed: DataFrame, delay_ms: int) -> DataFrame:
    """One input's watermark, on the helper column ``ts + L`` with delay ``delay + L``;
    rows rejected at parse count at the epoch (they move no watermark)."""
    # L added to the epoch ms, not as an interval to the timestamp: Spark adds a day-time
    # interval through a ZonedDateTime per row (docs/performance-history.md, "The watermark's
    # allowance on epoch ms")
    bad = ROLES.index(ROLE_BAD)  # the routed rows' roles are numbers (``routed_rows.ROLES``)
    # typed literals (a tinyint role, bigint times) and the allowance in each branch: the
    # expression as Spark's optimizer leaves it, which it then does not rewrite every micro-batch
    event_time = F.expr(
        f"timestamp_millis(CASE WHEN role = {bad}Y THEN {LATE_ALLOWANCE_MS}L "
        f"ELSE {_TS_MS} + {LATE_ALLOWANCE_MS}L END)"
    )
    routed = routed.withColumn(_EVENT_TIME, event_time)
    return routed.withWatermark(_EVENT_TIME, f"{delay_ms + LATE_ALLOWANCE_MS} milliseconds")


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
        wake_path: a directory Spark can read where the sink posts wake files after a
            micro-batch whose shards relayed (``handoff.wake``; ``start`` wires it under the
            checkpoint).  Without it, relayed completions wait for the next micro-batch
            that has input or moves the watermark.  ``wake_first``: read it as the first
            source (the order a checkpoint began with: ``handoff.wake.wake_first``).
        state_encoding: how the shard state is kept in Spark's group state: ``text`` (the
            default) or ``binary``, which a checkpoint started by spark-purgatory 0.1.0
            recorded and must keep (``group_state``; ``start`` tells it by the checkpoint).

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
    routed = routed_stream(
        operations, events, config, source_format=source_format, wake_path=wake_path, wake_first=wake_first
    )
    step = _stateful_shard(
        config, encoding=state_encoding, partitioned=_from_kafka(operations, events, source_format)
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
    """``purgatory_stream`` whose shards stage their own output (``start``'s path).

    Each shard call writes its table rows where it produced them (``delta.staging.ShardStaging``)
    and returns only ``STAGED`` rows: one per staged file and its metrics row.  A
    ``PurgatorySink(..., staged=True)`` records and drains them; the output rows never cross
    into the JVM.  Needs the micro-batch id in the tasks, which a classic session's
    ``foreachBatch`` has and a Spark Connect one has not (``start`` chooses).
    """
    routed = routed_stream(
        operations, events, config, source_format=source_format, wake_path=wake_path, wake_first=wake_first
    )
    partitioned = _from_kafka(operations, events, source_format)
    step = _stateful_shard(config, staging, encoding=state_encoding, partitioned=partitioned)
    return _grouped(routed, step, STAGED_SCHEMA, state_encoding)


def _from_kafka(operations: DataFrame, events: DataFrame, source_format: SourceFormat) -> bool:
    """Does an input come from Kafka (a watermark per partition: ``handoff.partitions``)?"""
    return any(source_format_of(df, source_format) == "kafka" for df in (operations, events))


def _grouped(routed: DataFrame, step: Any, schema: T.StructType, encoding: StateEncoding) -> DataFrame:
    """The routed rows grouped by shard into the stateful ``step``."""
    return routed.groupBy("shard").applyInPandasWithState(
        step, schema, state_schema(encoding), "append", "EventTimeTimeout"
    )


def purgatory_batch(
    operations: DataFrame,
    events: DataFrame,
    config: PurgatoryConfig | None = None,
    *,
    source_format: SourceFormat = "auto",
    final_watermark_ms: int | None = None,
) -> DataFrame:
    """The same engine on static DataFrames: process everything, then move the watermark.

    ``final_watermark_ms`` defaults to "everything resolved": a wheel tick past every
    deadline a valid operation can have (event times end before ``contract.MAX_TS_MS``,
    timeouts at ``purgatory.max.timeout.ms``).  For input without late rows the outcomes
    equal the stream's at the same final watermark.
    """
    config = config or PurgatoryConfig()
    limits = config.input_limits
    parsed_ops = parse_operations(
        operations, source_format, max_timeout_ms=config.max_timeout_ms, limits=limits
    )
    parsed_events = parse_events(events, source_format, limits=limits)  # a backfill: no future-time check
    routed = route(parsed_ops, parsed_events, config)
    if final_watermark_ms is None:
        final_watermark_ms = MAX_TS_MS + config.max_timeout_ms + config.tick_ms
    final = int(final_watermark_ms)
    out = routed.groupBy("shard").applyInPandas(_batch_shard(config, final), OUTPUT_SCHEMA)
    return with_timestamps(out)


# -- what runs in the Python workers -----------------------------------------------------------------


def segment_store(config: PurgatoryConfig) -> SegmentStore | None:
    """The ``SegmentStore`` that ``purgatory.state.path`` asks for, if any."""
    if not config.state_path:
        return None
    return SegmentStore(
        config.state_path,
        segment_rows=config.state_segment_rows,
        retain_versions=config.state_retain_versions,
        storage=Storage.of(config),
    )


def _micro_batch_key(now_ms: int) -> int:
    """What names this micro-batch in the mailbox: its timestamp ``now_ms`` (Spark's
    ``batchTimestampMs``): the same in every task of the micro-batch and on its replay (the
    offset log keeps it), larger in each later one.  Not the batch id: a local property of
    the stream thread's jobs, which a ``foreachBatch`` over Spark Connect runs from another."""
    if now_ms < 0:
        raise RuntimeError("the mailbox hand-off runs only inside a streaming micro-batch")
    return now_ms


def _stateful_shard(
    config: PurgatoryConfig,
    staging: ShardStaging | None = None,
    *,
    encoding: StateEncoding = "text",
    partitioned: bool = False,
):
    """The function Spark calls once per shard per micro-batch (and on the shard's timeout);
    with ``staging`` it stages its output rows and yields their ``STAGED`` rows instead;
    ``encoding``: how its value is kept in the group state (``group_state``);
    ``partitioned``: an input comes from Kafka, whose partitions each hold the watermark
    (``handoff.partitions``: the shard runs at most at the value the driver posted)."""
    store = segment_store(config)
    watermarks = StatePath(config.state_path).watermarks if partitioned and config.state_path else None
    storage = Storage.of(config) if watermarks else None
    handoff = ShardHandOff(config, relays=hands_off(config), registers=registers(config))
    registering = handoff.registers
    numbers = shard_numbers(config.shards + 1)
    delays = config.input_delays_ms()
    processing = config.deadline_clock == "processing"

    def shard_step(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        freeze_heap()  # the worker's modules out of the collections PySpark runs after each task
        with collector_paused():  # a container per operation: no collector walks during the call
            yield from shard_call(key, pdfs, state)

    def shard_call(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        shard = numbers[int(key[0])]
        started = time.perf_counter()
        p = load_state(shard_bytes(state.get[0]), config, store) if state.exists else Purgatory(config)
        if p.shard not in (None, shard):  # the shard layout changed under this checkpoint
            raise ValueError(
                f"the state under group {key[0]} belongs to shard {p.shard}, not {shard}: the "
                "checkpoint was written with another shard layout; start a new checkpoint"
            )
        p.shard = shard
        loaded = time.perf_counter()
        wm = int(state.getCurrentWatermarkMs())
        now = int(state.getCurrentProcessingTimeMs())  # the micro-batch's time, its key
        held = wm if watermarks is None else _held(wm, cap_before(watermarks, now, storage))
        pdf = routed_rows(pdfs)
        ops, events, bad = split_input(pdf, registering)
        batch = _micro_batch_key(now) if handoff.active else None
        claims = claims_of(pdf) if registering else None
        # the end of input (handoff.end_of_input): past every deadline, kept from now on by the engine
        ending = bool((roles_of(pdf) == ROLES.index(ROLE_END)).any())
        engine_wm = _end_watermark(p, config) if ending else held
        # the operator's clock (handoff.reaper): the watermark after this batch's rows are admitted
        expire_to = None if ending else clock_of(pdf)
        if processing:  # deadline.clock=processing: rows at their arrival, the batch's time the clock
            ops, events, claims = on_arrival(ops, events, claims, now)
            engine_wm, expire_to = engine_wm if ending else now, None
        received = handoff.receive(p, shard, batch, claims)
        result = p.process(
            ops,
            events,
            watermark_ms=engine_wm,
            validated=True,
            relayed=received.relayed,
            claims=received.claims,
            verdicts=received.verdicts,
            expire_to_ms=expire_to,
        )
        ended = is_end_watermark(p.watermark)
        posted = handoff.post(p, shard, batch, result)
        handled = len(pdf) + received.rows  # relayed rows are work too
        figures = shard_figures(p, pdf, delays, batch_time_ms=now, group_rows=handled, relayed=posted)
        clocked = p.watermark > wm  # the operator's clock is ahead of Spark's watermark (reaper)
        # read before p is saved (and parked); behind Spark's when a partition holds it back
        out_wm = p.watermark if ended or clocked or held < wm else wm
        # the cross-shard group keeps relays_through (files it received may still be in the
        # mailbox), an ended shard its end watermark, a clocked one its watermark
        keep = not (p.is_empty() and not ended and not clocked and not handoff.keeps(shard))
        if keep:  # saved before the output rows, whose metrics row carries the value's size
            wake = p.next_wakeup()
            if handoff.awaits(p, shard):
                # called in the next batch that moves the watermark (mailbox, registry's
                # verdicts; the wake file if none would); Spark wants a timeout > 0
                wake = min(wake, max(wm, 1) + 1)
            processed, how, pending = time.perf_counter(), loaded_by(p), p.pending
            # with a store: the delta file of this micro-batch (its timestamp the version) and
            # a pointer to it (state.deltas); parked: no use of p after this
            value = save_state(p, store, park=store is not None, version=now)
            written = saved_bytes(p)
        saved = time.perf_counter()
        out = (shard, result, bad, figures, out_wm)
        state_bytes = written if keep else 0
        if staging is None:
            yield output_rows(*out, state_bytes=state_bytes)
        else:  # straight to Arrow: the rows never become one pandas frame (``output_table``)
            yield staging(output_table(*out, state_bytes=state_bytes), shard).to_pandas()
        output = time.perf_counter()
        if not keep:
            state.remove()
            return
        state.update((to_group_state(value, encoding),))
        if _STATE_LOG:  # one JSON line per shard call on the worker's stderr (the executor log)
            figures = {
                "shard": shard,
                "loaded_by": how,
                "load_ms": round((loaded - started) * 1000),
                "process_ms": round((processed - loaded) * 1000),
                "save_ms": round((saved - processed) * 1000),
                "output_ms": round((output - saved) * 1000),  # with staging: the staged files written
                "value_bytes": len(value),
                "written_bytes": written,
                "pending": pending,
            }
            print("purgatory-state " + json.dumps(figures), file=sys.stderr, flush=True)
        if wake < NO_EXPIRATION:
            # Spark fires once the watermark is *past* the timestamp; we are due at wake
            state.setTimeoutTimestamp(max(wake - 1, wm))
        if is_pointer(value):  # the other shards parked here, forward while the worker waits
            saved_as = pointed(value)
            read_ahead(store, config, saved_as.lineage, saved_as.version)

    return shard_step


def _held(wm: int, cap: int | None) -> int:
    """Spark's watermark, held back to the slowest Kafka partition's (``handoff.partitions``)."""
    return wm if cap is None else min(wm, cap)


def _end_watermark(p: Purgatory, config: PurgatoryConfig) -> int:
    """The shard's watermark at the end of input: past its own deadlines and any valid one."""
    return end_watermark_ms(config.max_timeout_ms, config.tick_ms, p.latest_deadline())


def _batch_shard(config: PurgatoryConfig, final_watermark_ms: int):
    numbers = shard_numbers(config.shards + 1)
    delays = config.input_delays_ms()

    def shard_all(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        shard = numbers[int(key[0])]
        with collector_paused():  # as the stream's shard step
            p = Purgatory(config)
            ops, events, bad = split_input(pdf)
            result = p.replay(ops, events, final_watermark_ms=final_watermark_ms, validated=True)
            now = int(time.time() * 1000)
            figures = shard_figures(p, pdf, delays, batch_time_ms=now, group_rows=len(pdf))
            return output_rows(shard, result, bad, figures, final_watermark_ms)

    return shard_all
