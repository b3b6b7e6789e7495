"""One call to run the purgatory: ``start(operations, events, output=..., checkpoint=...)``.

``start`` is to this project what ``KafkaProducer`` plus its sender thread is to Kafka: it
builds the whole pipeline and returns a handle, ``PurgatoryQuery``, whose ``stop()`` flushes
like the producer's ``close()``.  The job, the demo, the notebooks and the Connect test all
go through it, so they run the same query with the same defaults:

* the operator (``purgatory_stream``) over the two sources, with the ``purgatory`` observed
  metrics attached (``observe_purgatory``);
* shard state in segment files beside the checkpoint (``<checkpoint>/purgatory-state``)
  unless ``purgatory.state.path`` is set;
* a ``RecordAccumulator`` staging under ``<checkpoint>/accumulator`` unless
  ``accumulator.staging.path`` is set, committing under the
  checkpoint's app id (``app_id_of``), through the writer ``choose_writer`` picks, in a
  ``PurgatorySink`` (``delta.sink``: the executors stage and write the rows, the driver
  commits); the tables are created empty at start;
* the driver's half of each micro-batch (``driver_step.DriverStep``), given its rows by the
  sink JAR's streaming sink (``runtime.staged_sink``; ``foreachBatch`` without it): the
  output through the sink, then the input's control plane (``handoff.control``: pending
  counts, wake, the Kafka partitions' watermarks, the reaper, the handle's totals);
* every path a path or a URI (``file://``, ``s3://``, ``s3a://``, ``abfss://``, ``dbfs:/`` ...):
  what the project writes itself goes through ``spark_purgatory.storage`` with the
  ``storage.*`` settings, never relative to the working directory;
* a linger timer (Kafka's sender): rows that have waited ``linger.ms`` are committed even
  when no micro-batch runs;
* the wake (``handoff.wake``): ``<checkpoint>/purgatory-wake`` read as a third input, written
  by the control plane after a micro-batch that relayed (the mailbox hand-off), and one more
  ``available-now`` run from ``await_termination`` when a run ends with relays unreceived;
* the reaper (``handoff.reaper``), for a ``processing-time`` query with ``watermark.idle.timeout`` or
  ``deadline.clock=processing``: a driver thread that, while operations wait, posts the
  operator's clock into the wake directory before each trigger, so the purgatory runs and
  expires on the clock when no input has rows; stopped by ``stop()``;
* the end of input (``end_input``, ``start(..., end_of_input=True)``): the end mark in the
  wake directory, one run that applies it, and the record ``<checkpoint>/purgatory-ended``,
  on which ``start`` refuses to run again (``docs/end-of-input.md``);
* the version record (``state.versions``): ``<checkpoint>/purgatory-version`` names the
  version that last started on the checkpoint and the formats it holds; ``start`` refuses a
  newer version's checkpoint, or one that needs ``spark-purgatory upgrade``, before it
  touches it (``docs/upgrading.md``);
* ``spark.sql.shuffle.partitions = purgatory.shards + 1`` for this query (``startup``),
  Spark's HDFS-backed state store unless the session names one (``runtime.settings.state_store``), and
  Arrow batches of 50,000 rows to the shards unless the session sets
  ``spark.sql.execution.arrow.maxRecordsPerBatch`` (``runtime.settings.arrow_records``), and
  Catalyst's ``InferFiltersFromGenerate`` and rules for what its plan never holds left out
  (``runtime.settings.optimizer_rules``: the plan Spark re-optimizes each micro-batch is
  smaller and each trigger walks it fewer times), and, for a
  checkpoint on the local file system, Spark's FileSystem-based checkpoint file manager
  unless the session names one (``runtime.settings.checkpoint_files``: Hadoop's local
  ``FileContext`` starts a ``readlink`` process per rename).

Session settings, the trigger and the app id the query commits under are settled first
(``startup``: why ``shards + 1`` shuffle partitions, which session settings are refused, why
the app id belongs to the checkpoint).

Over Spark Connect (Databricks shared and serverless compute) the same call works: nothing
here touches ``sparkContext`` or the JVM on a Connect session.  The driver's step (the sink
and the control plane) then runs in the server's Python, so the per-batch ``totals`` and
``pending`` of the handle stay at zero there (use ``history``, from the query's progress), and
lingered rows wait for the next micro-batch or ``stop()``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

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
from .runtime.staged_sink import staged_rows_writer
from .startup import (
    TRIGGERS,
    _check_session,
    _session_of,
    _with_defaults,
    app_id_of,
    check_trigger,
    trigger_interval,
    trigger_interval_ms,
)
from .state.pending_counts import PendingRecord
from .state.versions import check_formats, write_record
from .storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from .spark.group_state import StateEncoding
    from .spark.sources import SourceFormat

__all__ = ["PurgatoryQuery", "start", "TRIGGERS", "check_trigger", "app_id_of"]

log = logging.getLogger(__name__)

#: what a Python worker imports to run the shard step (warmed at start)
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
            ...}``: ``PurgatoryConfig.from_mapping``); the defaults when None, with the checkpoint's shard
            count, or for a new checkpoint the session's parallelism (logged:
            ``state.layout.default_shards``).
        trigger: ``available-now`` (process what is there, then stop) or
            ``processing-time=<interval>`` (e.g. ``processing-time=10s``).
        source_format: how paths are read (``json``, ``parquet``, ``delta``, ``kafka``) and
            inputs parsed; ``auto``: a path by its files (Parquet, JSON lines, a Delta
            table's ``_delta_log``; ``spark.formats``), a DataFrame by its schema.
        writer: ``auto`` (Spark's Delta source when its classes are present, else delta-rs),
            ``delta-rs``, ``spark``, or your own ``TableWriter``.
        name: the streaming query's name (``queryName``).
        on_batch: called after each micro-batch, in the process that runs the driver's step
            (``driver_step``: after the sink wrote the output), with its figures (a dict):
            ``batch_id``; ``pending`` (operations not yet resolved, each once, over every
            shard); the rows it gave: ``completed``, ``expired``, ``unmatched``,
            ``rejected``; ``relayed`` (rows shards sent to the cross-shard group);
            ``watermark_ms`` (the operator's), ``operations_watermark_ms`` and
            ``events_watermark_ms`` (each input's, None until known); ``staged_bytes``
            (rows waiting in the accumulator); ``committed`` (one dict per table commit).
        on_linger: called with the commits a linger drain made between micro-batches.
        spark: the session, when both inputs are paths (else the inputs' session).
        end_of_input: the input is bounded and complete: ``await_termination`` processes
            it, then ends it (``PurgatoryQuery.end_input``), so nothing stays pending.
            ``available-now`` only.  A checkpoint whose end was declared but not recorded
            (a crash during ``end_input``) is ended by any ``available-now`` start.
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
        CheckpointBusyError: another query runs on the checkpoint (``state.layout.RunLease``).
        IncompatibleCheckpointError: the checkpoint was written by a newer version, or needs
            ``spark-purgatory upgrade`` first (``state.versions``, docs/upgrading.md).
        OutputOwnedError: the output tables belong to another checkpoint's query and
            ``output.take.over`` is off (``delta.ownership``).
        ValueError: an unknown writer name, or no session to read paths with.

    Example (a notebook, where ``spark`` is the session)::

        from spark_purgatory import PurgatoryConfig, start

        with start("/data/ops", "/data/events", output="/data/tables", checkpoint="/data/chk",
                   config=PurgatoryConfig(shards=4), spark=spark) as purgatory:
            purgatory.await_termination()        # available-now: returns when input is done
        print(purgatory.totals, purgatory.history[-1])
    """
    if config is not None and not isinstance(config, PurgatoryConfig):
        config = PurgatoryConfig.from_mapping(config)  # dotted keys, as --set and .conf files give them
    cfg = _with_defaults(config or PurgatoryConfig(), checkpoint)
    check_trigger(trigger)
    if end_of_input and trigger != "available-now":
        raise ConfigError(
            f"end_of_input needs trigger available-now, got {trigger!r}; "
            "on a running query call end_input() instead"
        )
    spark = spark or _session_of(operations, events)
    if config is None:  # no configuration: the checkpoint's shards, or the session's parallelism
        from .state.layout import with_default_shards

        cfg = with_default_shards(cfg, spark, checkpoint)
    _check_session(spark)
    from .runtime.spark_logs import quiet_spark_logs
    from .runtime.workers import advise_unix_sockets, use_project_python, warm_python_workers

    quiet_spark_logs(spark)  # no WARN lines a user cannot act on (runtime.spark_logs)
    from .spark.group_state import encoding_of

    use_project_python(spark)  # the workers must import the project (runtime.workers)
    advise_unix_sockets(spark)  # TCP to the workers makes each task wait (runtime.session)
    # while the query is built: the first micro-batch's workers, with the shard step's modules
    warm_python_workers(spark, modules=(SHARD_STEP_MODULE,))
    storage = Storage.of(cfg)
    with _removed_if_failed(checkpoint, storage):  # a failed start leaves no new checkpoint
        # a checkpoint of a newer version, or one that needs ``spark-purgatory upgrade``, is
        # refused before anything touches it (state.versions)
        record = check_formats(checkpoint, storage)
        end = EndOfInput(checkpoint, storage)
        end.check_open()
        from .state.layout import RunLease, check_layout

        check_layout(
            checkpoint, cfg.shards, storage=storage, config=cfg
        )  # and completes an interrupted rescale
        lease = RunLease(checkpoint, storage)  # a second start and ``rescale`` refuse while it is held
        lease.take()
        with lease.given_back_on_error():  # nothing runs: the next start may take it
            write_record(checkpoint, storage, known=record)  # this version, and its formats
            if end.declared() and not end_of_input:
                log.warning(
                    "checkpoint %s: its end of input was declared, not recorded: completing it", checkpoint
                )
                end_of_input = trigger == "available-now"
            # always read (even without the mailbox hand-off): the end of input comes through it
            wake = Wake.under(
                checkpoint,
                storage,
                cross_shard=cfg.shards,
                every_group=registers(cfg),
                relays=hands_off(cfg),
            )
            wake.create()
            wake.first = wake_first(checkpoint, storage)  # the source order the checkpoint began with
            # on a classic session the shards stage their own rows (delta.staging.ShardStaging)
            staging_uri = absolute_uri(cfg.accumulator_staging_path)
            staging = None if is_connect(spark) else ShardStaging(staging_uri, storage)
            # a checkpoint keeps the group state's schema it began with (spark.group_state)
            encoding = encoding_of(checkpoint, storage=storage)
            with library_plan():  # no call-site capture for the library's own plan (settings)
                out = _operator(
                    spark, operations, events, cfg, source_format, wake, staging, encoding, kafka_options
                )
            if isinstance(writer, str):
                writer = writer_for(spark, output, prefer=writer, storage=storage)
            if hasattr(writer, "create_tables"):  # every table exists from the start, rows or not
                writer.create_tables()
            app_id = app_id_of(checkpoint, storage=storage)
            # one writer per output: the tables name their checkpoint (delta.ownership)
            claim_tables(writer, app_id=app_id, checkpoint=checkpoint, take_over=cfg.output_take_over)
            accumulator = RecordAccumulator(
                cfg.accumulator_staging_path,
                app_id=app_id,
                batch_size=cfg.accumulator_batch_size,
                linger_ms=cfg.accumulator_linger_ms,
                buffer_memory=cfg.accumulator_buffer_memory,
                storage=storage,
            )
            pending = PendingRecord.under(checkpoint, storage)  # every shard's count (state.pending_counts)
            counts = pending.read()  # every shard's, as the checkpoint's last micro-batch left them
            totals = _Totals(on_batch, pending=sum(counts.values()))
            reaper = _reaper(spark, cfg, trigger, wake, counts, storage, run=(checkpoint, lease.token))
            # each micro-batch on the driver: the output, then the input's control plane
            sink = PurgatorySink(
                accumulator,
                writer,
                staged=staging is not None,
                trigger_interval_ms=trigger_interval_ms(trigger),
                topic=topic_output(cfg, app_id, storage),
            )
            control = MicroBatchControl(
                wake=wake,
                partitions=PartitionWatermarks.beside(cfg.state_path, cfg.input_delays_ms(), storage),
                reaper=reaper,
                pending=pending,
                on_batch=totals,
            )
            step = DriverStep(sink, control)

            # the shards' STAGED rows (as SENT) through a sink of Spark's own kind where the sink JAR is
            # on the driver (runtime.staged_sink), else through foreachBatch: the same rows
            staged_rows = None
            if staging is not None:
                take = functools.partial(step.take_staged, spark=spark)
                staged_rows = staged_rows_writer(
                    out, SENT, begin=step.begin_staged, take=take, abort=step.end_staged
                )

            def run(available_now: bool = trigger == "available-now") -> StreamingQuery:
                stream = out.writeStream.foreachBatch(step) if staged_rows is None else staged_rows.stream()
                stream = stream.option("checkpointLocation", checkpoint)
                if name:
                    stream = stream.queryName(name)
                if available_now:
                    stream = stream.trigger(availableNow=True)
                else:
                    stream = stream.trigger(processingTime=trigger_interval(trigger))
                with (
                    shuffle_partitions(spark, cfg.groups),
                    state_store(spark),
                    arrow_records(spark),
                    optimizer_rules(spark),  # a plan Spark re-optimizes each micro-batch (runtime.settings)
                    checkpoint_files(spark, checkpoint),  # no process started per rename (runtime.settings)
                ):
                    return stream.start()

            release = staged_rows.forget if staged_rows is not None else None
            try:
                first = run()
            except BaseException:
                if release is not None:  # a start that failed keeps no committer in the driver
                    release()
                raise
            return PurgatoryQuery(
                first,
                step,
                totals,
                linger=not is_connect(spark),
                on_linger=on_linger,
                rerun=run if trigger == "available-now" else None,
                end=end,
                end_of_input=end_of_input,
                run_available_now=functools.partial(run, True),
                lease=lease,
                reaper=reaper,
                stop_timeout_ms=cfg.stop_timeout_ms,
                release=release,
                permanent=_asked_after_failure(
                    spark, operations, events, output, checkpoint, cfg, storage, source_format, kafka_options
                ),
            )


# -- the steps of start ------------------------------------------------------------------------------


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
    """What the handle asks after a failure (``faults.diagnose``): what the query depends on
    (``faults.depended_on``), its inputs only when given by name."""
    inputs = (operations, events) if isinstance(operations, str) and isinstance(events, str) else None
    where = output if isinstance(output, str) else None
    asked = depended_on(where, checkpoint, cfg, inputs, source_format, kafka_options)
    return functools.partial(diagnose, **asked, storage=storage, spark=spark)


@contextlib.contextmanager
def _removed_if_failed(checkpoint: str, storage: Storage) -> Iterator[None]:
    """A ``start`` that fails (a missing Kafka source, a broker that does not answer, a bad
    input ...) removes the checkpoint directory it created; one that was there is kept."""
    fs, root = storage.filesystem(checkpoint)
    new = fs.get_file_info(root).type == pafs.FileType.NotFound
    try:
        yield
    except BaseException:
        if new:
            with contextlib.suppress(OSError):
                fs.delete_dir(root)
        raise


def _reaper(
    spark: Any,
    cfg: PurgatoryConfig,
    trigger: str,
    wake: Wake,
    pending: dict[int, int],
    storage: Storage,
    *,
    run: tuple[str, str | None],
) -> ExpirationReaper | None:
    """The query's reaper (``handoff.reaper.reaper_for``), if its configuration asks for one,
    telling the checkpoint's readers how its clock goes (``run``: the checkpoint and the run
    lease's token; ``handoff.clock_record``).  Over Spark Connect the driver's step (which
    tells the reaper each micro-batch) runs in the server, out of its reach: none, said in a
    warning."""
    checkpoint, token = run
    interval = trigger_interval_ms(trigger) or 0
    recorder = ClockRecorder.under(checkpoint, storage, run=token or "", trigger_ms=interval)
    reaper = reaper_for(cfg, trigger, wake.root, pending=pending, storage=storage, recorder=recorder)
    if reaper is not None and is_connect(spark):
        log.warning(
            "watermark.idle.timeout / deadline.clock=processing need the driver's step in this process: "
            "not on Spark Connect; expiries wait for input there"
        )
        return None
    return reaper


def _operator(
    spark: Any,
    operations: Any,
    events: Any,
    cfg: PurgatoryConfig,
    source_format: str,
    wake: Wake | None,
    staging: ShardStaging | None,
    encoding: StateEncoding,
    kafka_options: dict[str, str] | None = None,
) -> Any:
    """The operator's output stream, with the ``purgatory`` observed metrics attached; with
    ``staging``, the shards stage their own rows and the stream carries ``STAGED`` rows (``SENT``)."""
    from .spark.formats import formats_of, read_stream
    from .spark.metrics import observe_purgatory
    from .spark.operator import purgatory_stream, staged_stream

    storage = Storage.of(cfg)
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

    ops, evs = source(operations, "operations"), source(events, "events")
    wake_path = wake.root if wake is not None else None
    options = {"source_format": source_format, "wake_path": wake_path, "state_encoding": encoding}
    if wake is not None:
        options["wake_first"] = wake.first
    if staging is None:
        out = purgatory_stream(ops, evs, cfg, **options)
    else:
        out = staged_stream(ops, evs, cfg, staging, **options)
    return observe_purgatory(out)
