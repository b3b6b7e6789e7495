"""The sender's tasks: a ready destination's staged files become Delta data files, on an executor.

A drain ships its ready destinations as one small Spark job, a task per destination, which
writes Parquet data files into the table's partition and returns their Delta add actions
(``ADDS``); it commits nothing.

Invariants: a data file's name is fixed by ``(app id, drain version, destination, sequence)``,
so a retried task, or the same drain after a crash, overwrites the files it wrote before;
a data file is invisible until a commit names it, so files of a drain that never committed
are only garbage (``VACUUM`` removes them), never rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, TypeVar
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from ..contract import TABLES
from ..runtime.settings import is_connect
from ..storage import Storage, WholeFile

#: what a sender task returns: one add action per data file written
ADDS = pa.schema(
    [
        ("table", pa.string()),
        ("path", pa.string()),  # relative to the table's root
        ("size", pa.int64()),
        ("partition_values", pa.string()),  # JSON
        ("modification_time", pa.int64()),
        ("stats", pa.string()),  # JSON, Delta's per-file statistics
    ]
)
ADDS_DDL = ", ".join(f"`{f.name}` {'string' if f.type == pa.string() else 'bigint'}" for f in ADDS)

#: the output tables' columns of few distinct values, dictionary-encoded in every Parquet file
#: the job writes; for the others a dictionary would be built, found too big and dropped
_FEW_VALUES = frozenset(
    {"status", "condition", "source", "reason", "batch_id", "matched_events", "progress", "target"}
)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` a Parquet file of the output dictionary-encodes."""
    return [f.name for f in schema if f.name in _FEW_VALUES or pa.types.is_date(f.type)]


#: longest string kept in statistics (Delta's own default prefix length)
_STRING_PREFIX = 32
#: row groups per data file (how much of a file a task holds in memory at once)
_GROUPS = 8


@dataclass(frozen=True)
class DataFileTask:
    """One ready destination to write: its staged files and where its data files go."""

    table: str
    partition: str
    staged: tuple[str, ...]  # relative to staging_dir
    staging_dir: str
    table_uri: str
    version: int
    app_id: str
    target_size: int
    storage: Storage
    rows: int  # staged rows and Parquet bytes (the accumulator's bookkeeping)
    nbytes: int

    @property
    def rows_per_file(self) -> int:
        """Rows per data file: the staged bytes in ``round(bytes / target)`` equal files (a
        full destination holds one to two ``batch.size``: not one full file and a small rest)."""
        files = max(1, round(self.nbytes / self.target_size))
        return max(1, math.ceil(self.rows / files))


def write_data_files(task: DataFileTask) -> pa.Table:
    """Write ``task``'s staged rows as data files of about ``target_size``; return their ``ADDS``."""
    contract = TABLES[task.table]
    columns = [n for n in contract.schema.names if n != contract.partition_by]
    schema = pa.schema([contract.schema.field(n) for n in columns])
    src, src_root = task.storage.filesystem(task.staging_dir)
    dst, dst_root = task.storage.filesystem(task.table_uri)
    directory = f"{contract.partition_by}={quote(task.partition, safe='')}"
    token = hashlib.sha1(task.app_id.encode()).hexdigest()[:12]
    names = (f"{directory}/part-{task.version:020d}-{seq:05d}-{token}.snappy.parquet" for seq in count())
    files: list[dict] = []
    out: _DataFile | None = None
    per_file = task.rows_per_file
    for batch in _staged_batches(src, src_root, task, columns):
        while batch.num_rows:
            if out is None:
                out = _DataFile(dst, dst_root, next(names), schema)
            take = min(batch.num_rows, per_file - out.rows)
            out.write(batch.slice(0, take))
            batch = batch.slice(take)
            if out.rows >= per_file:
                files.append(out.close())
                out = None
    if out is not None:
        files.append(out.close())
    values = json.dumps({contract.partition_by: task.partition})
    return pa.Table.from_pylist(
        [{"table": task.table, "partition_values": values, **f} for f in files], schema=ADDS
    )


def _staged_batches(src: Any, root: str, task: DataFileTask, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The staged rows in pieces of 1/_GROUPS of a data file (bounded memory), in the table's
    columns (a file staged by an earlier version lacks those added since)."""
    rows = max(1024, math.ceil(task.rows_per_file / _GROUPS))
    contract = TABLES[task.table]
    for name in task.staged:
        with src.open_input_file(f"{root}/{name}") as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=rows, columns=columns):
                if batch.schema.names == columns:
                    yield batch
                else:
                    yield from contract.conformed(batch, columns).combine_chunks().to_batches()


class _DataFile:
    """One data file being written, with what its add action needs."""

    def __init__(self, fs: Any, root: str, path: str, schema: pa.Schema) -> None:
        self.path = path
        self.rows = 0
        self._out = WholeFile(fs, f"{root}/{path}")
        self._writer = pq.ParquetWriter(
            self._out.stream, schema, compression="snappy", use_dictionary=dictionary_columns(schema)
        )

    @property
    def size(self) -> int:
        return self._out.stream.tell()

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)  # one row group, on the stream at once
        self.rows += batch.num_rows

    def close(self) -> dict:
        self._writer.close()
        size = self.size
        self._out.commit()
        return {
            "path": self.path,
            "size": size,
            "modification_time": int(time.time() * 1000),
            "stats": stats_json(self._writer.writer.metadata),
        }


def stats_json(meta: pq.FileMetaData) -> str:
    """Delta's per-file statistics from a Parquet footer (top-level primitive columns).

    Timestamps in milliseconds, as delta-rs writes them; long strings (payloads) keep a
    prefix as their minimum and no maximum, so the log stays small.
    """
    lows: dict[str, Any] = {}
    highs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            name, s = column.path_in_schema, column.statistics
            if "." in name or s is None:
                continue
            nulls[name] = nulls.get(name, 0) + (s.null_count or 0)
            if s.has_min_max:
                lows[name] = s.min if name not in lows else min(lows[name], s.min)
                highs[name] = s.max if name not in highs else max(highs[name], s.max)
    return json.dumps(
        {
            "numRecords": meta.num_rows,
            "minValues": _json_values(lows, low=True),
            "maxValues": _json_values(highs, low=False),
            "nullCount": nulls,
        }
    )


def _json_values(values: dict[str, Any], *, low: bool) -> dict[str, Any]:
    out = {}
    for name, v in values.items():
        if isinstance(v, str) and len(v) > _STRING_PREFIX:
            if low:  # a prefix is still a lower bound; a cut maximum would not be an upper one
                out[name] = v[:_STRING_PREFIX]
        elif isinstance(v, dt.datetime):
            out[name] = v.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        elif isinstance(v, dt.date):
            out[name] = v.isoformat()
        elif isinstance(v, (str, int, bool)) or (isinstance(v, float) and math.isfinite(v)):
            out[name] = v
    return out


# -- where the tasks run -------------------------------------------------------------------------------

T = TypeVar("T")
#: runs ``fn`` on each item (one task each) and returns their rows together, in ``schema``
TaskRunner = Callable[[Callable[[T], pa.Table], Sequence[T], pa.Schema, str], pa.Table]


def in_process(fn: Callable[[T], pa.Table], items: Sequence[T], schema: pa.Schema, ddl: str) -> pa.Table:
    """The tasks one after the other in this process (no Spark: tests, the in-process sink)."""
    return pa.concat_tables([schema.empty_table(), *(fn(i) for i in items)])


class SparkTasks:
    """The tasks as one Spark job with one task per item: on a classic session an RDD (no SQL
    planning, no Arrow batches), on Spark Connect ``mapInArrow`` over ``range``."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def __call__(
        self, fn: Callable[[T], pa.Table], items: Sequence[T], schema: pa.Schema, ddl: str
    ) -> pa.Table:
        if not items:
            return schema.empty_table()
        chosen = list(items)
        if not is_connect(self.spark):
            tables = self.spark.sparkContext.parallelize(chosen, len(chosen)).map(fn).collect()
            return pa.concat_tables([t.cast(schema) for t in tables])

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for i in batch.column(0).to_pylist():
                    yield from fn(chosen[i]).to_batches()

        return to_arrow(self.spark.range(0, len(chosen), 1, len(chosen)).mapInArrow(run, ddl), schema)


def to_arrow(frame: Any, schema: pa.Schema) -> pa.Table:
    """A (small) DataFrame as Arrow in ``schema`` (``toArrow`` where available, else via pandas)."""
    if hasattr(frame, "toArrow"):
        return frame.toArrow().cast(schema)
    return pa.Table.from_pandas(frame.toPandas(), schema=schema, preserve_index=False)
