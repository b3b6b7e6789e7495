"""Spark's HDFS-backed state store of the operator, read and written without a JVM.

``rescale`` reads every shard group's value as of the last committed micro-batch and writes
the new groups' values as the next version; Spark's own offline repartition keeps the same
keys (ours are shard labels, which change with the count).  The format:

* ``state/0/<partition>/<version>.delta`` and ``.snapshot``: a compressed stream of records
  ``[key size][key][value size][value]`` (big-endian; a value size of -1 removes the key, a
  key size of -1 ends the stream).  Version V is the newest snapshot at or below V with the
  deltas after it applied; ``write_version`` writes a snapshot.
* the compression is lz4-java's block stream (Spark's default ``lz4`` codec): blocks of
  ``LZ4Block`` magic, a token, both lengths and the XXH32 checksum (seed ``0x9747b28c``),
  then the bytes, raw or LZ4; an empty block ends it.  Blocks are written raw.
* keys and values are ``UnsafeRow``s: a null bitmap word, one 8-byte slot per field, then
  variable-length data.  The key is the group's label (an int); the value (state format 2)
  is the state struct and the timeout timestamp (-1 for none).

Invariant: what ``read_version`` returns is what Spark would load for that version; what
``write_version`` writes, Spark loads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from ..config import PurgatoryConfig
from ..shard.labels import shard_labels
from ..storage import listing, read_bytes, write_whole
from .xxhash import xxh32

_MAGIC = b"LZ4Block"
_RAW, _LZ4 = 0x10, 0x20
_LEVEL = 5  # 32 KiB blocks (lz4-java's level for Spark's default block size)
_BLOCK = 1 << (10 + _LEVEL)
_SEED = 0x9747B28C
NO_TIMEOUT = -1

#: Spark's HDFS-backed state store, the provider whose files this module reads
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
#: the session settings (kept in the offsets log) that say how the state is stored, and the
#: values this module reads: Spark's HDFS-backed store, the lz4 codec, state format 2
_KNOWN_FORMAT = {
    "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER,
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
}


class StateFormatError(ValueError):
    """A state file this module does not know (the message names it, in one line)."""


@dataclass(frozen=True)
class GroupValue:
    """A group's entry: its label, its state field (text or bytes) and its timeout."""

    label: int
    state: str | bytes | None
    timeout_ms: int = NO_TIMEOUT


# -- the store: versions of partitions -----------------------------------------------------------------


def read_version(fs: pafs.FileSystem, operator_dir: str, partition: int, version: int) -> list[GroupValue]:
    """The groups of ``partition`` at ``version`` (``state/0`` is ``operator_dir``)."""
    directory = f"{operator_dir}/{partition}"
    names = {info.base_name for info in listing(fs, directory)}
    snapshots = [v for v in _versions(names, ".snapshot") if v <= version]
    base = max(snapshots, default=0)
    rows: dict[bytes, bytes] = {}
    if base:
        for key, value in _records(_read(fs, f"{directory}/{base}.snapshot")):
            rows[key] = value  # type: ignore[assignment]
    for v in range(base + 1, version + 1):
        if f"{v}.delta" not in names:
            raise StateFormatError(
                f"state partition {directory} has no version {v} (neither delta nor snapshot)"
            )
        for key, value in _records(_read(fs, f"{directory}/{v}.delta")):
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value
    return [decode_value(key, value) for key, value in rows.items()]


def read_groups(fs: pafs.FileSystem, operator_dir: str, groups: int, version: int) -> dict[int, GroupValue]:
    """Every group's entry at ``version`` by shard number (the cross-shard group last); a
    partition no group has lived in reads as none.

    Raises:
        StateFormatError: a missing version, a file or a group label this module does not know.
    """
    labels = shard_labels(groups)
    number = {label: n for n, label in enumerate(labels)}
    found: dict[int, GroupValue] = {}
    for partition in range(groups):
        try:
            entries = read_version(fs, operator_dir, partition, version)
        except FileNotFoundError:
            entries = []  # no group has lived in this partition
        for g in entries:
            if g.label not in number:
                raise StateFormatError(
                    f"state group {g.label} is no shard label of {PurgatoryConfig.shards_in(groups)} shards: "
                    "not a layout this release knows"
                )
            found[number[g.label]] = g
    return found


def unknown_format(conf: dict[str, str]) -> list[str]:
    """The settings of a checkpoint's offsets log (``conf``) under which its state is not in
    the format this module reads, as ``key=value`` (empty: readable)."""
    return [f"{key}={conf[key]}" for key, known in _KNOWN_FORMAT.items() if conf.get(key, known) != known]


def write_version(
    fs: pafs.FileSystem, operator_dir: str, partition: int, version: int, groups: list[GroupValue]
) -> str:
    """Write ``groups`` as ``partition``'s whole state at ``version`` (a snapshot file, written
    whole); returns its path."""
    body = bytearray()
    for g in groups:
        key, value = encode_value(g)
        body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    body += struct.pack(">i", -1)
    directory = f"{operator_dir}/{partition}"
    fs.create_dir(directory, recursive=True)
    path = f"{directory}/{version}.snapshot"
    data = _compress(bytes(body))
    write_whole(fs, path, lambda out: out.write(data))
    return path


def _versions(names: set[str], suffix: str) -> list[int]:
    return [int(n[: -len(suffix)]) for n in names if n.endswith(suffix) and n[: -len(suffix)].isdigit()]


def _read(fs: pafs.FileSystem, path: str) -> bytes:
    return _decompress(read_bytes(fs, path), path)


def _records(data: bytes):
    """(key, value or None) records of a decompressed delta or snapshot."""
    at = 0
    while True:
        (key_size,) = struct.unpack_from(">i", data, at)
        at += 4
        if key_size == -1:
            return
        key = data[at : at + key_size]
        at += key_size
        (value_size,) = struct.unpack_from(">i", data, at)
        at += 4
        if value_size < 0:
            yield key, None
            continue
        yield key, data[at : at + value_size]
        at += value_size


# -- lz4-java's block stream -------------------------------------------------------------------------


def _decompress(data: bytes, path: str) -> bytes:
    out = bytearray()
    at = 0
    while at < len(data):
        if data[at : at + 8] != _MAGIC:
            raise StateFormatError(f"{path} is not an lz4 block stream (Spark's lz4 state codec)")
        token = data[at + 8]
        compressed, original, _checksum = struct.unpack_from("<iii", data, at + 9)
        at += 21
        if original == 0:
            break
        block = data[at : at + compressed]
        at += compressed
        if token & 0xF0 == _RAW:
            out += block
        elif token & 0xF0 == _LZ4:
            out += pa.decompress(block, decompressed_size=original, codec="lz4_raw").to_pybytes()
        else:
            raise StateFormatError(f"{path}: unknown lz4 block method {token:#x}")
    return bytes(out)


def _compress(data: bytes) -> bytes:
    """``data`` as lz4-java's block stream of raw blocks, ended by an empty block."""
    out = bytearray()
    token = _RAW | _LEVEL
    for at in range(0, len(data), _BLOCK):
        block = data[at : at + _BLOCK]
        checksum = xxh32(block, _SEED) & 0xFFFFFFF
        out += _MAGIC + bytes([token]) + struct.pack("<iii", len(block), len(block), checksum)
        out += block
    out += _MAGIC + bytes([token]) + struct.pack("<iii", 0, 0, 0)
    return bytes(out)


# -- UnsafeRow ------------------------------------------------------------------------------------

#: the size half of an UnsafeRow offset-and-size word
_M32 = 0xFFFFFFFF


def encode_value(g: GroupValue) -> tuple[bytes, bytes]:
    """The group's key row (its int label) and value row (state struct, timeout).

    >>> key, value = encode_value(GroupValue(7, "abc", -1))
    >>> decode_value(key, value)
    GroupValue(label=7, state='abc', timeout_ms=-1)
    """
    key = struct.pack("<q", 0) + struct.pack("<i", g.label) + b"\0\0\0\0"
    if g.state is None:
        value = struct.pack("<q", 1) + struct.pack("<q", 0) + struct.pack("<q", g.timeout_ms)
        return key, value
    raw = g.state.encode("utf-8") if isinstance(g.state, str) else bytes(g.state)
    padded = raw + b"\0" * (-len(raw) % 8)
    inner = struct.pack("<q", 0) + struct.pack("<Q", (16 << 32) | len(raw)) + padded
    value = (
        struct.pack("<q", 0)
        + struct.pack("<Q", (24 << 32) | len(inner))
        + struct.pack("<q", g.timeout_ms)
        + inner
    )
    return key, value


def decode_value(key: bytes, value: bytes, *, text: bool | None = None) -> GroupValue:
    """A group's entry from its key and value rows; ``state`` as text when it is valid
    ASCII (the base64 value new checkpoints keep), else bytes (``group_state``)."""
    if len(key) != 16:
        raise StateFormatError(f"a state key of {len(key)} bytes: not a shard label (an int)")
    (label,) = struct.unpack_from("<i", key, 8)
    (nulls,) = struct.unpack_from("<q", value, 0)
    (timeout,) = struct.unpack_from("<q", value, 16)
    if nulls & 1:
        return GroupValue(label, None, timeout)
    (slot,) = struct.unpack_from("<Q", value, 8)
    inner = value[slot >> 32 : (slot >> 32) + (slot & _M32)]
    (inner_nulls,) = struct.unpack_from("<q", inner, 0)
    if inner_nulls & 1:
        return GroupValue(label, None, timeout)
    (field,) = struct.unpack_from("<Q", inner, 8)
    raw = inner[field >> 32 : (field >> 32) + (field & _M32)]
    try:
        state: str | bytes = raw.decode("ascii") if text is not False else raw
    except UnicodeDecodeError:
        state = raw
    return GroupValue(label, state, timeout)
