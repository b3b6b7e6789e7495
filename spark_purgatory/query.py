"""One call to run the purgatory: ``start(operations, events, output=..., checkpoint=...)``.

``start`` is to this project what ``KafkaProducer`` and its sender thread are to Kafka: it
builds the whole pipeline and returns a handle whose ``stop()`` flushes like ``close()``.
Over Spark Connect the driver's step runs in the server's Python, so the handle's ``totals``
and ``pending`` stay at zero (use ``history``), and lingered rows wait for the next
micro-batch or ``stop()``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from .checkpoint_paths import Checkpoint, OpenCheckpoint
from .config import ConfigError, PurgatoryConfig
from .delta.accumulator import RecordAccumulator, TableWriter
from .delta.catalog import CatalogTables, writer_for
from .delta.ownership import claim_tables
from .delta.sent import SENT
from .delta.sink import PurgatorySink
from .delta.staging import ShardStaging, absolute_uri
from .delta.writers import WriterChoice
from .driver_step import DriverStep
from .faults import PermanentFault, depended_on, diagnose
from .handle import PurgatoryQuery, _Totals
from .handoff import Wake
from .handoff.clock_record import ClockRecorder
from .handoff.control import MicroBatchControl
from .handoff.end_of_input import EndOfInput
from .handoff.partitions import PartitionWatermarks
from .handoff.reaper import ExpirationReaper, reaper_for
from .handoff.shard_handoff import hands_off, registers
from .handoff.wake import wake_first
from .kafka_output import topic_output
from .runtime.settings import (
    arrow_records,
    checkpoint_files,
    is_connect,
    library_plan,
    optimizer_rules,
    shuffle_partitions,
    state_store,
)
from .runtime.spark_logs import quiet_spark_logs
from .runtime.staged_sink import staged_rows_writer
from .runtime.workers import (
    advise_unix_sockets,
    use_project_python,
    warm_python_workers,
)
from .startup import (
    TRIGGERS,
    Trigger,
    _check_session,
    _session_of,
    app_id_of,
    check_trigger,
    with_checkpoint_defaults,
)
from .state.layout import RunLease, check_layout, with_default_shards
from .state.pending_counts import PendingRecord
from .state.versions import check_formats, write_record
from .storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from .spark.sources import SourceFormat

__all__ = ["PurgatoryQuery", "start", "TRIGGERS", "check_trigger", "app_id_of"]

log = logging.getLogger(__name__)

#: what a Python worker imports to run the shard step (warmed while the query is built)
SHARD_STEP_MODULE = "spark_purgatory.spark.operator"


def start(
    operations: DataFrame | str,
    events: DataFrame | str,
    *,
    output: str | CatalogTables,
    checkpoint: str,
    config: PurgatoryConfig | Mapping[str, object] | None = None,
    trigger: str = "available-now",
    source_format: SourceFormat = "auto",
    writer: WriterChoice | TableWriter = "auto",
    name: str | None = None,
    on_batch: Callable[[dict], None] | None = None,
    on_linger: Callable[[list[dict]], None] | None = None,
    spark: SparkSession | None = None,
    end_of_input: bool = False,
    kafka_options: dict[str, str] | None = None,
) -> PurgatoryQuery:
    """Start the purgatory over two streams into the Delta tables under ``output``.

    Args:
        operations: the operations stream as ``read_stream`` returns it, or a path (a
            directory of ``source_format`` files; a Kafka topic for ``kafka``), read with
            ``source.max.files.per.trigger``.
        events: the completion-events stream or path, in the same format.
        output: where the ``outcomes``, ``unmatched_events``, ``rejected`` and ``metrics``
            tables live: a path or URI (a directory per table), or ``CatalogTables`` (names
            in the session's catalog, ``main.purgatory.outcomes`` ...; Spark's Delta writer).
        checkpoint: Spark's checkpoint; it holds the app id, and (unless configured) the
            accumulator's staging and the shard state live under it.
        config: ``PurgatoryConfig``, or its dotted keys (``{"output.kafka.topic": "alerts",
            ...}``); the defaults when None, with the checkpoint's shard count, or for a new
            checkpoint the session's parallelism (logged).
        trigger: ``available-now`` (process what is there, then stop) or
            ``processing-time=<interval>`` (e.g. ``processing-time=10s``).
        source_format: how paths are read (``json``, ``parquet``, ``delta``, ``kafka``) and
            inputs parsed; ``auto``: a path by its files (Parquet, JSON lines, a Delta
            table's ``_delta_log``), a DataFrame by its schema.
        writer: ``auto`` (Spark's Delta source when its classes are present, else delta-rs),
            ``delta-rs``, ``spark``, or your own ``TableWriter``.
        name: the streaming query's name (``queryName``).
        on_batch: called after each micro-batch, in the process that runs the driver's step
            (after the sink wrote the output), with its figures (a dict):
            ``batch_id``; ``pending`` (operations not yet resolved, each once, over every
            shard); the rows it gave: ``completed``, ``expired``, ``cancelled``,
            ``unmatched``, ``rejected``, ``warned``; ``relayed`` (rows shards sent to the
            cross-shard group);
            ``watermark_ms`` (the operator's), ``operations_watermark_ms`` and
            ``events_watermark_ms`` (each input's, None until known); ``staged_bytes``
            (rows waiting in the accumulator); ``committed`` (one dict per table commit).
        on_linger: called with the commits a linger drain made between micro-batches.
        spark: the session, when both inputs are paths (else the inputs' session).
        end_of_input: the input is bounded and complete: ``await_termination`` processes
            it, then ends it (``PurgatoryQuery.end_input``), so nothing stays pending.
            ``available-now`` only.
        kafka_options: Spark's Kafka source options when the inputs are topics
            (``source_format="kafka"``): ``kafka.bootstrap.servers`` and any other
            ``kafka.*`` consumer setting (security too), ``startingOffsets``,
            ``maxOffsetsPerTrigger`` ... (``docs/kafka.md``).

    Returns:
        The running ``PurgatoryQuery``; ``stop()`` it (or use it in a ``with`` block) to
        flush what the accumulator still holds.

    Raises:
        ConfigError: a trigger or a session setting that would break the query, naming
            the key and what to set; Python workers that cannot import the project
            (``spark.pyspark.python`` / ``PYSPARK_PYTHON``).
        InputEndedError: the checkpoint's input ended (``end_input``): use a new one.
        CheckpointBusyError: another query runs on the checkpoint.
        IncompatibleCheckpointError: the checkpoint was written by a newer version, or needs
            ``spark-purgatory upgrade`` first (docs/upgrading.md).
        OutputOwnedError: the output tables belong to another checkpoint's query and
            ``output.take.over`` is off.
        ValueError: an unknown writer name, or no session to read paths with.

    Example (a notebook, where ``spark`` is the session)::

        from spark_purgatory import PurgatoryConfig, start

        with start("/data/ops", "/data/events", output="/data/tables", checkpoint="/data/chk",
                   config=PurgatoryConfig(shards=4), spark=spark) as purgatory:
            purgatory.await_termination()        # available-now: returns when input is done
        print(purgatory.totals, purgatory.history[-1])
    """
    spark, cfg, chk, trig = _settled(operations, events, checkpoint, config, trigger, end_of_input, spark)
    permanent = _asked_after_failure(
        spark, operations, events, output, chk.path, cfg, chk.storage, source_format, kafka_options
    )
    with _removed_if_failed(chk):  # a failed start leaves no new checkpoint
        opened = _opened(chk, cfg, trig, end_of_input)
        with opened.lease.given_back_on_error():  # nothing runs: the next start may take it
            out, staging = _operator(spark, operations, events, cfg, source_format, opened, kafka_options)
            sink = _sink(spark, output, writer, cfg, trig, chk, staging)
            control, totals, reaper = _control(spark, cfg, trig, opened, on_batch)
            step = DriverStep(sink, control)  # each micro-batch on the driver: the output, then the input
            first, run, release = _started(spark, out, step, cfg, trig, name, chk, staging)
            return PurgatoryQuery(
                first,
                step,
                totals,
                linger=not is_connect(spark),
                on_linger=on_linger,
                rerun=run if trig.available_now else None,
                end=opened.end,
                end_of_input=opened.end_of_input,
                run_available_now=functools.partial(run, True),
                lease=opened.lease,
                reaper=reaper,
                stop_timeout_ms=cfg.stop_timeout_ms,
                release=release,
                permanent=permanent,
            )


# -- the steps of start ------------------------------------------------------------------------------


def _settled(
    operations: DataFrame | str,
    events: DataFrame | str,
    checkpoint: str,
    config: PurgatoryConfig | Mapping[str, object] | None,
    trigger: str,
    end_of_input: bool,
    spark: SparkSession | None,
) -> tuple[SparkSession, PurgatoryConfig, OpenCheckpoint, Trigger]:
    """The configuration, the trigger, the session and its Python workers, and the checkpoint
    opened once."""
    configured = config is not None
    if configured and not isinstance(config, PurgatoryConfig):
        config = PurgatoryConfig.from_mapping(config)  # dotted keys, as --set and .conf files give them
    cfg = with_checkpoint_defaults(config or PurgatoryConfig(), checkpoint)
    trig = Trigger.parse(trigger)
    if end_of_input and not trig.available_now:
        raise ConfigError(
            f"end_of_input needs trigger available-now, got {trigger!r}; "
            "on a running query call end_input() instead"
        )
    spark = spark or _session_of(operations, events)
    _check_session(spark)
    chk = Checkpoint(checkpoint, cfg.state_path).open_on(Storage.of(cfg))
    if not configured:  # the checkpoint's shards, or the session's parallelism
        cfg = with_default_shards(cfg, spark, chk)
    quiet_spark_logs(spark)
    use_project_python(spark)
    advise_unix_sockets(spark)
    warm_python_workers(spark, modules=(SHARD_STEP_MODULE,))
    return spark, cfg, chk, trig


@dataclass(frozen=True)
class _Opened:
    """The checkpoint as one start holds it; ``end_of_input``: the run ends the input, as asked,
    or because an earlier end was declared and not recorded."""

    checkpoint: OpenCheckpoint
    lease: RunLease
    end: EndOfInput
    wake: Wake
    end_of_input: bool


def _opened(chk: OpenCheckpoint, cfg: PurgatoryConfig, trigger: Trigger, end_of_input: bool) -> _Opened:
    """The refusals, each before anything touches the checkpoint, then the lease, the version
    record and the wake."""
    record = check_formats(chk)
    end = EndOfInput(chk.path, chk.storage)
    end.check_open()
    check_layout(chk, cfg.shards)
    lease = RunLease(chk)  # a second start and ``rescale`` refuse while it is held
    lease.take()
    with lease.given_back_on_error():
        write_record(chk, known=record)  # this version, and its formats
        if end.declared() and not end_of_input:
            log.warning("checkpoint %s: its end of input was declared, not recorded: completing it", chk.path)
            end_of_input = trigger.available_now
        # always read (even without the mailbox hand-off): the end of input comes through it
        wake = Wake.under(
            chk.path, chk.storage, cross_shard=cfg.shards, every_group=registers(cfg), relays=hands_off(cfg)
        )
        wake.create()
        wake.first = wake_first(chk)  # the source order the checkpoint began with
    return _Opened(chk, lease, end, wake, end_of_input)


def _operator(
    spark: Any,
    operations: Any,
    events: Any,
    cfg: PurgatoryConfig,
    source_format: str,
    opened: _Opened,
    kafka_options: dict[str, str] | None = None,
) -> tuple[Any, ShardStaging | None]:
    """The operator's stream and, on a classic session, the shards' staging."""
    from .spark.formats import formats_of, read_stream
    from .spark.group_state import encoding_of
    from .spark.metrics import observe_purgatory
    from .spark.operator import purgatory_stream, staged_stream

    storage = opened.checkpoint.storage
    staging = None if is_connect(spark) else ShardStaging(absolute_uri(cfg.accumulator_staging_path), storage)
    options = {
        "source_format": source_format,
        "wake_path": opened.wake.root,
        "wake_first": opened.wake.first,
        # a checkpoint keeps the group state's schema it began with
        "state_encoding": encoding_of(opened.checkpoint),
    }
    paths = [given for given in (operations, events) if isinstance(given, str)]
    told = dict(zip(paths, formats_of(paths, source_format, storage=storage), strict=True))  # by the files

    def source(given: Any, kind: str) -> Any:
        if not isinstance(given, str):
            return given
        return read_stream(
            spark,
            given,
            told[given],
            kind=kind,
            max_files_per_trigger=cfg.source_max_files_per_trigger,
            kafka_options=kafka_options,
            storage=storage,
        )

    with library_plan():
        ops, evs = source(operations, "operations"), source(events, "events")
        if staging is None:
            out = purgatory_stream(ops, evs, cfg, **options)
        else:
            out = staged_stream(ops, evs, cfg, staging, **options)
        return observe_purgatory(out), staging


def _sink(
    spark: Any,
    output: str | CatalogTables,
    writer: WriterChoice | TableWriter,
    cfg: PurgatoryConfig,
    trigger: Trigger,
    chk: OpenCheckpoint,
    staging: ShardStaging | None,
) -> PurgatorySink:
    """The output's half of the driver's step, its tables claimed for this checkpoint."""
    if isinstance(writer, str):
        writer = writer_for(spark, output, prefer=writer, storage=chk.storage)
        log.info("writer: %s, output %s, checkpoint %s", type(writer).__name__, output, chk.path)
    if hasattr(writer, "create_tables"):  # every table exists from the start, rows or not
        writer.create_tables()
    app_id = app_id_of(chk)
    claim_tables(writer, app_id=app_id, checkpoint=chk.path, take_over=cfg.output_take_over)
    accumulator = RecordAccumulator(
        cfg.accumulator_staging_path,
        app_id=app_id,
        batch_size=cfg.accumulator_batch_size,
        linger_ms=cfg.accumulator_linger_ms,
        buffer_memory=cfg.accumulator_buffer_memory,
        storage=chk.storage,
    )
    return PurgatorySink(
        accumulator,
        writer,
        staged=staging is not None,
        trigger_interval_ms=trigger.interval_ms,
        topic=topic_output(cfg, app_id, chk.storage),
    )


def _control(
    spark: Any,
    cfg: PurgatoryConfig,
    trigger: Trigger,
    opened: _Opened,
    on_batch: Callable[[dict], None] | None,
) -> tuple[MicroBatchControl, _Totals, ExpirationReaper | None]:
    """The input's half of the driver's step, and the handle's totals, which it feeds."""
    chk = opened.checkpoint
    pending = PendingRecord.under(chk.path, chk.storage)
    counts = pending.read()
    totals = _Totals(on_batch, pending=sum(counts.values()))
    reaper = _reaper(spark, cfg, trigger, opened, counts)
    control = MicroBatchControl(
        wake=opened.wake,
        partitions=PartitionWatermarks.beside(cfg.state_path, cfg.input_delays_ms(), chk.storage),
        reaper=reaper,
        pending=pending,
        on_batch=totals,
    )
    return control, totals, reaper


def _started(
    spark: Any,
    out: Any,
    step: DriverStep,
    cfg: PurgatoryConfig,
    trigger: Trigger,
    name: str | None,
    chk: OpenCheckpoint,
    staging: ShardStaging | None,
) -> tuple[StreamingQuery, Callable[..., StreamingQuery], Callable[[], None] | None]:
    """The stream's first run, the function that starts it again and what releases the sink's
    committer."""
    staged_rows = None
    if staging is not None:
        take = functools.partial(step.take_staged, spark=spark)
        staged_rows = staged_rows_writer(out, SENT, begin=step.begin_staged, take=take, abort=step.end_staged)

    def run(available_now: bool = trigger.available_now) -> StreamingQuery:
        stream = out.writeStream.foreachBatch(step) if staged_rows is None else staged_rows.stream()
        stream = stream.option("checkpointLocation", chk.path)
        if name:
            stream = stream.queryName(name)
        if available_now:
            stream = stream.trigger(availableNow=True)
        else:
            stream = stream.trigger(processingTime=trigger.interval)
        with (
            shuffle_partitions(spark, cfg.groups),
            state_store(spark),
            arrow_records(spark),
            optimizer_rules(spark),
            checkpoint_files(spark, chk.path),
        ):
            return stream.start()

    release = staged_rows.forget if staged_rows is not None else None
    try:
        return run(), run, release
    except BaseException:
        if release is not None:  # a start that failed keeps no committer in the driver
            release()
        raise


def _asked_after_failure(
    spark: SparkSession,
    operations: DataFrame | str,
    events: DataFrame | str,
    output: str | CatalogTables,
    checkpoint: str,
    cfg: PurgatoryConfig,
    storage: Storage,
    source_format: SourceFormat,
    kafka_options: dict[str, str] | None,
) -> Callable[[], PermanentFault | None]:
    """What the handle asks after a failure: what the query depends on."""
    inputs = (operations, events) if isinstance(operations, str) and isinstance(events, str) else None
    where = output if isinstance(output, str) else None
    asked = depended_on(where, checkpoint, cfg, inputs, source_format, kafka_options)
    return functools.partial(diagnose, **asked, storage=storage, spark=spark)


@contextlib.contextmanager
def _removed_if_failed(chk: OpenCheckpoint) -> Iterator[None]:
    """A ``start`` that fails removes the checkpoint directory it created; one that was there is
    kept."""
    new = chk.fs.get_file_info(chk.files.path).type == pafs.FileType.NotFound
    try:
        yield
    except BaseException:
        if new:
            with contextlib.suppress(OSError):
                chk.fs.delete_dir(chk.files.path)
        raise


def _reaper(
    spark: Any, cfg: PurgatoryConfig, trigger: Trigger, opened: _Opened, pending: dict[int, int]
) -> ExpirationReaper | None:
    """The query's reaper, if its configuration asks for one; none over Spark Connect (warned)."""
    chk, interval = opened.checkpoint, trigger.interval_ms
    recorder = ClockRecorder.under(
        chk.path, chk.storage, run=opened.lease.token or "", trigger_ms=interval or 0
    )
    reaper = reaper_for(
        cfg, interval, opened.wake.root, pending=pending, storage=chk.storage, recorder=recorder
    )
    if reaper is not None and is_connect(spark):
        log.warning(
            "watermark.idle.timeout / deadline.clock=processing need the driver's step in this process: "
            "not on Spark Connect; expiries wait for input there"
        )
        return None
    return reaper
