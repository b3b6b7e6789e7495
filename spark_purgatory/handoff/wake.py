"""The wake: one more micro-batch after one whose shards posted for another shard.

A receiver gets micro-batch N's posts in its next call, and Spark calls it only when it has
rows or the watermark passes its timeout; after N the inputs may go quiet or an
``available-now`` run may end.  So the driver asks for the next micro-batch:

* once the sink has written N's output and the shards' metrics say N relayed
  (``contract.RELAYED``), the driver writes ``<N>.txt`` into the wake directory, which the
  operator reads as a third input and routes to the receivers only;
* ``available-now`` fixes a run's files when it starts, so the driver keeps the first
  micro-batch whose posts no later call received (``owed``), and
  ``PurgatoryQuery.await_termination`` starts one more run.

Writing N's file deletes those of batches up to N - 2.  A replay writes the same name again,
which the file source has seen, so it wakes nothing twice.  The end mark and the clock lines
ride the same directory.

Invariant: wake rows never reach the engine; they only make Spark call a shard group.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow.fs as pafs

from ..checkpoint_paths import Checkpoint, OpenCheckpoint, WakeDirectory, open_checkpoint
from ..contract import MAX_TS_MS
from ..storage import Storage, listing, numbered, read_bytes, remove, write_once, write_whole

_NAME = re.compile(r"^(\d{12})\.txt$")
#: a clock line's file, named by the time it was posted (``handoff.reaper``)
_CLOCK_NAME = re.compile(r"^clock-(\d{13})\.txt$")
#: the end mark's one line (its file: ``WakeDirectory.end_mark``)
END_LINE = "end"


def is_end_watermark(watermark_ms: int | None) -> bool:
    """Has a shard reported (or kept) the end watermark?  Spark's own watermark never gets
    there: event times at or after ``MAX_TS_MS`` are rejected at parse."""
    return watermark_ms is not None and int(watermark_ms) >= MAX_TS_MS


def wake_first(checkpoint: str | OpenCheckpoint, storage: Storage | None = None) -> bool:
    """Does the query on ``checkpoint`` read the wake as its first source?  Yes with the
    record, or with no micro-batch logged yet (the record is written then); no on one whose
    offsets were logged before the record existed."""
    chk = open_checkpoint(checkpoint, storage)
    fs, files = chk.fs, chk.files
    if fs.get_file_info(files.wake_first).is_file:
        return True
    if listing(fs, files.offsets):
        return False
    write_once(fs, files.wake_first, b"the wake directory is the stream's first source\n")
    return True


class Wake:
    """The wake directory, driver side."""

    def __init__(
        self,
        root: str,
        storage: Storage | None = None,
        *,
        cross_shard: int = -1,
        every_group: bool = False,
        relays: bool = True,
    ) -> None:
        self.root = root
        self.storage = storage or Storage()
        self.cross_shard = cross_shard  # the cross-shard group's shard number
        #: the op_id registry's verdicts go to any shard: a wake calls every group
        self.every_group = every_group
        #: the cross-shard group may be relayed to; else only verdicts are posted
        self.relays = relays or not every_group
        #: the groups not called since something was posted for them: the cross-shard group
        #: after a relay; with the registry, every group the relaying micro-batch called
        self._waiting: set[int] = set()
        #: the first micro-batch whose posts some receiver has not taken since
        self.owed: int | None = None
        #: is the wake the stream's first source (``wake_first``)?
        self.first = True
        #: the watermark of the last micro-batch that relayed
        self._relayed_at: int | None = None

    @classmethod
    def under(cls, checkpoint: str, storage: Storage | None = None, **options: Any) -> Wake:
        """The wake directory of ``checkpoint`` (``options``: ``__init__``'s)."""
        return cls(Checkpoint(checkpoint).wake, storage, **options)

    def after(self, batch_id: int, *, relayed: bool, shards: set[int], watermark: int | None = None) -> None:
        """Micro-batch ``batch_id`` ran ``shards``; ``relayed``: some posted for another
        shard, so post a wake file.  ``watermark``: the largest its shards reported (the end
        watermark names the micro-batch that applied the end of input).  What was posted is
        received once every receiver ran since, or once the watermark passed the relaying
        micro-batch's by 2 ms (the receivers' timeouts fired)."""
        if is_end_watermark(watermark):
            self._ended_in(batch_id)
        timed_out = None not in (watermark, self._relayed_at) and watermark > max(self._relayed_at, 1) + 1  # type: ignore[type-var]
        self._waiting = set() if timed_out else self._waiting - shards
        if not self._waiting:
            self.owed = None
        if relayed:
            self.post(batch_id)
            self._relayed_at = watermark
            if self.relays:
                self._waiting.add(self.cross_shard)
            if self.every_group:
                self._waiting |= shards
            if self.owed is None:
                self.owed = batch_id

    def create(self) -> None:
        """Create the directory (a file source needs it before the query starts)."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)

    def post(self, batch_id: int) -> None:
        """Ask for a micro-batch after ``batch_id``; forget files Spark has read by now."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        write_whole(fs, f"{root}/{batch_id:012d}.txt", lambda out: out.write(f"{batch_id}\n".encode()))
        remove(fs, [f"{root}/{name}" for batch, name in self._files(fs, root) if batch <= batch_id - 2])

    def post_clock(self, line: str, posted_ms: int, *, forget_before_ms: int | None = None) -> None:
        """Write a clock line as ``clock-<posted_ms>.txt`` (a new name every post: Spark's
        file source reads a path once); forget those posted before ``forget_before_ms``."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        write_whole(fs, f"{root}/clock-{posted_ms:013d}.txt", lambda out: out.write(f"{line}\n".encode()))
        if forget_before_ms is not None:
            old = [name for (posted,), name in numbered(fs, root, _CLOCK_NAME) if posted < forget_before_ms]
            remove(fs, [f"{root}/{name}" for name in old])

    def end(self) -> None:
        """Write the end mark: the next micro-batch ends every shard's input (a fixed name:
        written again after a crash, it wakes nothing twice)."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        write_whole(fs, WakeDirectory(root).end_mark, lambda out: out.write(f"{END_LINE}\n".encode()))

    def end_posted(self) -> bool:
        """Is the end mark there (declared, applied or about to be)?"""
        fs, root = self.storage.filesystem(self.root)
        return fs.get_file_info(WakeDirectory(root).end_mark).is_file

    def _ended_in(self, batch_id: int) -> None:
        """Keep the first micro-batch whose shards reported the end watermark."""
        fs, root = self.storage.filesystem(self.root)
        write_once(fs, WakeDirectory(root).end_batch, str(batch_id).encode())

    def end_batch(self) -> int | None:
        """The micro-batch that applied the end of input, once the driver has seen it."""
        fs, root = self.storage.filesystem(self.root)
        try:
            return int(read_bytes(fs, WakeDirectory(root).end_batch).decode().strip())
        except FileNotFoundError:
            return None

    def batches(self) -> list[int]:
        """The batches whose wake files are present (tests, housekeeping)."""
        fs, root = self.storage.filesystem(self.root)
        return [batch for batch, _ in self._files(fs, root)]

    @staticmethod
    def _files(fs: pafs.FileSystem, root: str) -> list[tuple[int, str]]:
        return [(batch, name) for (batch,), name in numbered(fs, root, _NAME)]
