"""Routing's hash, in Python: the shard Spark's ``pmod(xxhash64(shard key), shards)`` gives a key.

``routing`` sends each key to ``pmod(xxhash64(shard key), shards)`` in Spark SQL (XXH64 of
the UTF-8 bytes, seed 42, as a signed long).  ``rescale`` must send every key it moves to
the shard that routing will send its next rows to, without a JVM, so this is the same
function: standard XXH64, then Spark's ``pmod``.  ``tests/query/test_rescale_spark.py`` checks it
against Spark's own for the keys it routes.

Invariant: ``shards_of(keys, n, d)[i] == pmod(xxhash64(shard key of keys[i]), n)`` in Spark.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["spark_xxhash64", "shards_of"]

_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261
_M64 = (1 << 64) - 1
_SPARK_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) & _M64, 31) * _P1 & _M64


def _merge(acc: int, v: int) -> int:
    return ((acc ^ _round(0, v)) * _P1 + _P4) & _M64


def spark_xxhash64(value: str, seed: int = _SPARK_SEED) -> int:
    """Spark's ``xxhash64(value)`` of a string (signed, as Spark returns it).

    >>> spark_xxhash64("")
    -7444071767201028348
    """
    data = value.encode("utf-8")
    n, at = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed & _M64, (seed - _P1) & _M64
        words = struct.unpack_from(f"<{(n // 32) * 4}Q", data)
        for i in range(0, len(words), 4):
            v1, v2 = _round(v1, words[i]), _round(v2, words[i + 1])
            v3, v4 = _round(v3, words[i + 2]), _round(v4, words[i + 3])
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
        at = (n // 32) * 32
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while at + 8 <= n:
        (word,) = struct.unpack_from("<Q", data, at)
        h = (_rotl(h ^ _round(0, word), 27) * _P1 + _P4) & _M64
        at += 8
    if at + 4 <= n:
        (word,) = struct.unpack_from("<I", data, at)
        h = (_rotl(h ^ (word * _P1 & _M64), 23) * _P2 + _P3) & _M64
        at += 4
    while at < n:
        h = _rotl(h ^ (data[at] * _P5 & _M64), 11) * _P1 & _M64
        at += 1
    h ^= h >> 33
    h = h * _P2 & _M64
    h ^= h >> 29
    h = h * _P3 & _M64
    h ^= h >> 32
    return h - (1 << 64) if h >= 1 << 63 else h


def shards_of(keys: np.ndarray, shards: int, delimiter: str = "") -> np.ndarray:
    """The shard of each key as routing computes it (``delimiter``:
    ``purgatory.shard.key.delimiter``; the shard key is the part before its first occurrence).

    >>> shards_of(np.array(["a", "a:x", "b"], dtype=object), 4, ":").tolist()
    [0, 0, 3]
    """
    memo: dict[str, int] = {}
    out = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
        shard_key = key.split(delimiter, 1)[0] if delimiter else key
        found = memo.get(shard_key)
        if found is None:
            found = memo[shard_key] = spark_xxhash64(shard_key) % shards  # Python's % is pmod
        out[i] = found
    return out
