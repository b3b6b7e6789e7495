"""RecordAccumulator: Kafka's producer batching, applied to Delta commits from micro-batches.

Appending each micro-batch to a Delta table writes small files every trigger.  Here a
**destination** ``(table, partition)`` is drained when its staged bytes reach ``batch.size``,
when its oldest row has waited ``linger.ms``, on flush, or when ``buffer.memory`` is exceeded
(``ready``).  The Spark tasks stage the rows; ``record`` writes the batch's staged manifest
and advances ``staged_through``; ``drain`` commits each table's ready rows in **one commit**
carrying an app transaction ``(app_id, version)``, then deletes the staged files.

Exactly once, across crashes: the version of a drain is ``3 * batch_id + phase`` (0 inside
the micro-batch, 1 for a linger drain after it, 2 for the flush on close), so versions only
grow.  A drain first writes a manifest of the staged files it covers; recovery deletes the
staged files of a manifest whose version the table already recorded, and otherwise leaves
them staged.  A drain whose version a table already recorded skips that table, and a
replayed micro-batch is not staged twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..contract import TABLES
from ..storage import Storage, join, listing, read_bytes, remove, write_whole
from .sender import ADDS, ADDS_DDL, DataFileTask, TaskRunner, in_process, write_data_files
from .staging import STAGED, StagedFile, absolute_uri, stage_rows, staged_name

Clock = Callable[[], float]  # seconds, like time.time
#: for crash tests only: called with the name of each fault point the accumulator passes
FaultHook = Callable[[str], None]
#: where a crash matters: after a batch's staged files are written (before its manifest),
#: before ``staged_through`` moves, after a drain manifest is written (before data files),
#: after the data files are written (before the commit), after a commit (before clean-up)
FAULT_POINTS = ("staging", "staged", "manifest", "written", "committed")


@dataclass(frozen=True)
class Destination:
    """Rows staged for one (table, partition)."""

    table: str
    partition: str
    files: tuple[str, ...]  # relative to the staging directory
    nbytes: int
    rows: int
    oldest_ms: int  # when its oldest staged row was staged (clock ms)


class TableWriter(Protocol):
    """Commits rows to one table with an idempotency token (Delta's app transactions).

    A writer may also offer ``commit_files`` (executors write the data files) or
    ``commit_staged`` (its engine reads the staged files); otherwise the drain reads the
    staged rows in the driver and calls ``commit``.
    """

    def committed_version(self, table: str, app_id: str) -> int | None:
        """The last version recorded for ``app_id`` in ``table`` (None if never)."""

    def commit(self, table: str, rows: pa.Table, *, app_id: str, version: int, target_file_size: int) -> None:
        """Append ``rows`` to ``table`` in one commit that records ``(app_id, version)``."""


_STAGED_THROUGH = "staged_through"
_STAGED_DIR = "_staged"  # a manifest per micro-batch: the files its tasks staged
_DRAIN = "drain-{version:020d}.json"


class RecordAccumulator:
    """Durable per-destination batching in front of the Delta tables.

    Args:
        staging_dir: where staged rows live between micro-batches (next to the checkpoint);
            a path or a URI every executor reaches.
        app_id: identifies this query's writes in every table's app transactions.
        batch_size: Parquet bytes per destination that make it ready (``accumulator.batch.size``).
        linger_ms: longest a staged row waits (``accumulator.linger.ms``).
        buffer_memory: bytes staged in all destinations before forced drains.
        clock: seconds since the epoch; ``time.time`` by default.
        storage: the ``storage.*`` settings for a URI staging directory (the environment's
            when None).
        fault_hook: for crash tests only: called with each of ``FAULT_POINTS`` as the
            accumulator passes it.

    Example:

    >>> import tempfile, pyarrow as pa
    >>> acc = RecordAccumulator(tempfile.mkdtemp(), app_id="q1", batch_size=1 << 20, linger_ms=60_000,
    ...                         buffer_memory=1 << 24, clock=lambda: 0.0)
    >>> acc.append(0, "outcomes", "2026-01-01", pa.table({"op_id": ["a", "b"]}))
    >>> acc.mark_staged(0)
    >>> [d.rows for d in acc.destinations()], acc.ready()
    ([2], [])
    """

    IN_BATCH, LINGER, CLOSE = 0, 1, 2

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
        self.staging_dir = absolute_uri(staging_dir)  # the executors write there too
        self.app_id = app_id
        self.batch_size = int(batch_size)
        self.linger_ms = int(linger_ms)
        self.buffer_memory = int(buffer_memory)
        self.clock = clock
        self.storage = storage or Storage()
        self.fault_hook = fault_hook
        self._fs, self._root = self.storage.filesystem(staging_dir)
        self._manifests: dict[int, dict] = {}  # staged manifests read so far, by batch id
        self._appended: dict[int, dict[tuple[str, str], pa.Table]] = {}  # append()ed, not yet mark_staged()
        self._swept = False

    def __getstate__(self) -> dict:  # Spark Connect pickles the sink: filesystems are rebuilt
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs", "_root")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fs, self._root = self.storage.filesystem(self.staging_dir)

    def _fault_point(self, name: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(name)

    # -- staging: the driver's bookkeeping -------------------------------------------------------

    @property
    def staged_through(self) -> int:
        """The last micro-batch whose rows are fully staged (-1 if none)."""
        try:
            return int(read_bytes(self._fs, f"{self._root}/{_STAGED_THROUGH}").decode().strip() or -1)
        except FileNotFoundError:
            return -1

    def record(self, batch_id: int, staged: pa.Table) -> None:
        """Record micro-batch ``batch_id`` as staged: its files (``staging.STAGED`` rows); a
        replay (at or below ``staged_through``) is ignored."""
        self._fault_point("staging")
        if batch_id <= self.staged_through:
            return
        files = staged.filter(pc.is_valid(staged.column("table"))).select(
            ["table", "partition", "name", "bytes", "rows"]
        )
        manifest = {"batch_id": batch_id, "staged_ms": int(self.clock() * 1000), "files": files.to_pylist()}
        body = json.dumps(manifest).encode()
        write_whole(self._fs, self._manifest_path(batch_id), lambda f: f.write(body))
        self._manifests[batch_id] = manifest
        self._sweep(batch_id)  # failed task attempts, a crashed run's files
        self._fault_point("staged")
        write_whole(self._fs, f"{self._root}/{_STAGED_THROUGH}", lambda f: f.write(str(batch_id).encode()))

    def append(self, batch_id: int, table: str, partition: str, rows: pa.Table) -> None:
        """Stage ``rows`` for ``(table, partition)`` from this process; ``mark_staged`` records
        the batch.  A destination appended twice for one batch keeps the last rows."""
        if batch_id <= self.staged_through or rows.num_rows == 0:
            return
        self._appended.setdefault(batch_id, {})[(table, partition)] = rows

    def mark_staged(self, batch_id: int) -> None:
        """Stage what ``append`` gathered for ``batch_id`` and record the batch."""
        staged = []
        for (table, partition), rows in self._appended.pop(batch_id, {}).items():
            name = staged_name(table, partition, batch_id, 0)
            out = StagedFile(self._fs, f"{self._root}/{name}", name, write=True)
            out.write(rows)
            staged.append(out.close())
        self.record(batch_id, pa.Table.from_pylist(staged, schema=STAGED))

    def stage_rows(self, rows: pa.Table, batch_id: int, now: Any) -> pa.Table:
        """Stage operator rows from this process (``staging.stage_rows``); return ``STAGED``."""
        return stage_rows(
            rows,
            batch_id=batch_id,
            now=now,
            staging_dir=self.staging_dir,
            storage=self.storage,
            write=batch_id > self.staged_through,
        )

    def destinations(self) -> list[Destination]:
        """Every destination with staged rows: recorded files that are not drained yet."""
        present = self._present()
        by_destination: dict[tuple[str, str], list[tuple[dict, int]]] = {}
        for manifest in self._recorded(self.staged_through):
            for entry in manifest["files"]:
                if entry["name"] in present:
                    key = (entry["table"], entry["partition"])
                    by_destination.setdefault(key, []).append((entry, manifest["staged_ms"]))
        return [
            Destination(
                table=table,
                partition=partition,
                files=tuple(e["name"] for e, _ in entries),
                nbytes=sum(e["bytes"] for e, _ in entries),
                rows=sum(e["rows"] for e, _ in entries),
                oldest_ms=min(ms for _, ms in entries),
            )
            for (table, partition), entries in sorted(by_destination.items())
        ]

    def staged_files(self, after: int, tables: Sequence[str]) -> list[tuple[int, list[tuple[str, str]]]]:
        """Each recorded micro-batch after ``after`` with its staged ``(table, URI)`` files of
        ``tables``: what the output topic reads."""
        present = self._present()
        wanted = set(tables)
        out = []
        for manifest in sorted(self._recorded(self.staged_through), key=lambda m: m["batch_id"]):
            if manifest["batch_id"] > after:
                files = [
                    (e["table"], join(self.staging_dir, e["name"]))
                    for e in manifest["files"]
                    if e["table"] in wanted and e["name"] in present
                ]
                out.append((manifest["batch_id"], files))
        return out

    @property
    def buffered_bytes(self) -> int:
        return sum(d.nbytes for d in self.destinations())

    # -- Kafka's ready() -----------------------------------------------------------------------

    def ready(self, *, flush: bool = False, until_ms: int | None = None) -> list[tuple[Destination, str]]:
        """Destinations to drain now, each with why: full, lingered, flush or memory.
        ``until_ms``: no row can be staged before then, so a destination whose linger ends
        first counts as lingered now."""
        now_ms = max(int(self.clock() * 1000), until_ms or 0)
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

    # -- the sender: drain, with crash recovery --------------------------------------------------

    def drain(
        self,
        batch_id: int,
        writer: TableWriter,
        *,
        phase: int = IN_BATCH,
        tasks: TaskRunner = in_process,
        until_ms: int | None = None,
    ) -> list[dict]:
        """Commit every ready destination (one commit per table); return what was written.
        ``tasks`` runs the sender's tasks (in this process by default); ``until_ms``: when
        the next rows can come at the earliest (``ready``)."""
        self.recover(writer)
        version = 3 * int(batch_id) + phase
        by_table: dict[str, list[tuple[Destination, str]]] = {}
        for d, why in self.ready(flush=phase == self.CLOSE, until_ms=until_ms):
            by_table.setdefault(d.table, []).append((d, why))
        for table in list(by_table):
            done = writer.committed_version(table, self.app_id)
            if done is not None and done >= version:
                del by_table[table]  # a replayed micro-batch already drained this table
        if not by_table:
            return []
        manifest = f"{self._root}/{_DRAIN.format(version=version)}"
        covered = {t: [f for d, _ in items for f in d.files] for t, items in by_table.items()}
        body = {"version": version, "tables": covered}
        write_whole(self._fs, manifest, lambda f: f.write(json.dumps(body).encode()))
        self._fault_point("manifest")
        sizes = self._send(writer, by_table, version, tasks)
        self._drained([f for files in body["tables"].values() for f in files])
        remove(self._fs, [manifest])
        now_ms = int(self.clock() * 1000)
        return [
            {
                "table": table,
                "version": version,
                "partitions": [d.partition for d, _ in items],
                "reasons": sorted({why for _, why in items}),
                "rows": sum(d.rows for d, _ in items),
                "bytes": sizes[table][0],
                "files": sizes[table][1],
                "waited_ms": now_ms - min(d.oldest_ms for d, _ in items),
            }
            for table, items in sorted(by_table.items())
        ]

    def flush(self, batch_id: int, writer: TableWriter, *, tasks: TaskRunner = in_process) -> list[dict]:
        """Drain everything (Kafka's ``flush()``/``close()``), e.g. when the query stops."""
        return self.drain(batch_id, writer, phase=self.CLOSE, tasks=tasks)

    def _send(
        self, writer: Any, by_table: dict[str, list[tuple[Destination, str]]], version: int, tasks: TaskRunner
    ) -> dict[str, tuple[int, int]]:
        """Write and commit each table's ready rows; return (bytes, files) per table."""
        if hasattr(writer, "commit_files"):
            return self._send_data_files(writer, by_table, version, tasks)
        return self._send_staged(writer, by_table, version)

    def _send_data_files(
        self, writer: Any, by_table: dict[str, list[tuple[Destination, str]]], version: int, tasks: TaskRunner
    ) -> dict[str, tuple[int, int]]:
        """The executors write the data files (one task per destination), the driver commits them."""
        items = [
            DataFileTask(
                table=d.table,
                partition=d.partition,
                staged=d.files,
                staging_dir=self.staging_dir,
                table_uri=writer.path(d.table),
                version=version,
                app_id=self.app_id,
                target_size=self._target_size(),
                storage=writer.storage,
                rows=d.rows,
                nbytes=d.nbytes,
            )
            for items in by_table.values()
            for d, _ in items
        ]
        adds = tasks(write_data_files, items, ADDS, ADDS_DDL)
        self._fault_point("written")
        sizes = {}
        for table in sorted(by_table):
            mine = adds.filter(pc.equal(adds.column("table"), table))
            writer.commit_files(table, mine, app_id=self.app_id, version=version)
            self._fault_point("committed")
            sizes[table] = (int(pc.sum(mine.column("size")).as_py() or 0), mine.num_rows)
        return sizes

    def _send_staged(
        self, writer: Any, by_table: dict[str, list[tuple[Destination, str]]], version: int
    ) -> dict[str, tuple[int, int]]:
        """A writer that reads the staged files itself (Spark's Delta), or a writer of rows."""
        sizes = {}
        for table, items in sorted(by_table.items()):
            files = [f for d, _ in items for f in d.files]
            if hasattr(writer, "commit_staged"):  # the writer's engine reads the staged files
                writer.commit_staged(
                    table,
                    [join(self.staging_dir, f) for f in files],
                    app_id=self.app_id,
                    version=version,
                    target_file_size=self._target_size(),
                )
            else:  # a writer of rows: they pass through this process
                contract = TABLES[table]  # files staged by an earlier version lack newer columns
                read = (pq.read_table(f"{self._root}/{f}", filesystem=self._fs) for f in files)
                rows = pa.concat_tables([contract.conformed(staged) for staged in read])
                writer.commit(
                    table, rows, app_id=self.app_id, version=version, target_file_size=self._target_size()
                )
            self._fault_point("committed")
            sizes[table] = (sum(d.nbytes for d, _ in items), len(files))
        return sizes

    def _target_size(self) -> int:
        """Data files of ``batch.size`` bytes, but not below 1 MiB (delta-rs's own floor)."""
        return max(self.batch_size, 1 << 20)

    def recover(self, writer: TableWriter) -> None:
        """Resolve drains and stagings interrupted by a crash (see the module docstring)."""
        for info in sorted(listing(self._fs, self._root), key=lambda i: i.path):
            if not (info.base_name.startswith("drain-") and info.base_name.endswith(".json")):
                continue
            manifest = json.loads(read_bytes(self._fs, info.path))
            for table, files in manifest["tables"].items():
                done = writer.committed_version(table, self.app_id)
                if done is not None and done >= manifest["version"]:
                    self._drained(files)  # committed; only the clean-up was lost
            remove(self._fs, [info.path])  # else never committed: the files are still staged
        if not self._swept:
            self._sweep(self.staged_through)
            self._swept = True

    # -- manifests and files ----------------------------------------------------------------------

    def _manifest_path(self, batch_id: int) -> str:
        return f"{self._root}/{_STAGED_DIR}/{batch_id:020d}.json"

    def _recorded(self, through: int) -> list[dict]:
        """The staged manifests of batches up to ``through`` (read once, then remembered)."""
        out = []
        for info in listing(self._fs, f"{self._root}/{_STAGED_DIR}"):
            if not info.base_name.endswith(".json"):
                continue
            batch_id = int(info.base_name[: -len(".json")])
            if batch_id > through:
                continue
            if batch_id not in self._manifests:
                self._manifests[batch_id] = json.loads(read_bytes(self._fs, info.path))
            out.append(self._manifests[batch_id])
        return out

    def _present(self) -> set[str]:
        """The staged files there are, relative to the staging directory."""
        start = len(self._root) + 1
        return {
            i.path[start:]
            for i in listing(self._fs, self._root, recursive=True)
            if i.base_name.endswith(".parquet")
        }

    def _sweep(self, through: int) -> None:
        """Delete what no manifest up to ``through`` names: failed attempts, crashed stagings."""
        for info in listing(self._fs, f"{self._root}/{_STAGED_DIR}"):
            if info.base_name.endswith(".json") and int(info.base_name[: -len(".json")]) > through:
                remove(self._fs, [info.path])
                self._manifests.pop(int(info.base_name[: -len(".json")]), None)
        named = {e["name"] for m in self._recorded(through) for e in m["files"]}
        remove(self._fs, [f"{self._root}/{f}" for f in self._present() - named], prune=True)

    def _drained(self, files: list[str]) -> None:
        """Delete drained staged files, then the manifests with nothing left staged."""
        remove(self._fs, [f"{self._root}/{f}" for f in files], prune=True)
        present = self._present()
        for manifest in self._recorded(self.staged_through):
            if not any(e["name"] in present for e in manifest["files"]):
                remove(self._fs, [self._manifest_path(manifest["batch_id"])])
                self._manifests.pop(manifest["batch_id"], None)
