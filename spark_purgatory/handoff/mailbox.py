"""The mailbox: relay rows from the primary shards to the cross-shard group, between batches.

A primary shard's stubs and the cross-shard group run as separate Spark tasks of one
micro-batch, so the hand-off goes through files beside the shard state, one per (sender
shard, micro-batch): ``<batch>-<shard>.arrow``, a micro-batch named by its timestamp.  The
cross-shard group, called in batch N, first reads every file of a batch below N it has not
received yet (``collect``), applies the relayed rows, and only then moves its wheel.

**Why expiry stays correct.**  A relayed pair (e, o) is written in the batch M where the
later of the two arrived, so ``W_M <= e.ts`` or ``W_M <= o.ts``.  An event counts for o only
if ``e.ts < o.deadline``, so ``W_M < o.deadline`` for every pair (``<=`` for a floor).  o
expires in the first call whose watermark ``W_N >= o.deadline``: for a pair ``W_M < W_N``, so
M < N and the pair was collected before the wheel moved.  For a floor M = N is possible: the
cross-shard group holds such an operation until its next call, which the wake asks for.

**Exactly once.**  ``collect`` reads the files of batches ``(after, before)``; the caller
keeps ``after`` in the group state, which Spark commits with the batch, so a replay collects
the same files again and applies them once.  ``clean`` deletes only files received in an
*earlier* call than the current one.

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

_NAME = re.compile(r"^(\d{15})-(\d{6})\.arrow$")


class Mailbox:
    """Relay files under ``root`` (``<purgatory.state.path>/mailbox``)."""

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
