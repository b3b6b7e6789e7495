"""RecordAccumulator: Kafka's producer batching, applied to Delta commits from micro-batches.

Kafka's producer appends records to a per-partition deque of batches and sends a batch when
it is full (``batch.size``), when its oldest record has waited ``linger.ms``, on
``flush()``/``close()``, or when the buffer pool (``buffer.memory``) is exhausted.  A
streaming query that appends each micro-batch to a Delta table instead writes one small file
per partition per trigger: a trickle stream leaves thousands of tiny files.  This module puts
the producer's rule between the micro-batches and the tables.

* A **destination** is ``(table, partition)``; each holds the rows staged for it.
* ``append(batch_id, table, partition, rows)`` stages rows **durably**: one Arrow IPC file per
  (destination, micro-batch) under ``<staging>/<table>/<partition>/``, written to a temporary
  name and renamed, then ``staged_through`` (the last micro-batch fully staged) is advanced.
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

Sizes are Arrow's in-memory sizes (``Table.nbytes``); Parquet files are smaller by their
compression ratio.  The clock is injectable, so tests never sleep.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.ipc as ipc

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
        staging_dir: where staged rows live between micro-batches (next to the checkpoint).
        app_id: identifies this query's writes in every table's app transactions.
        batch_size: bytes per destination that make it ready (``accumulator.batch.size``).
        linger_ms: longest a staged row waits (``accumulator.linger.ms``).
        buffer_memory: bytes staged in all destinations before forced drains.
        clock: seconds since the epoch; ``time.time`` by default.
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
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.staging_dir = staging_dir
        self.app_id = app_id
        self.batch_size = int(batch_size)
        self.linger_ms = int(linger_ms)
        self.buffer_memory = int(buffer_memory)
        self.clock = clock
        self.fault_hook = fault_hook
        os.makedirs(staging_dir, exist_ok=True)

    def _fault_point(self, name: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(name)

    # -- staging -------------------------------------------------------------------------------

    @property
    def staged_through(self) -> int:
        """The last micro-batch whose rows are fully staged (-1 if none)."""
        path = os.path.join(self.staging_dir, _STAGED_THROUGH)
        if not os.path.exists(path):
            return -1
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip() or -1)

    def append(self, batch_id: int, table: str, partition: str, rows: pa.Table) -> None:
        """Stage ``rows`` for ``(table, partition)`` from micro-batch ``batch_id``.

        Call ``mark_staged(batch_id)`` once every destination of the batch is appended; a
        batch at or below ``staged_through`` is a replay and is ignored.
        """
        if batch_id <= self.staged_through or rows.num_rows == 0:
            return
        directory = os.path.join(self.staging_dir, table, _safe(partition))
        os.makedirs(directory, exist_ok=True)
        # a crash while staging this batch may have left part of it: start it afresh
        prefix = f"{batch_id:020d}-"
        _remove(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(prefix))
        staged_ms = int(self.clock() * 1000)
        # the name carries what ready() needs: batch, staging time, bytes and rows
        name = f"{batch_id:020d}-{staged_ms:015d}-{rows.nbytes:015d}-{rows.num_rows:012d}.arrow"
        _atomic_write(os.path.join(directory, name), lambda f: _write_ipc(f, rows))

    def mark_staged(self, batch_id: int) -> None:
        """Record that micro-batch ``batch_id`` is fully staged (replays will be ignored)."""
        self._fault_point("staged")
        if batch_id > self.staged_through:
            _atomic_write(
                os.path.join(self.staging_dir, _STAGED_THROUGH), lambda f: f.write(str(batch_id).encode())
            )

    def destinations(self) -> list[Destination]:
        """Every destination with staged rows."""
        out = []
        for table in sorted(_subdirs(self.staging_dir)):
            for part in sorted(_subdirs(os.path.join(self.staging_dir, table))):
                directory = os.path.join(self.staging_dir, table, part)
                files = sorted(f for f in os.listdir(directory) if f.endswith(".arrow"))
                if not files:
                    continue
                meta = [f[: -len(".arrow")].split("-") for f in files]
                out.append(
                    Destination(
                        table=table,
                        partition=_unsafe(part),
                        files=tuple(os.path.join(directory, f) for f in files),
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
            manifest = os.path.join(self.staging_dir, table, _MANIFEST.format(version=version))
            body = json.dumps({"version": version, "files": files}).encode()
            _atomic_write(manifest, lambda f, body=body: f.write(body))
            self._fault_point("manifest")
            rows = pa.concat_tables([_read_ipc(f) for f in files], promote_options="default")
            writer.commit(table, rows, app_id=self.app_id, version=version, target_file_size=self.batch_size)
            self._fault_point("committed")
            _remove(files, prune=True)
            _remove([manifest])
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
        for table in _subdirs(self.staging_dir):
            directory = os.path.join(self.staging_dir, table)
            for name in sorted(os.listdir(directory)):
                if not (name.startswith("drain-") and name.endswith(".json")):
                    continue
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    manifest = json.load(f)
                done = writer.committed_version(table, self.app_id)
                if done is not None and done >= manifest["version"]:
                    _remove(manifest["files"], prune=True)  # committed; only the clean-up was lost
                    _remove([path])
                else:
                    _remove([path])  # never committed: the files are still staged


# -- small helpers --------------------------------------------------------------------------------


def _safe(partition: str) -> str:
    return partition.replace("%", "%25").replace("/", "%2F") or "%00"


def _unsafe(name: str) -> str:
    return "" if name == "%00" else name.replace("%2F", "/").replace("%25", "%")


def _subdirs(path: str) -> Iterable[str]:
    if not os.path.isdir(path):
        return []
    return [d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))]


def _write_ipc(f, rows: pa.Table) -> None:
    with ipc.new_file(f, rows.schema) as writer:
        writer.write_table(rows)


def _read_ipc(path: str) -> pa.Table:
    with pa.memory_map(path) as source:
        return ipc.open_file(source).read_all()


def _atomic_write(path: str, write: Callable) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _remove(paths: Iterable[str], *, prune: bool = False) -> None:
    """Delete files (missing ones are fine); with ``prune``, also their emptied directories."""
    for path in list(paths):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        parent = os.path.dirname(path)
        if prune and os.path.isdir(parent) and not os.listdir(parent):
            shutil.rmtree(parent, ignore_errors=True)
