"""The driver's sink: the operator's output rows into the Delta tables.

The ``metrics`` rows, one per shard call, are made here (two of their columns need every
call of the batch) and staged as one more file of the batch, so they are committed exactly
once with its other rows.  No output row passes through the driver: only one small ``STAGED``
row per file and per shard call, collected with the micro-batch's one action (a second would
run the stateful operator again).  The sink writes the output and nothing else.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from ..contract import (
    METRICS,
    OPERATOR_OUTPUT,
    OUTCOMES,
    PROPOSED_WATERMARKS,
    RELAYED,
    ROW_COUNTS,
    STATUSES,
    ms_column,
)
from ..kafka_output.topic import TopicOutput
from ..runtime.call_site import kept_call_site
from ..runtime.small_rows import SmallRows
from .accumulator import RecordAccumulator, TableWriter
from .reading import table_dataset
from .sender import SparkTasks, TaskRunner, in_process, to_arrow
from .sent import SENT, widened
from .staging import STAGED, STAGED_DDL, metrics_rows, stage_metrics, stage_task
from .writers import open_table as _open_table

log = logging.getLogger(__name__)

_WATERMARK = ms_column("watermark")


@dataclass(frozen=True)
class Written:
    """A micro-batch the sink took: what the driver's control plane reads next."""

    batch_id: int
    #: its metrics rows, one per shard call (``staging.CALL_COLUMNS``)
    calls: pa.Table
    #: its figures but ``pending`` (``start``'s ``on_batch`` names them)
    figures: dict
    #: each input's watermark after it, as the metrics table holds them (also from earlier runs)
    watermarks: dict[str, int | None]


class PurgatorySink:
    """Takes each micro-batch's output (a ``foreachBatch`` function, or ``take_staged``): stage
    on the executors, record, drain what is ready.

    Args:
        accumulator: where rows wait for ``batch.size`` / ``linger.ms``.
        writer: ``DeltaRsWriter`` or ``SparkDeltaWriter`` (see ``choose_writer``).
        clock: seconds since the epoch (for ``emitted_at`` and the rejected date).
        staged: the micro-batches are ``STAGED`` rows of shards that staged their own output
            (``staged_stream``, ``start``'s path on a classic session): the sink only records
            and drains them.  False: they are the operator's rows, staged here.
        trigger_interval_ms: the query's ``processing-time`` interval: rows whose linger ends
            before the next trigger are committed at once.
        topic: the output topic, sent each recorded micro-batch before any drain.

    ``spark_purgatory.start`` builds and closes the sink; wire it yourself only for your own
    sink around it (the output alone)::

        sink = PurgatorySink(RecordAccumulator(f"{chk}/staging", app_id=..., ...), DeltaRsWriter(out))
        query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", chk).start()
        query.awaitTermination()
        sink.close()   # flush what is still lingering
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        writer: TableWriter,
        *,
        clock: Callable[[], float] | None = None,
        staged: bool = False,
        trigger_interval_ms: int | None = None,
        topic: TopicOutput | None = None,
    ) -> None:
        self.accumulator = accumulator
        self.topic = topic
        self.trigger_interval_ms = trigger_interval_ms
        self.writer = writer
        self.clock = clock or accumulator.clock
        self.last_batch_id: int | None = None
        self.staged = staged
        self.watermarks: dict[str, int | None] | None = None  # per input, after the last batch
        self.tasks: TaskRunner = in_process  # the sender's tasks: on the executors once a batch ran
        #: the last micro-batch's milliseconds in the sink, by step
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()  # micro-batches and linger drains never overlap
        #: when (ms) the oldest staged row will have lingered ``linger.ms`` (``linger_due``)
        self.linger_at_ms: int | None = None
        self._select: bool | None = None  # does the batch need a select to STAGED's columns?
        self._small_rows = SmallRows()  # the batch's rows within its own SQL execution

    def __getstate__(self) -> dict:
        # Spark Connect pickles the foreachBatch function to run it in the server's Python
        state = dict(self.__dict__)
        del state["_lock"]
        state["tasks"] = in_process
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> Written:
        """Stage micro-batch ``batch_id`` on the executors, then record and drain what is ready."""
        batch_id = int(batch_id)
        # the batch's actions (toArrow, the drain's tasks) would leave the stream thread
        # without its call site, so that every later RDD walks its stack (``call_site``)
        with self._lock, kept_call_site(batch.sparkSession):
            self.tasks = SparkTasks(batch.sparkSession)
            began = time.perf_counter()
            if self.staged:  # the shards staged their rows: only their STAGED rows come here (SENT)
                if self._select is None:  # asked once: a select is a Py4J call per column
                    self._select = list(batch.columns) != SENT.names
                staged = widened(self._collect(batch.select(*SENT.names) if self._select else batch, SENT))
                _check_staged_by(staged, batch_id)
                return self._after_staging(staged, batch_id, began)
            stage = functools.partial(
                stage_task,
                batch_id=batch_id,
                now=self._now(),
                staging_dir=self.accumulator.staging_dir,
                storage=self.accumulator.storage,
                write=batch_id > self.accumulator.staged_through,
            )
            frame = batch.select(*OPERATOR_OUTPUT.names).mapInArrow(stage, STAGED_DDL)
            return self._after_staging(self._collect(frame, STAGED), batch_id, began)

    def take_staged(self, sent: pa.Table, batch_id: int, spark: Any) -> Written:
        """Record and drain micro-batch ``batch_id`` given as the shards' ``sent.SENT`` rows (a
        sink of Spark's own kind hands them over); ``spark``: the session for the drain's tasks."""
        with self._lock, kept_call_site(spark):
            self.tasks = SparkTasks(spark)
            began = time.perf_counter()
            staged = widened(sent)
            _check_staged_by(staged, batch_id)
            return self._after_staging(staged, batch_id, began)

    def process(self, rows: pa.Table, batch_id: int) -> dict:
        """Stage and drain one micro-batch given as operator rows; return its figures."""
        with self._lock:
            staged = self.accumulator.stage_rows(rows, batch_id, self._now())
            return self._after_staging(staged, batch_id).figures

    def drain_lingering(self) -> list[dict]:
        """Commit destinations whose rows have lingered long enough, between micro-batches (a
        quiet stream runs none); ``start`` calls it from a timer, as Kafka's sender thread."""
        with self._lock:
            if self.last_batch_id is None:
                return []
            self._send(self.last_batch_id)
            written = self.accumulator.drain(
                self.last_batch_id, self.writer, phase=RecordAccumulator.LINGER, tasks=self.tasks
            )
            self._staged_bytes()  # when the next one can be due
            return written

    def linger_due(self) -> bool:
        """Can a linger drain have anything to commit now (no look at the staging)?"""
        due = self.linger_at_ms
        return due is not None and self.last_batch_id is not None and self.clock() * 1000 >= due

    def close(self) -> list[dict]:
        """Flush everything still staged (the producer's ``close()``)."""
        with self._lock:
            batch_id = self.last_batch_id
            if batch_id is None:
                batch_id = max(self.accumulator.staged_through, 0)
            self._send(self.accumulator.staged_through)
            return self.accumulator.flush(batch_id, self.writer, tasks=self.tasks)

    def _collect(self, frame: Any, schema: pa.Schema) -> pa.Table:
        """The batch's small rows (``STAGED``, or ``SENT``): the micro-batch's one action."""
        rows = self._small_rows(frame, schema)
        return rows if rows is not None else to_arrow(frame, schema)

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock(), tz=dt.timezone.utc)

    def _after_staging(self, staged: pa.Table, batch_id: int, began: float | None = None) -> Written:
        """Where every way in meets: metrics staged, the batch recorded, what is ready drained."""
        collected = time.perf_counter()
        metrics = staged.filter(pc.is_null(staged.column("table")))  # one row per shard call
        staged = pa.concat_tables([staged, self._stage_metrics(metrics, batch_id)])
        self.accumulator.record(batch_id, staged)
        self._send(batch_id, start=batch_id - 1)
        recorded = time.perf_counter()
        batch_time = pc.max(metrics.column(ms_column("batch_time"))).as_py() if metrics.num_rows else None
        until = None  # Spark's next trigger: no row can be staged before it
        if self.trigger_interval_ms and batch_time is not None:
            until = (int(batch_time) // self.trigger_interval_ms + 1) * self.trigger_interval_ms
        written = self.accumulator.drain(batch_id, self.writer, tasks=self.tasks, until_ms=until)
        drained = time.perf_counter()
        self.last_batch_id = batch_id
        figures = self._figures(staged, metrics, batch_id, written)
        done = time.perf_counter()
        self.timings = {
            "collect": round(1000 * (collected - (began or collected)), 1),
            "record": round(1000 * (recorded - collected), 1),
            "drain": round(1000 * (drained - recorded), 1),
            "report": round(1000 * (done - drained), 1),
        }
        return Written(batch_id, metrics, figures, dict(self.watermarks or {}))

    def _send(self, through: int, *, start: int | None = None) -> None:
        """The output topic's records of the recorded micro-batches up to ``through`` it
        lacks, before any drain deletes their staged files; ``start``: where a topic with no
        marker yet starts (default: the last recorded micro-batch)."""
        if self.topic is None:
            return
        if self.topic.sent_through is None:
            self.topic.open(self.accumulator.staged_through if start is None else start)
        self.topic.catch_up(self.accumulator.staged_files, through, self.tasks)

    def _stage_metrics(self, calls: pa.Table, batch_id: int) -> pa.Table:
        """The batch's ``metrics`` rows, staged with its other rows: nothing for a batch no
        shard ran in, or a replay already recorded (its calls still move the inputs'
        watermarks, which this sink keeps between batches)."""
        if self.watermarks is None:
            self.watermarks = self._recorded_watermarks(batch_id)
        rows = metrics_rows(calls, batch_id, self._now(), self.watermarks)
        if rows.num_rows == 0 or batch_id <= self.accumulator.staged_through:
            return STAGED.empty_table()
        acc = self.accumulator
        return stage_metrics(rows, batch_id=batch_id, staging_dir=acc.staging_dir, storage=acc.storage)

    def _recorded_watermarks(self, batch_id: int) -> dict[str, int | None]:
        """Each input's watermark after the batches before ``batch_id`` (committed or staged)."""
        columns = [f"{source}_watermark" for source in PROPOSED_WATERMARKS]
        parts = []
        path = getattr(self.writer, "path", None)
        if path is not None:
            try:
                table = _open_table(path(METRICS.name), getattr(self.writer, "storage_options", None))
                if table is not None:
                    dataset = table_dataset(table, path(METRICS.name), self.accumulator.storage)
                    parts.extend(_committed(table, dataset, batch_id, columns))
            except Exception as error:  # e.g. a table whose features delta-rs cannot read
                log.warning(
                    "metrics: inputs' watermarks start afresh (%s unreadable: %s)", path(METRICS.name), error
                )
        fs, root = self.accumulator.storage.filesystem(self.accumulator.staging_dir)
        for d in self.accumulator.destinations():
            if d.table == METRICS.name:
                parts.extend(
                    pq.read_table(f"{root}/{f}", filesystem=fs, columns=["batch_id", *columns])
                    for f in d.files
                )
        return {
            source: _highest_ms(parts, batch_id, column)
            for source, column in zip(PROPOSED_WATERMARKS, columns, strict=True)
        }

    def _figures(self, staged: pa.Table, metrics: pa.Table, batch_id: int, written: list[dict]) -> dict:
        table = staged.column("table")

        def total(column: str, name: str) -> int:
            return int(pc.sum(staged.filter(pc.equal(table, name)).column(column)).as_py() or 0)

        wm = pc.max(metrics.column(_WATERMARK)).as_py() if metrics.num_rows else None
        return {
            "batch_id": batch_id,
            **{status: total(status, OUTCOMES.name) for status in STATUSES},
            **{name: total("rows", t.name) for name, t in ROW_COUNTS.items()},
            RELAYED: int(pc.sum(metrics.column(RELAYED)).as_py() or 0),
            _WATERMARK: wm,
            **{f"{source}_{_WATERMARK}": value for source, value in (self.watermarks or {}).items()},
            "staged_bytes": self._staged_bytes(),
            "committed": written,
        }

    def _staged_bytes(self) -> int:
        """The bytes still staged; notes when the oldest of them will have lingered."""
        destinations = self.accumulator.destinations()
        oldest = min((d.oldest_ms for d in destinations), default=None)
        self.linger_at_ms = None if oldest is None else oldest + self.accumulator.linger_ms
        return sum(d.nbytes for d in destinations)


def _highest_ms(parts: list[pa.Table], batch_id: int, column: str) -> int | None:
    """The largest time in ``column`` of the rows before ``batch_id``, as epoch ms (a file
    Spark's writer wrote holds INT96 times without a time zone: all are UTC)."""
    highest = None
    for part in parts:
        times = part.filter(pc.less(part.column("batch_id"), batch_id)).column(column)
        ms = pc.max(pc.cast(pc.cast(times, pa.timestamp("ms", tz="UTC"), safe=False), pa.int64())).as_py()
        if ms is not None and (highest is None or ms > highest):
            highest = ms
    return highest


def _committed(table: Any, dataset: pads.Dataset, batch_id: int, columns: list[str]) -> list[pa.Table]:
    """The largest ``columns`` of the committed metrics rows before ``batch_id``, from the
    files' statistics where a file lies wholly before it (a restart need not read a
    long-running table), else from the file."""
    actions = pa.table(table.get_add_actions(flatten=True))
    stats = [f"max.{c}" for c in ["batch_id", *columns]]
    if actions.num_rows == 0:
        return []
    if not set(stats) <= set(actions.column_names):  # a writer that kept no statistics: read all
        return [dataset.to_table(columns=["batch_id", *columns])]
    before = pc.less(actions.column("max.batch_id"), batch_id)
    summary = actions.filter(pc.fill_null(before, False)).select(stats).rename_columns(["batch_id", *columns])
    rest = actions.filter(pc.invert(pc.fill_null(before, False)))
    rest = rest.filter(pc.fill_null(pc.less(rest.column("min.batch_id"), batch_id), True))
    if rest.num_rows == 0:
        return [summary]
    wanted = tuple(rest.column("path").to_pylist())
    files = [f for f in dataset.files if f.endswith(wanted)]
    read = pads.dataset(files, filesystem=dataset.filesystem, format="parquet")
    return [summary, read.to_table(columns=["batch_id", *columns], filter=pads.field("batch_id") < batch_id)]


def _check_staged_by(staged: pa.Table, batch_id: int) -> None:
    """Every staged file must be named for this micro-batch (``staging.staged_name``)."""
    prefix = f"{batch_id:020d}-"
    for name in staged.column("name").drop_null().to_pylist():
        if not name.rsplit("/", 1)[-1].startswith(prefix):
            raise RuntimeError(f"micro-batch {batch_id} got a file staged for another batch: {name}")
