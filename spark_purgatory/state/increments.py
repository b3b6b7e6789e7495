"""Increments: one small versioned file per save of a shard (a *delta file*, under ``deltas/``),
and the pointer that names it.  (Not Delta Lake's: that is the ``delta`` package.)

Spark's group state carries only a *pointer* to the shard's state (``@`` and a delta file's
name, a hundred bytes, whatever the shard holds); the state itself lives in the
``SegmentStore`` beside the segment files, written by the executor that ran the shard:

* **segments** (``base-*``, ``change-*``): the bulk, immutable (``shard_state``);
* **delta files** (``deltas/<shard>/<version>.<lineage>.<token>.arrow``): what one save
  changed since the save before it (operations and watchers added, handles resolved, dedup
  rows added), the small tables and scalars whole (the buffered events and windows whole
  once every ``MAX_DELTAS`` files, as changes between: ``small_tables``), and the
  *chain*: the names of the delta files since the last segment (or since the last full
  delta, which holds every row of a shard too small for segments).  A chain is at most
  ``MAX_DELTAS`` files; the save that would make it longer (or whose chain's files after
  its first hold more than ``segment.rows`` rows) compacts it: a change segment or a new
  base, or, for a small shard, one full delta.  The new chain's first file also names the
  chain it ended and holds that save's change since it, or names the change segment that
  holds exactly that change (``layers.chain_record``): a shard live at a version of an
  earlier chain is brought forward across the compaction by changes alone.

**Versions decide, files never do.**  A delta file's version is the micro-batch's timestamp
(the same on a replay, larger in every later micro-batch) or, outside a stream, one more
than the last; its token is new at every save.  A batch replayed after a crash loads the
pointer Spark committed for the batch before (never a file a crashed attempt wrote: those
carry other tokens, and no committed pointer names them) and writes its own files under
new names.  So files are written once and never overwritten, on a local disk or an object
store alike.

**Retention.**  Every ``SWEEP_EVERY`` saves a shard lists its directory and deletes the
files older than its newest ``retain.versions + MAX_DELTAS`` versions: a shard saves at most
once per micro-batch, so the pointers of the last ``retain.versions`` micro-batches (Spark's
``minBatchesToRetain``) and their chains are among them.  Files of failed attempts and of
shard histories that ended (a shard that emptied starts a new lineage) go the same way.

Invariant: a pointer names one file, and the chain in that file names only files of
versions at or below its own.
"""

from __future__ import annotations

from typing import NamedTuple

from ..checkpoint_paths import StatePath

__all__ = [
    "MAX_DELTAS",
    "SWEEP_EVERY",
    "DeltaName",
    "delta_name",
    "directory_of",
    "parsed",
    "expired",
    "is_pointer",
    "pointer",
    "pointed",
]

#: the longest chain of delta files a load may read before the next segment (Spark's own
#: HDFS state store writes a snapshot every ten deltas, ``minDeltasForSnapshot``)
MAX_DELTAS = 10
#: saves between two sweeps of a shard's delta directory (a listing each)
SWEEP_EVERY = 10
#: what starts a pointer: never the first byte of an Arrow IPC stream (a whole value) nor a
#: base64 character (a whole value kept as text)
_POINTER = b"@"
#: the delta files' directory, relative to the state path (``checkpoint_paths.StatePath``)
DELTAS = StatePath.DELTAS


class DeltaName(NamedTuple):
    """A delta file's name and what it says: its shard's directory, version, lineage, token."""

    name: str
    version: int
    lineage: str
    token: str


def delta_name(shard: int | None, version: int, lineage: str, token: str) -> str:
    """The name (relative to the store's root) of a shard's delta file of ``version``."""
    return f"{DELTAS}/{_directory(shard)}/{version:016d}.{lineage}.{token}.arrow"


def parsed(name: str) -> DeltaName:
    version, lineage, token, _ = name.rsplit("/", 1)[1].split(".")
    return DeltaName(name, int(version), lineage, token)


def directory_of(shard: int | None) -> str:
    return f"{DELTAS}/{_directory(shard)}"


def _directory(shard: int | None) -> str:
    return "shard-any" if shard is None else f"shard-{shard}"


def is_pointer(data: bytes) -> bool:
    """Does the group state's value name a delta file (rather than hold the state itself)?"""
    return bytes(data[:1]) == _POINTER


def pointer(name: str) -> bytes:
    return _POINTER + name.encode("ascii")


def pointed(data: bytes) -> DeltaName:
    """The delta file a pointer names."""
    return parsed(bytes(data[1:]).decode("ascii"))


def expired(names: list[str], keep: int) -> list[str]:
    """Of a shard's delta files, those older than its newest ``keep`` versions.

    >>> expired([delta_name(1, v, "l", t) for v, t in ((1, "a"), (2, "b"), (2, "c"), (3, "d"))], 2)
    ['deltas/shard-1/0000000000000001.l.a.arrow']
    """
    versions = sorted({parsed(n).version for n in names}, reverse=True)
    if len(versions) <= keep:
        return []
    oldest_kept = versions[keep - 1]
    return [n for n in names if parsed(n).version < oldest_kept]
