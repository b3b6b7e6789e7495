"""The mailbox: relay rows from the primary shards to the cross-shard group, between batches.

A primary shard's stubs hand events on to the cross-shard group (``engine.relay``).  The two
run as separate Spark tasks of one micro-batch, so the hand-off goes through files beside
the shard state (``<purgatory.state.path>/mailbox/``, any filesystem ``storage`` opens): one
file per (sender shard, micro-batch), ``<batch>-<shard>.arrow``, written by the primary in
that batch (``post``).  A micro-batch is named by its timestamp (``batchTimestampMs``: the
same in all its tasks and on a replay, larger in each later micro-batch; ``operator``
explains why not its id); below, "batch N" is the micro-batch so named.  The cross-shard
group, called in batch N, first reads every file of a batch below N that it has not received
yet (``collect``, which names each row's batch and sender: a notice names its event by
both), applies the relayed rows, and only then moves its wheel to the watermark.

**Why expiry stays correct.**  A relayed pair (e, o) is written in the batch M where the
later of the two arrived: e (then ``W_M <= e.ts``: e was not late) or o's stub (then
``W_M <= o.ts``); a floor, in the batch of o's stub.  An event counts for o only if
``e.ts < o.deadline`` (and ``o.ts <= e.ts`` unless o is ``offset``), so ``W_M < o.deadline``
for every pair, and ``W_M <= o.deadline`` for a floor.  o expires in the first call of the
cross-shard group whose watermark ``W_N >= o.deadline``: for a pair ``W_M < W_N``, so
M < N and the pair was collected, before the wheel moved, in that very call or earlier.
For a floor M = N is possible (timeout 0, the operation arriving at the watermark, due on
arrival): the cross-shard group holds an operation due by its call's watermark on arrival
until its next call (due by the watermark, not by its wheel, which lags in a first call), and
its metrics row's ``relayed`` counts it, so the driver asks for that call (``handoff.wake``).

**Exactly once.**  ``collect`` reads the files of batches ``(after, before)``; the caller
keeps ``after`` (the last batch received, ``Purgatory.relays_through``) in the group state,
which Spark commits with the batch.  A replayed batch starts from the state before it, so it
collects the same files again and applies them once; a replayed primary rewrites its file
with the same rows (same state, same input).  The cross-shard group's record of relayed
pairs awaiting their notice (``engine.relay``) is in that state too, so it moves with
``after``: a replay answers the same notices the same way.  ``clean`` therefore deletes only files
received in an *earlier* call than the current one: the current call's may be replayed.

**Being called.**  The cross-shard group is called when it has input or when its event-time
timeout fires; while it holds pending operations or awaits notices the host sets that
timeout to the current watermark, so it is called in the next micro-batch whose watermark
moves past it (no-data micro-batches must be on, as ``query.start`` requires).  When no later
micro-batch would come or move the watermark (both inputs quiet, a stalled watermark under
``min``, the end of an ``available-now`` run), the driver asks for one (``handoff.wake``): a
wake row for the cross-shard group in the next micro-batch.  With nothing pending it still
wakes when the watermark passes the deadline of an operation it completed (it keeps the
keys' resolution times until then): a stub that outlived its operation has relayed every
event it matched by then, and each such pair makes it wait for that event's notice.

Invariant: a file name is a pure function of (batch, sender), so a rewrite replaces, never
duplicates; files are deleted only after a later call received them.
"""

from __future__ import annotations

import re

import pandas as pd

from ..checkpoint_paths import StatePath
from ..engine.frames import empty
from ..engine.tables import RELAY
from ..state.codec import frame_bytes, frame_from
from ..storage import Storage, numbered, read_bytes, write_whole

__all__ = ["Mailbox"]

_NAME = re.compile(r"^(\d{15})-(\d{6})\.arrow$")


class Mailbox:
    """Relay files under ``root`` (``<purgatory.state.path>/mailbox``).

    Example::

        box = Mailbox("/chk/purgatory-state/mailbox")
        box.post(sender=3, batch_id=7, rows=result.relay)      # a primary, batch 7
        rows = box.collect(after=6, before=8)                   # the cross-shard group, batch 8
        box.clean(through=6)
    """

    def __init__(self, root: str, storage: Storage | None = None, *, columns: dict[str, str] = RELAY) -> None:
        self.root = root
        self.storage = storage or Storage()
        self.columns = columns
        self._fs, self._dir = self.storage.filesystem(root)

    @classmethod
    def beside(cls, state_path: str, storage: Storage | None = None) -> Mailbox:
        """The relay mailbox of the shard state at ``state_path``."""
        return cls(StatePath(state_path).mailbox, storage)

    def __getstate__(self) -> dict:  # shipped to executors inside the shard function
        return {"root": self.root, "storage": self.storage, "columns": self.columns}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"], state["storage"], columns=state.get("columns", RELAY))

    def post(self, sender: int, batch_id: int, rows: pd.DataFrame) -> None:
        """Write (or rewrite, on a replay) the relay of ``sender`` in ``batch_id``."""
        self._fs.create_dir(self._dir, recursive=True)
        path = f"{self._dir}/{batch_id:015d}-{sender:06d}.arrow"
        data = frame_bytes(rows[list(self.columns)].reset_index(drop=True))
        write_whole(self._fs, path, lambda out: out.write(data))  # a failed attempt leaves no half

    def collect(self, after: int, before: int) -> pd.DataFrame:
        """Every relay row of the batches strictly between ``after`` and ``before``, with
        its ``batch`` and ``sender``, in (batch, sender) order."""
        frames = []
        for batch, sender, name in self._files():
            if after < batch < before:
                data = read_bytes(self._fs, f"{self._dir}/{name}")
                frames.append(frame_from(data, self.columns).assign(batch=batch, sender=sender))
        collected = {**self.columns, "batch": "int64", "sender": "int64"}
        if not frames:
            return empty(collected)
        return pd.concat(frames, ignore_index=True).astype(collected)

    def clean(self, through: int) -> None:
        """Delete the files of batches up to ``through`` (received by an earlier call)."""
        for batch, _, name in self._files():
            if batch <= through:
                try:
                    self._fs.delete_file(f"{self._dir}/{name}")
                except (FileNotFoundError, OSError):  # gone already (a replayed call deleted it)
                    pass

    def batches(self) -> list[tuple[int, int]]:
        """(batch, sender) of the files present (for tests and housekeeping)."""
        return [(batch, sender) for batch, sender, _ in self._files()]

    def _files(self) -> list[tuple[int, int, str]]:
        return [(batch, sender, name) for (batch, sender), name in numbered(self._fs, self._dir, _NAME)]
