"""Where each file of a checkpoint is: every name the project gives under a checkpoint, its
state path and its wake directory, written once, here.

A query's checkpoint holds Spark's own logs and state, and beside them the project's small
records (the app id, the layout, the lease, the version record ...), the wake directory (a
third input of the stream) and, unless ``purgatory.state.path`` says otherwise, the state path
(the shard-state segments, the hand-off's mailbox, the registry's verdicts, the Kafka
partitions' watermarks).  ``Checkpoint`` is that tree as a value: one property per file or
directory, each saying what it is and who writes it; every module that reads or writes one
asks it instead of joining a name of its own, so a name is spelled in this module alone
(``tests/state/test_checkpoint_paths.py`` greps the package for it).

Families of numbered files are named by the one class that writes and reads them, inside the
directory named here: the wake's ``<batch>.txt`` and ``clock-<ms>.txt`` (``handoff.wake``), the
mailbox's ``<batch>-<shard>.arrow`` (``handoff.mailbox``), the watermarks'
``<batch>.json`` (``handoff.partitions``), the segment and delta files (``state.segments``,
``state.increments``), Spark's log entries (named by their micro-batch).

Example::

    chk = Checkpoint("s3a://bucket/chk")
    chk.lease                        # 's3a://bucket/chk/purgatory-running'
    chk.state.mailbox                # 's3a://bucket/chk/purgatory-state/mailbox'
    fs, files = chk.opened(Storage())
    files.layout                     # 'bucket/chk/purgatory-layout', a path inside ``fs``
    opened = chk.open_on(Storage())  # the same as one value (``fs``, ``files``, ``given``)

``start`` opens its checkpoint once, with its state path, and hands the ``OpenCheckpoint`` down;
a reader given a path opens it itself (``open_checkpoint``).

Invariant: every name here is the one earlier versions wrote: a checkpoint they left keeps
working (``tests/upgrades``); a new file takes a new name, never an old one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pyarrow.fs as pafs

from .storage import Storage, join

__all__ = ["Checkpoint", "OpenCheckpoint", "StatePath", "WakeDirectory", "base_name", "open_checkpoint"]


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
        state_path: ``purgatory.state.path``; empty: the default, ``<checkpoint>/purgatory-state``
            (``start`` puts it there unless configured).
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
        """``purgatory-id``: the Delta app id the query's commits are made under, written once
        when the checkpoint is new (``startup.app_id_of``), read by ``inspect``."""
        return join(self.path, "purgatory-id")

    @property
    def layout(self) -> str:
        """``purgatory-layout``: the shard count and the history of rescales (JSON), written
        when a rescale finishes (``state.layout.finish``), read by ``layout_of``."""
        return join(self.path, "purgatory-layout")

    @property
    def rescale_journal(self) -> str:
        """``purgatory-rescale``: the journal of a rescale under way, written by ``rescale``
        before its first change and removed by ``state.layout.finish``/``recover``."""
        return join(self.path, "purgatory-rescale")

    @property
    def lease(self) -> str:
        """``purgatory-running``: the lease of the query running on the checkpoint (host, pid,
        token, renewed), taken by ``start``, renewed by the handle, given back by ``stop``
        (``state.layout.RunLease``)."""
        return join(self.path, "purgatory-running")

    @property
    def pending_record(self) -> str:
        """``purgatory-pending``: every shard's pending count as of the last micro-batch,
        written by the driver after each one (``handoff.control``,
        ``state.pending_counts.PendingRecord``), read by
        a restarted query and ``status``."""
        return join(self.path, "purgatory-pending")

    @property
    def end_record(self) -> str:
        """``purgatory-ended``: the record that the input ended (its micro-batch and time),
        written once the run that applied the end committed (``handoff.end_of_input``);
        ``start`` refuses a checkpoint that has it."""
        return join(self.path, "purgatory-ended")

    @property
    def clock_record(self) -> str:
        """``purgatory-clock``: how the running query's clock goes (its lag, from when it
        follows the wall clock), written by the reaper when that changes, read by the
        countdowns of ``pending``/``at-risk``/``explain`` (``handoff.clock_record``)."""
        return join(self.path, "purgatory-clock")

    @property
    def version_record(self) -> str:
        """``purgatory-version``: the spark-purgatory that last started on the checkpoint and
        the formats it holds, written by ``start`` and ``upgrade`` (``state.versions``)."""
        return join(self.path, "purgatory-version")

    @property
    def upgrade_journal(self) -> str:
        """``purgatory-upgrade``: the journal of an upgrade under way, written and removed by
        ``upgrade``; ``start`` refuses while it is there (``state.versions``)."""
        return join(self.path, "purgatory-upgrade")

    @property
    def wake(self) -> str:
        """``purgatory-wake``: the wake directory, the stream's third input (a text file
        source): the driver's wake and end files, the reaper's clock lines (``handoff.wake``;
        its fixed names: ``WakeDirectory``)."""
        return join(self.path, "purgatory-wake")

    @property
    def wake_first(self) -> str:
        """``purgatory-wake-first``: the stream reads the wake as its first source, written
        once by the first ``start`` of a new checkpoint (``handoff.wake.wake_first``)."""
        return join(self.path, "purgatory-wake-first")

    @property
    def accumulator(self) -> str:
        """``accumulator``: where the ``RecordAccumulator`` stages rows for the output tables
        unless ``purgatory.accumulator.staging.path`` says otherwise (``start``'s default)."""
        return join(self.path, "accumulator")

    # -- Spark's own, which the project reads (and ``rescale`` writes) ---------------------

    @property
    def spark_metadata(self) -> str:
        """``metadata``: Spark's record of the query's id, written when a query first ran."""
        return join(self.path, "metadata")

    @property
    def offsets(self) -> str:
        """``offsets``: Spark's offsets log, an entry per micro-batch started (its watermark,
        its session settings such as the shuffle partitions); ``rescale`` adds one."""
        return join(self.path, "offsets")

    @property
    def commits(self) -> str:
        """``commits``: Spark's commits log, an entry per micro-batch finished; ``rescale``
        adds one (the switch to the new layout)."""
        return join(self.path, "commits")

    @property
    def spark_state(self) -> str:
        """``state``: Spark's state of the stateful operators, a directory each."""
        return join(self.path, "state")

    @property
    def operator_state(self) -> str:
        """``state/0``: the purgatory's state (its only stateful operator), a directory per
        partition; ``rescale`` writes its new versions (``spark.state_files``)."""
        return join(self.spark_state, "0")

    @property
    def state_schema(self) -> str:
        """``state/0/0/_metadata/schema``: the state schemas Spark recorded for the operator
        (partition 0), read for the group state's encoding (``spark.group_state``)."""
        return join(self.operator_state, "0", "_metadata", "schema")


@dataclass(frozen=True)
class OpenCheckpoint:
    """A checkpoint opened once: its paths as given (``given``: URIs, with its state path), the
    filesystem they are on (``fs``), the same paths inside it (``files``), and the ``storage.*``
    settings that opened it (for the state path, which may be on another store)."""

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
    """The state path (``purgatory.state.path``): the shard-state segment files at its root
    (``state.segments``) and the directories below."""

    path: str

    #: the shards' delta files, relative to the state path (``state.increments``): the group
    #: state's pointers name them so
    DELTAS: ClassVar[str] = "deltas"

    @property
    def deltas(self) -> str:
        """``deltas``: the shards' delta files, a directory per shard (``state.increments``),
        written by the shard step's saves, swept by its later saves and by ``rescale``."""
        return join(self.path, self.DELTAS)

    @property
    def mailbox(self) -> str:
        """``mailbox``: the relay files the primary shards post for the cross-shard group
        (``handoff.mailbox``); emptied by ``rescale``."""
        return join(self.path, "mailbox")

    @property
    def verdicts(self) -> str:
        """``verdicts``: the op_id registries' verdicts, a directory per home shard
        (``verdicts_for``); emptied by ``rescale``."""
        return join(self.path, "verdicts")

    def verdicts_for(self, home: int) -> str:
        """``verdicts/<home>``: the verdicts the registries post for shard ``home``, read by
        that shard alone (``handoff.shard_handoff``)."""
        return join(self.verdicts, f"{home:06d}")

    @property
    def watermarks(self) -> str:
        """``watermarks``: the Kafka inputs' watermarks the driver posts after each
        micro-batch, read by the shards of the next (``handoff.partitions``)."""
        return join(self.path, "watermarks")


@dataclass(frozen=True)
class WakeDirectory:
    """The wake directory's fixed names (``Checkpoint.wake``; ``handoff.wake``)."""

    path: str

    @property
    def end_mark(self) -> str:
        """``end.txt``: the end mark, one line ``end`` that every shard group receives,
        written by ``Wake.end`` when the input is declared ended (``handoff.end_of_input``)."""
        return join(self.path, "end.txt")

    @property
    def end_batch(self) -> str:
        """``_end-batch``: the micro-batch that applied the end of input, written once by the
        driver (a name Spark's file listing skips: ``Wake.end_batch``)."""
        return join(self.path, "_end-batch")
