"""Segment files: immutable Arrow IPC files where shards keep the bulk of their state.

A ``SegmentStore`` is a directory every executor reaches: ``base-<uuid>.arrow`` holds every
big table of a shard, ``change-<uuid>.arrow`` what changed since the segment before it, and
``deltas/`` each shard's delta files.

Invariants: a name is never reused and a file never rewritten; a file is deleted only by
the shard whose lineage wrote it, once no retained version names it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.fs as pafs

from ..checkpoint_paths import StatePath
from ..storage import Storage, listing
from .codec import Encoded, unpack_parts, write_parts

if TYPE_CHECKING:
    from ..config import PurgatoryConfig

#: what a segment file holds: every big table, or a change since the segment before it
SegmentKind = Literal["base", "change"]


class SegmentStore:
    """Where shards keep their segment files.

    Args:
        root: directory (or filesystem URI) for the segment files.
        segment_rows: rows of change a chain of delta files holds before they go to a
            segment file; a shard with fewer rows has no segment.
        retain_versions: saves of a shard after which a replaced segment file is deleted.
        storage: the ``storage.*`` settings; the environment's when None.

    Example::

        store = SegmentStore("/chk/purgatory-state", segment_rows=100_000)
        blob = save_state(purgatory, store)          # a pointer to its delta file
        again = load_state(blob, config, store)
    """

    def __init__(
        self,
        root: str,
        *,
        segment_rows: int = 100_000,
        retain_versions: int = 100,
        storage: Storage | None = None,
    ) -> None:
        self.root = root
        self.segment_rows = int(segment_rows)
        self.retain_versions = int(retain_versions)
        self.storage = storage or Storage()
        self._fs, self._dir = self.storage.filesystem(root)
        self._made = False
        self._dirs: set[str] = set()

    @classmethod
    def of(cls, config: PurgatoryConfig) -> SegmentStore | None:
        """The store ``purgatory.state.path`` asks for, if any."""
        if not config.state_path:
            return None
        return cls(
            config.state_path,
            segment_rows=config.state_segment_rows,
            retain_versions=config.state_retain_versions,
            storage=Storage.of(config),
        )

    def __getstate__(self) -> dict:  # shipped to executors inside the shard function
        return {k: v for k, v in self.__dict__.items() if k not in ("_fs", "_made", "_dirs")}

    def __setstate__(self, state: dict) -> None:
        self.__init__(
            state["root"],
            segment_rows=state["segment_rows"],
            retain_versions=state["retain_versions"],
            storage=state["storage"],
        )

    def write(self, kind: SegmentKind, parts: dict[str, Encoded], meta: dict[str, str]) -> str:
        """Write a new immutable segment file; returns its name (relative to the root)."""
        if not self._made:
            self._fs.create_dir(self._dir, recursive=True)
            self._made = True
        name = f"{kind}-{uuid.uuid4().hex}.arrow"
        with self._fs.open_output_stream(f"{self._dir}/{name}") as out:
            write_parts(out, parts, meta)
        return name

    def write_named(self, name: str, parts: dict[str, Encoded], meta: dict[str, str]) -> int:
        """Write a file of named parts under a name the caller made unique; the bytes written."""
        directory = f"{self._dir}/{name.rsplit('/', 1)[0]}"
        if directory not in self._dirs:
            self._fs.create_dir(directory, recursive=True)
            self._dirs.add(directory)
        with self._fs.open_output_stream(f"{self._dir}/{name}") as out:
            return write_parts(out, parts, meta)

    def names_under(self, directory: str) -> list[str]:
        """The files in a subdirectory of the root, named relative to the root."""
        return [f"{directory}/{i.base_name}" for i in listing(self._fs, f"{self._dir}/{directory}")]

    def local_directory(self, directory: str) -> str | None:
        """A subdirectory of the root as a local path; None when the store is not local."""
        if not isinstance(self._fs, pafs.LocalFileSystem):
            return None
        return f"{self._dir}/{directory}"

    def read(self, name: str) -> tuple[dict[str, pa.Buffer], dict[str, str]]:
        with self._fs.open_input_file(f"{self._dir}/{name}") as f:
            return unpack_parts(f.read_buffer())

    def delete(self, names: list[str]) -> None:
        for name in names:
            try:
                self._fs.delete_file(f"{self._dir}/{name}")
            except (FileNotFoundError, OSError):  # already gone (a replayed batch deleted it)
                pass

    def delta_files(self) -> list[str]:
        """Names of every shard's delta files present."""
        infos = listing(self._fs, StatePath(self._dir).deltas, recursive=True)
        return sorted(i.path[len(self._dir) + 1 :] for i in infos)

    def segments(self) -> list[str]:
        """Names of the segment files present (for tests and housekeeping)."""
        names = (i.base_name for i in listing(self._fs, self._dir))
        return sorted(n for n in names if n.startswith(("base-", "change-")))
