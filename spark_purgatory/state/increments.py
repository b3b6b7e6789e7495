"""Increments: one small versioned file per save of a shard (a *delta file*, under ``deltas/``),
and the pointer that names it.  (Not Delta Lake's: that is the ``delta`` package.)

Spark's group state carries only a *pointer* (``@`` and a delta file's name); the delta file
``deltas/<shard>/<version>.<lineage>.<token>.arrow`` holds what one save changed and the
*chain*: the names of the delta files since the last segment or full delta (at most
``MAX_DELTAS``).

**Versions decide, files never do.**  A delta file's version is the micro-batch's timestamp
(outside a stream, one more than the last); its token is new at every save.  A replayed batch
loads the pointer Spark committed for the batch before and writes under new names.

**Retention.**  Every ``SWEEP_EVERY`` saves a shard deletes its files older than its newest
``retain.versions + MAX_DELTAS`` versions.

Invariant: a pointer names one file, and the chain in that file names only files of
versions at or below its own.
"""

from __future__ import annotations

from typing import NamedTuple

from ..checkpoint_paths import StatePath

#: the longest chain of delta files a load may read (Spark's HDFS state store snapshots
#: every ten deltas, ``minDeltasForSnapshot``)
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
