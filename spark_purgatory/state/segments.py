"""Big shard state kept out of Spark's state store: immutable segment files plus a small delta.

A shard's ``Purgatory`` grows with its pending operations.  Stored whole in the group state,
every micro-batch moves all of it through the state store, the JVM and Arrow, both ways (at
500k pending per shard: a 75 MB value, ~7 s of a 9.6 s micro-batch).  With a
``SegmentStore`` (``purgatory.state.path``) the group state holds only what changed since the
shard's last *segment*: the operations added since (the tail), the handles resolved since
(the dead), the dedup rows added since, the small tables (matches, buffered events, key
progress) and the list of segment files it extends.  Segments are immutable Arrow IPC files:
one *base* (every big table) and *delta* segments (tails and deads), LSM-style:

* when the value's delta passes ``purgatory.state.segment.rows`` it is written out as a delta
  segment, so the value stays small;
* when the delta segments together hold half as many rows as the base, one new base replaces
  them all (the rewrite is amortised over many micro-batches).

A shard below ``purgatory.state.segment.rows`` rows keeps everything in the value.

**Immutable files, versioned pointers.**  A segment is never modified; a state version names
the segments it extends, so a restart from any retained checkpoint version finds them.  A
replaced segment is deleted ``purgatory.state.retain.versions`` saves of its shard later (each
save is one micro-batch, so at least that many batches later; keep it at or above
``spark.sql.streaming.minBatchesToRetain``, Spark's default 100).  Files written by a task
attempt that then failed are named by no committed version and are never read; they are
left behind (one per failed attempt at most, removed with the checkpoint).

**A cache in the Python worker.**  Spark reuses Python workers between micro-batches.  After a
shard saves its state it *parks* its live ``Purgatory`` in the worker, tagged with the random
token the saved version also carries (and each version lists the tokens of the versions it
descends from).  The next call for that shard in this worker:

* finds the same token: takes the object back, nothing to load;
* finds an ancestor (another worker ran the shard since): applies only what changed since,
  the delta segments written in between and the value's delta;
* otherwise (a sibling from a failed attempt, another shard, nothing parked): rebuilds from
  the segments and the value.

A parked object is taken out on use, so a failed attempt leaves nothing half-changed behind:
the cache changes the speed, never the result.

The path must be reachable from every executor, like the checkpoint: a local or FUSE path
(``/dbfs/...``, ``/Volumes/...``) or a URI pyarrow's filesystems understand (``s3://``,
``gs://``, ``abfs://``, ``hdfs://``).  The job puts it next to the checkpoint by default.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from collections import OrderedDict
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["SegmentStore", "pack_parts", "unpack_parts"]


def pack_parts(parts: dict[str, bytes], meta: dict[str, str]) -> bytes:
    """Named binary parts and string metadata as one Arrow IPC stream."""
    table = pa.table({"part": list(parts), "data": pa.array(list(parts.values()), pa.binary())})
    table = table.replace_schema_metadata(meta)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def unpack_parts(data: bytes | pa.Buffer) -> tuple[dict[str, bytes], dict[str, str]]:
    """Inverse of ``pack_parts``."""
    table = pa.ipc.open_stream(data).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    column = table.column("data")
    parts = {name: column[i].as_buffer() for i, name in enumerate(table.column("part").to_pylist())}
    return parts, meta  # type: ignore[return-value]


def _pyarrow_location(root: str) -> str:
    """Hadoop-style names as pyarrow knows them: ``s3a://`` is ``s3://``, ``dbfs:/x`` is the
    FUSE path ``/dbfs/x``, ``file:/x`` is ``/x``.

    >>> _pyarrow_location("s3a://bucket/chk"), _pyarrow_location("dbfs:/chk"), _pyarrow_location("file:///t")
    ('s3://bucket/chk', '/dbfs/chk', '/t')
    """
    for hadoop in ("s3a://", "s3n://"):
        if root.startswith(hadoop):
            return "s3://" + root[len(hadoop) :]
    if root.startswith("dbfs:/"):
        return "/dbfs/" + root[len("dbfs:/") :].lstrip("/")
    if root.startswith("file:"):
        return "/" + root[len("file:") :].lstrip("/")
    return root


class SegmentStore:
    """Where shards keep their base segments, and the worker's cache of live shards.

    Args:
        root: directory (or filesystem URI) for the segment files.
        segment_rows: delta rows kept in the group state before a new base is written;
            a shard whose state has fewer rows than this keeps everything in the state.
        retain_versions: saves of a shard after which a superseded base may be deleted.

    Example::

        store = SegmentStore("/chk/purgatory-state", segment_rows=100_000)
        blob = purgatory.to_bytes(store)            # small: a pointer and a delta
        again = Purgatory.from_bytes(blob, config, store)
    """

    #: shards parked per worker process (one entry per shard lineage, the newest version)
    cache_entries = 64
    _cache: OrderedDict[str, tuple[str, Any]] = OrderedDict()
    _cache_lock = threading.Lock()

    def __init__(self, root: str, *, segment_rows: int = 100_000, retain_versions: int = 100) -> None:
        self.root = root
        self.segment_rows = int(segment_rows)
        self.retain_versions = int(retain_versions)
        location = _pyarrow_location(root)
        if "://" in location:
            self._fs, self._dir = pafs.FileSystem.from_uri(location)
        else:
            self._fs, self._dir = pafs.LocalFileSystem(), os.path.abspath(location)
        self._made = False

    def __getstate__(self) -> dict:  # shipped to executors inside the shard function
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs", "_made")}

    def __setstate__(self, state: dict) -> None:
        self.__init__(
            state["root"], segment_rows=state["segment_rows"], retain_versions=state["retain_versions"]
        )

    def write(self, parts: dict[str, bytes], meta: dict[str, str]) -> str:
        """Write a new immutable segment; returns its name (relative to the root)."""
        if not self._made:
            self._fs.create_dir(self._dir, recursive=True)
            self._made = True
        name = f"base-{uuid.uuid4().hex}.arrow"
        with self._fs.open_output_stream(f"{self._dir}/{name}") as out:
            out.write(pack_parts(parts, meta))
        return name

    def read(self, name: str) -> tuple[dict[str, bytes], dict[str, str]]:
        with self._fs.open_input_file(f"{self._dir}/{name}") as f:
            return unpack_parts(f.read_buffer())

    def delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self._fs.delete_file(f"{self._dir}/{name}")
            except (FileNotFoundError, OSError):  # already gone (a replayed batch deleted it)
                pass

    def segments(self) -> list[str]:
        """Names of the segment files present (for tests and housekeeping)."""
        try:
            infos = self._fs.get_file_info(pafs.FileSelector(self._dir))
        except FileNotFoundError:
            return []
        return sorted(i.base_name for i in infos if i.base_name.startswith("base-"))

    # -- the worker cache --------------------------------------------------------------------

    @classmethod
    def park(cls, lineage: str, token: str, obj: Any) -> None:
        """Keep ``obj`` (the state saved with ``token``) for the next call of its shard."""
        with cls._cache_lock:
            cls._cache[lineage] = (token, obj)
            cls._cache.move_to_end(lineage)
            while len(cls._cache) > cls.cache_entries:
                cls._cache.popitem(last=False)

    @classmethod
    def claim(cls, lineage: str) -> Any | None:
        """The object parked for ``lineage``, taken out of the cache (the caller checks its version)."""
        with cls._cache_lock:
            entry = cls._cache.pop(lineage, None)
        return None if entry is None else entry[1]

    @classmethod
    def clear_cache(cls) -> None:
        with cls._cache_lock:
            cls._cache.clear()
