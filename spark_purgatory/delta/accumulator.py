"""RecordAccumulator: Kafka's producer batching, applied to Delta commits from micro-batches.

Kafka's producer appends records to a per-partition deque of batches and sends a batch when
it is full (``batch.size``), when its oldest record has waited ``linger.ms``, on
``flush()``/``close()``, or when the buffer pool (``buffer.memory``) is exhausted.  A
streaming query that appends each micro-batch to a Delta table instead writes one small file
per partition per trigger: a trickle stream leaves thousands of tiny files.  This module puts
the producer's rule between the micro-batches and the tables.

* A **destination** is ``(table, partition)``; each holds the rows staged for it.
* ``append(batch_id, table, partition, rows)`` stages rows **durably**: one Arrow IPC file per
  (destination, micro-batch) under ``<staging>/<table>/<partition>/``, written whole or not at
  all, then ``staged_through`` (the last micro-batch fully staged) is advanced.
* ``ready(now)`` is Kafka's ``ready()``: a destination is ready when its staged bytes reach
  ``batch.size``, when its oldest staged row has waited ``linger.ms``, when everything is being
  flushed, or (``buffer.memory`` exceeded) when it is among the largest destinations whose
  drain brings the total back under the limit.
* ``drain(batch_id, writer)`` writes, per table, every ready destination in **one commit**
  carrying an app transaction ``(app_id = table's id, version)``, then deletes the staged files.

Exactly once, across crashes (the invariant of this module): the version of a drain is
``3 * batch_id + phase``: phase 0 for the drain inside micro-batch ``batch_id``, 1 for a
linger drain between that batch and the next (Kafka's sender does not wait for new records to
send a lingered batch; ``drain_lingering``), 2 for the flush on close, so versions only grow.
Before committing, the drain writes a manifest listing the staged files it covers;
recovery (on open and before every micro-batch) deletes the files of a manifest whose version
the table already recorded (committed, crash before clean-up) and otherwise just drops the
manifest (not committed: the files stay staged).  A drain whose version the table already
recorded is skipped (a replayed micro-batch), and a replayed micro-batch is not staged twice
(``batch_id <= staged_through``).  Nothing staged is lost, nothing is committed twice.
The crash tests kill the process at each of ``FAULT_POINTS`` through ``fault_hook`` (a
test-only argument) to check exactly that.

The staging directory may be a path or a URI (``s3://``, ``abfss://``, ``dbfs:/`` ...): files
go through pyarrow's filesystems (``spark_purgatory.storage``).  A local file is written to a
temporary name and renamed; an object store's put is atomic by itself (an interrupted upload
leaves no object), so there the file is written in place.  Either way a staged file or
manifest is whole or absent.

Sizes are Arrow's in-memory sizes (``Table.nbytes``); Parquet files are smaller by their
compression ratio.  The clock is injectable, so tests never sleep.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from ..storage import Storage

__all__ = ["Destination", "TableWriter", "RecordAccumulator", "Clock", "FaultHook", "FAULT_POINTS"]

Clock = Callable[[], float]  # seconds, like time.time
#: for crash tests only: called with the name of each fault point the accumulator passes
FaultHook = Callable[[str], None]
#: where a crash matters: before ``staged_through`` moves, after a drain manifest is written
#: (before its commit), after a commit (before the staged files are deleted)
FAULT_POINTS = ("staged", "manifest", "committed")


@dataclass(frozen=True)
class Destination:
    """Rows staged for one (table, partition)."""

    table: str
    partition: str
    files: tuple[str, ...]
    nbytes: int
    rows: int
    oldest_ms: int  # when its oldest staged row was staged (clock ms)


class TableWriter(Protocol):
    """Commits Arrow rows to one table with an idempotency token (Delta's app transactions)."""

    def committed_version(self, table: str, app_id: str) -> int | None:
        """The last version recorded for ``app_id`` in ``table`` (None if never)."""

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        """Append ``rows`` to ``table`` in one commit that records ``(app_id, version)``."""


_STAGED_THROUGH = "staged_through"
_MANIFEST = "drain-{version:020d}.json"


class RecordAccumulator:
    """Durable per-destination batching in front of the Delta tables.

    Args:
        staging_dir: where staged rows live between micro-batches (next to the checkpoint);
            a path or a URI.
        app_id: identifies this query's writes in every table's app transactions.
        batch_size: bytes per destination that make it ready (``accumulator.batch.size``).
        linger_ms: longest a staged row waits (``accumulator.linger.ms``).
        buffer_memory: bytes staged in all destinations before forced drains.
        clock: seconds since the epoch; ``time.time`` by default.
        storage: the ``storage.*`` settings for a URI staging directory (the environment's
            when None).
        fault_hook: for crash tests only (``tests/faulty_job.py`` kills the process in it):
            called with each of ``FAULT_POINTS`` as the accumulator passes it.  None in
            production.

    Example:

    >>> import tempfile, pyarrow as pa
    >>> acc = RecordAccumulator(tempfile.mkdtemp(), app_id="q1", batch_size=1 << 20, linger_ms=60_000,
    ...                         buffer_memory=1 << 24, clock=lambda: 0.0)
    >>> acc.append(0, "outcomes", "2026-01-01", pa.table({"op_id": ["a", "b"]}))
    >>> [d.rows for d in acc.destinations()], acc.ready()
    ([2], [])
    """

    def __init__(
        self,
        staging_dir: str,
        *,
        app_id: str,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        clock: Clock = time.time,
        storage: Storage | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.staging_dir = staging_dir
        self.app_id = app_id
        self.batch_size = int(batch_size)
        self.linger_ms = int(linger_ms)
        self.buffer_memory = int(buffer_memory)
        self.clock = clock
        self.storage = storage or Storage()
        self.fault_hook = fault_hook
        self._fs, self._root = self.storage.filesystem(staging_dir)

    def __getstate__(self) -> dict:  # Spark Connect pickles the sink: filesystems are rebuilt
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs", "_root")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fs, self._root = self.storage.filesystem(self.staging_dir)

    def _fault_point(self, name: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(name)

    # -- staging -------------------------------------------------------------------------------

    @property
    def staged_through(self) -> int:
        """The last micro-batch whose rows are fully staged (-1 if none)."""
        try:
            with self._fs.open_input_stream(f"{self._root}/{_STAGED_THROUGH}") as f:
                return int(f.read().decode().strip() or -1)
        except FileNotFoundError:
            return -1

    def append(self, batch_id: int, table: str, partition: str, rows: pa.Table) -> None:
        """Stage ``rows`` for ``(table, partition)`` from micro-batch ``batch_id``.

        Call ``mark_staged(batch_id)`` once every destination of the batch is appended; a
        batch at or below ``staged_through`` is a replay and is ignored.
        """
        if batch_id <= self.staged_through or rows.num_rows == 0:
            return
        directory = f"{self._root}/{table}/{_safe(partition)}"
        # a crash while staging this batch may have left part of it: start it afresh
        prefix = f"{batch_id:020d}-"
        _remove(self._fs, [i.path for i in _listing(self._fs, directory) if i.base_name.startswith(prefix)])
        staged_ms = int(self.clock() * 1000)
        # the name carries what ready() needs: batch, staging time, bytes and rows
        name = f"{batch_id:020d}-{staged_ms:015d}-{rows.nbytes:015d}-{rows.num_rows:012d}.arrow"
        _write_whole(self._fs, f"{directory}/{name}", lambda f: _write_ipc(f, rows))

    def mark_staged(self, batch_id: int) -> None:
        """Record that micro-batch ``batch_id`` is fully staged (replays will be ignored)."""
        self._fault_point("staged")
        if batch_id > self.staged_through:
            _write_whole(
                self._fs, f"{self._root}/{_STAGED_THROUGH}", lambda f: f.write(str(batch_id).encode())
            )

    def destinations(self) -> list[Destination]:
        """Every destination with staged rows (one listing of the staging directory)."""
        by_destination: dict[tuple[str, str], list[pafs.FileInfo]] = {}
        for info in _listing(self._fs, self._root, recursive=True):
            parts = info.path[len(self._root) + 1 :].split("/")
            if len(parts) == 3 and parts[2].endswith(".arrow"):
                by_destination.setdefault((parts[0], parts[1]), []).append(info)
        out = []
        for (table, part), infos in sorted(by_destination.items()):
            infos.sort(key=lambda i: i.base_name)
            meta = [i.base_name[: -len(".arrow")].split("-") for i in infos]
            out.append(
                Destination(
                    table=table,
                    partition=_unsafe(part),
                    files=tuple(i.path for i in infos),
                    nbytes=sum(int(m[2]) for m in meta),
                    rows=sum(int(m[3]) for m in meta),
                    oldest_ms=min(int(m[1]) for m in meta),
                )
            )
        return out

    @property
    def buffered_bytes(self) -> int:
        return sum(d.nbytes for d in self.destinations())

    # -- Kafka's ready() -----------------------------------------------------------------------

    def ready(self, *, flush: bool = False) -> list[tuple[Destination, str]]:
        """Destinations to drain now, each with why: full, lingered, flush or memory."""
        now_ms = int(self.clock() * 1000)
        dests = self.destinations()
        chosen: dict[tuple[str, str], tuple[Destination, str]] = {}
        for d in dests:
            if flush:
                chosen[(d.table, d.partition)] = (d, "flush")
            elif d.nbytes >= self.batch_size:
                chosen[(d.table, d.partition)] = (d, "full")
            elif now_ms - d.oldest_ms >= self.linger_ms:
                chosen[(d.table, d.partition)] = (d, "lingered")
        remaining = sum(d.nbytes for d in dests if (d.table, d.partition) not in chosen)
        for d in sorted(dests, key=lambda d: d.nbytes, reverse=True):
            if remaining <= self.buffer_memory:
                break
            if (d.table, d.partition) not in chosen:
                chosen[(d.table, d.partition)] = (d, "memory")
                remaining -= d.nbytes
        return list(chosen.values())

    # -- drain, with crash recovery --------------------------------------------------------------

    IN_BATCH, LINGER, CLOSE = 0, 1, 2

    def drain(self, batch_id: int, writer: TableWriter, *, phase: int = IN_BATCH) -> list[dict]:
        """Commit every ready destination (one commit per table); return what was written."""
        self.recover(writer)
        flush = phase == self.CLOSE
        version = 3 * int(batch_id) + phase
        by_table: dict[str, list[tuple[Destination, str]]] = {}
        for d, why in self.ready(flush=flush):
            by_table.setdefault(d.table, []).append((d, why))
        written = []
        for table, items in sorted(by_table.items()):
            done = writer.committed_version(table, self.app_id)
            if done is not None and done >= version:
                continue  # a replayed micro-batch already drained this table
            files = [f for d, _ in items for f in d.files]
            manifest = f"{self._root}/{table}/{_MANIFEST.format(version=version)}"
            body = json.dumps({"version": version, "files": files}).encode()
            _write_whole(self._fs, manifest, lambda f, body=body: f.write(body))
            self._fault_point("manifest")
            rows = pa.concat_tables([_read_ipc(self._fs, f) for f in files], promote_options="default")
            writer.commit(table, rows, app_id=self.app_id, version=version, target_file_size=self.batch_size)
            self._fault_point("committed")
            _remove(self._fs, files, prune=True)
            _remove(self._fs, [manifest])
            written.append(
                {
                    "table": table,
                    "version": version,
                    "partitions": [d.partition for d, _ in items],
                    "reasons": sorted({why for _, why in items}),
                    "rows": rows.num_rows,
                    "bytes": rows.nbytes,
                    "waited_ms": int(self.clock() * 1000) - min(d.oldest_ms for d, _ in items),
                }
            )
        return written

    def flush(self, batch_id: int, writer: TableWriter) -> list[dict]:
        """Drain everything (Kafka's ``flush()``/``close()``), e.g. when the query stops."""
        return self.drain(batch_id, writer, phase=self.CLOSE)

    def recover(self, writer: TableWriter) -> None:
        """Resolve drains interrupted by a crash (see the module docstring)."""
        for info in sorted(_listing(self._fs, self._root, recursive=True), key=lambda i: i.path):
            parts = info.path[len(self._root) + 1 :].split("/")
            if not (len(parts) == 2 and parts[1].startswith("drain-") and parts[1].endswith(".json")):
                continue
            with self._fs.open_input_stream(info.path) as f:
                manifest = json.loads(f.read())
            done = writer.committed_version(parts[0], self.app_id)
            if done is not None and done >= manifest["version"]:
                _remove(self._fs, manifest["files"], prune=True)  # committed; only the clean-up was lost
            _remove(self._fs, [info.path])  # else never committed: the files are still staged


# -- small helpers --------------------------------------------------------------------------------


def _safe(partition: str) -> str:
    return partition.replace("%", "%25").replace("/", "%2F") or "%00"


def _unsafe(name: str) -> str:
    return "" if name == "%00" else name.replace("%2F", "/").replace("%25", "%")


def _listing(fs: pafs.FileSystem, directory: str, *, recursive: bool = False) -> list[pafs.FileInfo]:
    """The files under ``directory`` (none if it does not exist)."""
    selector = pafs.FileSelector(directory, recursive=recursive, allow_not_found=True)
    return [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]


def _write_ipc(f, rows: pa.Table) -> None:
    with ipc.new_file(f, rows.schema) as writer:
        writer.write_table(rows)


def _read_ipc(fs: pafs.FileSystem, path: str) -> pa.Table:
    if isinstance(fs, pafs.LocalFileSystem):
        with pa.memory_map(path) as source:
            return ipc.open_file(source).read_all()
    with fs.open_input_file(path) as source:
        return ipc.open_file(source).read_all()


def _write_whole(fs: pafs.FileSystem, path: str, write: Callable) -> None:
    """Write a file that readers see whole or not at all (see the module docstring)."""
    if not isinstance(fs, pafs.LocalFileSystem):
        with fs.open_output_stream(path) as out:  # an object store's put is atomic
            write(out)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(fs: pafs.FileSystem, paths: Iterable[str], *, prune: bool = False) -> None:
    """Delete files (missing ones are fine); with ``prune``, also their emptied local directories."""
    local = isinstance(fs, pafs.LocalFileSystem)
    for path in list(paths):
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        parent = os.path.dirname(path)
        if prune and local and os.path.isdir(parent) and not os.listdir(parent):
            try:
                os.rmdir(parent)
            except OSError:  # refilled meanwhile
                pass
