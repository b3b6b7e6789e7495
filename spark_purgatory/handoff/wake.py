"""The wake: one more micro-batch after one whose primary shards relayed to the mailbox.

The cross-shard group receives micro-batch N's relays (``handoff.mailbox``) in its next call,
and Spark calls it only when it has input rows or the watermark moves past its timeout (the
current watermark while it waits for relays).  Neither is certain after N: both inputs may
go quiet, or the watermark may stall under ``min`` (the slower input quiet, or behind), and
an ``available-now`` run may simply end at N.  Relayed completions would then wait for
whatever input comes next.  Kafka's purgatory has no such gap because its watcher lists are
checked in place; here the hand-off crosses a micro-batch, so the driver asks for the next one:

* the driver's control plane (``handoff.control``), once the sink has written N's output,
  sees in the shards' metrics rows that N relayed (``contract.RELAYED``: in the cross-shard
  group's row, the operations due on arrival it holds for N's relays) and writes a
  one-line file ``<N>.txt`` into the wake directory (``<checkpoint>/purgatory-wake``, which
  Spark can read wherever it keeps its checkpoint), before Spark records N as done;
* the operator reads that directory as a third input (a text file source without a
  watermark, so it moves no watermark), and routes each line to the cross-shard group only
  (``routing.route_wake``): a wake row carries nothing else;
* with a processing-time trigger the next trigger finds the new file and runs micro-batch
  N+1, which calls the cross-shard group: the relayed completions are emitted one
  micro-batch later, as SPEC allows, also when the inputs have gone quiet;
* ``available-now`` fixes a run's files when it starts, so a file written during the run
  wakes the *next* run; the driver keeps the first micro-batch whose relays no later call of
  the cross-shard group received (``owed``: a call receives everything relayed before its
  micro-batch), and ``PurgatoryQuery.await_termination`` starts that next run itself when
  the run ends with something owed (one more micro-batch, which reads the wake files).
  Within a run, the group is called when it has input or the watermark moves: every group
  with something to receive (the cross-shard group awaiting relays, a shard that parked
  operations for the registry's verdicts) keeps an event-time timeout at its micro-batch's
  watermark (``operator.shard_step``), and Spark calls a group once the watermark is past
  its timeout.  So a later micro-batch whose watermark passed the relaying micro-batch's
  called every receiver (``Wake.after`` waits for 2 ms past it, a margin): nothing is owed,
  and no run is added (an ``available-now`` run whose last data micro-batch moved the
  watermark ends on such a no-data micro-batch).

Files are whole or absent (``storage.write_whole``, dot-named while written, which Spark's
listing skips).  When writing N's file the driver deletes those of batches up to N - 2: Spark
planned and ran N - 1, the only batch that could still read them, before N began.  A
replayed micro-batch writes the same name again; the file source has seen that path, so it
wakes nothing twice (and waking twice would be harmless: a wake row only calls the group).

**The wake is the stream's first source** on a checkpoint begun since the operator's clock
needed it (``wake_first``): Spark asks its sources for offsets one after the other in the
plan's order, so a clock line posted before a micro-batch's wake listing is read with every
input row written before it (``handoff.reaper`` then needs no listing margin).  Spark numbers
sources in that order and keeps their offsets by number, so a checkpoint keeps the order it
began with; one begun with the wake last (no ``purgatory-wake-first`` record, offsets logged)
keeps it, and its clock keeps the margin.

**The end of input** rides the same directory: ``Wake.end`` writes the end mark ``end.txt``,
whose line ``routing.route_wake`` sends to *every* shard group (``handoff.end_of_input``).

Invariant: wake rows never reach the engine (``shard_input.split_input`` takes operations,
events and rejected rows by role); they only make Spark call a shard group (the end mark:
with the end watermark).
"""

from __future__ import annotations

import re

import pyarrow.fs as pafs

from ..checkpoint_paths import Checkpoint, OpenCheckpoint, WakeDirectory, open_checkpoint
from ..contract import MAX_TS_MS
from ..storage import Storage, listing, numbered, read_bytes, remove, write_once, write_whole

__all__ = ["Wake", "END_LINE", "is_end_watermark", "wake_first"]

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
    """Does the query on ``checkpoint`` read the wake as its first source (module docstring)?

    Yes on a checkpoint with the record, or with no micro-batch logged yet (the record is
    written then: its first start fixes the order); no on one whose offsets were logged
    before the record existed.
    """
    chk = open_checkpoint(checkpoint, storage)
    fs, files = chk.fs, chk.files
    if fs.get_file_info(files.wake_first).is_file:
        return True
    if listing(fs, files.offsets):
        return False
    write_once(fs, files.wake_first, b"the wake directory is the stream's first source\n")
    return True


class Wake:
    """The wake directory: ``post`` after a micro-batch that relayed (``handoff.control``, driver
    side).

    Example::

        wake = Wake.under("/chk")
        wake.post(7)                 # micro-batch 7 relayed: wake the cross-shard group
        wake.batches()               # [7]
    """

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
        #: the op_id registry's verdicts go to any shard (``engine.registry``): a wake calls
        #: every group
        self.every_group = every_group
        #: the cross-shard group may be relayed to (cross-shard operations through the
        #: mailbox, ``shard_handoff.hands_off``); else only verdicts are posted
        self.relays = relays or not every_group
        #: the groups that have not been called since something was posted for them: the
        #: cross-shard group after a relay; with the registry, every group the relaying
        #: micro-batch called (the homes that claimed then: a registry answers each claim in
        #: the micro-batch it comes in, and a home parks only in a call of its own)
        self._waiting: set[int] = set()
        #: the first micro-batch (in this process) whose posts some receiver has not taken
        #: since: an ``available-now`` run ending with it set owes a run
        self.owed: int | None = None
        #: is the wake the stream's first source (``wake_first``: ``start`` asks the checkpoint)?
        self.first = True
        #: the watermark of the last micro-batch that relayed (module docstring)
        self._relayed_at: int | None = None

    @classmethod
    def under(
        cls,
        checkpoint: str,
        storage: Storage | None = None,
        *,
        cross_shard: int = -1,
        every_group: bool = False,
        relays: bool = True,
    ) -> Wake:
        root = Checkpoint(checkpoint).wake
        return cls(root, storage, cross_shard=cross_shard, every_group=every_group, relays=relays)

    def after(self, batch_id: int, *, relayed: bool, shards: set[int], watermark: int | None = None) -> None:
        """Micro-batch ``batch_id`` ran the ``shards`` given (its metrics rows); ``relayed``:
        some posted to the mailbox.  A call of a group received everything posted for it
        before its micro-batch; what this batch posted needs a later call, so post a wake
        file.  ``watermark``: the largest its shards reported; the end watermark the first
        time names the micro-batch that applied the end of input (kept: ``end_batch``).
        Received once every receiver ran since, or once the watermark passed the last
        relaying micro-batch's (the receivers' timeouts fired: module docstring; with a
        margin of 2 ms)."""
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
        """Write a clock line (``handoff.reaper.clock_line``) as ``clock-<posted_ms>.txt``
        (a new name for every post: Spark's file source reads a path once), and forget the
        clock files posted before ``forget_before_ms`` (read by committed micro-batches)."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        write_whole(fs, f"{root}/clock-{posted_ms:013d}.txt", lambda out: out.write(f"{line}\n".encode()))
        if forget_before_ms is not None:
            old = [name for (posted,), name in numbered(fs, root, _CLOCK_NAME) if posted < forget_before_ms]
            remove(fs, [f"{root}/{name}" for name in old])

    def end(self) -> None:
        """Write the end mark (``end.txt``): the next micro-batch ends every shard's input.
        Written whole, under a fixed name: writing it again after a crash wakes nothing twice
        (Spark's file source has seen the path)."""
        fs, root = self.storage.filesystem(self.root)
        fs.create_dir(root, recursive=True)
        write_whole(fs, WakeDirectory(root).end_mark, lambda out: out.write(f"{END_LINE}\n".encode()))

    def end_posted(self) -> bool:
        """Is the end mark there (declared, applied or about to be)?"""
        fs, root = self.storage.filesystem(self.root)
        return fs.get_file_info(WakeDirectory(root).end_mark).is_file

    def _ended_in(self, batch_id: int) -> None:
        """Keep the first micro-batch whose shards reported the end watermark.  The driver sees
        a micro-batch before Spark commits it, and a replay has the same id, so the file
        names the micro-batch that applied the end also across crashes."""
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
