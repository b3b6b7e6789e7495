"""Where each file of a checkpoint is: every name the project gives under a checkpoint, its
state path and its wake directory, written once, here.

``Checkpoint`` is that tree as a value, one property per file or directory, so a name is
spelled in this module alone.  Families of numbered files are named by the class that writes
and reads them, inside a directory named here.

Example::

    chk = Checkpoint("s3a://bucket/chk")
    chk.lease                        # 's3a://bucket/chk/purgatory-running'
    chk.state.mailbox                # 's3a://bucket/chk/purgatory-state/mailbox'
    opened = chk.open_on(Storage())  # ``fs``, ``files`` (paths inside ``fs``), ``given``

Invariant: every name here is the one earlier versions wrote; a new file takes a new name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow.fs as pafs

from .storage import Storage, join


def base_name(path: str) -> str:
    """The last part of a path given here: the file's name, as a report or a log line says it.

    >>> base_name(Checkpoint("/chk").pending_record)
    'purgatory-pending'
    """
    return path.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Checkpoint:
    """A query's checkpoint: its paths and, through ``state``, its state path's.

    Args:
        path: the checkpoint, a path or URI as the user gave it (after ``opened``: the path
            inside its filesystem).
        state_path: ``purgatory.state.path``; empty: ``<checkpoint>/purgatory-state``.
    """

    path: str
    state_path: str = ""

    def __post_init__(self) -> None:
        if not self.state_path:
            object.__setattr__(self, "state_path", join(self.path, "purgatory-state"))

    def opened(self, storage: Storage | None = None) -> tuple[pafs.FileSystem, Checkpoint]:
        """pyarrow's filesystem of the checkpoint, and this value with its paths inside that
        filesystem: for a caller that reads or writes several of its files.  The state path
        stays as it was (a URI: it may be on another store)."""
        fs, root = (storage or Storage()).filesystem(self.path)
        return fs, Checkpoint(root, self.state_path)

    def open_on(self, storage: Storage | None = None) -> OpenCheckpoint:
        """This checkpoint opened once (``opened`` as one value), to hand down."""
        storage = storage or Storage()
        fs, files = self.opened(storage)
        return OpenCheckpoint(self, fs, files, storage)

    @property
    def state(self) -> StatePath:
        """The state path's files (``StatePath``)."""
        return StatePath(self.state_path)

    # -- the project's files under the checkpoint ------------------------------------------

    @property
    def app_id(self) -> str:
        """The Delta app id the query's commits are made under."""
        return join(self.path, "purgatory-id")

    @property
    def layout(self) -> str:
        """The shard count and the history of rescales (JSON)."""
        return join(self.path, "purgatory-layout")

    @property
    def rescale_journal(self) -> str:
        """The journal of a rescale under way."""
        return join(self.path, "purgatory-rescale")

    @property
    def lease(self) -> str:
        """The lease of the query running on the checkpoint."""
        return join(self.path, "purgatory-running")

    @property
    def pending_record(self) -> str:
        """Every shard's pending count as of the last micro-batch."""
        return join(self.path, "purgatory-pending")

    @property
    def end_record(self) -> str:
        """The record that the input ended (its micro-batch and time): ``start`` refuses it."""
        return join(self.path, "purgatory-ended")

    @property
    def clock_record(self) -> str:
        """How the running query's clock goes, for the countdowns."""
        return join(self.path, "purgatory-clock")

    @property
    def version_record(self) -> str:
        """The spark-purgatory that last started on the checkpoint, and the formats it holds."""
        return join(self.path, "purgatory-version")

    @property
    def upgrade_journal(self) -> str:
        """The journal of an upgrade under way; ``start`` refuses while it is there."""
        return join(self.path, "purgatory-upgrade")

    @property
    def wake(self) -> str:
        """The wake directory, the stream's third input (a text file source)."""
        return join(self.path, "purgatory-wake")

    @property
    def wake_first(self) -> str:
        """The mark that the stream reads the wake as its first source."""
        return join(self.path, "purgatory-wake-first")

    @property
    def accumulator(self) -> str:
        """Where the ``RecordAccumulator`` stages rows unless ``accumulator.staging.path`` is set."""
        return join(self.path, "accumulator")

    # -- Spark's own, which the project reads (and ``rescale`` writes) ---------------------

    @property
    def spark_metadata(self) -> str:
        """Spark's record of the query's id, written when a query first ran."""
        return join(self.path, "metadata")

    @property
    def offsets(self) -> str:
        """Spark's offsets log, an entry per micro-batch started."""
        return join(self.path, "offsets")

    @property
    def commits(self) -> str:
        """Spark's commits log, an entry per micro-batch finished."""
        return join(self.path, "commits")

    @property
    def spark_state(self) -> str:
        """Spark's state of the stateful operators, a directory each."""
        return join(self.path, "state")

    @property
    def operator_state(self) -> str:
        """The purgatory's state (its only stateful operator), a directory per partition."""
        return join(self.spark_state, "0")

    @property
    def state_schema(self) -> str:
        """The state schemas Spark recorded for the operator."""
        return join(self.operator_state, "0", "_metadata", "schema")


@dataclass(frozen=True)
class OpenCheckpoint:
    """A checkpoint opened once: its paths as given (``given``), the filesystem they are on
    (``fs``), the same paths inside it (``files``), and the settings that opened it (for the
    state path, which may be on another store)."""

    given: Checkpoint
    fs: pafs.FileSystem
    files: Checkpoint
    storage: Storage

    @property
    def path(self) -> str:
        """The checkpoint as the user gave it (what Spark's ``checkpointLocation`` gets)."""
        return self.given.path


def open_checkpoint(
    checkpoint: str | OpenCheckpoint, storage: Storage | None = None, state_path: str = ""
) -> OpenCheckpoint:
    """``checkpoint`` as an ``OpenCheckpoint``: as it is when opened already (then ``storage``
    and its state path are its own), else opened with ``state_path`` (empty: the default)."""
    if isinstance(checkpoint, OpenCheckpoint):
        return checkpoint
    return Checkpoint(checkpoint, state_path).open_on(storage)


@dataclass(frozen=True)
class StatePath:
    """The state path: the shard-state segment files at its root and the directories below."""

    path: str

    #: the shards' delta files, relative to the state path (the group state's pointers)
    DELTAS: ClassVar[str] = "deltas"

    @property
    def deltas(self) -> str:
        """The shards' delta files, a directory per shard."""
        return join(self.path, self.DELTAS)

    @property
    def mailbox(self) -> str:
        """The relay files the primary shards post for the cross-shard group."""
        return join(self.path, "mailbox")

    @property
    def verdicts(self) -> str:
        """The op_id registries' verdicts, a directory per home shard."""
        return join(self.path, "verdicts")

    def verdicts_for(self, home: int) -> str:
        """The verdicts the registries post for shard ``home``."""
        return join(self.verdicts, f"{home:06d}")

    @property
    def watermarks(self) -> str:
        """The Kafka inputs' watermarks the driver posts after each micro-batch, for the next."""
        return join(self.path, "watermarks")


@dataclass(frozen=True)
class WakeDirectory:
    """The wake directory's fixed names."""

    path: str

    @property
    def end_mark(self) -> str:
        """The end mark, one line ``end`` that every shard group receives."""
        return join(self.path, "end.txt")

    @property
    def end_batch(self) -> str:
        """The micro-batch that applied the end of input (a name Spark's file listing skips)."""
        return join(self.path, "_end-batch")
