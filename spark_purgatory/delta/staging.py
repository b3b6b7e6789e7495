"""The producer's side of the accumulator: operator rows become table rows, staged where they are.

``split_tables`` is the one place rows become table rows, and it knows no table by name: the
engine columns come from the operator's output, event times become timestamps, and the
writer's columns are added (``batch_id``, ``emitted_at``, the date partition).

``stage_task`` (a Spark task) and ``ShardStaging`` (inside the shard step) write one staged
Parquet file per destination ``(table, partition)`` and return one small ``STAGED`` row per
file and per shard call's metrics row.

Invariants: a staged file is whole or absent; a retried ``stage_task`` attempt writes the
names the first attempt wrote, and a shard call writes names no other call writes, so only
the manifest decides which files count.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..contract import (
    GROUP_ROWS,
    KIND_METRICS,
    METRICS,
    PARTITION_MAXIMA,
    PROPOSED_WATERMARKS,
    SINK_METRICS,
    STATUSES,
    TABLES,
    TableContract,
    ms_column,
)
from ..storage import Storage, WholeFile, location
from .sender import dictionary_columns

_TS = pa.timestamp("us", tz="UTC")
_BATCH_ID = "streaming.sql.batchId"  # the local property Spark sets on a micro-batch's jobs

#: what a shard call's metrics row carries to the driver: the ``metrics`` table's shard columns
#: (event times as epoch ms) and the watermarks it proposes per input
CALL_COLUMNS: tuple[str, ...] = (
    "shard",
    *(ms_column(c) if c in METRICS.time_columns else c for c in METRICS.engine_columns[1:-1]),
    *PROPOSED_WATERMARKS.values(),
)
#: what a staging task returns: a row per staged file (``table`` set: its rows, and its
#: outcomes by status) or per shard call (``table`` null: its metrics row, ``CALL_COLUMNS``)
STAGED = pa.schema(
    [
        ("table", pa.string()),
        ("partition", pa.string()),
        ("name", pa.string()),  # relative to the staging directory
        ("bytes", pa.int64()),
        ("rows", pa.int64()),
        *((name, pa.int64()) for name in STATUSES),
        *((name, pa.int64()) for name in CALL_COLUMNS if name not in STATUSES),
        (PARTITION_MAXIMA, pa.string()),  # the call's Kafka partitions (``handoff.partitions``)
    ]
)
#: the same as a Spark DDL string, for ``mapInArrow``
STAGED_DDL = ", ".join(f"`{f.name}` {'string' if f.type == pa.string() else 'bigint'}" for f in STAGED)


# -- operator rows -> table rows ------------------------------------------------------------------


_US_A_DAY = 86_400_000_000


def _date(ts: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The UTC dates of timestamps (in numpy when none is null: Arrow's cast is slower)."""
    if ts.null_count:
        return pc.cast(pc.cast(ts, _TS), pa.date32())
    us = pc.cast(pc.cast(ts, _TS), pa.int64()).to_numpy()
    return pa.array((us // _US_A_DAY).astype(np.int32), pa.date32())


def _from_ms(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch milliseconds as UTC timestamps: microseconds, each chunk's int64 buffer viewed as times."""
    us = pc.multiply(pc.cast(values, pa.int64()), 1000)
    if isinstance(us, pa.Array):
        return us.view(_TS)
    return pa.chunked_array([chunk.view(_TS) for chunk in us.chunks], _TS)


def _table_rows(table: TableContract, rows: pa.Table, batch_id: int, now: dt.datetime) -> pa.Table:
    """One table's rows from its kind of operator output rows (see the module docstring)."""
    n = rows.num_rows
    columns: dict[str, Any] = {}
    for name in table.engine_columns:
        if name == "batch_id":
            columns[name] = pa.array(np.full(n, batch_id, dtype=np.int64))
        elif name in table.time_columns:
            columns[name] = _from_ms(rows.column(ms_column(name)))
        elif name == "keys" and "key" in rows.column_names:
            columns[name] = _keys_of(rows)
        else:
            columns[name] = rows.column(name)
    for name in table.writer_columns:
        if name == table.partition_by:
            if table.time_columns:
                columns[name] = _date(columns[table.time_columns[-1]])
            else:
                columns[name] = _repeat(now.date(), pa.date32(), n)
        else:  # emitted_at: when the row is written
            columns[name] = _repeat(now, table.schema.field(name).type, n)
    return pa.table(columns, schema=table.schema)


def _repeat(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    """``value`` ``n`` times: one scalar repeated, not ``n`` Python objects."""
    return pa.repeat(pa.scalar(value, type=type_), n)


def _keys_of(rows: pa.Table) -> pa.ChunkedArray:
    """An outcome's ``keys``: a single key may travel as ``key`` (``keys`` null)."""
    if rows.column("keys").null_count == 0:
        return rows.column("keys")
    keys, key = rows.column("keys").combine_chunks(), rows.column("key").combine_chunks()
    single = pa.ListArray.from_arrays(pa.array(np.arange(len(key) + 1, dtype=np.int32)), key)
    return pa.chunked_array([pc.if_else(pc.is_null(keys), single, keys)])


def split_tables(rows: pa.Table, batch_id: int, now: dt.datetime) -> dict[str, pa.Table]:
    """The operator's output rows (``contract.OPERATOR_OUTPUT``) as the tables' rows, by name
    (``metrics`` empty: the sink makes those rows)."""
    filled = dict(_split(_by_kind(rows), batch_id, now))
    return {name: filled[name] if name in filled else t.schema.empty_table() for name, t in TABLES.items()}


def _by_kind(rows: pa.Table) -> dict[str, pa.Table]:
    """Operator rows by their ``kind``; rows all of one kind as they are, without a copy."""
    kind = rows.column("kind")
    if not rows.num_rows:
        return {}
    first = kind[0].as_py()
    if kind.null_count == 0 and pc.all(pc.equal(kind, first)).as_py():  # no hash table for one kind
        return {first: rows}
    return {k: rows.filter(pc.equal(kind, k)) for k in pc.unique(kind).to_pylist()}


def metrics_rows(
    calls: pa.Table, batch_id: int, now: dt.datetime, watermarks: dict[str, int | None]
) -> pa.Table:
    """The ``metrics`` table's rows of micro-batch ``batch_id``, one per shard call.

    ``watermarks`` (each input's, epoch ms; None until the input sent a row) is moved to the
    running maximum of the watermarks the calls propose, as Spark's is after this batch, and
    the rows carry it.  A batch time the calls lack is ``now``.
    """
    n = calls.num_rows
    for source, column in PROPOSED_WATERMARKS.items():
        proposed = pc.max(calls.column(column)).as_py()
        if proposed is not None and (watermarks.get(source) is None or proposed > watermarks[source]):
            watermarks[source] = proposed
    group_rows = calls.column(GROUP_ROWS)
    total = pc.sum(group_rows).as_py() or 0
    batch_wide = {  # the same on every row of the batch (contract.SINK_METRICS)
        **{f"{source}_watermark": watermarks.get(source) for source in PROPOSED_WATERMARKS},
        "busiest_share": (pc.max(group_rows).as_py() or 0) / total if total else None,
    }
    assert set(batch_wide) == set(SINK_METRICS)
    now_ms = int(now.timestamp() * 1000)
    columns: dict[str, Any] = {}
    for name in METRICS.schema.names:
        field = METRICS.schema.field(name)
        if name == "batch_id":
            columns[name] = pa.array(np.full(n, batch_id, dtype=np.int64))
        elif name == "batch_time":  # a batch time the calls lack is now
            columns[name] = _from_ms(pc.fill_null(calls.column(ms_column(name)), now_ms))
        elif name == "watermark":  # Spark's is 0 until it has one: none yet
            ms = calls.column(ms_column(name))
            columns[name] = _from_ms(pc.if_else(pc.greater(ms, 0), ms, pa.scalar(None, pa.int64())))
        elif name in batch_wide and field.type == _TS:
            columns[name] = _from_ms(pa.chunked_array([pa.array([batch_wide[name]] * n, pa.int64())]))
        elif name in batch_wide:
            columns[name] = pa.array([batch_wide[name]] * n, field.type)
        elif name == "emitted_at":
            columns[name] = _repeat(now, field.type, n)
        elif name == METRICS.partition_by:
            columns[name] = _date(columns["batch_time"])
        else:
            columns[name] = pc.cast(calls.column(name), field.type)
    return pa.table(columns, schema=METRICS.schema)


def _by_partition(name: str, rows: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """A table's rows per partition value (a date, as ISO text); rows of one date as they are."""
    dates = rows.column(TABLES[name].partition_by)
    values = pc.unique(dates).to_pylist()
    if len(values) == 1:
        yield values[0].isoformat(), rows
        return
    for value in values:
        yield value.isoformat(), rows.filter(pc.equal(dates, pa.scalar(value, pa.date32())))


# -- staging: one Parquet file per (destination, batch, task) ----------------------------------------


def staged_name(table: str, partition: str, batch_id: int, task: int, token: str = "") -> str:
    """Where a task stages a destination's rows, relative to the staging directory (``task``:
    the staging task's partition, or the shard with its call's own ``token``)."""
    suffix = f"-{token}" if token else ""
    return f"{table}/{safe(partition)}/{batch_id:020d}-{task:05d}{suffix}.parquet"


def stage_task(
    batches: Iterable[pa.RecordBatch],
    *,
    batch_id: int,
    now: dt.datetime,
    staging_dir: str,
    storage: Storage,
    write: bool,
    task: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stage one task's operator rows (``mapInArrow``); yield its ``STAGED`` rows.
    ``write=False`` (a replay, already staged and maybe committed) only counts."""
    if task is None:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
    tables = (pa.Table.from_batches([batch]) for batch in batches)

    def name(table: str, partition: str) -> str:
        return staged_name(table, partition, batch_id, task)

    staged = _stage(
        tables, name, batch_id=batch_id, now=now, staging_dir=staging_dir, storage=storage, write=write
    )
    yield from pa.Table.from_pylist(staged, schema=STAGED).to_batches()


def stage_rows(
    rows: pa.Table, *, batch_id: int, now: dt.datetime, staging_dir: str, storage: Storage, write: bool
) -> pa.Table:
    """``stage_task`` for rows already in this process (one task, number 0)."""
    out = stage_task(
        rows.to_batches(),
        batch_id=batch_id,
        now=now,
        staging_dir=staging_dir,
        storage=storage,
        write=write,
        task=0,
    )
    return pa.Table.from_batches(list(out), schema=STAGED)


def _split(kinds: dict[str, pa.Table], batch_id: int, now: dt.datetime) -> Iterator[tuple[str, pa.Table]]:
    """``split_tables`` of rows already by kind (``_by_kind``): the tables they fill, by name."""
    for name, table in TABLES.items():
        if table is not METRICS and table.kind in kinds:
            yield name, _table_rows(table, kinds[table.kind], batch_id, now)


def _stage(
    parts: Iterable[pa.Table],
    name: Callable[[str, str], str],
    *,
    batch_id: int,
    now: dt.datetime,
    staging_dir: str,
    storage: Storage,
    write: bool,
) -> list[dict]:
    """Stage operator rows, one file per destination; the ``STAGED`` rows as Python values."""
    fs, root = storage.filesystem(staging_dir)
    files: dict[tuple[str, str], StagedFile] = {}
    metrics = []
    try:
        for rows in parts:
            kinds = _by_kind(rows)
            if KIND_METRICS in kinds:
                metrics.append(kinds[KIND_METRICS])
            for table_name, table in _split(kinds, batch_id, now):
                if table.num_rows == 0:
                    continue
                for partition, part in _by_partition(table_name, table):
                    if (table_name, partition) not in files:
                        relative = name(table_name, partition)
                        files[(table_name, partition)] = StagedFile(fs, f"{root}/{relative}", relative, write)
                    files[(table_name, partition)].write(part)
        staged = [f.close() for f in files.values()]
    except BaseException:
        for f in files.values():
            f.abort()
        raise
    return _staged_rows(staged, metrics)


@dataclass(frozen=True)
class ShardStaging:
    """The shard step's own staging: a shard call's output rows become staged files where
    they are produced, and only its ``STAGED`` rows go on to the sink.

    A call names its files ``<batch>-<shard>-<token>``, the token fresh per call, so no
    manifest names the files of a call the driver did not take (a failed attempt's, a
    replay's: the next ``record`` sweeps them).  The micro-batch id is Spark's local property
    ``streaming.sql.batchId``, so a file's ``batch_id`` column is the sink's.
    """

    staging_dir: str
    storage: Storage

    def __call__(self, rows: pa.Table | Sequence[pa.Table], shard: int) -> pa.Table:
        """Stage one shard call's operator rows (one table, or its parts); return ``STAGED``."""
        return pa.Table.from_pylist(self.stage(rows, shard), schema=STAGED)

    def stage(self, rows: pa.Table | Sequence[pa.Table], shard: int) -> list[dict]:
        """``__call__``'s ``STAGED`` rows as Python values, a dict a row."""
        batch_id = micro_batch_id()
        token = uuid.uuid4().hex[:12]

        def name(table: str, partition: str) -> str:
            return staged_name(table, partition, batch_id, shard, token)

        now = dt.datetime.now(dt.timezone.utc)
        return _stage(
            [rows] if isinstance(rows, pa.Table) else rows,
            name,
            batch_id=batch_id,
            now=now,
            staging_dir=self.staging_dir,
            storage=self.storage,
            write=True,
        )


def stage_metrics(rows: pa.Table, *, batch_id: int, staging_dir: str, storage: Storage) -> pa.Table:
    """Stage the ``metrics`` rows the sink made: one file per partition; their ``STAGED`` rows."""
    fs, root = storage.filesystem(staging_dir)
    files: list[StagedFile] = []
    try:
        for partition, part in _by_partition(METRICS.name, rows):
            name = staged_name(METRICS.name, partition, batch_id, 0, "sink")
            files.append(StagedFile(fs, f"{root}/{name}", name, True))
            files[-1].write(part)
        return pa.Table.from_pylist([f.close() for f in files], schema=STAGED)
    except BaseException:
        for f in files:
            f.abort()
        raise


def micro_batch_id() -> int:
    """The id of the micro-batch this Spark task runs in (Spark's ``streaming.sql.batchId``)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty(_BATCH_ID) if context is not None else None
    if value is None:
        raise RuntimeError(
            "staging in the shard step needs the micro-batch id Spark gives a streaming query's "
            f"jobs ({_BATCH_ID}); it is missing here (not a micro-batch, or a Spark Connect "
            "foreachBatch): stage in the sink instead (PurgatorySink without staged=True)"
        )
    return int(value)


class StagedFile:
    """One destination's staged Parquet file, written whole or not at all."""

    def __init__(self, fs: pafs.FileSystem, path: str, relative: str, write: bool) -> None:
        self.relative, self.rows, self.statuses = relative, 0, dict.fromkeys(STATUSES, 0)
        self.table, self.partition = relative.split("/")[0], unsafe(relative.split("/")[1])
        self._out = WholeFile(fs, path) if write else None
        self._writer: pq.ParquetWriter | None = None

    def write(self, rows: pa.Table) -> None:
        self.rows += rows.num_rows
        if "status" in rows.schema.names:
            for counted in pc.value_counts(rows.column("status")).to_pylist():
                self.statuses[counted["values"]] += counted["counts"]
        if self._out is None:
            return
        if self._writer is None:
            # no statistics: a staged file is read whole, never filtered
            self._writer = pq.ParquetWriter(
                self._out.stream,
                rows.schema,
                use_dictionary=dictionary_columns(rows.schema),
                write_statistics=False,
            )
        self._writer.write_table(rows)

    def close(self) -> dict:
        nbytes = 0
        if self._writer is not None:
            self._writer.close()
            nbytes = data_bytes(self._writer.writer.metadata)
            self._out.commit()
        return {
            "table": self.table,
            "partition": self.partition,
            "name": self.relative,
            "bytes": nbytes,
            "rows": self.rows,
            **self.statuses,
        }

    def abort(self) -> None:
        if self._out is not None:
            self._out.abort()


def _staged_rows(staged: list[dict], metrics: list[pa.Table]) -> list[dict]:
    """The ``STAGED`` rows of the files, then of the operator's metrics rows."""
    calls = [m.select([*CALL_COLUMNS, PARTITION_MAXIMA]).to_pylist() for m in metrics]
    return [*staged, *(row for rows in calls for row in rows)]


def data_bytes(metadata: pq.FileMetaData) -> int:
    """A Parquet file's data size: its column chunks, compressed, without the footer."""
    return sum(
        metadata.row_group(g).column(c).total_compressed_size
        for g in range(metadata.num_row_groups)
        for c in range(metadata.num_columns)
    )


# -- paths ---------------------------------------------------------------------------------------------


def absolute_uri(uri: str) -> str:
    """``uri`` as every process resolves it alike: a relative plain path made absolute here
    (executors run in other working directories); URIs as given."""
    where = location(uri)
    return uri if "://" in where or os.path.isabs(where) else os.path.abspath(where)


def safe(partition: str) -> str:
    """A partition value as one path segment."""
    return partition.replace("%", "%25").replace("/", "%2F") or "%00"


def unsafe(name: str) -> str:
    return "" if name == "%00" else name.replace("%2F", "/").replace("%25", "%")
